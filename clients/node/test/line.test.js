// Waiting in line (pg_fencing 1.10): a wait for an exclusive lease in a
// session, and a campaign, is a place the database keeps.  A fleet of
// candidates through a transaction-pooling PgBouncer started here, a wait
// that keeps its place, a wait woken by LISTEN.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client, LockTimeoutError } from '../index.js';
import { connectDb, newName, sql1, waitUntil, within } from './helpers.js';
import { PGBOUNCER, havePgBouncer, startPgBouncer } from './pgbouncer.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

// The places in lock name's line.
const placesOf = (name) =>
  sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE lock_id = (SELECT lock_id FROM fencing_lock WHERE lock_name = $1)', [name]);
// The places of the sessions of holder.
const placesOfHolder = (holder) =>
  sql1(db, 'SELECT count(*)::int FROM fencing_line JOIN fencing_sessions USING (session_id) WHERE holder = $1', [holder]);
// The places in name's line still waiting (not granted).
const waitingIn = (name) =>
  sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE token IS NULL AND lock_id = (SELECT lock_id FROM fencing_lock WHERE lock_name = $1)', [name]);
const liveLeases = (name) => sql1(db, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [name]);

describe('the line', () => {
  test(
    'a fleet through a transaction-pooling PgBouncer: 40 candidates wait in line, the leader renews throughout, the first in line follows it',
    { timeout: 180_000, skip: havePgBouncer() ? false : `PgBouncer is not installed (${PGBOUNCER})` },
    async () => {
      // Nothing of the package may be a named prepared statement: a
      // transaction pooler would run it on whichever server connection.
      const named = [];
      const query = pg.Client.prototype.query;
      pg.Client.prototype.query = function (config, ...rest) {
        if (config !== null && typeof config === 'object' && config.name) named.push(config.name);
        return query.call(this, config, ...rest);
      };
      const poolSize = 5;
      const bouncer = await startPgBouncer({ poolSize });
      const pooled = new Client(bouncer.url); // no LISTEN: the timer alone
      const name = newName();
      const leaderLost = [];
      const leader = pooled.election(name, `${name}-leader`, { ttl: 1.5, onLost: (reason) => leaderLost.push(reason) });
      const controller = new AbortController();
      const candidates = [];
      let watching = true;
      const problems = [];
      let mostBackends = 0;
      try {
        const leaderLease = await leader.campaign({ role: 'leader' });
        // Every 100 ms: never two leaders, the leader's lease the one live
        // lease while it leads, no more server backends than the pool.
        const watcher = (async () => {
          while (watching) {
            const leaders = [leader, ...candidates.map((c) => c.election)].filter((e) => e.isLeader());
            if (leaders.length > 1) problems.push(`two leaders: ${leaders.map((e) => e.holder)}`);
            const { rows } = await db.query(
              `SELECT (SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1 AND state = 'live') AS live,
                      (SELECT count(*)::int FROM pg_stat_activity WHERE application_name LIKE '%' || $1 || '%') AS backends`,
              [name],
            );
            if (rows[0].live > 1) problems.push(`${rows[0].live} live leases`);
            mostBackends = Math.max(mostBackends, rows[0].backends);
            await sleep(100);
          }
        })().catch((err) => problems.push(`the watcher failed: ${err}`));

        // 40 candidates join, one after the other: c00 first.  c30..c39
        // give up at their timeout (8 s), the others when the signal aborts.
        const started = performance.now();
        for (let i = 0; i < 40; i += 1) {
          const holder = `${name}-c${String(i).padStart(2, '0')}`;
          const election = pooled.election(name, holder, { ttl: 3 });
          const c = { i, holder, election, outcome: null, lease: null };
          const giveUp = i >= 30 ? { timeout: 8 } : { signal: controller.signal };
          c.done = election.campaign({ n: i }, giveUp).then(
            (lease) => {
              c.lease = lease;
              c.outcome = 'leads';
            },
            (err) => {
              c.outcome = err;
            },
          );
          candidates.push(c);
          assert.ok(await waitUntil(async () => (await placesOfHolder(holder)) === 1, 10_000), `${holder} has a place in line`);
        }
        assert.equal(await waitingIn(name), 40);
        assert.equal(await placesOf(name), 41, "and the leader's, granted");

        // About 15 s of the fleet waiting: the leader keeps its lease.
        const leading = async () =>
          sql1(db, "SELECT holder || ' ' || token::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [name]);
        while (performance.now() - started < 15_000) {
          assert.ok(leader.isLeader(), `the leader lost its lease: ${leaderLost}`);
          assert.equal(await leading(), `${name}-leader ${leaderLease.token}`);
          await sleep(250);
        }
        assert.deepEqual(leaderLost, [], 'the leader never lost its lease');
        assert.ok(leaderLease.held());
        const timedOut = candidates.filter((c) => c.i >= 30);
        assert.ok(await waitUntil(() => timedOut.every((c) => c.outcome !== null), 5000), 'the candidates with a timeout gave up');
        for (const c of timedOut) {
          assert.ok(c.outcome instanceof LockTimeoutError, `${c.holder}: ${c.outcome}`);
          assert.equal(await placesOfHolder(c.holder), 0, `${c.holder} left the line`);
        }
        assert.equal(await waitingIn(name), 30);
        assert.ok(candidates.every((c) => c.outcome !== 'leads'), 'nobody led while the leader did');

        // The leader resigns: the candidate that joined first leads, and only it.
        assert.equal(await leader.resign(), true);
        const first = candidates[0];
        assert.ok(await waitUntil(() => candidates.some((c) => c.outcome === 'leads'), 5000), 'a candidate leads');
        assert.deepEqual(candidates.filter((c) => c.outcome === 'leads').map((c) => c.holder), [first.holder]);
        assert.ok(first.lease.token > leaderLease.token);
        assert.deepEqual(await pooled.leader(name), { holder: first.holder, token: first.lease.token, payload: { n: 0 } });
        await sleep(1500); // a few polls of everyone else
        assert.deepEqual(candidates.filter((c) => c.outcome === 'leads').map((c) => c.holder), [first.holder], 'one leader');

        // All give up: the waiting ones by their signal, while the leader resigns.
        controller.abort();
        const [resigned] = await Promise.all([first.election.resign(), ...candidates.map((c) => c.done)]);
        assert.equal(resigned, true);
        for (const c of candidates.slice(1, 30)) assert.equal(c.outcome?.name, 'AbortError', `${c.holder}: ${c.outcome}`);
        assert.equal(await placesOf(name), 0, 'fencing_line is empty');
        assert.equal(await liveLeases(name), 0, 'no lease is held by a candidate that gave up');
        assert.equal(
          await sql1(db, "SELECT count(*)::int FROM fencing_sessions WHERE holder LIKE $1 || '%' AND live", [name]),
          0,
          'every candidate closed its session',
        );
        watching = false;
        await watcher;
        assert.deepEqual(problems, []);
        assert.ok(mostBackends <= poolSize, `${mostBackends} server backends for a pool of ${poolSize}`);
        assert.deepEqual(named, [], 'no named prepared statement');
      } finally {
        watching = false;
        pg.Client.prototype.query = query;
        controller.abort();
        await Promise.all(candidates.map((c) => c.done));
        await Promise.all([leader.resign(), ...candidates.map((c) => c.election.resign())]).catch(() => {});
        await bouncer.stop();
      }
    },
  );

  test('a wait keeps its place, its connection cut or not: a plain acquire gets nothing, the first in line gets the lock before the second', async () => {
    const name = newName();
    const holding = await client.session({ ttl: 10 });
    const first = await client.session({ ttl: 10 });
    const second = await client.session({ ttl: 10 });
    const order = [];
    try {
      const held = await holding.lock(name);
      const firstWait = first.lock(name, { wait: 30 }).then((lease) => (order.push('first'), lease));
      firstWait.catch(() => {}); // a failure below is the test's; the wait ends with the session
      assert.ok(await waitUntil(async () => (await placesOf(name)) === 1, 5000));
      const secondWait = second.lock(name, { wait: 30 }).then((lease) => (order.push('second'), lease));
      secondWait.catch(() => {}); // a failure below is the test's; the wait ends with the session
      assert.ok(await waitUntil(async () => (await placesOf(name)) === 2, 5000));
      await assert.rejects(client.lock(name, { ttl: 5 }), LockTimeoutError);
      // The first's connection is cut (its heartbeat's is left): the place is the database's, not the connection's.
      const cut = await sql1(
        db,
        `SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = $1
            AND query NOT LIKE '%fencing_session_open%' AND query NOT LIKE '%fencing_session_renew%'`,
        [`pg_fencing session ${first.holder}`.slice(0, 63)],
      );
      assert.equal(cut, 1, "the first's work connection was cut");
      await sleep(1200); // its next polls, on a new connection

      // Released and taken in one transaction by a third party: the first
      // place is in line, so the lock is not the third party's.
      await db.query('BEGIN');
      assert.equal(await sql1(db, 'SELECT fencing_release($1, $2::fencing_token)', [name, held.token]), true);
      const stolen = await sql1(db, "SELECT fencing_acquire($1, 'third party', '10 s')::text", [name]);
      await db.query('COMMIT');
      assert.equal(stolen, null, 'a plain acquire took the lock from the line');
      // Nor in the moments before the first place polls.
      for (let i = 0; i < 5; i += 1) {
        await assert.rejects(client.lock(name, { ttl: 5, holder: 'third party' }), LockTimeoutError);
        await sleep(50);
      }
      const one = await within(firstWait, 5000, 'the first wait');
      assert.ok(one.token > held.token && one.held());
      await sleep(1000); // two polls of the second
      assert.deepEqual(order, ['first'], 'the second waits while the first holds');
      assert.equal(await placesOf(name), 2, 'the granted place and the waiting one');
      assert.equal(await one.release(), true);
      const two = await within(secondWait, 5000, 'the second wait');
      assert.ok(two.token > one.token);
      assert.deepEqual(order, ['first', 'second']);
      assert.ok(one.place < two.place, 'places in arrival order');
      assert.equal(await two.release(), true);
      assert.equal(await placesOf(name), 0);
    } finally {
      await Promise.all([holding.close(), first.close(), second.close()]);
    }
  });

  test('a candidate that comes back with waits shorter than its poll period takes its turn: a plain acquire meanwhile gets nothing', async () => {
    // 0.2 s waits with a poll every 1 s and its other work between them (as
    // the C++ demo's leader scenario's 250 ms attempts): each wait polls its
    // place just before its deadline, so when the holder releases during one
    // of them the candidate takes the lock within a few attempts.  (A wait
    // that left at its deadline without polling left the lock free and its
    // line empty.)
    const name = newName();
    const looping = new Client(undefined, { poll: 1 });
    const holding = await client.session({ ttl: 10 });
    const candidate = await looping.session({ ttl: 10, holder: `looping-${name}` });
    const attempts = []; // when each attempt began
    let stop = false;
    try {
      const held = await holding.lock(name);
      const loop = (async () => {
        while (!stop) {
          attempts.push(performance.now());
          try {
            return { lease: await candidate.lock(name, { wait: 0.2 }), attempt: attempts.length };
          } catch (err) {
            if (!(err instanceof LockTimeoutError)) throw err;
          }
          await sleep(100); // its other work
        }
        return null;
      })();
      loop.catch(() => {}); // awaited below
      let done = null;
      loop.then((got) => (done = got), () => (done = {}));
      // 50 ms into its third attempt (or a later one), its place in line: the release.
      let releasedIn = 0;
      const deadline = performance.now() + 10_000;
      while (releasedIn === 0 && performance.now() < deadline && done === null) {
        const seen = attempts.length;
        if (seen >= 3 && performance.now() - attempts[seen - 1] < 50) {
          await sleep(Math.max(0, attempts[seen - 1] + 50 - performance.now()));
          if (attempts.length === seen && (await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [candidate.id])) === 1) {
            assert.equal(await held.release(), true);
            releasedIn = seen;
            continue;
          }
        }
        await sleep(2);
      }
      assert.ok(releasedIn > 0, 'no attempt of the candidate to release during');
      let third = 0;
      while (done === null && performance.now() < deadline) {
        const stolen = await sql1(db, "SELECT fencing_acquire($1, 'third', '10 s')::text", [name]);
        assert.equal(stolen, null, `a third party's plain acquire took the lock after attempt ${attempts.length} of the candidate (released in ${releasedIn})`);
        third += 1;
        await sleep(10);
      }
      const got = await within(loop, 5000, 'the candidate');
      assert.ok(got?.lease, 'the candidate took the lock');
      assert.ok(got.attempt <= releasedIn + 2, `taken at attempt ${got.attempt}, released in ${releasedIn}`);
      assert.ok(third > 0);
      assert.equal(await sql1(db, "SELECT holder FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [name]), `looping-${name}`);
      assert.equal(await got.lease.release(), true);
      assert.equal(await placesOf(name), 0);
    } finally {
      stop = true;
      await Promise.all([holding.close(), candidate.close()]);
    }
  });

  test('with listen: true a place is polled as soon as its number is announced', async () => {
    const name = newName();
    const listening = new Client(undefined, { listen: true, poll: 60 }); // the timer alone would be too late
    const holding = await client.session({ ttl: 10 });
    const waiter = await listening.session({ ttl: 10 });
    try {
      const held = await holding.lock(name);
      const waiting = waiter.lock(name, { wait: 30 });
      assert.ok(
        await waitUntil(async () => (await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [waiter.id])) === 1, 5000),
        'the wait is a place in line',
      );
      const listeners = () =>
        sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pg_fencing line' AND query = 'LISTEN fencing_line'");
      assert.ok(await waitUntil(async () => (await listeners()) >= 1, 5000), 'one connection LISTENs');
      const released = performance.now();
      await held.release();
      const got = await within(waiting, 5000, 'the wait');
      assert.ok(performance.now() - released < 3000, `granted ${performance.now() - released} ms after the release`);
      assert.ok(got.token > held.token);
      assert.equal(await got.release(), true);
      assert.ok(await waitUntil(async () => (await listeners()) === 0, 5000), 'the listener ends with the last wait');
    } finally {
      await Promise.all([holding.close(), waiter.close()]);
    }
  });
});
