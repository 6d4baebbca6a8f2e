// Client: the entry point.  Every lease, session and election it makes
// uses connections from the same config (and so as the same role, which
// renewals and releases require).
//
// The connections a Client makes (each a pg.Client of its own):
// - one heartbeat (./heartbeat.js): a single connection that renews every
//   lease and session the client made (an election's too), one statement
//   for all of those due, opened when the first renewal is due and closed
//   when nothing is left to renew;
// - a session's work connection (its open, acquires, the statements of the
//   line, releases), made at its open and ended at its close;
// - a lease of its own: a connection while it acquires (its wait, a CALL
//   fencing_await, holds it), and a short one for its release;
// - short ones for what must not queue behind a statement that waits (a
//   session's close, cancelling a wait) and for leader();
// - an election's observe(): one LISTENing on fencing_events while it runs;
// - with listen: true, one LISTENing on fencing_line (below).
//
// A wait in a session, of every kind (an exclusive lease, a shared lease, a
// permit), and a campaign, is a place in the lock's line (1.10,
// ./line.js), polled every `poll` seconds (default
// 0.5).  With listen: true the client also keeps one connection LISTENing
// on fencing_line while any of its waits is in line, and a place polls at
// once when its number is announced (and at the latest every 2 s by
// default).  Leave it off through a transaction-pooling PgBouncer, where
// LISTEN cannot be relied on; turn it on when the config names the server
// (or a session pool), for hand-overs within milliseconds rather than
// within a poll.
//
// No statement of the package is a named prepared statement (node-postgres
// prepares one only for a query config with a `name`, which the package
// never passes): every statement works through a transaction pooler.

import { keepConfig, withConnection } from './connection.js';
import { Election, readLeader } from './election.js';
import { Heartbeats } from './heartbeat.js';
import { Lease } from './lease.js';
import { Listener, pollPeriodMs } from './line.js';
import { Session } from './session.js';

export class Client {
  // config: a pg.Client config or a connection string; undefined takes
  // everything from the PG* variables.  listen, poll: see above.
  constructor(config, { listen = false, poll } = {}) {
    keepConfig(this, config);
    this.listen = Boolean(listen);
    pollPeriodMs(poll, this.listen); // RangeError now, not at the first wait
    this.poll = poll ?? null;
    // What every session, election and lease of the client shares: the
    // listener, the poll period, the one heartbeat.
    this.#shared = { listener: this.listen ? new Listener(config) : null, poll, heartbeats: new Heartbeats(config) };
  }

  #shared;

  // An exclusive lease, held once the promise resolves.  Its wait, if any,
  // is CALL fencing_await (a lease of its own has no session to wait in
  // line in): for a wait through a transaction pooler, lock in a session.
  lock(name, options = {}) {
    return Lease.acquire(this.config, name, 'exclusive', options, this.#shared.heartbeats);
  }

  // One of `permits` permits of the semaphore `name`, each with its own token.
  semaphore(name, permits, options = {}) {
    return Lease.acquire(this.config, name, 'permit', { ...options, permits }, this.#shared.heartbeats);
  }

  // A shared lease of `name`, beside other shared holders.
  shared(name, options = {}) {
    return Lease.acquire(this.config, name, 'shared', options, this.#shared.heartbeats);
  }

  // Takes the lock, runs fn(lease), and releases it whatever fn did: fn's result.
  async withLock(name, options, fn) {
    const lease = await this.lock(name, options);
    let result;
    try {
      result = await fn(lease);
    } catch (err) {
      await lease.release().catch(() => {}); // fn's error goes on; the lease ends after its ttl
      throw err;
    }
    await lease.release();
    return result;
  }

  // Opens a session (pg_fencing 1.8).
  session(options = {}) {
    return Session.open(this.config, options, this.#shared);
  }

  // A candidate `holder` (default host:pid:random) in the election on lock `name`.
  election(name, holder, options = {}) {
    return new Election(this.config, name, holder, options, this.#shared);
  }

  // The live holder of name's exclusive lease ({ holder, token, payload }), or null.
  leader(name) {
    return withConnection(this.config, 'pg_fencing leader', async (client) => (await readLeader(client, name)).leader);
  }
}
