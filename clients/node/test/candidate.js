// A leader candidate: campaigns, says "leader TOKEN" once it leads, and
// writes under its token every 100 ms until its lease is lost (then it
// campaigns again) or stdin closes (then it resigns and exits).
//
//   node candidate.js LOCK TABLE NAME

import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client, LeaseLostError, StaleTokenError } from '../index.js';

const [lockName, table, me] = process.argv.slice(2);
const election = new Client().election(lockName, me, { ttl: 1 });
const db = new pg.Client();
await db.connect();
let stdinClosed = false;
process.stdin.on('end', () => (stdinClosed = true)).resume();
while (!stdinClosed) {
  const lease = await election.campaign({ candidate: me });
  console.log('leader', String(lease.token));
  while (lease.held() && !stdinClosed) {
    try {
      await lease.query(db, `UPDATE ${table} SET token = $1, v = $2 WHERE id = 1`, [lease.token, me]);
    } catch (err) {
      if (err instanceof LeaseLostError || err instanceof StaleTokenError) break;
      throw err;
    }
    await sleep(100);
  }
}
await election.resign();
await db.end();
process.exit(0);
