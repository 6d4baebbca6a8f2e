#!/usr/bin/env node
// pg_fencing from Node.js: a lease with a heartbeat, fenced writes, a stale write refused.
//
//   node examples/node/example.js [--ttl MS]
//
// The connection comes from libpq-style PG* variables (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE), which node-postgres reads.  The role must be
// allowed to create the extension (a superuser), a table, and to take leases.
//
// 1. Heartbeat: a lease with a short ttl is held for several ttls while its
//    heartbeat renews it, and every write carries its token.
// 2. Pause: worker A (a worker thread, with an event loop of its own) holds
//    the lease, checks it still holds it, and blocks its whole thread with
//    Atomics.wait between that check and its write -- a pause it cannot see
//    coming: its heartbeat timers cannot run either.  Its lease expires; B
//    takes the lock with the next token and writes.  A is woken and writes
//    with its stale token: the table's guard refuses it (SQLSTATE 55Z01,
//    StaleTokenError) and B's value survives.
//
// Exits 0 when all of that happened as described, 1 otherwise.

import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

import pg from 'pg';

import { StaleTokenError, fencedQuery, withLease } from './fenced-lease.js';

const TABLE = 'example_resource';
const LOCK = 'example-resource';

async function connect() {
  const client = new pg.Client();
  await client.connect();
  return client;
}

async function setup() {
  const db = await connect();
  await db.query('CREATE EXTENSION IF NOT EXISTS pg_fencing');
  await db.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id int PRIMARY KEY, token fencing_token, val text)`);
  await db.query('SELECT fencing_protect($1)', [TABLE]);
  await db.query(`INSERT INTO ${TABLE} (id) VALUES (1) ON CONFLICT DO NOTHING`);
  await db.end();
}

function write(db, token, val) {
  return fencedQuery(db, `UPDATE ${TABLE} SET token = $1, val = $2 WHERE id = 1`, [token, val]);
}

async function heartbeatPart(ttlMs) {
  console.log(`\n== 1. heartbeat: a lease of ttl ${ttlMs} ms held for ${4 * ttlMs} ms`);
  const db = await connect();
  let lost = false;
  await withLease({ lockName: LOCK, holder: 'heartbeat-demo', ttlMs }, async (lease) => {
    lease.on('lost', (why) => {
      lost = true;
      console.log(`lost: ${why}`);
    });
    console.log(`acquired '${LOCK}': token ${lease.token}`);
    for (let i = 1; i <= 4; i++) {
      await sleep(ttlMs);
      await write(db, lease.check(), `heartbeat write ${i}`);
      console.log(`t=${i * ttlMs} ms: still held (${i} ttl), wrote with token ${lease.token}`);
    }
  });
  console.log('released at the end of withLease');
  await db.end();
  return !lost;
}

// Worker A, in its own thread.  workerData: { ttlMs, gate: Int32Array on shared memory }.
async function workerA({ ttlMs, gate }) {
  const say = (msg) => console.log(`   A: ${msg}`);
  const db = await connect();
  let refused = false;
  await withLease({ lockName: LOCK, holder: 'worker-A', ttlMs, waitMs: 5 * ttlMs }, async (lease) => {
    lease.on('lost', (why) => say(`lost: ${why}`));
    say(`acquired token ${lease.token}; writing`);
    await write(db, lease.token, 'A before the pause');
    const token = lease.check(); // still held: the check passes...
    say('check() passed, about to write -- pausing (Atomics.wait blocks this thread) now');
    parentPort.postMessage('paused');
    Atomics.wait(gate, 0, 0); // ...and the thread freezes here, timers and all
    say(`resumed; writing with token ${token}, unaware of the pause`);
    try {
      await write(db, token, 'A after the pause');
      say('write ACCEPTED with a stale token');
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      say(`write refused: StaleTokenError (${err.code}): ${err.message}`);
      refused = true;
    }
  });
  await db.end();
  parentPort.postMessage(refused ? 'refused' : 'accepted');
}

async function pausePart(ttlMs) {
  console.log(`\n== 2. pause: A stops between its check and its write; its lease (ttl ${ttlMs} ms) expires`);
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(new URL(import.meta.url), { workerData: { ttlMs, gate } });
  const [first] = await once(worker, 'message');
  if (first !== 'paused') throw new Error(`worker A: ${first}`);
  const pausedAt = performance.now();
  const outcome = once(worker, 'message');
  const db = await connect();
  await withLease({ lockName: LOCK, holder: 'worker-B', ttlMs, waitMs: 5 * ttlMs }, async (lease) => {
    const after = (performance.now() - pausedAt).toFixed(0);
    console.log(`B: acquired token ${lease.token} ${after} ms after A paused (A's lease had to expire first); writing`);
    await write(db, lease.token, 'B');
    console.log('B: waking A');
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    await outcome;
  });
  const [result] = await outcome;
  const { rows } = await db.query(`SELECT token::bigint AS token, val FROM ${TABLE} WHERE id = 1`);
  await db.end();
  console.log(`row 1 now: token ${rows[0].token}, val '${rows[0].val}'`);
  return result === 'refused' && rows[0].val === 'B';
}

async function main() {
  const { values } = parseArgs({ options: { ttl: { type: 'string', default: '1000' } } });
  const ttlMs = Number(values.ttl);
  await setup();
  let ok = await heartbeatPart(ttlMs);
  ok = (await pausePart(ttlMs)) && ok;
  console.log(`\nresult: ${ok ? 'as expected' : 'NOT as expected'}`);
  return ok ? 0 : 1;
}

if (isMainThread) {
  process.exitCode = await main();
} else {
  await workerA(workerData);
}
