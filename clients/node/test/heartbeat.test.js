// One heartbeat per Client: every session, election and lease of its own a
// Client makes is renewed on one connection, one statement a round, each
// keeping its own loss.  The heartbeat's connection is found on the server
// by the Client's own application_name (its config names it, so every
// connection of the Client carries it) and by what it runs: the renewals.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client } from '../index.js';
import { connectDb, newName, sql1, waitUntil } from './helpers.js';

let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

// A Client whose connections all carry an application_name of its own.
function ownClient() {
  const app = `pg_fencing node test ${newName()}`;
  return { app, client: new Client({ application_name: app }) };
}

// The pids of app's connections whose statement is (or was last) a renewal.
async function heartbeatPids(app) {
  const { rows } = await db.query(
    `SELECT pid FROM pg_stat_activity
      WHERE application_name = $1 AND (query LIKE '%fencing_session_renew%' OR query LIKE '%fencing_renew%')`,
    [app],
  );
  return rows.map((row) => row.pid);
}

// Samples heartbeatPids(app) every 100 ms for ms: the distinct pids seen,
// and the most seen at once.
async function watchHeartbeats(app, ms) {
  const seen = new Set();
  let most = 0;
  const end = performance.now() + ms;
  while (performance.now() < end) {
    const pids = await heartbeatPids(app);
    for (const pid of pids) seen.add(pid);
    most = Math.max(most, pids.length);
    await sleep(100);
  }
  return { pids: [...seen], most };
}

// When each session ends by the server's clock (epoch seconds), by id (text).
async function sessionEnds(ids) {
  const { rows } = await db.query(
    'SELECT session_id::text AS id, live, extract(epoch FROM expires_at)::float8 AS ends FROM fencing_sessions WHERE session_id = ANY($1::bigint[])',
    [ids.map(String)],
  );
  return new Map(rows.map((row) => [row.id, row.live ? row.ends : null]));
}

describe('one heartbeat per client', () => {
  test('20 sessions, a lease and an election of one client are renewed on one connection, one statement a round, for three ttls', { timeout: 30_000 }, async () => {
    const { app, client } = ownClient();
    const name = newName();
    const ttl = 1.5;
    const periodMs = (ttl * 1000) / 3; // a renewal every 0.5 s
    // The renewal statements the process sends (on the old package, one per
    // session and lease each period).
    const renewals = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (config, ...rest) {
      const text = typeof config === 'string' ? config : config?.text;
      if (typeof text === 'string' && /fencing_(session_)?renew\(/.test(text)) renewals.push(text);
      return query.call(this, config, ...rest);
    };
    const lost = [];
    const sessions = [];
    let lease = null;
    const election = client.election(`${name}_e`, `${name}-leader`, { ttl, onLost: (r) => lost.push(`election: ${r}`) });
    try {
      for (let i = 0; i < 20; i += 1) {
        sessions.push(await client.session({ ttl, holder: `${name}-s${i}`, onLost: (r) => lost.push(`session ${i}: ${r}`) }));
      }
      const inSession = await sessions[0].lockAll([`${name}_a`, `${name}_b`]);
      lease = await client.lock(`${name}_l`, { ttl, onLost: (r) => lost.push(`lease: ${r}`) });
      const leading = await election.campaign({ n: 1 });
      const ids = [...sessions.map((s) => s.id), leading.session.id];
      const before = await sessionEnds(ids);
      const leaseEnds = () =>
        sql1(db, "SELECT extract(epoch FROM expires_at)::float8 FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [`${name}_l`]);
      const leaseBefore = await leaseEnds();

      renewals.length = 0;
      const windowMs = 3 * ttl * 1000;
      const { pids, most } = await watchHeartbeats(app, windowMs);
      const statements = renewals.length;

      assert.deepEqual(lost, [], 'nothing was lost');
      assert.ok(sessions.every((s) => s.held()) && inSession.every((l) => l.held()) && lease.held() && election.isLeader());
      assert.equal(pids.length, 1, `one heartbeat connection for the client's 21 sessions and its lease, seen: ${pids}`);
      assert.equal(most, 1);
      // A round every period (0.5 s), after the first rounds have brought
      // the items' periods together: 9 over the window; the old package sent
      // 22 a period, about 200.
      assert.ok(statements <= (2 * windowMs) / periodMs, `${statements} renewal statements in ${windowMs} ms`);
      assert.ok(statements >= 4, `${statements} renewal statements in ${windowMs} ms`);
      // By the server's clock: every session (and the election's) and the
      // lease were renewed, and live.
      const afterEnds = await sessionEnds(ids);
      for (const id of ids) {
        assert.ok(afterEnds.get(String(id)) > before.get(String(id)) + ttl, `session ${id} was renewed: ${before.get(String(id))} -> ${afterEnds.get(String(id))}`);
      }
      assert.ok((await leaseEnds()) > leaseBefore + ttl, 'the lease was renewed');
      assert.equal(
        await sql1(db, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = ANY($1) AND state = 'live'", [[`${name}_a`, `${name}_b`, `${name}_e`]]),
        3,
        "the sessions' leases live with them",
      );
    } finally {
      pg.Client.prototype.query = query;
      await Promise.all([...sessions.map((s) => s.close()), lease?.release(), election.resign()]);
    }
    assert.ok(await waitUntil(async () => (await heartbeatPids(app)).length === 0, 3000), 'the heartbeat connection is closed once nothing is left to renew');
  });

  test('a loss is its own: a session closed and a lease revoked by an operator are lost, once each, the others renewed on', { timeout: 30_000 }, async () => {
    const { app, client } = ownClient();
    const name = newName();
    const ttl = 1.5;
    const lost = new Map(); // what -> reasons
    const onLost = (what) => (reason) => lost.set(what, [...(lost.get(what) ?? []), reason]);
    const sessions = [];
    let lease = null;
    try {
      for (let i = 0; i < 5; i += 1) sessions.push(await client.session({ ttl, onLost: onLost(`session ${i}`) }));
      lease = await client.lock(name, { ttl, onLost: onLost('lease') });
      const other = await client.lock(`${name}_o`, { ttl, onLost: onLost('other lease') });
      assert.ok(await waitUntil(async () => (await heartbeatPids(app)).length === 1, 3000), 'the heartbeat renews');
      const [pid] = await heartbeatPids(app);

      assert.equal(await sql1(db, 'SELECT fencing_session_close($1)', [sessions[2].id]), 0);
      await sql1(db, "SELECT fencing_revoke($1, 'test')", [name]);
      assert.ok(await waitUntil(() => lost.size === 2, 3000), `both losses reported: ${[...lost.keys()]}`);
      const { pids } = await watchHeartbeats(app, 2 * ttl * 1000); // more rounds: no second report
      assert.deepEqual([...lost.keys()].sort(), ['lease', 'session 2']);
      assert.deepEqual(lost.get('session 2'), ['renewal refused: the session ended, or was closed']);
      assert.deepEqual(lost.get('lease'), ['renewal refused: the lease expired, was released, revoked or taken over']);
      assert.ok(!sessions[2].held() && !lease.held());
      assert.ok(sessions.every((s, i) => i === 2 || s.held()) && other.held(), 'the others are held');
      assert.deepEqual(pids, [pid], 'renewed on by the same one heartbeat connection');
      const ends = await sessionEnds(sessions.map((s) => s.id));
      assert.ok(sessions.every((s, i) => (i === 2) === (ends.get(String(s.id)) == null)), 'the others live on the server');
      assert.equal(await other.release(), true);
      assert.equal(await lease.release(), false, 'revoked');
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  });

  test("a round stuck behind one lease's lock is given up at that lease's deadline: it is lost, the others of the round are renewed on", { timeout: 30_000 }, async () => {
    // The same period for all (so they share their rounds), a shorter ttl
    // (an earlier deadline) for the lease whose rows are locked.  (The old
    // package passed this too: every lease and session had a connection of
    // its own.)
    const { client } = ownClient();
    const name = newName();
    const lost = [];
    const sessions = [];
    let other = null;
    const stuck = await client.lock(name, { ttl: 1, heartbeat: 0.3, onLost: (r) => lost.push(`stuck: ${r}`) });
    const blocker = await connectDb();
    try {
      for (let i = 0; i < 3; i += 1) sessions.push(await client.session({ ttl: 3, heartbeat: 0.3, onLost: (r) => lost.push(`session ${i}: ${r}`) }));
      other = await client.lock(`${name}_o`, { ttl: 3, heartbeat: 0.3, onLost: (r) => lost.push(`other: ${r}`) });
      await sleep(700); // a few rounds together
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM fencing_lock WHERE lock_name = $1 FOR UPDATE', [name]);
      await blocker.query('SELECT 1 FROM fencing_lease WHERE lock_name = $1 FOR UPDATE', [name]);
      assert.ok(await waitUntil(() => lost.length > 0, 2000), 'the stuck lease is lost by its deadline');
      const ends = await sessionEnds(sessions.map((s) => s.id));
      await sleep(1500); // half the others' ttl, past the stuck round
      assert.deepEqual(lost, ["stuck: renewal got no answer before the lease's safe deadline"]);
      assert.ok(sessions.every((s) => s.held()) && other.held(), 'the others are held');
      const later = await sessionEnds(sessions.map((s) => s.id));
      assert.ok(sessions.every((s) => later.get(String(s.id)) > ends.get(String(s.id)) + 1), 'renewed on the server since');
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
      await Promise.all([...sessions.map((s) => s.close()), other?.release(), stuck.release()]);
    }
  });

  test('the heartbeat connection cut between rounds is made again, and nothing is lost', { timeout: 30_000 }, async () => {
    const { app, client } = ownClient();
    const name = newName();
    const ttl = 1.5;
    const lost = [];
    const session = await client.session({ ttl, onLost: (r) => lost.push(`session: ${r}`) });
    const lease = await client.lock(name, { ttl, onLost: (r) => lost.push(`lease: ${r}`) });
    try {
      assert.ok(await waitUntil(async () => (await heartbeatPids(app)).length === 1, 3000), 'the heartbeat renews');
      const [pid] = await heartbeatPids(app);
      // Between two rounds (a round takes milliseconds of the period's 500).
      const cut = "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE pid = $1 AND state = 'idle'";
      assert.ok(await waitUntil(async () => (await sql1(db, cut, [pid])) === 1, 2000), 'cut while idle');
      const gone = 'SELECT count(*)::int FROM pg_stat_activity WHERE pid = $1';
      assert.ok(await waitUntil(async () => (await sql1(db, gone, [pid])) === 0, 2000), 'the backend has ended');
      const { pids } = await watchHeartbeats(app, 2 * ttl * 1000);
      assert.deepEqual(lost, []);
      assert.ok(session.held() && lease.held());
      assert.equal(pids.length, 1, `one heartbeat connection at a time: ${pids}`);
      assert.notEqual(pids[0], pid, 'a new one');
      assert.equal(await sql1(db, 'SELECT live FROM fencing_sessions WHERE session_id = $1', [session.id]), true);
    } finally {
      await Promise.all([session.close(), lease.release()]);
    }
  });
});
