// Edges a review found: tokens and session ids past 2^53 under an
// application's own int8 parser, observe() and an error no reconnect mends,
// a grant that races the cancel of a wait, a session closed while a wait in
// it is pending.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { Client, LeaseLostError } from '../index.js';
import { connectDb, newName, protectedTable, sql1, waitUntil, within } from './helpers.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

describe('edges', () => {
  test('tokens and session ids past 2^60 stay exact, whatever int8 parser the application set', async () => {
    // Every later grant, session ids included, past 2^60, where a Number
    // holds only multiples of 256.
    const floor = 2n ** 60n;
    const now = BigInt(await sql1(db, 'SELECT fencing_grant()::text'));
    if (now < floor) await db.query('SELECT fencing_bump_tokens($1::bigint)', [floor - now]);
    pg.types.setTypeParser(20, Number); // what many applications do, for the whole process
    let lease;
    let session;
    try {
      const name = newName();
      await protectedTable(db, name, name);
      lease = await client.lock(name, { ttl: 1.2 });
      session = await client.session({ ttl: 1.2 });
      const inSession = await session.lockAll([`${name}_a`, `${name}_b`]);
      assert.ok(lease.token > floor && session.id > floor);
      const live = (lock) => sql1(db, "SELECT token::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live'", [lock]);
      assert.equal(String(lease.token), await live(name));
      assert.equal(String(session.id), await sql1(db, 'SELECT session_id::text FROM fencing_sessions WHERE holder = $1', [session.holder]));
      assert.deepEqual(inSession.map((l) => String(l.token)), [await live(`${name}_a`), await live(`${name}_b`)]);
      await sleep(1500); // past the ttl: renewed by the exact token and id
      assert.ok(lease.held(), lease.lostReason);
      assert.ok(session.held(), session.lostReason);
      await lease.query(db, `UPDATE ${name} SET token = $1, v = 'big' WHERE id = 1`, [lease.token]);
      assert.equal(await sql1(db, `SELECT token::text FROM ${name}`), String(lease.token));
      assert.equal(await lease.release(), true);
      assert.equal(await session.close(), 2);
    } finally {
      pg.types.setTypeParser(20, (text) => text); // node-postgres's default: the text
      await Promise.all([lease?.release(), session?.close()]);
    }
  });

  test('observe() throws an error no reconnect can mend, rather than retrying it forever', async () => {
    const wrong = new Client({ password: `not-${randomBytes(6).toString('hex')}` });
    const controller = new AbortController(); // ends the loop should it retry
    const watching = wrong.election(newName()).observe({ signal: controller.signal });
    try {
      await within(
        assert.rejects(watching.next(), (err) => err.code === '28P01' && /password authentication failed/.test(err.message)),
        5000,
        'observe() with a wrong password',
      );
    } finally {
      controller.abort();
      await watching.return();
    }
  });

  test('a grant that lands while a wait is being cancelled is given back', async () => {
    const name = newName();
    const first = await client.lock(name, { ttl: 5 });
    const controller = new AbortController();
    const waiting = client.lock(name, { ttl: 5, wait: 30, holder: `racer-${name}`, signal: controller.signal });
    const app = `pg_fencing lease racer-${name}`;
    assert.ok(
      await waitUntil(async () => (await sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'CALL fencing_await%' AND state = 'active'", [app])) === 1, 5000),
      'the wait is on the server',
    );
    // The cancel needs a connection of its own; the release, sent on one
    // that is open already (the test's: a lease's own release() makes a
    // short connection of its own), usually gets the wait granted before it
    // lands.
    controller.abort();
    assert.equal(await sql1(db, 'SELECT fencing_release($1, $2::fencing_token)', [name, first.token]), true);
    await within(assert.rejects(waiting, { name: 'AbortError' }), 5000, 'the aborted wait');
    assert.equal(await first.release(), false, 'released already');
    assert.equal(
      await sql1(db, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1 AND holder = $2 AND state = 'live'", [name, `racer-${name}`]),
      0,
      'nothing is left granted to the cancelled wait',
    );
    const next = await client.lock(name, { ttl: 5 });
    await next.release();
  });

  test('a session closes at once while a wait in it is pending, and the wait ends', async () => {
    const name = newName();
    const holder = await client.lock(name, { ttl: 30 });
    const session = await client.session({ ttl: 30 });
    try {
      const waiting = session.lock(name, { wait: 20 }); // neither ends by itself within the test
      waiting.catch(() => {}); // it may end before close() resolves; checked below
      const app = `pg_fencing session ${session.holder}`.slice(0, 63);
      assert.ok(
        await waitUntil(async () => (await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [session.id])) === 1, 5000),
        'the wait is a place in line',
      );
      assert.equal(await within(session.close(), 5000, 'close() while a wait is pending'), 0);
      await within(assert.rejects(waiting, (err) => err instanceof LeaseLostError && /closed|ended/.test(err.message)), 5000, 'the wait in the closed session');
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_sessions WHERE session_id = $1', [session.id]), 0);
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [session.id]), 0, 'its place went with it');
      // Calls after the close are refused without a connection being made for them.
      await assert.rejects(session.lock(`${name}_after`), /closed/);
      await sleep(200);
      assert.equal(await sql1(db, 'SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1', [app]), 0, 'no connection of the session is left open');
    } finally {
      await session.close();
      await holder.release();
    }
  });

  test("cancelling a session's wait for one more permit leaves the permit it holds", async () => {
    const name = newName();
    const session = await client.session({ ttl: 10 });
    const other = await client.semaphore(name, 2, { ttl: 10 });
    try {
      const mine = await session.lock(name, { kind: 'permit', permits: 2 });
      const controller = new AbortController();
      const waiting = session.lock(name, { kind: 'permit', permits: 2, wait: 30, signal: controller.signal });
      assert.ok(
        await waitUntil(async () => (await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1 AND token IS NULL', [session.id.toString()])) === 1, 5000),
        'the wait for a second permit is a place in line',
      );
      controller.abort();
      await within(assert.rejects(waiting, { name: 'AbortError' }), 5000, 'the aborted wait');
      assert.equal(
        await sql1(db, "SELECT state FROM fencing_permits WHERE lock_name = $1 AND token = $2::fencing_token", [name, mine.token]),
        'live',
        'the permit the session already held is still live',
      );
      assert.equal(await mine.release(), true);
    } finally {
      await Promise.all([session.close(), other.release()]);
    }
  });
});
