// Leases against a live server: tokens, fenced writes and the guard's
// refusals, loss reported once, the pause scenario, waits and their
// cancellation, semaphores and shared leases.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  Client,
  FencingError,
  GuardError,
  LeaseEndedError,
  LeaseLostError,
  LockTimeoutError,
  MissingTokenError,
  NeverGrantedTokenError,
  StaleTokenError,
  fencedQuery,
} from '../index.js';
import { connectDb, kill, newName, protectedTable, sql1, startScript, waitUntil, within } from './helpers.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

describe('leases', () => {
  test('lock gives a bigint token, refuses a second holder, and releases', async () => {
    const name = newName();
    const lease = await client.lock(name, { ttl: 5 });
    assert.equal(typeof lease.token, 'bigint');
    assert.ok(lease.held());
    assert.equal((await client.leader(name)).token, lease.token);
    await assert.rejects(client.lock(name), (err) => err instanceof LockTimeoutError && err.message.includes(name));
    const started = performance.now();
    await assert.rejects(client.lock(name, { wait: 0.3 }), /held by another holder \(waited 0.3 s\)/);
    assert.ok(performance.now() - started >= 250, 'it waited');
    assert.equal(await lease.release(), true);
    assert.equal(await lease.release(), false, 'a second release is a no-op');
    assert.ok(!lease.held());
    assert.equal(lease.lostReason, 'released');
    assert.equal(await sql1(db, 'SELECT state FROM fencing_leases WHERE lock_name = $1', [name]), 'released');
    const again = await client.lock(name, { ttl: 5 });
    assert.ok(again.token > lease.token);
    await again.release();
  });

  test('the heartbeat keeps the lease across several ttls', async () => {
    const name = newName();
    const lost = [];
    const lease = await client.lock(name, { ttl: 1.5, onLost: (r) => lost.push(r) });
    await sleep(3200); // over two ttls
    assert.ok(lease.held(), lease.lostReason);
    assert.deepEqual(lost, []);
    assert.equal(await sql1(db, "SELECT token::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [name]), String(lease.token));
    await lease.release();
  });

  test('a waiting lock gets the lock once it is released, holding no snapshot meanwhile', async () => {
    const name = newName();
    const first = await client.lock(name, { ttl: 5 });
    const waiting = client.lock(name, { ttl: 5, wait: 10, holder: `waiter-${name}` });
    const app = `pg_fencing lease waiter-${name}`;
    // Caught between two attempts (each a transaction of its own), it holds
    // neither; a function form's wait would hold its snapshot all along.
    const sleeping = `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1
        AND query LIKE 'CALL fencing_await%' AND state = 'active' AND backend_xmin IS NULL AND backend_xid IS NULL`;
    assert.ok(
      await waitUntil(async () => (await sql1(db, sleeping, [app])) === 1, 5000),
      'the wait is a CALL fencing_await on the server, holding no snapshot and no transaction id while it sleeps',
    );
    await first.release();
    const second = await within(waiting, 5000, 'the wait');
    assert.ok(second.token > first.token && second.held());
    await second.release();
  });

  test('an AbortSignal ends a wait, on the server too', async () => {
    const name = newName();
    const holder = await client.lock(name, { ttl: 5 });
    const controller = new AbortController();
    const app = `pg_fencing lease waiter-${name}`;
    const waiting = client.lock(name, { ttl: 5, wait: 60, holder: `waiter-${name}`, signal: controller.signal });
    const onServer = () =>
      sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'CALL fencing_await%' AND state = 'active'", [app]);
    assert.ok(await waitUntil(async () => (await onServer()) === 1, 5000), 'the wait is on the server');
    controller.abort();
    await within(
      assert.rejects(waiting, (err) => err.name === 'AbortError'),
      5000,
      'the aborted wait',
    );
    assert.ok(await waitUntil(async () => (await onServer()) === 0, 5000), 'the cancelled wait does not go on on the server');
    assert.equal((await client.leader(name)).token, holder.token);
    await assert.rejects(client.lock(name, { wait: 5, signal: AbortSignal.abort() }), { name: 'AbortError' });
    await holder.release();
    assert.equal(await sql1(db, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1 AND holder = $2", [name, `waiter-${name}`]), 0, 'nothing was granted to the cancelled wait');

    // The same for a permit of a semaphore.
    const permit = await client.semaphore(`${name}_s`, 1, { ttl: 5 });
    const permitWait = new AbortController();
    const waitingForPermit = client.semaphore(`${name}_s`, 1, { ttl: 5, wait: 60, holder: `waiter-${name}`, signal: permitWait.signal });
    assert.ok(await waitUntil(async () => (await onServer()) === 1, 5000), 'the wait for a permit is on the server');
    permitWait.abort();
    await within(assert.rejects(waitingForPermit, { name: 'AbortError' }), 5000, 'the aborted wait for a permit');
    assert.ok(await waitUntil(async () => (await onServer()) === 0, 5000));
    await permit.release();
  });

  test("fenced writes map the guard's refusals, keeping the server's error", async () => {
    const name = newName();
    await protectedTable(db, name, name);
    const first = await client.lock(name, { ttl: 5 });
    const update = `UPDATE ${name} SET token = $1, v = $2 WHERE id = 1`;
    assert.equal((await first.query(db, update, [first.token, 'first'])).rowCount, 1);
    const missing = await first.query(db, `UPDATE ${name} SET v = 'no token' WHERE id = 1`).catch((e) => e);
    assert.ok(missing instanceof MissingTokenError && missing instanceof GuardError && missing instanceof FencingError);
    assert.equal(missing.code, '55Z02');
    assert.equal(missing.sqlstate, '55Z02');
    assert.equal(missing.cause.code, '55Z02', "the server's error is the cause");
    await assert.rejects(first.query(db, update, [null, 'NULL token']), MissingTokenError);
    const never = await fencedQuery(db, update, [2n ** 63n - 1n, 'made up']).catch((e) => e);
    assert.ok(never instanceof NeverGrantedTokenError, String(never));
    assert.equal(never.sqlstate, '55Z03');
    await first.release();
    await assert.rejects(first.query(db, 'SELECT 1/0'), LeaseLostError, 'refused before sending: no division by zero');

    const second = await client.lock(name, { ttl: 5 });
    await second.query(db, update, [second.token, 'second']);
    const stale = await fencedQuery(db, update, [first.token, 'stale']).catch((e) => e);
    assert.ok(stale instanceof StaleTokenError, String(stale));
    assert.equal(stale.sqlstate, '55Z01');
    assert.match(stale.message, /fencing token/);
    assert.equal(stale.table, name, "the server's table name");
    assert.equal(await sql1(db, `SELECT v FROM ${name}`), 'second');
    assert.equal((await second.query(db, update, [second.token, 'second'])).rowCount, 1, 'the connection is usable after the refusal');

    // 55Z04: the lease ends between the write and the COMMIT.
    const tx = await connectDb();
    try {
      await tx.query('BEGIN');
      await second.query(tx, update, [second.token, 'in a transaction']);
      await second.release();
      const ended = await fencedQuery(tx, 'COMMIT').catch((e) => e);
      assert.ok(ended instanceof LeaseEndedError, String(ended));
      assert.equal(ended.sqlstate, '55Z04');
    } finally {
      await tx.end();
    }
    assert.equal(await sql1(db, `SELECT v FROM ${name}`), 'second');
  });

  test('lease loss is reported once', async () => {
    const name = newName();
    const reasons = [];
    const events = [];
    const lease = await client.lock(name, { ttl: 3, heartbeat: 0.2, onLost: (r) => reasons.push(r) });
    lease.on('lost', (r) => events.push(r));
    await sql1(db, "SELECT fencing_revoke($1, 'test')", [name]);
    assert.ok(await waitUntil(() => reasons.length > 0, 3000), 'onLost was called');
    await sleep(600); // renewals would have come in this time
    assert.equal(reasons.length, 1, String(reasons));
    assert.equal(events.length, 1);
    assert.match(reasons[0], /refused/);
    assert.ok(!lease.held());
    assert.throws(() => lease.check(), LeaseLostError);
    await assert.rejects(lease.query(db, 'SELECT 1/0'), LeaseLostError);
    await lease.release();
  });

  test('the lease is lost once when its renewal fails with its connection', async () => {
    // Its renewals go on the client's heartbeat connection: cut while idle,
    // that is made again for the next renewal (heartbeat.test.js); cut under
    // a renewal, the renewal fails.  The renewal is held on the server (as
    // below) until the connection is cut under it.
    const name = newName();
    const lost = [];
    const lease = await client.lock(name, { ttl: 2, holder: `cut-${name}`, onLost: (r) => lost.push(r) });
    const blocker = await connectDb();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM fencing_lock WHERE lock_name = $1 FOR UPDATE', [name]);
      await blocker.query('SELECT 1 FROM fencing_lease WHERE lock_name = $1 FOR UPDATE', [name]);
      const cut = 'SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))';
      assert.ok(await waitUntil(async () => (await sql1(db, cut, [blocker.processID])) === 1, 2000), 'the renewal waited, and its connection was cut');
      assert.ok(await waitUntil(() => lost.length > 0, 2000), "'lost' within the ttl");
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    await sleep(300);
    assert.equal(lost.length, 1, String(lost));
    assert.match(lost[0], /connection failed|renewal failed/);
    assert.ok(!lease.held());
    assert.equal(await lease.release(), true, 'released on a new connection rather than left to run out');
  });

  test('a renewal stuck on the server is waited for only until the safe deadline', async () => {
    const name = newName();
    const lost = [];
    const lease = await client.lock(name, { ttl: 1, onLost: (r) => lost.push(r) });
    const blocker = await connectDb();
    try {
      // Holds the rows a renewal writes: the next renewal waits behind them.
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM fencing_lock WHERE lock_name = $1 FOR UPDATE', [name]);
      await blocker.query('SELECT 1 FROM fencing_lease WHERE lock_name = $1 FOR UPDATE', [name]);
      assert.ok(await waitUntil(() => lost.length > 0, 2000), "'lost' came although the renewal never answered");
      assert.equal(lost.length, 1);
      assert.match(lost[0], /no answer before the lease's safe deadline/);
      assert.ok(!lease.held());
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    await lease.release();
  });

  test('a blocked process wakes up to held() false, judged on the monotonic clock', async () => {
    const name = newName();
    const lost = [];
    const lease = await client.lock(name, { ttl: 1, onLost: (r) => lost.push(r) });
    assert.ok(lease.held());
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000); // no timer runs meanwhile
    assert.equal(lost.length, 0, 'no timer has run');
    assert.ok(!lease.held(), 'held() does not wait for a timer');
    assert.throws(() => lease.check(), LeaseLostError);
    assert.ok(await waitUntil(() => lost.length === 1, 2000), "'lost' follows once the timers run");
    await lease.release();
  });

  test('pause scenario: the stale write of a SIGSTOPped holder bounces with 55Z01', async () => {
    const name = newName();
    await protectedTable(db, name, name);
    const holderA = startScript('pause-holder', name, name);
    try {
      const [word, token] = (await holderA.nextLine(10_000)).split(' ');
      assert.equal(word, 'ready');
      holderA.kill('SIGSTOP'); // between its check and its write
      const successor = await client.lock(name, { ttl: 5, wait: 10 }); // A's lease runs out meanwhile
      assert.ok(successor.token > BigInt(token));
      await successor.query(db, `UPDATE ${name} SET token = $1, v = 'B' WHERE id = 1`, [successor.token]);
      holderA.kill('SIGCONT');
      holderA.stdin.write('go\n');
      assert.equal(await holderA.nextLine(10_000), 'rejected 55Z01');
      assert.equal(await sql1(db, `SELECT v FROM ${name}`), 'B');
      await successor.release();
    } finally {
      await kill(holderA);
    }
  });

  test('semaphores and shared leases', async () => {
    const name = newName();
    const p1 = await client.semaphore(name, 2, { ttl: 5 });
    const p2 = await client.semaphore(name, 2, { ttl: 5 });
    assert.notEqual(p1.token, p2.token);
    assert.equal(p1.kind, 'permit');
    await assert.rejects(client.semaphore(name, 2), /every permit is taken/);
    await p1.release();
    const p3 = await client.semaphore(name, 2, { ttl: 5, wait: 1 });
    assert.ok(p3.held());
    await Promise.all([p2.release(), p3.release()]);

    const shared = `${name}_rw`;
    const r1 = await client.shared(shared, { ttl: 5 });
    const r2 = await client.shared(shared, { ttl: 5 });
    assert.ok(r1.held() && r2.held());
    await assert.rejects(client.lock(shared), LockTimeoutError);
    await Promise.all([r1.release(), r2.release()]);
    const writer = await client.lock(shared, { ttl: 5 });
    assert.ok(writer.held());
    await writer.release();
  });

  test('withLock releases when its function ends, also by a throw', async () => {
    const name = newName();
    let inside;
    const result = await client.withLock(name, { ttl: 5 }, async (lease) => {
      inside = lease;
      assert.ok(lease.held());
      return 42;
    });
    assert.equal(result, 42);
    assert.equal(inside.lostReason, 'released');
    await assert.rejects(
      client.withLock(name, { ttl: 5 }, async (lease) => {
        inside = lease;
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await sql1(db, 'SELECT state FROM fencing_leases WHERE lock_name = $1', [name]), 'released');
  });

  test('options are checked before anything is sent', async () => {
    await assert.rejects(client.lock(newName(), { ttl: 0 }), /ttl must be a positive number of seconds, got 0/);
    await assert.rejects(client.lock(newName(), { ttl: 1, heartbeat: 1 }), /heartbeat must be positive and shorter/);
    await assert.rejects(client.semaphore(newName(), 0), /permits must be a positive integer, got 0/);
    await assert.rejects(client.shared(newName(), { payload: { a: 1 } }), /a payload needs an exclusive lease/);
    await assert.rejects(client.lock(''), /a lock name/);
  });
});
