// Every wait in a session is a place in line (pg_fencing 1.10, issue 43):
// a wait for a permit of a semaphore or for a shared lease too, not only
// one for an exclusive lease.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '../index.js';
import { connectDb, newName, sql1, track, waitUntil, within } from './helpers.js';
import { PGBOUNCER, havePgBouncer, startPgBouncer } from './pgbouncer.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

async function granted(tracked, what, timeoutMs = 10_000) {
  await within(tracked.done, timeoutMs, what);
  if (tracked.state === 'rejected') throw tracked.error;
  return tracked.value;
}

// How many of these sessions wait on the server: with a place in line that
// waits, or a CALL fencing_await that runs.
async function onTheServer(sessions) {
  let waiting = 0;
  for (const s of sessions) {
    const app = `pg_fencing session ${s.holder}`.slice(0, 63);
    if (await sql1(
      db,
      `SELECT EXISTS (SELECT FROM fencing_line WHERE session_id = $1 AND token IS NULL)
           OR EXISTS (SELECT FROM pg_stat_activity WHERE application_name = $2 AND state = 'active'
                         AND query LIKE 'CALL fencing_await%')`,
      [s.id.toString(), app],
    )) waiting += 1;
  }
  return waiting;
}

describe('every wait in a session is a place in line', () => {
  test(
    "a session's waits for a permit and for a shared lease hold no server connection: another client's statements go through a pool of 2 meanwhile",
    { timeout: 60_000, skip: havePgBouncer() ? false : `PgBouncer is not installed (${PGBOUNCER})` },
    async () => {
      const bouncer = await startPgBouncer({ poolSize: 2 });
      const pooled = new Client(bouncer.url);
      const semaphore = newName();
      const shared = newName();
      const blockers = [await client.semaphore(semaphore, 2, { ttl: 30 }), await client.semaphore(semaphore, 2, { ttl: 30 })];
      const writer = await client.lock(shared, { ttl: 30 });
      const permitSession = await pooled.session({ ttl: 5, holder: `permit-${semaphore}` });
      const sharedSession = await pooled.session({ ttl: 5, holder: `shared-${shared}` });
      const controller = new AbortController();
      try {
        const permitWait = track(permitSession.lock(semaphore, { kind: 'permit', permits: 2, wait: 30, signal: controller.signal }));
        const sharedWait = track(sharedSession.lock(shared, { kind: 'shared', wait: 30, signal: controller.signal }));
        assert.ok(
          await waitUntil(async () => (await onTheServer([permitSession, sharedSession])) === 2, 10_000),
          'the two waits are on the server',
        );
        // Another client's short statements through the same pool: two
        // statements that wait would take both of its server connections.
        for (let i = 0; i < 10; i += 1) {
          await within(pooled.leader(newName()), 2000, `another client's statement ${i} through the pool`);
          await sleep(100);
        }
        assert.equal(permitWait.state, 'pending', 'the wait for a permit ended before one was freed');
        assert.equal(sharedWait.state, 'pending', 'the wait for a shared lease ended before the exclusive lease did');

        await blockers[0].release();
        const permit = await granted(permitWait, 'the wait for a permit');
        assert.equal(
          await sql1(db, 'SELECT state FROM fencing_permits WHERE lock_name = $1 AND token = $2::fencing_token AND session_id = $3',
            [semaphore, permit.token.toString(), permitSession.id.toString()]),
          'live',
        );
        await writer.release();
        const reader = await granted(sharedWait, 'the wait for a shared lease');
        assert.equal(
          await sql1(db, 'SELECT state FROM fencing_permits WHERE lock_name = $1 AND token = $2::fencing_token AND session_id = $3',
            [shared, reader.token.toString(), sharedSession.id.toString()]),
          'live',
        );
        assert.equal(await permit.release(), true);
        assert.equal(await reader.release(), true);
        assert.equal(
          await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = ANY($1::bigint[])',
            [[permitSession.id.toString(), sharedSession.id.toString()]]),
          0,
          'no place is left once the leases are released',
        );
      } finally {
        controller.abort();
        await Promise.all([permitSession.close(), sharedSession.close()]);
        await Promise.all([...blockers, writer].map((lease) => lease.release().catch(() => false)));
        await bouncer.stop();
      }
    },
  );

  test('permits go to their waits in arrival order: A, B, C wait for one of 2 (B and C polling more often, A cut off meanwhile): A gets the first freed, not a third party asking outside the line, B the next', async () => {
    const name = newName();
    const blockers = [await client.semaphore(name, 2, { ttl: 30 }), await client.semaphore(name, 2, { ttl: 30 })];
    const sessions = [];
    const waits = [];
    const controller = new AbortController();
    try {
      for (const who of ['A', 'B', 'C']) {
        const waiter = new Client(undefined, { poll: who === 'A' ? 1 : 0.05 });
        const session = await waiter.session({ ttl: 5, holder: `${who}-${name}` });
        sessions.push(session);
        waits.push(track(session.lock(name, { kind: 'permit', permits: 2, wait: 30, signal: controller.signal })));
        // On the server before the next one starts.
        assert.ok(await waitUntil(async () => (await onTheServer([session])) === 1, 10_000), `the wait of ${who} is on the server`);
      }
      // A's work connection is cut (its heartbeat's is left): the place is the database's.
      const cut = await sql1(
        db,
        `SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = $1
            AND query NOT LIKE '%fencing_session_open%' AND query NOT LIKE '%fencing_session_renew%'`,
        [`pg_fencing session ${sessions[0].holder}`.slice(0, 63)],
      );
      assert.equal(cut, 1, "A's work connection was cut");
      await sleep(200);
      assert.deepEqual(waits.map((w) => w.state), ['pending', 'pending', 'pending'], 'every wait goes on');

      // Released, and asked for by a third party outside the line, in one
      // transaction: the permit is A's, not the third party's.
      await db.query('BEGIN');
      assert.equal(await sql1(db, 'SELECT fencing_release($1, $2::fencing_token)', [name, blockers[0].token.toString()]), true);
      const stolen = await sql1(db, "SELECT fencing_acquire_permit($1, 'third party', 2, '10 s')::text", [name]);
      await db.query('COMMIT');
      assert.equal(stolen, null, 'a permit asked for outside the line was granted while A, B and C wait');
      const a = await granted(waits[0], "A's wait for the first permit freed");
      assert.deepEqual(waits.map((w) => w.state), ['resolved', 'pending', 'pending'], 'B or C had a permit before a second one was freed');
      await blockers[1].release();
      const b = await granted(waits[1], "B's wait for the second permit freed");
      await sleep(300); // C polls a few times
      assert.equal(waits[2].state, 'pending', 'C had a permit too, with none free');
      assert.notEqual(a.token, b.token);
      assert.ok(a.place < b.place, 'places in arrival order');
      // A releases: its permit goes to C, and A's place goes with it.
      assert.equal(await a.release(), true);
      const c = await granted(waits[2], 'C after A released');
      assert.equal(await b.release(), true);
      assert.equal(await c.release(), true);
      assert.equal(
        await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = ANY($1::bigint[])', [sessions.map((s) => s.id.toString())]),
        0,
        'no place is left once every permit is released',
      );
    } finally {
      controller.abort();
      await Promise.all(sessions.map((s) => s.close()));
      await Promise.all(blockers.map((lease) => lease.release().catch(() => false)));
    }
  });
});
