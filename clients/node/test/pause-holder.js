// The pause scenario's holder A: takes the lock, checks it, says
// "ready TOKEN", and waits for a line; the test stops it (SIGSTOP)
// meanwhile, lets its lease run out and another holder write, then resumes
// it.  A then writes with its token, as a client that checked before the
// pause has every reason to, and says what the database answered.
//
//   node pause-holder.js LOCK TABLE

import { createInterface } from 'node:readline';

import pg from 'pg';

import { Client, StaleTokenError, fencedQuery } from '../index.js';

const [lockName, table] = process.argv.slice(2);
const db = new pg.Client();
await db.connect();
const lease = await new Client().lock(lockName, { ttl: 1 });
lease.on('lost', () => {}); // noticed late, after the resume: the write below is what counts
const token = lease.check();
console.log('ready', String(token));
const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once('line', resolve)); // stopped here, then resumed
try {
  await fencedQuery(db, `UPDATE ${table} SET token = $1, v = 'A' WHERE id = 1`, [token]);
  console.log('accepted');
} catch (err) {
  if (!(err instanceof StaleTokenError)) throw err;
  console.log('rejected', err.sqlstate);
}
await lease.release();
await db.end();
lines.close();
