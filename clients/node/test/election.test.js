// Elections against a live server: three candidates and a SIGKILLed
// leader, observe() following the leader (ignoring a forged notification),
// reconnecting after its connection is terminated, campaign and proclaim.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LeaseLostError, LockTimeoutError, StaleTokenError, fencedQuery } from '../index.js';
import { connectDb, kill, newName, protectedTable, sql1, startScript, waitUntil, within } from './helpers.js';

const client = new Client();
let db;

before(async () => {
  db = await connectDb();
});
after(async () => {
  await db.end();
});

// Collects what observe() reports into seen, in the background, until stopped.
function follow(election, options) {
  const controller = new AbortController();
  const seen = [];
  const done = (async () => {
    try {
      for await (const leader of election.observe({ ...options, signal: controller.signal })) seen.push(leader);
    } catch (err) {
      if (!controller.signal.aborted) throw err;
    }
  })();
  return { seen, stop: () => (controller.abort(), done), done };
}

describe('elections', () => {
  test('three candidates; the leader is SIGKILLed; another leads with a higher token', async () => {
    const name = newName();
    await protectedTable(db, name, name);
    const candidates = [0, 1, 2].map((i) => startScript('candidate', name, name, `c${i}`));
    try {
      // The next "leader TOKEN" line of any of them, in the order printed.
      const seen = new Set();
      const nextLeader = async (among) => {
        let found = null;
        const printed = await waitUntil(() => {
          for (const c of among) {
            c.lines.forEach((line, i) => {
              const key = `${c.pid}:${i}`;
              if (found === null && !seen.has(key) && line.startsWith('leader ')) {
                seen.add(key);
                found = { candidate: c, token: BigInt(line.split(' ')[1]) };
              }
            });
          }
          return found !== null;
        }, 15_000);
        assert.ok(printed, 'no leader within the time allowed');
        return found;
      };
      const first = await nextLeader(candidates);
      assert.equal((await client.leader(name)).token, first.token);
      first.candidate.kill('SIGKILL'); // its lease is left to run out
      await first.candidate.exited;
      const second = await nextLeader(candidates.filter((c) => c !== first.candidate));
      assert.ok(second.token > first.token);
      assert.ok(
        await waitUntil(async () => BigInt(await sql1(db, `SELECT token::text FROM ${name}`)) === second.token, 3000),
        "the new leader's writes land",
      );
      await assert.rejects(fencedQuery(db, `UPDATE ${name} SET token = $1, v = 'ghost' WHERE id = 1`, [first.token]), StaleTokenError);
    } finally {
      await Promise.all(candidates.map(kill));
    }
  });

  test('observe follows the leader and ignores a forged notification', async () => {
    const name = newName();
    await sql1(db, 'SELECT fencing_create_lock($1)', [name]);
    await sql1(db, 'SELECT fencing_set_announce($1, true)', [name]);
    const election = client.election(name, 'observed', { ttl: 5 });
    const lease = await election.campaign({ addr: '10.0.0.1:1' });
    assert.ok(election.isLeader());
    const follower = follow(client.election(name), { reread: 60 });
    try {
      assert.ok(await waitUntil(() => follower.seen.length > 0, 5000));
      assert.deepEqual(follower.seen[0], { holder: 'observed', token: lease.token, payload: { addr: '10.0.0.1:1' } });
      assert.equal(
        await sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pg_fencing observe' AND state = 'idle' AND backend_xmin IS NULL"),
        1,
        'between reads it sits LISTENing, idle, holding no snapshot',
      );
      const forged = JSON.stringify({ lock_name: name, event: 'granted', holder: 'mallory', token: 1 });
      await sql1(db, "SELECT pg_notify('fencing_events', $1)", [forged]);
      await sleep(500);
      assert.equal(follower.seen.length, 1, `a forged notification changed what it reports: ${JSON.stringify(follower.seen, (k, v) => (typeof v === 'bigint' ? String(v) : v))}`);
      await election.proclaim({ addr: '10.0.0.1:2' });
      assert.deepEqual((await client.leader(name)).payload, { addr: '10.0.0.1:2' });
      assert.equal(lease.token, (await election.leader()).token, 'a proclamation keeps the token');
      await sleep(300);
      assert.equal(follower.seen.length, 1, 'a proclamation keeps the same leader and token');
      assert.equal(await election.resign(), true);
      await assert.rejects(election.proclaim({}), LeaseLostError);
      const successor = client.election(name, 'next', { ttl: 5 });
      const next = await successor.campaign();
      assert.ok(
        await waitUntil(() => follower.seen.at(-1)?.holder === 'next', 5000),
        'the real change is reported',
      );
      assert.equal(follower.seen.at(-1).token, next.token);
      assert.ok(follower.seen.every((l) => l === null || l.holder !== 'mallory'));
      await successor.resign();
      assert.ok(await waitUntil(() => follower.seen.at(-1) === null, 5000), 'no leader is reported as null');
    } finally {
      await follower.stop();
    }
  });

  test('observe reconnects after its connection is terminated, LISTENing before it reads', async () => {
    const name = newName();
    const follower = follow(client.election(name), { reread: 60 });
    try {
      assert.ok(await waitUntil(() => follower.seen.length > 0, 5000));
      assert.deepEqual(follower.seen, [null]);
      // Taken while the observer sleeps (not announced: no notification,
      // and the next periodic read is a minute away) ...
      const lease = await client.lock(name, { ttl: 10, holder: 'after' });
      // ... then its connection is cut: it reconnects and reads again.
      assert.equal(
        await sql1(db, "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = 'pg_fencing observe'"),
        1,
      );
      assert.ok(await waitUntil(() => follower.seen.length > 1, 5000), 'no change reported after the reconnect');
      assert.equal(follower.seen.at(-1).holder, 'after');
      assert.equal(follower.seen.at(-1).token, lease.token);
      assert.equal(
        await sql1(db, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pg_fencing observe' AND query = 'LISTEN fencing_events'"),
        0,
        'the last statement of the new connection is the read, after its LISTEN',
      );
      await lease.release();
    } finally {
      await follower.stop();
    }
  });

  test('observe sees an expiry that nobody announces', async () => {
    const name = newName();
    await sql1(db, "SELECT fencing_acquire($1, 'short', '700 milliseconds')", [name]);
    const follower = follow(client.election(name), { reread: 60 });
    try {
      assert.ok(await waitUntil(() => follower.seen[0]?.holder === 'short', 5000));
      assert.ok(await waitUntil(() => follower.seen.at(-1) === null, 5000), 'the expiry is seen by the server clock, not the reread period');
    } finally {
      await follower.stop();
    }
  });

  test("observe's reread period catches a lock that is not announced", async () => {
    const name = newName();
    const follower = follow(client.election(name), { reread: 0.3 });
    try {
      assert.ok(await waitUntil(() => follower.seen.length > 0, 5000));
      const lease = await client.lock(name, { ttl: 5, holder: 'quiet' });
      assert.ok(await waitUntil(() => follower.seen.at(-1)?.holder === 'quiet', 3000), 'seen at the next periodic read');
      await lease.release();
    } finally {
      await follower.stop();
    }
  });

  test('a campaign waits for the leader to go, and gives up at its timeout or signal', async () => {
    const name = newName();
    const leader = client.election(name, 'first', { ttl: 5 });
    const lease = await leader.campaign();
    const other = client.election(name, 'second', { ttl: 5 });
    await assert.rejects(other.campaign(null, { timeout: 0.2 }), LockTimeoutError);
    await assert.rejects(other.campaign(null, { signal: AbortSignal.timeout(200) }), { name: 'TimeoutError' });
    const campaigning = other.campaign({ n: 2 });
    await sleep(200);
    assert.ok(!other.isLeader());
    await leader.resign();
    const next = await within(campaigning, 5000, 'the campaign');
    assert.ok(next.token > lease.token && other.isLeader());
    assert.deepEqual((await client.leader(name)).payload, { n: 2 });
    await other.resign();
    assert.equal(await client.leader(name), null);
  });

  test('observe never reports a grant that rolled back', async () => {
    const name = newName();
    const follower = follow(client.election(name), { reread: 0.1 }); // many reads, each could be wrong
    const other = await connectDb();
    try {
      assert.ok(await waitUntil(() => follower.seen.length > 0, 5000));
      await other.query('BEGIN');
      await other.query("SELECT fencing_acquire($1, 'ghost', '30 s')", [name]);
      await sleep(500);
      await other.query('ROLLBACK');
      const lease = await client.lock(name, { ttl: 5, holder: 'real' });
      assert.ok(await waitUntil(() => follower.seen.at(-1) !== null, 3000), 'the real grant is reported');
      await lease.release();
      assert.deepEqual(follower.seen.slice(0, 2).map((l) => l?.holder ?? null), [null, 'real']);
    } finally {
      await other.end();
      await follower.stop();
    }
  });
});
