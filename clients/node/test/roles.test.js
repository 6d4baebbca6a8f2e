// The client as a real deployment runs it: as unprivileged login roles,
// not as the superuser the other tests use.  The superuser makes two roles
// with passwords -- the application's, allowed to use three locks (a lease's,
// a session's and an election's) and to write a table guarded under the
// first, and a hostile one, allowed to write that table but to use none of
// them (only a lock of its own) -- and each role gets a Client of its own
// (its own user and password).
// Every attack of the hostile role must fail with a clear error (on the
// application's session: the answer for a session that does not exist, 1.9),
// and the application's lease, session and leadership must be unharmed
// afterwards.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { after, before, describe, test } from 'node:test';

import pg from 'pg';

import { Client, LeaseLostError, NeverGrantedTokenError, fencedQuery } from '../index.js';
import { connectDb, newName, protectedTable, sql1, waitUntil, within } from './helpers.js';

const PERMISSION_DENIED = '42501';
const SESSION_ENDED = '55Z05';

// A refusal of the privilege model: SQLSTATE 42501 and a message matching `message`.
function denied(message) {
  return (err) => {
    assert.equal(err.code, PERMISSION_DENIED, `expected 42501, got ${err.code}: ${err.message}`);
    assert.match(err.message, message);
    return true;
  };
}

// The answer for an acquire in a session that does not exist: 55Z05 naming the session id,
// never a token, NULL or 42501 -- to another role, the app's session is no session at all.
function noSuchSession(id) {
  return (err) => {
    assert.equal(err.code, SESSION_ENDED, `expected 55Z05, got ${err.code}: ${err.message}`);
    assert.equal(err.message, `fencing session ${id} does not exist or has ended`);
    return true;
  };
}

const suffix = randomBytes(4).toString('hex');
const app = { role: `js_app_${suffix}`, password: randomBytes(12).toString('hex') };
const evil = { role: `js_evil_${suffix}`, password: randomBytes(12).toString('hex') };
const leaseLock = newName();
const sessionLock = newName();
const electionLock = newName();
const evilLock = newName(); // a lock the hostile role may use: in the app's session, only the session stands in its way
const table = leaseLock;

let db; // the superuser's
let appDb; // plain connections of each role, for the writes and the raw SQL
let evilDb;
const appClient = new Client({ user: app.role, password: app.password });
const evilClient = new Client({ user: evil.role, password: evil.password });

async function connectAs({ role, password }) {
  const conn = new pg.Client({ user: role, password, application_name: `pg_fencing node test ${role}` });
  await conn.connect();
  return conn;
}

before(async () => {
  db = await connectDb();
  // Identifiers of this run's own making ([a-z0-9_]); passwords are bind
  // parameters of format(), never spliced into SQL by hand.
  for (const { role, password } of [app, evil]) {
    await db.query(await sql1(db, 'SELECT format($$CREATE ROLE %I LOGIN PASSWORD %L$$, $1::text, $2::text)', [role, password]));
  }
  for (const lock of [leaseLock, sessionLock, electionLock]) {
    await db.query('SELECT fencing_create_lock($1)', [lock]); // the superuser's lock ...
    await db.query('SELECT fencing_grant_lock($1, $2::regrole)', [lock, app.role]); // ... whose use it grants the app
  }
  await db.query('SELECT fencing_create_lock($1)', [evilLock]);
  await db.query('SELECT fencing_grant_lock($1, $2::regrole)', [evilLock, evil.role]);
  await protectedTable(db, table, leaseLock);
  // The hostile role may write the table too: what stops it is the lock.
  await db.query(`GRANT SELECT, UPDATE ON ${table} TO ${app.role}, ${evil.role}`);
  appDb = await connectAs(app);
  evilDb = await connectAs(evil);
});

after(async () => {
  await Promise.all([appDb?.end(), evilDb?.end()]);
  for (const lock of [leaseLock, sessionLock, electionLock]) {
    await db.query('SELECT fencing_revoke_lock($1, $2::regrole)', [lock, app.role]);
  }
  await db.query('SELECT fencing_revoke_lock($1, $2::regrole)', [evilLock, evil.role]);
  await db.query(`DROP TABLE IF EXISTS ${table}`);
  await db.query(`DROP OWNED BY ${app.role}, ${evil.role}`);
  await db.query(`DROP ROLE ${app.role}, ${evil.role}`);
  await db.end();
});

describe('unprivileged roles', () => {
  test("a hostile role can neither take, renew, release nor write under the app's lease", async () => {
    const lease = await appClient.lock(leaseLock, { ttl: 5 });
    const lost = [];
    lease.on('lost', (reason) => lost.push(reason));
    const update = `UPDATE ${table} SET token = $1, v = $2 WHERE id = 1`;
    await lease.query(appDb, update, [lease.token, 'app']);

    await assert.rejects(evilClient.lock(leaseLock), denied(new RegExp(`permission denied for fencing lock "${leaseLock}"`)));
    // A wait is refused at its first attempt, not after it: the role holds no place in the queue.
    await within(assert.rejects(evilClient.lock(leaseLock, { wait: 30 }), denied(/permission denied for fencing lock/)), 5000, 'the refused wait');
    await assert.rejects(evilClient.shared(leaseLock), denied(/permission denied for fencing lock/));
    assert.equal(await evilClient.leader(leaseLock), null, 'the hostile role does not even see who holds the lock');

    // With the token (say it leaked from a log), the lease's own functions refuse the role.
    await assert.rejects(evilDb.query('SELECT fencing_release($1, $2::fencing_token)', [leaseLock, lease.token]), denied(/permission denied for fencing lock/));
    await assert.rejects(evilDb.query("SELECT fencing_renew($1, $2::fencing_token, '1 hour')", [leaseLock, lease.token]), denied(/permission denied for fencing lock/));
    // Writes: with a forged higher token, or with the app's own token.
    await assert.rejects(fencedQuery(evilDb, update, [lease.token + 1000n, 'evil']), denied(/permission denied for fencing lock/));
    await assert.rejects(fencedQuery(evilDb, update, [lease.token, 'evil']), denied(/permission denied for fencing lock/));
    // The connection that renews the lease (the app client's one heartbeat, opened for
    // the first renewal) is visible in pg_stat_activity (its application_name and role),
    // but not the hostile role's to end.
    const heartbeat = "SELECT pid FROM pg_stat_activity WHERE usename = $1 AND application_name = 'pg_fencing heartbeat'";
    assert.ok(await waitUntil(async () => (await db.query(heartbeat, [app.role])).rows.length === 1, 5000), "the app's heartbeat connection");
    await assert.rejects(evilDb.query(`SELECT pg_terminate_backend(pid) FROM (${heartbeat}) AS hb`, [app.role]), denied(/terminate/));
    // A token above every grant is refused as never granted even from a role that may use
    // the lock (an app instance with a bug, or stolen app credentials): it cannot lock the
    // real holder out.
    const forged = await fencedQuery(appDb, update, [lease.token + 1000n, 'forged']).catch((e) => e);
    assert.ok(forged instanceof NeverGrantedTokenError, String(forged));
    assert.equal(forged.sqlstate, '55Z03');
    assert.match(forged.message, /was never granted/);

    // Unharmed: held by the client and by the server, and its next write lands.
    assert.ok(lease.held(), lease.lostReason);
    assert.deepEqual(lost, []);
    assert.equal(await sql1(db, "SELECT token::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [leaseLock]), String(lease.token));
    assert.equal((await lease.query(appDb, update, [lease.token, 'app again'])).rowCount, 1);
    assert.equal(await sql1(db, `SELECT v FROM ${table}`), 'app again');
    assert.equal(await lease.release(), true);
  });

  test("a hostile role can neither close, renew nor use the app's session", async () => {
    const session = await appClient.session({ ttl: 5 });
    // As the superuser sees it: whether it is live, seconds until it ends, leases in it.
    const state = async (id) => (await db.query(
      'SELECT live, extract(epoch FROM expires_at - clock_timestamp())::float8 AS left, leases::int FROM fencing_sessions WHERE session_id = $1',
      [id],
    )).rows[0];
    try {
      const held = await session.lock(sessionLock);
      const evilSession = await evilClient.session({ ttl: 5 }); // a session of its own it may open ...
      try {
        await assert.rejects(evilSession.lock(sessionLock), denied(/permission denied for fencing lock/)); // ... but not lock in
      } finally {
        await evilSession.close();
      }
      const before = await state(session.id);
      assert.ok(before.live && before.leases === 1, `the session before: live ${before.live}, ${before.leases} leases`);
      // 1.9 (issue 42): the app's session id answers the hostile role exactly as one it made up:
      // a close closes nothing (0), a renewal renews nothing (false), an acquire in it -- even
      // of a lock it may use -- is refused with 55Z05.  It cannot tell the one from the other,
      // nor close, prolong or join the session.
      const madeUp = (BigInt(`0x${randomBytes(8).toString('hex')}`) >> 3n) + (1n << 61n);
      assert.equal(await state(madeUp), undefined, 'a made-up session id that exists');
      assert.equal(await sql1(evilDb, 'SELECT count(*)::int FROM fencing_sessions WHERE session_id = $1', [session.id]), 0, 'it sees the session');
      for (const id of [session.id, madeUp]) {
        assert.equal(await sql1(evilDb, 'SELECT fencing_session_close($1)', [id]), 0);
        // A renewal that took would end the session within a millisecond, or keep it an hour:
        // looked at at once, before the app's heartbeat (every third of its ttl) renews it.
        for (const ttl of ['1 millisecond', '1 hour']) {
          assert.equal(await sql1(evilDb, 'SELECT fencing_session_renew($1, $2::interval)', [id, ttl]), false);
          if (id === session.id) {
            const { live, left } = await state(id);
            assert.ok(live && left > 0.5 && left <= 5.5, `after a renewal to ${ttl}: live ${live}, ${left} s left`);
          }
        }
        await assert.rejects(evilDb.query('SELECT fencing_session_acquire($1, $2)', [id, evilLock]), noSuchSession(id));
        await assert.rejects(evilDb.query("SELECT fencing_session_acquire($1, $2, kind => 'shared')", [id, evilLock]), noSuchSession(id));
        await assert.rejects(evilDb.query('SELECT fencing_session_acquire_all($1, $2::text[])', [id, [evilLock]]), noSuchSession(id));
        await assert.rejects(evilDb.query("SELECT fencing_session_acquire_all($1, $2::text[], '1 s')", [id, [evilLock]]), noSuchSession(id));
        // Refused at its first attempt, not after the wait.
        await within(
          assert.rejects(evilDb.query("CALL fencing_await($1, session => $2, wait => '30 s')", [evilLock, id]), noSuchSession(id)),
          10000,
          'the refused wait in the session',
        );
      }
      await assert.rejects(evilDb.query('SELECT fencing_release($1, $2::fencing_token)', [sessionLock, held.token]), denied(/permission denied for fencing lock/));

      // Unharmed: held by the client and by the server, still ending when the app's heartbeat
      // says, with its one lease and nothing of the hostile role's.
      assert.ok(session.held() && held.held(), held.lostReason);
      const { live, left, leases } = await state(session.id);
      assert.ok(live && left > 0.5 && left <= 5.5 && leases === 1, `the session: live ${live}, ${left} s left, ${leases} leases`);
      assert.equal(await sql1(db, "SELECT session_id::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [sessionLock]), String(session.id));
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1', [evilLock]), 0, 'a lease of its lock was granted');
      // The same calls in a session of its own do what they say: what was refused is the app's session.
      const own = await evilClient.session({ ttl: 5 });
      try {
        assert.equal(await sql1(evilDb, "SELECT fencing_session_renew($1, '5 s')", [own.id]), true);
        assert.notEqual(await sql1(evilDb, 'SELECT fencing_session_acquire($1, $2)::text', [own.id, evilLock]), null);
        assert.equal(await sql1(evilDb, 'SELECT fencing_session_close($1)', [own.id]), 1);
      } finally {
        await own.close();
      }
      assert.equal(await held.release(), true);
    } finally {
      await session.close();
    }
  });

  test('a hostile role can neither campaign in nor proclaim over the election', async () => {
    const leader = appClient.election(electionLock, 'app-leader', { ttl: 5 });
    const lease = await leader.campaign({ addr: 'app' });
    try {
      // Refused at once with 42501, not a wait that times out.
      const usurper = evilClient.election(electionLock, 'app-leader', { ttl: 5 });
      await within(assert.rejects(usurper.campaign({ addr: 'evil' }, { timeout: 30 }), denied(/permission denied for fencing lock/)), 5000, 'the refused campaign');
      // The client refuses a proclamation by a candidate that does not lead, before sending ...
      await assert.rejects(usurper.proclaim({ addr: 'evil' }), LeaseLostError);
      // ... and the server refuses the acquire a proclamation is, even under the leader's holder name.
      await assert.rejects(
        evilDb.query("SELECT fencing_acquire($1, 'app-leader', '10 s', payload => $2::jsonb)", [electionLock, JSON.stringify({ addr: 'evil' })]),
        denied(/permission denied for fencing lock/),
      );
      assert.equal(await usurper.leader(), null, 'the hostile role does not see the leader');

      assert.ok(leader.isLeader());
      assert.deepEqual(await leader.leader(), { holder: 'app-leader', token: lease.token, payload: { addr: 'app' } });
      await leader.proclaim({ addr: 'app, moved' }); // the real leader still may
      assert.deepEqual((await leader.leader()).payload, { addr: 'app, moved' });
    } finally {
      assert.equal(await leader.resign(), true);
    }
  });

  test("the role's password is in nothing a log line prints", async () => {
    // Whoever reads the logs is not to learn the app's password: node-postgres keeps it
    // out of what util.inspect and JSON print, and so must every object of this client.
    const lease = await appClient.lock(leaseLock, { ttl: 5 });
    const session = await appClient.session({ ttl: 5 });
    const election = appClient.election(electionLock, 'logged');
    const withUrl = new Client(`postgresql://${app.role}:${app.password}@${process.env.PGHOST ?? 'localhost'}/`);
    try {
      for (const [what, object] of Object.entries({ client: appClient, lease, session, election, withUrl })) {
        const printed = inspect(object, { depth: 10, showHidden: false }) + JSON.stringify(object, (k, v) => (typeof v === 'bigint' ? String(v) : v));
        assert.ok(!printed.includes(app.password), `the password is printed with the ${what}: ${printed}`);
      }
      assert.equal(appClient.config.password, app.password, 'the config is still there to read');
    } finally {
      await Promise.all([lease.release(), session.close()]);
    }
  });
});
