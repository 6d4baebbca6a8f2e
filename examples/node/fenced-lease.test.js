// Tests of fenced-lease.js, fenced-session.js and follower.js against a live server with pg_fencing installed.
//
//   bash examples/node/run-tests.sh        # npm ci, then node --test
//
// The connection comes from the PG* variables (node-postgres reads them); the
// role must be allowed to create the extension, and roles.  Each test uses
// lock names of its own; the file makes (and drops) a protected table of its own.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import {
  FencedLease,
  LeaseLostError,
  LeaseUnavailableError,
  MissingTokenError,
  StaleTokenError,
  fencedQuery,
  withLease,
} from './fenced-lease.js';
import { FencedSession, withSession } from './fenced-session.js';
import { LeaderFollower } from './follower.js';

const RUN = randomBytes(4).toString('hex'); // in table, role and holder names: runs sharing a database do not meet
const TABLE = `js_example_${RUN}`;
const ROWS = 6; // 1-3 for FencedLease, 4-6 for FencedSession
const HERE = fileURLToPath(new URL('.', import.meta.url));

let admin; // autocommit client for set-up and inspection
let db; // the application's client for fenced writes
let lock; // this test's lock name (for sessions, the prefix of its locks' names)
let leases; // released after each test
let sessions; // closed after each test

async function sql1(text, values) {
  const { rows } = await admin.query(text, values);
  return rows.length === 0 ? null : Object.values(rows[0])[0];
}

const leader = () => sql1('SELECT fencing_leader($1)', [lock]);
const leaseToken = () => sql1('SELECT token::bigint FROM fencing_leases WHERE lock_name = $1', [lock]);
const rowVal = (id) => sql1(`SELECT val FROM ${TABLE} WHERE id = $1`, [id]);

function write(id, token, val) {
  return fencedQuery(db, `UPDATE ${TABLE} SET token = $1, val = $2 WHERE id = $3`, [token, val, id]);
}

const holder = (name) => `${name}-${RUN}`;

// A FencedLease on this test's lock, released after the test.
function lease(name, options = {}) {
  const l = new FencedLease({ lockName: lock, holder: holder(name), ttlMs: 1000, ...options });
  leases.push(l);
  return l;
}

// A FencedSession opened for this test, closed after it.
async function session(name, options = {}) {
  const s = await FencedSession.open({ holder: holder(name), ttlMs: 1000, ...options });
  sessions.push(s);
  return s;
}

// n lock names of this test's.
const locks = (n) => Array.from({ length: n }, (_, i) => `${lock}-${i}`);

// { lock_name: [state, token, session_id, holder] } of fencing_leases, read now.
async function leasesOf(names) {
  const { rows } = await admin.query(
    `SELECT lock_name, state, token::text AS token, session_id::text AS session_id, holder
       FROM fencing_leases WHERE lock_name = ANY($1)`,
    [names],
  );
  return Object.fromEntries(
    rows.map((r) => [
      r.lock_name,
      [r.state, BigInt(r.token), r.session_id === null ? null : BigInt(r.session_id), r.holder],
    ]),
  );
}

// Cuts the lease's own connection, as a network partition would.
function terminateLeaseConnection(l) {
  return sql1(
    'SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = $1',
    [`fenced_lease ${l.holder}`.slice(0, 63)],
  );
}

// { pid, state, wait_event_type, backend_xmin, backend_xid } of the one
// backend with that application_name, or null; read afresh each call (admin
// is in autocommit: each query has its own snapshot of pg_stat_activity).
async function backendOf(applicationName) {
  const { rows } = await admin.query(
    `SELECT pid, state, wait_event_type, backend_xmin::text AS backend_xmin, backend_xid::text AS backend_xid
       FROM pg_stat_activity WHERE application_name = $1`,
    [applicationName],
  );
  assert.ok(rows.length <= 1, `${rows.length} backends named ${applicationName}`);
  return rows[0] ?? null;
}

async function waitUntil(predicate, timeoutMs) {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(20);
  }
  return predicate();
}

// Watches acquiring, a promise of a wait for a lock that another holder has,
// through its backend, found by applicationName, every 100 ms while it
// waits, then release()s the other holder's lease: the token acquiring
// resolves to.  Fails unless B (the waiter) was still waiting when released,
// was seen asleep in its wait at least 5 times with no backend_xmin and no
// backend_xid each time, and was then served.
async function servedWithoutSnapshot(acquiring, applicationName, release) {
  let done = false;
  const waited = acquiring.finally(() => {
    done = true;
  });
  waited.catch(() => {}); // awaited below; not unhandled meanwhile
  const waiting = []; // [backend_xmin, backend_xid] each time B was seen asleep in its wait
  let released;
  try {
    const end = performance.now() + 5000;
    while (waiting.length < 8 && !done && performance.now() < end) {
      const row = await backendOf(applicationName);
      // Asleep on its latch between attempts (an attempt itself is a short
      // transaction, which has a snapshot while it runs).
      if (row !== null && row.state === 'active' && row.wait_event_type === 'Extension') {
        waiting.push([row.backend_xmin, row.backend_xid]);
      }
      await sleep(100);
    }
    assert.equal(done, false, 'B stopped waiting while the lock was held');
  } finally {
    released = await release();
  }
  const token = await waited;
  assert.equal(released, true, "the holder's lease was not live");
  assert.ok(waiting.length >= 5, `B was seen waiting only ${waiting.length} times`);
  assert.deepEqual(
    waiting,
    waiting.map(() => [null, null]),
    '[backend_xmin, backend_xid] of B while it waited',
  );
  assert.notEqual(token, null, 'B did not get the lock once it was released');
  return token;
}

// Every lease or session of this run gave back its clients (their
// application_name is the prefix, then the holder, which ends in RUN): a
// leaked client would also keep this process from ending.
async function assertConnectionsClosed(applicationNamePrefix) {
  const open = () =>
    sql1('SELECT count(*)::int FROM pg_stat_activity WHERE application_name LIKE $1', [
      `${applicationNamePrefix} %-${RUN}`,
    ]);
  assert.ok(
    await waitUntil(async () => (await open()) === 0, 2000),
    `${await open()} ${applicationNamePrefix} connections left open`,
  );
}

before(async () => {
  admin = new pg.Client();
  await admin.connect();
  db = new pg.Client();
  await db.connect();
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_fencing');
  await admin.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, token fencing_token, val text)`);
  await admin.query('SELECT fencing_protect($1)', [TABLE]);
  await admin.query(`INSERT INTO ${TABLE} (id) SELECT generate_series(1, $1::int)`, [ROWS]);
});

after(async () => {
  await admin?.query(`DROP TABLE IF EXISTS ${TABLE}`);
  await db?.end();
  await admin?.end();
});

describe('FencedLease', () => {
  beforeEach((t) => {
    lock = `js-${t.name.replace(/\W+/g, '-')}-${randomBytes(4).toString('hex')}`;
    leases = [];
  });

  afterEach(async () => {
    for (const l of leases) await l.release().catch(() => {});
    await assertConnectionsClosed('fenced_lease');
  });

  test('acquire gets a token', async () => {
    const a = lease('A');
    const token = await a.acquire();
    assert.equal(typeof token, 'bigint');
    assert.ok(token > 0n);
    assert.equal(a.token, token);
    assert.equal(a.held, true);
    assert.equal(a.lost, false);
    assert.equal(a.check(), token);
    assert.equal(await leader(), a.holder);
    assert.equal(BigInt(await leaseToken()), token);
  });

  test('a second holder is refused while the lease is live', async () => {
    const a = lease('A');
    assert.notEqual(await a.acquire(), null);
    assert.equal(await lease('B').acquire(), null);
    await assert.rejects(
      withLease({ lockName: lock, holder: holder('C'), ttlMs: 1000 }, () => assert.fail('ran without the lock')),
      LeaseUnavailableError,
    );
    const start = performance.now();
    assert.equal(await lease('D', { waitMs: 300 }).acquire(), null);
    assert.ok(performance.now() - start >= 250, 'did not wait');
    assert.equal(await leader(), a.holder);
    assert.equal(a.held, true);
  });

  test('a waiting acquire gets the lock once it is released', async () => {
    const a = lease('A');
    const aToken = await a.acquire();
    const releasing = sleep(500).then(() => a.release());
    const start = performance.now();
    const b = lease('B', { waitMs: 5000 });
    const bToken = await b.acquire();
    await releasing;
    assert.notEqual(bToken, null);
    assert.ok(bToken > aToken);
    assert.ok(performance.now() - start >= 400, 'B did not wait for A');
    assert.equal(await leader(), b.holder);
  });

  test('a waiting acquire holds no snapshot and no xid', async () => {
    // B waits in CALL fencing_await, which commits each attempt before it
    // sleeps: its backend pins no xmin horizon.  The function form
    // fencing_acquire(..., wait) would show a backend_xmin all along.
    const a = lease('A', { ttlMs: 30_000 });
    const aToken = await a.acquire();
    const b = lease('B', { ttlMs: 5000, waitMs: 20_000 });
    const bToken = await servedWithoutSnapshot(b.acquire(), `fenced_lease ${b.holder}`.slice(0, 63), () =>
      a.release(),
    );
    assert.ok(bToken > aToken);
    assert.equal(await leader(), b.holder);
    assert.equal(b.held, true, b.lostReason);
  });

  test('a wait that runs out gets null', async () => {
    const a = lease('A', { ttlMs: 30_000 });
    assert.notEqual(await a.acquire(), null);
    await assert.rejects(
      withLease({ lockName: lock, holder: holder('B'), ttlMs: 1000, waitMs: 0 }, () =>
        assert.fail('ran without the lock'),
      ),
      LeaseUnavailableError,
    );
    assert.equal(await lease('C', { waitMs: 200 }).acquire(), null);
    assert.equal(await leader(), a.holder);
  });

  test('the heartbeat keeps the lease across several ttls', async () => {
    const lost = [];
    let renewals = 0;
    const a = lease('A', { ttlMs: 600 });
    a.on('lost', (why) => lost.push(why));
    a.on('renewed', () => renewals++);
    const token = await a.acquire();
    await sleep(4 * 600);
    assert.deepEqual(lost, []);
    assert.equal(a.held, true, a.lostReason);
    assert.ok(renewals >= 6, `only ${renewals} renewals in 4 ttls`);
    assert.equal(await leader(), a.holder, 'the server let the lease expire');
    assert.equal(await lease('B').acquire(), null);
    assert.equal((await write(1, a.check(), 'A after 4 ttls')).rowCount, 1);
    assert.equal(BigInt(await leaseToken()), token);
  });

  test('the lease is lost when a renewal fails', async () => {
    const lost = [];
    const a = lease('A', { ttlMs: 1000 });
    a.on('lost', (why) => lost.push(why));
    await a.acquire();
    assert.equal(await terminateLeaseConnection(a), 1);
    assert.ok(await waitUntil(() => lost.length > 0, 1000), "'lost' was not emitted within the ttl");
    await sleep(50);
    assert.equal(lost.length, 1, `'lost' emitted more than once: ${lost}`);
    assert.match(lost[0], /connection failed|renewal failed/);
    assert.equal(a.lost, true);
    assert.equal(a.held, false);
    assert.throws(() => a.check(), LeaseLostError);
  });

  test('lost is judged on the monotonic clock, not on timers', async (t) => {
    const a = lease('A', { ttlMs: 5000 });
    await a.acquire();
    assert.equal(a.lost, false);
    // Five seconds later on the monotonic clock, with no timer run since: the
    // lease counts as lost before any heartbeat has had a chance to say so.
    const later = performance.now() + 5000;
    t.mock.method(performance, 'now', () => later);
    assert.equal(a.lost, true);
    assert.throws(() => a.check(), LeaseLostError);
    t.mock.restoreAll();
  });

  test('a stale write raises StaleTokenError', async () => {
    const a = lease('A', { ttlMs: 600 });
    const aToken = await a.acquire();
    assert.equal((await write(2, aToken, 'A')).rowCount, 1);
    // A is cut off: its heartbeat cannot renew and the server lets the lease expire.
    await terminateLeaseConnection(a);
    const bToken = await lease('B', { ttlMs: 600, waitMs: 3000 }).acquire();
    assert.notEqual(bToken, null, "B did not get the lock after A's lease expired");
    assert.ok(bToken > aToken);
    assert.equal(a.lost, true);
    assert.equal((await write(2, bToken, 'B')).rowCount, 1);
    await assert.rejects(write(2, aToken, 'A, stale'), (err) => {
      assert.ok(err instanceof StaleTokenError, `not a StaleTokenError: ${err}`);
      assert.equal(err.code, '55Z01');
      assert.equal(err.table, TABLE);
      return true;
    });
    assert.equal(await rowVal(2), 'B');
    assert.equal((await write(2, bToken, 'B again')).rowCount, 1, 'the client is not usable after the error');
  });

  test('a write without a token raises MissingTokenError', async () => {
    const token = await lease('A').acquire();
    assert.equal((await write(3, token, 'with token')).rowCount, 1);
    await assert.rejects(fencedQuery(db, `UPDATE ${TABLE} SET val = $1 WHERE id = 3`, ['no token']), (err) => {
      assert.ok(err instanceof MissingTokenError, `not a MissingTokenError: ${err}`);
      assert.equal(err.code, '55Z02');
      return true;
    });
    await assert.rejects(write(3, null, 'NULL token'), MissingTokenError);
    assert.equal(await rowVal(3), 'with token');
  });

  test('release frees the lock', async () => {
    const a = lease('A', { ttlMs: 30_000 });
    const aToken = await a.acquire();
    assert.equal(await a.release(), true);
    assert.equal(a.held, false);
    assert.equal(a.lost, false);
    assert.equal(await leader(), null);
    const b = lease('B', { ttlMs: 30_000 });
    const bToken = await b.acquire(); // at once, no wait, long before 30 s
    assert.notEqual(bToken, null);
    assert.ok(bToken > aToken);
    assert.equal(await a.release(), false, 'released twice');
    assert.equal(await leader(), b.holder);
  });

  test('withLease releases when its function ends, also by a throw', async () => {
    await withLease({ lockName: lock, holder: holder('A'), ttlMs: 30_000 }, async (a) => {
      assert.equal(a.held, true);
      assert.equal(await leader(), a.holder);
    });
    assert.equal(await leader(), null);
    await assert.rejects(
      withLease({ lockName: lock, holder: holder('B'), ttlMs: 30_000 }, async () => {
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await leader(), null);
    assert.notEqual(await lease('C').acquire(), null);
  });
});

// A process of its own, so that it can really be paused (SIGSTOP): it opens a
// session, takes every lock it is given, prints its id and tokens, and waits
// for a line on stdin.  Resumed, it says what it sees and what its writes
// under its old tokens got.
const PAUSED_CHILD = `
import pg from 'pg';
const [dir, table, holder, ...names] = process.argv.slice(1);
const { LeaseLostError, StaleTokenError, fencedQuery } = await import(dir + 'fenced-lease.js');
const { FencedSession } = await import(dir + 'fenced-session.js');
const lost = [];
const session = await FencedSession.open({ holder, ttlMs: 1000 });
session.on('lost', (why) => lost.push(why));
const tokens = await session.acquireAll(names);
const db = new pg.Client();
await db.connect();
console.log(JSON.stringify({ id: String(session.id), tokens: tokens.map(String) }));
await new Promise((resolve) => process.stdin.once('data', resolve)); // SIGSTOP'd around here
const report = { heldOnWaking: session.held };
async function write(id, token) {
  try {
    await fencedQuery(db, 'UPDATE ' + table + " SET token = $1, val = 'paused' WHERE id = $2", [token, id]);
    return 'written';
  } catch (err) {
    return err instanceof StaleTokenError ? 'StaleTokenError' : err.code;
  }
}
report.writeRow4 = await write(4, tokens[0]); // the new holder wrote row 4
report.writeRow5 = await write(5, tokens[1]); // nobody took that lock since
report.acquire = await session.acquire(names[0]).then(() => 'acquired', (err) =>
  err instanceof LeaseLostError ? 'LeaseLostError' : String(err));
await new Promise((resolve) => setTimeout(resolve, 500)); // time for a second 'lost', if there were one
report.lost = lost;
report.close = await session.close();
await db.end();
process.stdin.destroy();
console.log(JSON.stringify(report));
`;

describe('FencedSession', () => {
  beforeEach((t) => {
    lock = `js-${t.name.replace(/\W+/g, '-')}-${randomBytes(4).toString('hex')}`;
    sessions = [];
  });

  afterEach(async () => {
    for (const s of sessions) await s.close().catch(() => {});
    await assertConnectionsClosed('fenced_session');
  });

  test('the heartbeat keeps every lease past the ttl', async () => {
    const names = locks(3);
    const lost = [];
    let renewals = 0;
    const s = await session('A', { ttlMs: 1000 });
    s.on('lost', (why) => lost.push(why));
    s.on('renewed', () => renewals++);
    assert.equal(s.held, true);
    const tokens = [await s.acquire(names[0]), await s.acquire(names[1]), ...(await s.acquireAll(names.slice(2)))];
    assert.ok(tokens.every((t) => typeof t === 'bigint'), `${tokens}`);
    assert.equal(new Set(tokens).size, 3);
    const expected = Object.fromEntries(names.map((n, i) => [n, ['live', tokens[i], s.id, s.holder]]));
    const start = performance.now();
    while (performance.now() - start < 2500) {
      // two and a half ttls: only the session is renewed
      assert.deepEqual(await leasesOf(names), expected, `after ${Math.round(performance.now() - start)} ms`);
      assert.equal(s.held, true, s.lostReason);
      await sleep(100);
    }
    assert.deepEqual(lost, []);
    assert.ok(renewals >= 6, `only ${renewals} renewals in 2.5 ttls`);
    assert.equal(
      await sql1('SELECT row(live, leases, holder)::text FROM fencing_sessions WHERE session_id = $1', [s.id]),
      `(t,3,${s.holder})`,
    );
    assert.equal(await (await session('B')).acquire(names[1]), null, 'another session took a live lease');
    assert.equal((await write(6, tokens[1], 'A after 2.5 ttls')).rowCount, 1);
  });

  test('a paused process loses every lease at once', async () => {
    const names = locks(3);
    const child = spawn(
      process.execPath,
      ['--input-type=module', '-e', PAUSED_CHILD, HERE, TABLE, holder('paused'), ...names],
      { cwd: HERE, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise((resolve) => child.on('exit', resolve));
    try {
      assert.ok(await waitUntil(() => out.includes('\n') || child.exitCode !== null, 10_000), 'the child said nothing');
      assert.ok(out.includes('\n'), `the child ended: ${err}`);
      const started = JSON.parse(out.split('\n')[0]);
      const tokens = started.tokens.map(BigInt);
      const states = async () => Object.values(await leasesOf(names)).map((r) => r[0]);
      assert.deepEqual(await states(), ['live', 'live', 'live']);
      process.kill(child.pid, 'SIGSTOP');
      assert.ok(
        await waitUntil(async () => !(await states()).includes('live'), 3000),
        'the leases outlived the paused session',
      );
      assert.equal(
        await sql1('SELECT count(DISTINCT expires_at)::int FROM fencing_leases WHERE lock_name = ANY($1)', [names]),
        1,
        "the leases did not end together, at the session's end",
      );
      assert.deepEqual(await states(), ['expired', 'expired', 'expired']);
      // Another holder takes one of the locks at once, and writes.
      const b = await session('B', { ttlMs: 2000 });
      const bToken = await b.acquire(names[0]);
      assert.notEqual(bToken, null, 'the lock of an ended session was not free');
      assert.ok(bToken > tokens[0]);
      assert.equal((await write(4, bToken, 'B')).rowCount, 1);
      process.kill(child.pid, 'SIGCONT');
      child.stdin.write('go\n');
      const code = await Promise.race([exited, sleep(10_000).then(() => 'timeout')]);
      assert.equal(code, 0, `the child: ${code}: ${err}`);
    } finally {
      if (child.exitCode === null) {
        process.kill(child.pid, 'SIGCONT');
        child.kill();
      }
    }
    const report = JSON.parse(out.trim().split('\n')[1]);
    assert.equal(report.heldOnWaking, false);
    assert.equal(report.lost.length, 1, `${report.lost}`);
    assert.match(report.lost[0], /blocked|deadline/);
    assert.equal(report.writeRow4, 'StaleTokenError', '55Z01: a newer token wrote the row');
    assert.equal(report.writeRow5, '55Z04', 'the COMMIT of a write under an ended lease');
    assert.equal(report.acquire, 'LeaseLostError');
    assert.equal(report.close, 0);
    assert.equal(await rowVal(4), 'B');
    assert.notEqual(await rowVal(5), 'paused');
  });

  test("'lost' once when the server ends the session", async () => {
    // A superuser closes the session; the heartbeat is not due before 800
    // ms, so the acquire is the first to hear of it (55Z05).
    const lost = [];
    const s = await session('A', { ttlMs: 1000, heartbeatMs: 800 });
    s.on('lost', (why) => lost.push(why));
    const [a, b] = locks(2);
    assert.notEqual(await s.acquire(a), null);
    assert.equal(await sql1('SELECT fencing_session_close($1)', [s.id]), 1);
    await assert.rejects(s.acquire(b), (err) => {
      assert.ok(err instanceof LeaseLostError, `not a LeaseLostError: ${err}`);
      assert.equal(err.cause?.code, '55Z05');
      return true;
    });
    assert.equal(s.held, false);
    assert.equal(s.lost, true);
    assert.equal(lost.length, 1, `${lost}`);
    await sleep(1000); // the heartbeat's renewal is refused meanwhile: no second 'lost'
    assert.equal(lost.length, 1, `${lost}`);
    assert.equal((await leasesOf([a]))[a][0], 'released');
    assert.equal(await s.close(), 0);
  });

  test('held is judged on the monotonic clock, not on timers', async (t) => {
    const s = await session('A', { ttlMs: 5000 });
    assert.equal(s.held, true);
    const later = performance.now() + 5000;
    t.mock.method(performance, 'now', () => later);
    try {
      assert.equal(s.held, false);
      assert.throws(() => s.check(), LeaseLostError);
      await assert.rejects(s.acquire(lock), LeaseLostError); // not even sent
    } finally {
      t.mock.restoreAll();
    }
    assert.deepEqual(await leasesOf([lock]), {});
  });

  test('close releases every lease at once', async () => {
    const names = locks(4);
    const s = await session('A', { ttlMs: 30_000 });
    const tokens = await s.acquireAll(names);
    assert.notEqual(tokens, null);
    // One lease released on its own: out of the session, not counted by close.
    assert.equal(await s.release(names[3], tokens[3]), true);
    assert.equal(await s.release(names[3], tokens[3]), false, 'released twice');
    assert.deepEqual((await leasesOf([names[3]]))[names[3]].slice(0, 3), ['released', tokens[3], null]);
    assert.equal(await s.close(), 3);
    assert.deepEqual(
      await leasesOf(names),
      Object.fromEntries(names.map((n, i) => [n, ['released', tokens[i], null, s.holder]])),
    );
    assert.equal(await sql1('SELECT session_id FROM fencing_sessions WHERE session_id = $1', [s.id]), null);
    assert.equal(s.held, false);
    assert.equal(s.lost, false);
    assert.equal(await s.close(), 0, 'idempotent');
    assert.equal(await s.release(names[0], tokens[0]), false);
    await assert.rejects(s.acquire(names[0]), LeaseLostError);
    // At once, without a wait, long before the 30 s ttl.
    const again = await (await session('B', { ttlMs: 30_000 })).acquireAll(names);
    assert.notEqual(again, null, 'the released locks were not free');
    assert.ok(again.every((t, i) => t > tokens[i]), `${again} ${tokens}`);
  });

  test('acquireAll takes every lock or none', async () => {
    const [a, b, c] = locks(3);
    const other = await session('other', { ttlMs: 30_000 });
    const bToken = await other.acquire(b);
    const s = await session('A', { ttlMs: 30_000 });
    const start = performance.now();
    assert.equal(await s.acquireAll([c, b, a], { waitMs: 300 }), null);
    assert.ok(performance.now() - start >= 250, 'did not wait');
    // Neither a nor c: not held by s, not even seen outside its transaction.
    assert.deepEqual(await leasesOf([a, b, c]), { [b]: ['live', bToken, other.id, other.holder] });
    assert.equal(await sql1('SELECT leases::int FROM fencing_sessions WHERE session_id = $1', [s.id]), 0);
    assert.equal(await s.acquireAll([a, b]), null, 'no wait');
    assert.deepEqual(await leasesOf([a]), {});
    // Once b is free: all of them, in the order given; a name twice gets its
    // token twice, and any name goes through as it is.
    assert.equal(await other.release(b, bToken), true);
    const odd = `${lock}-{x,"y\\z}`;
    const tokens = await s.acquireAll([c, a, odd, b, c]);
    assert.notEqual(tokens, null);
    assert.equal(tokens[0], tokens[4]);
    const found = await leasesOf([a, b, c, odd]);
    assert.deepEqual(Object.keys(found).sort(), [a, b, c, odd].sort());
    assert.deepEqual(tokens, [c, a, odd, b, c].map((n) => found[n][1]));
    assert.deepEqual(
      Object.values(found).map((r) => [r[0], r[2]]),
      Object.values(found).map(() => ['live', s.id]),
      '[state, session_id] of each',
    );
  });

  test('a waiting acquire gets the lock once it is released', async () => {
    const other = await session('other', { ttlMs: 30_000 });
    const otherToken = await other.acquire(lock);
    const releasing = sleep(400).then(() => other.close());
    const s = await session('A', { ttlMs: 30_000 });
    const start = performance.now();
    const token = await s.acquire(lock, { waitMs: 5000 });
    await releasing;
    assert.notEqual(token, null);
    assert.ok(token > otherToken);
    assert.ok(performance.now() - start >= 300, 'did not wait for the release');
    assert.equal(await s.acquire(lock), token, 'the same lock again in the session');
  });

  test('a waiting acquire holds no snapshot and no xid', async () => {
    // acquire with waitMs waits in CALL fencing_await(..., session =>), which
    // commits each attempt before it sleeps.  The function form
    // fencing_session_acquire(..., wait) would show a backend_xmin all along.
    // A short ttl: the heartbeat renews while the work client waits.
    const other = await session('other', { ttlMs: 30_000 });
    const otherToken = await other.acquire(lock);
    const s = await session('B', { ttlMs: 1000 });
    const token = await servedWithoutSnapshot(
      s.acquire(lock, { waitMs: 20_000 }),
      `fenced_session work ${s.holder}`.slice(0, 63),
      () => other.release(lock, otherToken),
    );
    assert.ok(token > otherToken);
    assert.deepEqual(await leasesOf([lock]), { [lock]: ['live', token, s.id, s.holder] });
    assert.equal(s.held, true, s.lostReason);
    assert.equal(other.held, true, other.lostReason);
  });

  test('another role may not act in the session', async () => {
    const role = `js_session_other_${RUN}`;
    await admin.query(`CREATE ROLE "${role}" LOGIN PASSWORD 'other'`);
    try {
      const s = await session('A', { ttlMs: 30_000 });
      const token = await s.acquire(lock);
      const hostile = new pg.Client({ user: role, password: 'other' });
      await hostile.connect();
      try {
        for (const [call, values] of [
          ['fencing_session_renew($1)', [s.id]],
          ["fencing_session_renew($1, '1 hour')", [s.id]],
          ['fencing_session_close($1)', [s.id]],
          ['fencing_session_acquire($1, $2)', [s.id, `${lock}-2`]],
          ['fencing_session_acquire_all($1, $2::text[])', [s.id, [`${lock}-3`]]],
        ]) {
          await assert.rejects(hostile.query(`SELECT ${call}`, values), (err) => {
            assert.equal(err.code, '42501', `${call}: ${err.message}`);
            return true;
          });
        }
        const { rows } = await hostile.query(
          'SELECT count(*)::int AS n FROM fencing_sessions WHERE session_id = $1',
          [s.id],
        );
        assert.equal(rows[0].n, 0, 'the other role sees the session');
      } finally {
        await hostile.end();
      }
      assert.equal(s.held, true, s.lostReason);
      assert.deepEqual(await leasesOf([lock]), { [lock]: ['live', token, s.id, s.holder] });
      assert.equal(await sql1('SELECT count(*)::int FROM fencing_leases WHERE lock_name LIKE $1', [`${lock}-%`]), 0);
      assert.equal(await s.close(), 1);
    } finally {
      await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    }
  });

  test('withSession closes the session when its function ends, also by a throw', async () => {
    const names = locks(2);
    let opened;
    await assert.rejects(
      withSession({ holder: holder('A'), ttlMs: 30_000 }, async (s) => {
        opened = s;
        assert.notEqual(await s.acquireAll(names), null);
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(opened.held, false);
    assert.deepEqual(Object.values(await leasesOf(names)).map((r) => r[0]), ['released', 'released']);
    const taken = await withSession({ holder: holder('B'), ttlMs: 30_000 }, (s) => s.acquireAll(names));
    assert.notEqual(taken, null, 'the released locks were not free');
  });

  test('a bad heartbeat is refused before connecting', async () => {
    await assert.rejects(
      FencedSession.open({ connection: 'host=/nonexistent', ttlMs: 1000, heartbeatMs: 1000 }),
      RangeError,
    );
    await assert.rejects(FencedSession.open({ connection: 'host=/nonexistent', ttlMs: 0 }), RangeError);
  });
});

// The followers here have no reread period unless a test is about it:
// nothing but a notification, a reconnect or the lease's expiry makes them
// read, so each test fails if the path it is about is missing.
describe('LeaderFollower', () => {
  let followers; // stopped after each test
  let reports; // what the test's follower emitted: holders, null for none
  let errors;

  beforeEach((t) => {
    lock = `js-${t.name.replace(/\W+/g, '-')}-${randomBytes(4).toString('hex')}`;
    leases = [];
    followers = [];
    reports = [];
    errors = [];
  });

  afterEach(async () => {
    for (const f of followers) await f.stop();
    for (const l of leases) await l.release().catch(() => {});
  });

  async function makeLock(announce) {
    await admin.query('SELECT fencing_create_lock($1)', [lock]);
    await admin.query('SELECT fencing_set_announce($1, $2)', [lock, announce]);
  }

  async function follow(options = {}) {
    const f = new LeaderFollower({ lockName: lock, rereadPeriodMs: 0, ...options });
    f.on('leader', (leader) => reports.push(leader));
    f.on('reconnecting', (err) => errors.push(err));
    followers.push(f);
    await f.start();
    return f;
  }

  async function acquired(name, ttlMs = 30_000) {
    const l = lease(name, { ttlMs });
    assert.notEqual(await l.acquire(), null);
    return l;
  }

  const holders = () => reports.map((r) => r?.holder ?? null);
  const lastIs = (holder) => () => reports.length > 0 && (reports.at(-1)?.holder ?? null) === holder;
  const notify = (payload) => admin.query("SELECT pg_notify('fencing_events', $1)", [JSON.stringify(payload)]);

  test('reports the leader at start, then a grant and a release', async () => {
    await makeLock(true);
    const a = await acquired('A');
    const f = await follow();
    assert.equal(f.leader.holder, a.holder, 'start() read the leader');
    assert.equal(f.leader.token, a.token);
    assert.ok(await waitUntil(lastIs(a.holder), 5000), `${holders()}`);
    await a.release();
    assert.ok(await waitUntil(lastIs(null), 5000), `release not seen: ${holders()}`);
    const b = await acquired('B'); // another connection's grant
    assert.ok(await waitUntil(lastIs(b.holder), 5000), `grant not seen: ${holders()}`);
    assert.equal(f.leader.token, b.token);
    assert.deepEqual(errors, []);
  });

  test('its idle connection holds no snapshot', async () => {
    // Between reads it sits LISTENing: idle in autocommit, not idle in a
    // transaction that would pin the xmin horizon.
    await makeLock(true);
    const a = await acquired('A');
    await follow();
    assert.ok(await waitUntil(lastIs(a.holder), 5000), `${holders()}`);
    const name = `leader_follower ${lock}`.slice(0, 63);
    const seen = [];
    for (let i = 0; i < 5; i++) {
      const row = await backendOf(name);
      assert.notEqual(row, null, "the follower's connection was not found");
      seen.push([row.state, row.backend_xmin, row.backend_xid]);
      await sleep(50);
    }
    assert.deepEqual(seen, seen.map(() => ['idle', null, null]), '[state, backend_xmin, backend_xid]');
    assert.deepEqual(errors, []);
  });

  test('reports neither a rolled-back grant nor a forged notification', async () => {
    await makeLock(true);
    await follow({ rereadPeriodMs: 100 }); // many reads, each of which could report wrongly
    assert.ok(await waitUntil(lastIs(null), 5000));
    const other = new pg.Client();
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query("SELECT fencing_acquire($1, 'ghost', '30 s')", [lock]);
      await notify({ lock_name: lock, event: 'granted' }); // the follower reads while it is pending
      await sleep(300);
      await other.query('ROLLBACK');
    } finally {
      await other.end();
    }
    await notify({ lock_name: lock, event: 'granted', holder: 'forged', token: '999999' });
    await notify({ lock_id: '1', event: 'granted', truncated: true });
    const real = await acquired('real');
    assert.ok(await waitUntil(lastIs(real.holder), 5000), `${holders()}`);
    await notify({ lock_name: lock, event: 'released', holder: real.holder });
    await sleep(500);
    assert.deepEqual(holders(), [null, real.holder]);
    assert.deepEqual(errors, []);
  });

  test('sees an expiry that nobody announces', async () => {
    await makeLock(false);
    await admin.query("SELECT fencing_acquire($1, 'short', '700 milliseconds')", [lock]);
    await follow();
    assert.ok(await waitUntil(lastIs('short'), 5000), `${holders()}`);
    assert.ok(await waitUntil(lastIs(null), 5000), `expiry not seen: ${holders()}`);
  });

  test('reads again after its connection is terminated', async () => {
    await makeLock(false); // only a read finds the grant
    const f = await follow();
    assert.ok(await waitUntil(lastIs(null), 5000));
    const a = await acquired('A', 60_000);
    await sleep(300);
    assert.deepEqual(holders(), [null], 'read without a reason');
    assert.equal(
      await sql1('SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = $1', [
        `leader_follower ${lock}`.slice(0, 63),
      ]),
      1,
    );
    assert.ok(await waitUntil(lastIs(a.holder), 10_000), `${holders()}`);
    assert.equal(f.leader.token, a.token);
    assert.ok(errors.length >= 1, "'reconnecting' not emitted");
    assert.equal(f.connected, true);
  });

  test('the reread period catches a lock that is not announced', async () => {
    await makeLock(false);
    await follow({ rereadPeriodMs: 200 });
    assert.ok(await waitUntil(lastIs(null), 5000));
    const a = await acquired('A');
    assert.ok(await waitUntil(lastIs(a.holder), 5000), `${holders()}`);
  });
});
