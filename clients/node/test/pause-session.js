// The paused session's holder: opens a session, takes every lock it is
// given, prints {"id", "tokens"} and waits for a line; the test stops it
// (SIGSTOP) meanwhile, lets the session run out and another holder write,
// then resumes it.  It then writes under its old tokens, as a client past
// its check has every reason to, and prints what it saw and what the
// database answered.
//
//   node pause-session.js TABLE LOCK...

import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client, GuardError, LeaseLostError, fencedQuery } from '../index.js';

const [table, ...locks] = process.argv.slice(2);
const lost = [];
const session = await new Client().session({ ttl: 1, onLost: (reason) => lost.push(reason) });
const leases = await session.lockAll(locks);
const db = new pg.Client();
await db.connect();
console.log(JSON.stringify({ id: String(session.id), tokens: leases.map((l) => String(l.token)) }));
const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once('line', resolve)); // stopped here, then resumed
const report = { heldOnWaking: session.held() };

async function write(row, token) {
  try {
    await fencedQuery(db, `UPDATE ${table} SET token = $1, v = 'paused' WHERE id = $2`, [token, row]);
    return 'written';
  } catch (err) {
    if (!(err instanceof GuardError)) throw err;
    return err.name;
  }
}

report.writeRow1 = await write(1, leases[0].token); // the new holder wrote row 1
report.writeRow2 = await write(2, leases[1].token); // nobody took that lock since
report.lock = await session.lock(locks[0]).then(() => 'acquired', (err) => (err instanceof LeaseLostError ? 'LeaseLostError' : String(err)));
await sleep(500); // time for a second 'lost', if there were one
report.lost = lost;
report.close = await session.close();
console.log(JSON.stringify(report));
await db.end();
lines.close();
