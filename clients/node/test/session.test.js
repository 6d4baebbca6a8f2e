// Sessions against a live server: many leases under one keepalive, all or
// none, an operator's close reported once, waits in a session.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LeaseLostError, LockTimeoutError, SessionLease, StaleTokenError, fencedQuery } from '../index.js';
import { connectDb, kill, newName, protectedTable, sql1, startScript, waitUntil, within } from './helpers.js';

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
      const places = () => sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [waiter.id]);
      const cancelled = waiter.lock(name, { wait: 60, signal: controller.signal });
      assert.ok(await waitUntil(async () => (await places()) === 1, 5000), 'the wait is a place in the line');
      await sleep(600); // a poll or two
      const busy = `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1
          AND (state <> 'idle' OR backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)`;
      assert.ok(
        await waitUntil(async () => (await sql1(db, busy, [app])) === 0, 5000),
        'between its polls no statement runs, no snapshot or transaction id is held',
      );
      controller.abort();
      await within(assert.rejects(cancelled, { name: 'AbortError' }), 5000, 'the aborted wait');
      assert.equal(await places(), 0, 'the aborted wait left the line');

      const waiting = waiter.lock(name, { wait: 10 });
      await sleep(200);
      await held.release();
      const got = await within(waiting, 5000, 'the wait');
      assert.ok(got.token > held.token && got.held());
      assert.equal(typeof got.place, 'bigint');
      assert.equal(await got.release(), true);
      assert.equal(await places(), 0, 'a lease taken through the line, released, leaves no place');
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

  test('the heartbeat keeps every lease past the ttl', async () => {
    const name = newName();
    const locks = [0, 1, 2].map((i) => `${name}_${i}`);
    const lost = [];
    const session = await client.session({ ttl: 1, onLost: (r) => lost.push(r) });
    try {
      const leases = [await session.lock(locks[0]), ...(await session.lockAll(locks.slice(1)))];
      await sleep(2500); // two and a half ttls: only the session is renewed
      assert.deepEqual(lost, []);
      assert.ok(leases.every((l) => l.held()));
      const { rows } = await db.query("SELECT count(*)::int AS n FROM fencing_leases WHERE lock_name = ANY($1) AND state = 'live' AND session_id = $2", [locks, session.id]);
      assert.equal(rows[0].n, 3);
      assert.equal(await sql1(db, 'SELECT row(live, leases)::text FROM fencing_sessions WHERE session_id = $1', [session.id]), '(t,3)');
    } finally {
      await session.close();
    }
  });

  test('a paused holder loses every lease of its session at once', async () => {
    const name = newName();
    await db.query(`CREATE TABLE ${name} (id int PRIMARY KEY, token fencing_token, v text)`);
    await db.query(`INSERT INTO ${name} VALUES (1, NULL, 'initial'), (2, NULL, 'initial')`);
    await db.query('SELECT fencing_protect($1)', [name]); // each row fenced by the tokens written to it
    const locks = [`${name}_a`, `${name}_b`, `${name}_c`];
    const child = startScript('pause-session', name, ...locks);
    let report;
    try {
      const started = JSON.parse(await child.nextLine(10_000));
      child.kill('SIGSTOP');
      const live = () => sql1(db, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = ANY($1) AND state = 'live'", [locks]);
      assert.ok(await waitUntil(async () => (await live()) === 0, 3000), 'the leases outlived the paused session');
      assert.equal(await sql1(db, "SELECT string_agg(DISTINCT state, ',') FROM fencing_leases WHERE lock_name = ANY($1)", [locks]), 'expired');
      assert.equal(await sql1(db, 'SELECT count(DISTINCT expires_at)::int FROM fencing_leases WHERE lock_name = ANY($1)', [locks]), 1, 'they ended together, with the session');
      await client.withLock(locks[0], { ttl: 5 }, async (successor) => {
        assert.ok(successor.token > BigInt(started.tokens[0]));
        await successor.query(db, `UPDATE ${name} SET token = $1, v = 'B' WHERE id = 1`, [successor.token]);
      });
      child.kill('SIGCONT');
      child.stdin.write('go\n');
      report = JSON.parse(await child.nextLine(10_000));
    } finally {
      await kill(child);
    }
    assert.equal(report.heldOnWaking, false);
    assert.equal(report.lost.length, 1, String(report.lost));
    assert.match(report.lost[0], /paused/);
    assert.equal(report.writeRow1, 'StaleTokenError', '55Z01: a newer token wrote the row');
    assert.equal(report.writeRow2, 'LeaseEndedError', '55Z04: the COMMIT of a write under an ended lease');
    assert.equal(report.lock, 'LeaseLostError');
    assert.equal(report.close, 0);
    const { rows } = await db.query(`SELECT v FROM ${name} ORDER BY id`);
    assert.deepEqual(rows.map((r) => r.v), ['B', 'initial']);
  });

  test("the server's end of a session is its loss at the next lock (55Z05)", async () => {
    const name = newName();
    const lost = [];
    // The heartbeat is not due before 0.8 s: the lock is the first to hear.
    const session = await client.session({ ttl: 1, heartbeat: 0.8, onLost: (r) => lost.push(r) });
    const lease = await session.lock(`${name}_a`);
    assert.equal(await sql1(db, 'SELECT fencing_session_close($1)', [session.id]), 1);
    await assert.rejects(session.lock(`${name}_b`), (err) => err instanceof LeaseLostError && err.cause?.code === '55Z05');
    assert.ok(!session.held() && !lease.held());
    assert.equal(lost.length, 1, String(lost));
    await sleep(1000); // the heartbeat's renewal is refused meanwhile: no second report
    assert.equal(lost.length, 1, String(lost));
    assert.equal(await session.close(), 0);
  });

  test('close releases every lease, and is idempotent', async () => {
    const name = newName();
    const locks = [0, 1, 2].map((i) => `${name}_${i}`);
    const odd = `${name}-{x,"y\\z}`; // a name that must go through the text[] as it is
    const session = await client.session({ ttl: 30 });
    const leases = await session.lockAll([...locks, odd, locks[0]]);
    assert.equal(leases[0].token, leases[4].token, 'a name twice gets its token twice');
    assert.equal(await leases[1].release(), true);
    assert.equal(await leases[1].release(), false);
    assert.equal(await session.close(), 3, 'the lease released on its own is not counted');
    assert.equal(await session.close(), 0, 'idempotent');
    assert.equal(await sql1(db, "SELECT string_agg(DISTINCT state, ',') FROM fencing_leases WHERE lock_name = ANY($1)", [[...locks, odd]]), 'released');
    await assert.rejects(session.lock(locks[0]), LeaseLostError);
    const again = await client.session({ ttl: 30 }); // at once, long before the 30 s ttl
    try {
      const next = await again.lockAll(locks);
      assert.ok(next.every((l, i) => l.token > leases[i].token));
    } finally {
      await again.close();
    }
  });

  test('a bad heartbeat is refused before connecting', async () => {
    const nowhere = new Client({ host: '/nonexistent' });
    await assert.rejects(nowhere.session({ ttl: 1, heartbeat: 1 }), (err) => err instanceof RangeError && /heartbeat/.test(err.message));
    await assert.rejects(nowhere.session({ ttl: 0 }), (err) => err instanceof RangeError && /ttl/.test(err.message));
  });
});
