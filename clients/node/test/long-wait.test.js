// A wait longer than a minute keeps its place in line (issue 43): the line
// keeps arrival order for the whole wait, not for a slice of it.  About 70
// seconds, so it runs only with PG_FENCING_LONG_WAIT=1 (a script runs every
// client's long test side by side against one cluster).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '../index.js';
import { connectDb, newName, sql1, track, waitUntil, within } from './helpers.js';

const LONG_WAIT = process.env.PG_FENCING_LONG_WAIT === '1';

const client = new Client(); // no listener: the wait polls its place on the timer
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

// The places waiting in lock name's line, in order: [place, position] (text, number).
async function lineOf(name) {
  const { rows } = await db.query(
    'SELECT place::text AS place, position::int AS position FROM fencing_lines WHERE lock_name = $1 ORDER BY place',
    [name],
  );
  return rows.map((row) => [row.place, row.position]);
}

describe('a long wait', () => {
  test(
    'a wait of more than a minute keeps its place: the same place number, first in line, for 65 s, then takes the lock before the place behind it',
    {
      timeout: 150_000,
      skip: LONG_WAIT ? false : 'a wait of more than a minute (about 70 s): set PG_FENCING_LONG_WAIT=1 to run it',
    },
    async () => {
      // What it catches: a wait that left the line and joined again (every
      // 30 s, say) would come back with a new place number, behind B; a
      // wait cut into slices that ended early (a 30 s slice) would return,
      // or leave the line.  Either fails the checks of the 65 s below.
      const name = `long-wait-node-${newName()}`;
      const holding = await client.session({ ttl: 3 }); // renewed by the client's heartbeat throughout
      const waiter = await client.session();
      let bSession = null;
      let a = null;
      try {
        const held = await holding.lock(name);

        // A waits in line, up to 150 s, polling its place.
        a = track(waiter.lock(name, { wait: 150 }));
        assert.ok(
          await waitUntil(async () => (await sql1(db, 'SELECT count(*)::int FROM fencing_lines WHERE lock_name = $1', [name])) === 1, 10_000),
          "A's wait is a place in line",
        );
        const aPlace = await sql1(db, 'SELECT place::text FROM fencing_lines WHERE lock_name = $1 AND session_id = $2', [name, waiter.id]);
        assert.ok(aPlace !== null, "the one place in line is A's");

        // B joins behind A, in plain SQL, in a session that lives 5 min unrenewed.
        bSession = await sql1(db, "SELECT fencing_session_open('long-wait-B', '5 min')::text");
        const bPlace = await sql1(db, 'SELECT place::text FROM fencing_line_join($1::bigint, $2)', [bSession, name]);
        assert.ok(BigInt(bPlace) > BigInt(aPlace), 'B joined after A');

        // 65 s, checked every 2 s and once at the end: A's wait goes on,
        // A's place the first, B's the second.
        const expected = [[aPlace, 1], [bPlace, 2]];
        const started = performance.now();
        for (;;) {
          const elapsed = Math.round((performance.now() - started) / 1000);
          assert.equal(a.state, 'pending', `A's wait ended after ${elapsed} s: ${a.error ?? 'with a lease'}`);
          assert.ok(held.held(), `the holder lost its lease after ${elapsed} s: ${held.lostReason}`);
          assert.deepEqual(await lineOf(name), expected, `the line after ${elapsed} s`);
          if (performance.now() - started >= 65_000) break;
          await sleep(Math.min(2000, started + 65_000 - performance.now()));
        }

        // The holder releases: A takes the lock within 10 s, B still waits, now first.
        assert.equal(await held.release(), true);
        await within(a.done, 10_000, "A's wait");
        assert.equal(a.state, 'resolved', `A's wait: ${a.error}`);
        const lease = a.value;
        assert.ok(lease.held() && lease.token > held.token, `A's token ${lease.token} after the holder's ${held.token}`);
        assert.equal(String(lease.place), aPlace, 'granted to the place A joined with');
        assert.deepEqual(await lineOf(name), [[bPlace, 1]]);
        assert.equal(await sql1(db, 'SELECT state FROM fencing_line_poll(ARRAY[$1::bigint])', [bPlace]), 'waiting');

        assert.equal(await lease.release(), true);
      } finally {
        await Promise.all([holding.close(), waiter.close()]);
        await a?.done;
        if (bSession !== null) await sql1(db, 'SELECT fencing_session_close($1::bigint)', [bSession]);
      }
    },
  );
});
