#!/usr/bin/env node
// pg_fencing from Node.js: a lease with a heartbeat, fenced writes, a stale write refused.
//
//   node examples/node/example.js [--ttl SECONDS]
//
// It uses the pg-fencing package (clients/node, installed here by npm ci as
// a copy of that directory; see package.json).  The connection comes from
// libpq-style PG* variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
// PGDATABASE), which node-postgres reads.  The role must be allowed to
// create the extension (a superuser), a table, and to take leases.
//
// 1. Heartbeat: a lease with a short ttl is held for several ttls while the
//    package's heartbeat renews it, and every write carries its token.
// 2. Pause: worker A (a worker thread, with an event loop of its own) holds
//    the lease, checks it still holds it, and blocks its whole thread with
//    Atomics.wait between that check and its write -- a pause it cannot see
//    coming: its heartbeat timers cannot run either.  Its lease expires; B
//    takes the lock with the next token and writes.  A is woken and writes
//    with the token it checked: the table's guard refuses it (SQLSTATE
//    55Z01, StaleTokenError) and B's value survives.
//
// Exits 0 when all of that happened as described, 1 otherwise.

import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

import pg from 'pg';
import { Client, StaleTokenError, fencedQuery } from 'pg-fencing';

const TABLE = 'example_resource';
const LOCK = 'example-resource';
const UPDATE = `UPDATE ${TABLE} SET token = $1, val = $2 WHERE id = 1`;

const client = new Client(); // the PG* variables

async function connect() {
  const db = new pg.Client();
  await db.connect();
  return db;
}

async function setup() {
  const db = await connect();
  await db.query('CREATE EXTENSION IF NOT EXISTS pg_fencing');
  await db.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id int PRIMARY KEY, token fencing_token, val text)`);
  await db.query('SELECT fencing_protect($1)', [TABLE]);
  await db.query(`INSERT INTO ${TABLE} (id) VALUES (1) ON CONFLICT DO NOTHING`);
  await db.end();
}

async function heartbeatPart(ttl) {
  console.log(`\n== 1. heartbeat: a lease of ttl ${ttl} s held for ${4 * ttl} s`);
  const db = await connect();
  let lost = false;
  const onLost = (why) => {
    lost = true;
    console.log(`lost: ${why}`);
  };
  await client.withLock(LOCK, { holder: 'heartbeat-demo', ttl, wait: 5 * ttl, onLost }, async (lease) => {
    console.log(`acquired '${LOCK}': token ${lease.token}`);
    for (let i = 1; i <= 4; i++) {
      await sleep(ttl * 1000);
      await lease.query(db, UPDATE, [lease.token, `heartbeat write ${i}`]);
      console.log(`t=${i * ttl} s: still held (${i} ttl), wrote with token ${lease.token}`);
    }
  });
  console.log('released at the end of withLock');
  await db.end();
  return !lost;
}

// Worker A, in its own thread.  workerData: { ttl, gate: Int32Array on shared memory }.
async function workerA({ ttl, gate }) {
  const say = (msg) => console.log(`   A: ${msg}`);
  const db = await connect();
  const onLost = (why) => say(`lost: ${why}`);
  const refused = await client.withLock(LOCK, { holder: 'worker-A', ttl, wait: 5 * ttl, onLost }, async (lease) => {
    say(`acquired token ${lease.token}; writing`);
    await lease.query(db, UPDATE, [lease.token, 'A before the pause']);
    const token = lease.check(); // still held: the check passes...
    say('check() passed, about to write -- pausing (Atomics.wait blocks this thread) now');
    parentPort.postMessage('paused');
    Atomics.wait(gate, 0, 0); // ...and the thread freezes here, timers and all
    // lease.query() would now refuse to send (held() is false after the
    // pause); a write already past its check cannot ask again, so it goes
    // out as it was: the database is the one that refuses it.
    say(`resumed; writing with token ${token}, as a write already past its check would`);
    try {
      await fencedQuery(db, UPDATE, [token, 'A after the pause']);
      say('write ACCEPTED with a stale token');
      return false;
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      say(`write refused: StaleTokenError (${err.sqlstate}): ${err.message}`);
      return true;
    }
  });
  await db.end();
  parentPort.postMessage(refused ? 'refused' : 'accepted');
}

async function pausePart(ttl) {
  console.log(`\n== 2. pause: A stops between its check and its write; its lease (ttl ${ttl} s) expires`);
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(new URL(import.meta.url), { workerData: { ttl, gate } });
  const [first] = await Promise.race([once(worker, 'message'), once(worker, 'error').then(([err]) => [err.message])]);
  if (first !== 'paused') throw new Error(`worker A: ${first}`);
  const pausedAt = performance.now();
  const outcome = once(worker, 'message');
  const db = await connect();
  await client.withLock(LOCK, { holder: 'worker-B', ttl, wait: 5 * ttl }, async (lease) => {
    const after = ((performance.now() - pausedAt) / 1000).toFixed(2);
    console.log(`B: acquired token ${lease.token} ${after} s after A paused (A's lease had to expire first); writing`);
    await lease.query(db, UPDATE, [lease.token, 'B']);
    console.log('B: waking A');
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    await outcome;
  });
  const [result] = await outcome;
  const { rows } = await db.query(`SELECT token::text AS token, val FROM ${TABLE} WHERE id = 1`);
  await db.end();
  console.log(`row 1 now: token ${rows[0].token}, val '${rows[0].val}'`);
  return result === 'refused' && rows[0].val === 'B';
}

async function main() {
  const { values } = parseArgs({ options: { ttl: { type: 'string', default: '1' } } });
  const ttl = Number(values.ttl);
  await setup();
  let ok = await heartbeatPart(ttl);
  ok = (await pausePart(ttl)) && ok;
  console.log(`\nresult: ${ok ? 'as expected' : 'NOT as expected'}`);
  return ok ? 0 : 1;
}

if (isMainThread) {
  process.exitCode = await main();
} else {
  await workerA(workerData);
}
