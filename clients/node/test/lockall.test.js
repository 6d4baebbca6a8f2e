// A session's lockAll with a wait waits in line (issue 43): one lock at a
// time, in byte order, each a place; all or none for the result.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LockTimeoutError } from '../index.js';
import { connectDb, newName, sql1, track, waitUntil, within } from './helpers.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

const placesIn = (session, lockName) =>
  sql1(db, 'SELECT count(*)::int FROM fencing_lines WHERE session_id = $1 AND lock_name = $2', [session.id, lockName]);
const liveTokenOf = (session, lockName) =>
  sql1(db, "SELECT token::text FROM fencing_leases WHERE lock_name = $1 AND state = 'live' AND session_id = $2", [lockName, session.id]);

describe('lockAll with a wait waits in line', () => {
  test(
    'lockAll with a wait holds no snapshot and no server connection while it waits, then takes both locks, tokens in the order asked',
    { timeout: 30_000 },
    async () => {
      const name = newName();
      const [first, second] = [`${name}_a`, `${name}_b`]; // byte order: first, then second
      const holder = await client.session({ ttl: 10 });
      const waiter = await client.session({ ttl: 10 });
      try {
        const held = await holder.lockAll([first, second]);
        const app = `pg_fencing session ${waiter.holder}`.slice(0, 63);
        const all = track(waiter.lockAll([second, first], { wait: 15 }));
        await sleep(300);
        // Its connections as pg_stat_activity shows them, 15 samples over 1.5 s.
        const samples = 15;
        let quiet = 0;
        for (let i = 0; i < samples; i += 1) {
          const { rows: [row] } = await db.query(
            `SELECT count(*) FILTER (WHERE state <> 'idle')::int AS busy,
                    count(*) FILTER (WHERE state <> 'idle' AND clock_timestamp() - state_change > interval '250 ms')::int AS long,
                    count(*) FILTER (WHERE backend_xmin IS NOT NULL
                                       AND clock_timestamp() - coalesce(xact_start, state_change) > interval '250 ms')::int AS snapshots
               FROM pg_stat_activity WHERE application_name = $1`,
            [app],
          );
          assert.deepEqual([row.long, row.snapshots], [0, 0],
            `sample ${i}: no connection of the waiter's runs a statement, or holds a snapshot, for more than 250 ms`);
          if (row.busy === 0) quiet += 1;
          await sleep(100);
        }
        assert.ok(quiet >= (samples * 2) / 3, `the waiter's connections were idle in ${quiet} of ${samples} samples only`);
        assert.equal(all.state, 'pending', 'lockAll waits while both locks are held');
        assert.equal(await placesIn(waiter, first), 1, 'a place in the line of the first lock in byte order');

        // The first in byte order freed: taken at once, held while it waits.
        assert.equal(await held[0].release(), true);
        assert.ok(await waitUntil(async () => (await liveTokenOf(waiter, first)) !== null, 5000),
          'the lock freed first is taken while lockAll waits for the other');
        assert.equal(await placesIn(waiter, second), 1, 'a place in the second lock\'s line');
        assert.equal(all.state, 'pending', 'lockAll waits while the second lock is held');
        assert.equal(await held[1].release(), true);
        await within(all.done, 5000, 'lockAll once both locks are free');
        if (all.state === 'rejected') throw all.error;
        const leases = all.value;
        assert.deepEqual(leases.map((l) => l.name), [second, first], 'in the order asked');
        for (const lease of leases) {
          assert.ok(lease.held());
          assert.equal(lease.token, BigInt(await liveTokenOf(waiter, lease.name)), `${lease.name}: the live lease's token`);
        }
        for (const lease of leases) assert.equal(await lease.release(), true);
        assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [waiter.id]), 0,
          'no place left after the releases');
      } finally {
        await waiter.close();
        await holder.close();
      }
    },
  );

  test(
    'lockAll gives back what it took, and leaves no place, when one lock stays busy past its wait',
    { timeout: 30_000 },
    async () => {
      const name = newName();
      const [free, busy] = [`${name}_a`, `${name}_b`];
      const holder = await client.session({ ttl: 10 });
      const waiter = await client.session({ ttl: 10 });
      try {
        await holder.lock(busy);
        const waitMs = 1500;
        const started = performance.now();
        const all = track(waiter.lockAll([busy, free], { wait: waitMs / 1000 }));
        let taken = null;
        assert.ok(
          await waitUntil(async () => {
            taken = await liveTokenOf(waiter, free);
            return taken !== null && (await placesIn(waiter, busy)) === 1;
          }, 1000),
          'while it waits, lockAll holds the free lock and has a place in the busy one\'s line',
        );
        await within(all.done, 5000, 'lockAll past its wait');
        const took = performance.now() - started;
        assert.equal(all.state, 'rejected');
        assert.ok(all.error instanceof LockTimeoutError, String(all.error));
        assert.match(all.error.message, /^not all of .* could be had \(waited 1.5 s/);
        assert.ok(took >= waitMs - 100 && took <= waitMs + 2000, `lockAll ended after ${took} ms, its wait was ${waitMs} ms`);
        const { rows: [lease] } = await db.query(
          'SELECT state, holder, token::text AS token, session_id FROM fencing_leases WHERE lock_name = $1', [free]);
        assert.deepEqual(lease, { state: 'released', holder: waiter.holder, token: taken, session_id: null },
          'the lease lockAll took was given back');
        assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_leases WHERE session_id = $1', [waiter.id]), 0,
          'the session holds no lease');
        assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_line WHERE session_id = $1', [waiter.id]), 0,
          'no place of the session is left');
        assert.equal(await sql1(db, 'SELECT count(*)::int FROM fencing_lines WHERE lock_name = ANY($1)', [[free, busy]]), 0,
          'no place is left in the two lines');
        const again = await holder.lock(free);
        assert.ok(again.held(), 'the lock given back is free for another session');
      } finally {
        await waiter.close();
        await holder.close();
      }
    },
  );
});
