#!/usr/bin/env node
// Prints each change of leader of a pg_fencing lock, until interrupted.
//
//   node examples/node/follower.js LOCK [--reread SECONDS]
//
// A thin command line over pg-fencing's election.observe(): it prints the
// leader at start, then each change of (holder, token) -- "LOCK: HOLDER
// leads with token N [PAYLOAD]" or "LOCK: no leader".  What it prints is
// always read from the view fencing_leases; notifications (LISTEN
// fencing_events) only make it read sooner, so a forged one changes
// nothing.  It also reads when the live lease is due to end and every
// --reread seconds (default 5): the fallback for a lock without
// fencing_set_announce(lock, true).  The connection comes from the PG*
// variables.

import { parseArgs } from 'node:util';

import { Client } from 'pg-fencing';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { reread: { type: 'string', default: '5' } },
});
if (positionals.length !== 1) {
  console.error('usage: node follower.js LOCK [--reread SECONDS]');
  process.exit(2);
}
const [lockName] = positionals;

function describe(leader) {
  if (leader === null) return `${lockName}: no leader`;
  const published = leader.payload === null ? '' : ` ${JSON.stringify(leader.payload)}`;
  return `${lockName}: ${leader.holder} leads with token ${leader.token}${published}`;
}

const election = new Client().election(lockName);
// observe() reconnects quietly after a failure; a server that cannot be
// reached at all should say so at once instead.
await election.leader();
const stop = new AbortController();
process.once('SIGINT', () => stop.abort());
process.once('SIGTERM', () => stop.abort());
try {
  for await (const leader of election.observe({ reread: Number(values.reread), signal: stop.signal })) {
    console.log(describe(leader));
  }
} catch (err) {
  if (!stop.signal.aborted) throw err;
}
