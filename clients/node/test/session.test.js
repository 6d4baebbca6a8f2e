// Sessions against a live server: many leases under one keepalive, all or
// none, an operator's close reported once, waits in a session.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LeaseLostError, LockTimeoutError, SessionLease, StaleTokenError, fencedQuery } from '../index.js';
import { connectDb, newName, protectedTable, sql1, waitUntil, within } from './helpers.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

describe('sessions', () => {
  test("locks many, all or none, and an operator's close is reported once", async () => {
    const name = newName();
    const reasons = [];
    const session = await client.session({ ttl: 3, heartbeat: 0.2, onLost: (r) => reasons.push(r) });
    const events = [];
    session.on('lost', (r) => events.push(r));
    try {
      assert.equal(typeof session.id, 'bigint');
      const part = await session.lock(`${name}_p`);
      const both = await session.lockAll([`${name}_b`, `${name}_a`]);
      assert.ok(part instanceof SessionLease);
      assert.deepEqual(both.map((l) => l.name), [`${name}_b`, `${name}_a`]);
      assert.ok([part, ...both].every((l) => l.held() && typeof l.token === 'bigint'));
      await sleep(1200); // past a third of the ttl: the heartbeat keeps them
      assert.ok(both[0].held());

      const other = await client.session({ ttl: 3 });
      await assert.rejects(other.lockAll([`${name}_a`, `${name}_z`]), LockTimeoutError);
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1 AND live', [`${name}_z`]), 0, 'none or all');
      await assert.rejects(other.lock(`${name}_a`, { wait: 0.2 }), /is busy \(waited 0.2 s\)/);
      assert.equal(await other.close(), 0);

      assert.equal(await part.release(), true);
      assert.ok(!part.held() && both[0].held());
      await sql1(db, 'SELECT fencing_session_close($1)', [session.id]); // an operator ends it
      assert.ok(await waitUntil(() => reasons.length > 0, 3000), 'the loss is reported');
      await sleep(500);
      assert.equal(reasons.length, 1, String(reasons));
      assert.equal(events.length, 1);
      assert.ok(!both[0].held() && !both[1].held());
      await assert.rejects(both[0].query(db, 'SELECT 1/0'), LeaseLostError);
      await assert.rejects(session.lock(`${name}_c`), LeaseLostError);
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_leases WHERE lock_name = ANY($1) AND live', [[`${name}_a`, `${name}_b`]]), 0, 'every lease in it ended');
    } finally {
      await session.close();
    }
  });

  test('a wait in a session gets the lock once it is free, and an AbortSignal ends it on the server', async () => {
    const name = newName();
    const holding = await client.session({ ttl: 5 });
    const waiter = await client.session({ ttl: 5 });
    try {
      const held = await holding.lock(name);
      const controller = new AbortController();
      const app = `pg_fencing session ${waiter.holder}`.slice(0, 63);
      const onServer = () =>
        sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'CALL fencing_await%' AND state = 'active'", [app]);
      const cancelled = waiter.lock(name, { wait: 60, signal: controller.signal });
      assert.ok(await waitUntil(async () => (await onServer()) === 1, 5000), 'the wait is on the server');
      controller.abort();
      await within(assert.rejects(cancelled, { name: 'AbortError' }), 5000, 'the aborted wait');
      assert.ok(await waitUntil(async () => (await onServer()) === 0, 5000), 'and ended there');

      const waiting = waiter.lock(name, { wait: 10 });
      await sleep(200);
      await held.release();
      const got = await within(waiting, 5000, 'the wait');
      assert.ok(got.token > held.token && got.held());
    } finally {
      await Promise.all([holding.close(), waiter.close()]);
    }
  });

  test('a lease of a closed session is refused by the guard', async () => {
    const name = newName();
    await protectedTable(db, name, name);
    const session = await client.session({ ttl: 5 });
    const lease = await session.lock(name);
    await lease.query(db, `UPDATE ${name} SET token = $1, v = 'in session' WHERE id = 1`, [lease.token]);
    assert.equal(await session.close(), 1);
    assert.equal(await session.close(), 0, 'close is idempotent');
    await assert.rejects(lease.query(db, 'SELECT 1/0'), LeaseLostError);
    const next = await client.lock(name, { ttl: 5 });
    await next.query(db, `UPDATE ${name} SET token = $1, v = 'next' WHERE id = 1`, [next.token]);
    await assert.rejects(fencedQuery(db, `UPDATE ${name} SET token = $1, v = 'late' WHERE id = 1`, [lease.token]), StaleTokenError);
    await next.release();
  });
});
