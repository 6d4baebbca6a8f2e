// Waiting for a busy lock, for a lease of its own, or in a session where the
// line cannot hold the wait (otherwise a wait in a session is a place in
// line: ./line.js): CALL fencing_await, which commits each attempt
// before it sleeps, so that a wait of hours holds no snapshot and no
// transaction id (VACUUM is never held back by a follower).  It cannot run
// in a transaction block: it is sent alone, in autocommit.
//
// A long wait is made of slices of at most SLICE_MS, each one CALL, so that
// no statement runs for hours.  An AbortSignal ends the wait on the server
// too: node-postgres does not cancel a running query by itself, so a
// second connection asks the server to (pg_cancel_backend of the waiting
// backend, which the same role may do), and whatever the wait granted in
// the meantime is given back.

import { performance } from 'node:perf_hooks';

import { value, withConnection } from './connection.js';

const SLICE_MS = 30_000;
const QUERY_CANCELED = '57014';

// The live leases and permits of (lock $1, holder $2).  A session may hold
// several permits of one semaphore under its one holder, so a cancelled
// wait gives back only those above the highest token held before it began
// ($3; tokens only go up, so a grant made by the wait is above it).
const HELD = `
  SELECT lock_name, token FROM fencing_leases WHERE lock_name = $1 AND holder = $2 AND state = 'live'
  UNION ALL
  SELECT lock_name, token FROM fencing_permits WHERE lock_name = $1 AND holder = $2 AND state = 'live'`;

// Waits up to waitMs (Infinity: until granted) with statement(sliceMs) ->
// [sql, values], a CALL fencing_await of one slice that answers one row
// (the token, or null when the slice ran out).  Resolves to
// { token (text or null), sent (performance.now() when the granting slice
// was sent) }.  Rejects with signal.reason once signal aborts.
//
// client    the waiting connection (pg.Client; its processID is the backend)
// config    the Client's connection config, for the cancelling connection
// release   { lockName, holder }: whose leases a cancelled wait may have
//           been granted
export async function awaitGrant({ client, config, waitMs, statement, signal, release }) {
  const end = performance.now() + waitMs;
  if (signal) {
    signal.throwIfAborted();
    const before = await value(client, `SELECT max(token::text::bigint)::text FROM (${HELD}) AS held`, [release.lockName, release.holder]);
    release = { ...release, before };
  }
  for (;;) {
    signal?.throwIfAborted(); // an abort between two slices sends no more
    const sliceMs = Math.max(0, Math.min(SLICE_MS, end - performance.now()));
    const sent = performance.now();
    const token = await oneSlice(client, config, statement(sliceMs), signal, release);
    if (token !== null) return { token, sent };
    if (performance.now() >= end) return { token: null, sent };
  }
}

async function oneSlice(client, config, [sql, values], signal, release) {
  const running = value(client, sql, values);
  if (!signal) return running;
  let onAbort;
  const aborted = new Promise((resolve) => {
    onAbort = resolve;
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const first = await Promise.race([running.then(() => 'answered', () => 'answered'), aborted.then(() => 'aborted')]);
    if (first === 'answered') return await running;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  // Aborted while the server waits: cancel it there, and see how it ended.
  await withConnection(config, 'pg_fencing cancel', async (canceller) => {
    await canceller.query('SELECT pg_cancel_backend($1)', [client.processID]);
    const outcome = await running.then(
      (token) => ({ token }),
      (err) => ({ err }),
    );
    if (outcome.err && outcome.err.code !== QUERY_CANCELED) throw outcome.err;
    // Granted before the cancel came (or committed just before it hit):
    // give it back rather than leave it to run out.
    await canceller.query(
      `SELECT fencing_release(lock_name, token) FROM (${HELD}) AS granted
        WHERE $3::bigint IS NULL OR token::text::bigint > $3::bigint`,
      [release.lockName, release.holder, release.before],
    );
  });
  throw signal.reason;
}
