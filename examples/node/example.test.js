// Runs the examples against a live server with pg_fencing installed (the
// PG* variables name it; the role may create the extension: the throwaway
// cluster's superuser).  What the examples do is the pg-fencing package's
// (clients/node, with tests of its own); these check that the scripts do
// what they say.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import pg from 'pg';
import { Client } from 'pg-fencing';

const HERE = fileURLToPath(new URL('.', import.meta.url));

// Runs node SCRIPT ARGS: child.nextLine(timeoutMs) resolves to its next line of output.
function run(script, ...args) {
  const child = spawn(process.execPath, [`${HERE}${script}`, ...args], { cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = [];
  let buffered = '';
  child.output = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => (child.output += chunk));
  child.stdout.on('data', (chunk) => {
    child.output += chunk;
    buffered += chunk;
    let at;
    while ((at = buffered.indexOf('\n')) >= 0) {
      lines.push(buffered.slice(0, at));
      buffered = buffered.slice(at + 1);
    }
  });
  child.exited = once(child, 'exit').then(([code]) => code);
  child.nextLine = async (timeoutMs) => {
    const end = performance.now() + timeoutMs;
    while (lines.length === 0) {
      if (performance.now() > end) throw new Error(`no line from ${script} within ${timeoutMs} ms; output: ${child.output}`);
      await sleep(20);
    }
    return lines.shift();
  };
  return child;
}

test("example.js: the paused worker's stale write is refused with 55Z01", async () => {
  const example = run('example.js');
  assert.equal(await example.exited, 0, example.output);
  assert.match(example.output, /A: write refused: StaleTokenError \(55Z01\)/);
  assert.match(example.output, /t=4 s: still held \(4 ttl\)/);
  assert.match(example.output, /val 'B'/);
  const db = new pg.Client();
  await db.connect();
  try {
    const { rows } = await db.query('SELECT val FROM example_resource WHERE id = 1');
    assert.equal(rows[0].val, 'B');
  } finally {
    await db.end();
  }
});

test('follower.js prints the leader when the lock is taken, and no leader once released', async () => {
  const lock = `js-follower-${randomBytes(4).toString('hex')}`;
  const db = new pg.Client();
  await db.connect();
  // Announced, and a reread period of a minute: only the notifications make
  // the follower read within the test's bounds.
  await db.query('CREATE EXTENSION IF NOT EXISTS pg_fencing');
  await db.query('SELECT fencing_create_lock($1)', [lock]);
  await db.query('SELECT fencing_set_announce($1, true)', [lock]);
  const follower = run('follower.js', lock, '--reread', '60');
  try {
    assert.equal(await follower.nextLine(10_000), `${lock}: no leader`);
    const lease = await new Client().lock(lock, { holder: 'the-holder', ttl: 10, payload: { n: 1 } });
    assert.equal(await follower.nextLine(10_000), `${lock}: the-holder leads with token ${lease.token} {"n":1}`);
    const forged = { lock_name: lock, event: 'granted', holder: 'mallory', token: 1 };
    await db.query("SELECT pg_notify('fencing_events', $1)", [JSON.stringify(forged)]);
    await lease.release();
    // The next line is the release, not the forged notification.
    assert.equal(await follower.nextLine(10_000), `${lock}: no leader`);
    follower.kill('SIGTERM');
    assert.equal(await follower.exited, 0, 'it stops cleanly on SIGTERM');
  } finally {
    follower.kill('SIGKILL');
    await db.end();
  }
});
