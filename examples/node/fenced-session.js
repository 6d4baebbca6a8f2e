// pg_fencing sessions (extension 1.8) from Node.js: one heartbeat for many leases.
//
//   import { FencedSession } from './fenced-session.js';
//
//   const session = await FencedSession.open({ holder: 'worker-17', ttlMs: 10_000 });
//   session.on('lost', (why) => { /* every lease of the session is gone: stop acting now */ });
//   const p3 = await session.acquire('partition-3');           // a token, or null if busy
//   const both = await session.acquireAll(['acct-7', 'acct-9']); // every token, or null
//   await fencedQuery(db, 'UPDATE parts SET token = $1, body = $2 WHERE id = 3',
//                     [p3, body]);                                // after session.check()
//   await session.close();                                        // releases them all: 3
//
// What each part does, and what it cannot do:
//
// - FencedSession.open() opens the session with fencing_session_open() on a
//   pg.Client of its own and renews it (fencing_session_renew) every ttl/3
//   on that client: one renewal keeps every lease in the session alive,
//   whatever their number.  The heartbeat is fenced-lease.js's, with the same
//   rules: `held` is judged on the monotonic clock (send time of the last
//   successful open or renewal, plus ttl, minus the safety margin), so an
//   event loop that was blocked wakes up to held false; a timer set for that
//   deadline reports the loss even while a renewal is stuck.  'lost' is
//   emitted once, with a reason: a renewal refused (the session ended, or a
//   superuser closed it) or failed, the deadline passed, or an acquire
//   refused because the server has ended the session (55Z05) before the
//   heartbeat noticed.
// - acquire, acquireAll, release and close run on a second client, so that a
//   renewal never queues behind an acquire that waits; calls made together
//   take turns on it, in the order they were made.  Each is its own
//   transaction (autocommit) at READ COMMITTED, whatever the role's
//   default_transaction_isolation says.  Both clients are made from the same
//   connection, so both are the role that opened the session: only that role
//   (or one with its privileges, or a superuser) may act in it (42501
//   otherwise).
// - acquire given waitMs waits with CALL fencing_await(lock, session => id,
//   wait => w) (pg_fencing 1.8), as FencedLease does for a plain lease: the
//   procedure commits each attempt before it sleeps, so while it waits the
//   work client holds no snapshot and no transaction id (a wait of hours
//   pins no xmin horizon).  It cannot run inside a transaction block
//   (25001): the work client never sends BEGIN.  A wait ends at the
//   session's end at the latest (55Z05, the loss).  acquireAll has no
//   procedure: its wait goes to the function form
//   (fencing_session_acquire_all(..., wait)), whose statement holds a
//   snapshot all along, which pins the xmin horizon of the whole database.
//   Keep its waits short, or retry.
// - As with a lease, none of this makes the client safe by itself: a pause
//   between check() and the write is invisible to it.  The tokens and the
//   tables' guard (fencing_protect) are what refuse a write under a lease
//   that ended with its session.
//
// The session's id and the tokens are BigInts, as in fenced-lease.js.

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import { Heartbeat, LeaseLostError, connectClient, defaultHolder, interval } from './fenced-lease.js';

export const SESSION_ENDED = '55Z05';

// A wait as an interval text; null (SQL NULL) for no wait.
function waitInterval(waitMs) {
  if (waitMs == null) return null;
  if (!(waitMs >= 0)) throw new RangeError('waitMs must not be negative');
  return interval(waitMs, 0);
}

export class FencedSession extends EventEmitter {
  // Opens a session and starts its heartbeat; see the constructor for the options.
  static async open(options) {
    const session = new FencedSession(options);
    await session.#open();
    return session;
  }

  // connection  pg.Client config or connection string (default: PG* variables)
  // holder      the application's label, the holder of every lease in the
  //             session; default host:pid:random
  // ttlMs       the server ends the session, and every lease in it, ttl after
  //             the last renewal
  // heartbeatMs between renewals (default ttl/3)
  // Not opened yet: use FencedSession.open().
  constructor({ connection, holder, ttlMs = 10_000, heartbeatMs } = {}) {
    super();
    if (!(ttlMs > 0)) throw new RangeError('ttlMs must be positive');
    this.connection = connection;
    this.holder = holder ?? defaultHolder();
    this.ttlMs = ttlMs;
    this.#beat = new Heartbeat({
      what: 'session',
      ttlMs,
      heartbeatMs,
      renew: () => this.#renew(),
      refused: 'the session ended, or was closed',
      onLost: (reason) => {
        // A renewal may still be on its way: never reuse its client.
        this.#endHeartbeatClient();
        this.emit('lost', reason);
      },
      onRenewed: () => this.emit('renewed'),
    });
    this.marginMs = this.#beat.marginMs;
    this.heartbeatMs = this.#beat.heartbeatMs;
    this.id = null; // fencing_sessions.session_id, a BigInt once open
  }

  #beat;
  #heartbeatClient = null;
  #workClient = null; // a promise of the client: calls made together share one new client
  #closed = false;

  async #open() {
    if (this.id !== null || this.#closed) throw new Error('this FencedSession was already opened; make a new one');
    try {
      this.#heartbeatClient = await this.#connect('fenced_session', (client, err) => {
        if (client === this.#heartbeatClient && this.id !== null) {
          this.#beat.markLost(`connection failed: ${err.message}`);
        }
      });
      this.#workClient = this.#connectWork();
      await this.#workClient;
      const sent = performance.now();
      const { rows } = await this.#heartbeatClient.query(
        'SELECT fencing_session_open($1, $2::interval) AS id',
        [this.holder, interval(this.ttlMs)],
      );
      this.id = BigInt(rows[0].id);
      this.#beat.begin(sent);
      this.#beat.start();
    } catch (err) {
      // Close what was opened rather than let it linger a ttl.
      if (this.id !== null) await this.close().catch(() => {});
      await this.#endClients();
      throw err;
    }
  }

  // -- leases in the session ---------------------------------------------------

  // Takes lockName in the session (fencing_session_acquire): its token, or
  // null when another holder has it.  waitMs: how long to wait for a busy
  // lock (default: do not wait), with CALL fencing_await(..., session =>),
  // which holds no snapshot and no transaction id while it sleeps.  The lease
  // ends when the session does, unless released first; the same lock again in
  // the session gives back its token.  LeaseLostError unless the session is
  // held (also when the server says it has ended, 55Z05, before or during
  // the wait).
  async acquire(lockName, { waitMs } = {}) {
    let value;
    if (waitMs == null) {
      value = await this.#inSession('SELECT fencing_session_acquire($1, $2)::bigint AS token', [
        this.id, lockName,
      ]);
    } else {
      // On its own, outside a transaction block (autocommit): the procedure
      // commits each attempt before it sleeps.  Its one row is the token,
      // null when the wait ran out.
      value = await this.#inSession('CALL fencing_await($1, session => $2, wait => $3::interval)', [
        lockName, this.id, waitInterval(waitMs),
      ]);
    }
    return value === null ? null : BigInt(value);
  }

  // Every lock of lockNames or none (fencing_session_acquire_all): their
  // tokens in the order given, or null when not all could be had within
  // waitMs (default: no wait).  Never deadlocks with another session's
  // acquireAll.  A wait goes to the function form, which holds a snapshot
  // while it waits (there is no procedure for it): keep it short.
  async acquireAll(lockNames, { waitMs } = {}) {
    if (!Array.isArray(lockNames)) throw new TypeError('lockNames must be an array of names');
    const value = await this.#inSession(
      'SELECT fencing_session_acquire_all($1, $2::text[], $3::interval)::bigint[] AS tokens',
      [this.id, lockNames, waitInterval(waitMs)],
    );
    return value === null ? null : value.map((token) => BigInt(token));
  }

  // Releases one lease of the session (fencing_release): true if it was still
  // live.  False after close().
  async release(lockName, token) {
    if (this.#closed) return false;
    return this.#workQuery('SELECT fencing_release($1, $2::fencing_token) AS released', [lockName, token]);
  }

  // Stops the heartbeat and closes the session (fencing_session_close), which
  // releases every lease in it at once: how many.  Idempotent: later calls
  // return 0.  A session already ended on the server releases 0.  Calls made
  // before it on the work client are answered first.
  async close() {
    this.#beat.stop(); // no renewal, and no 'lost', after the close
    if (this.#closed || this.id === null) return 0;
    this.#closed = true;
    try {
      return await this.#workQuery('SELECT fencing_session_close($1) AS released', [this.id]);
    } finally {
      await this.#endClients();
    }
  }

  // -- state ---------------------------------------------------------------------

  // performance.now() after which the session no longer counts as held.
  get deadline() {
    return this.#beat.deadline;
  }

  // Why the session is lost, or null while it is held (or was closed).
  get lostReason() {
    return this.id !== null ? this.#beat.lostReason : null;
  }

  // False once the session is lost (judged on the monotonic clock), and after
  // close(): every lease in it is then over, or about to be.
  get held() {
    return this.id !== null && !this.#beat.stopped && this.lostReason === null;
  }

  get lost() {
    return this.id !== null && !this.#beat.stopped && this.lostReason !== null;
  }

  // LeaseLostError unless the session is held.
  check() {
    if (!this.held) {
      const reason = this.#beat.stopped ? 'closed' : (this.lostReason ?? 'not open');
      throw new LeaseLostError(`fencing session ${this.id} of "${this.holder}": ${reason}`);
    }
  }

  // -- the clients -------------------------------------------------------------------

  async #renew() {
    const { rows } = await this.#heartbeatClient.query(
      'SELECT fencing_session_renew($1, $2::interval) AS renewed',
      [this.id, interval(this.ttlMs)],
    );
    return rows[0].renewed;
  }

  // sql on the work client, for a session that must be held.
  async #inSession(sql, values) {
    this.check(); // also after close(), which stops the heartbeat first
    try {
      return await this.#workQuery(sql, values);
    } catch (err) {
      if (err?.code !== SESSION_ENDED) throw err;
      this.#beat.markLost(`the server has ended the session: ${err.message}`);
      throw new LeaseLostError(`fencing session ${this.id} of "${this.holder}": ${err.message}`, { cause: err });
    }
  }

  // The one value of sql's one row, on the work client; a client whose
  // connection failed is made anew for the next call.
  async #workQuery(sql, values) {
    this.#workClient ??= this.#connectWork();
    const client = await this.#workClient;
    const { rows } = await client.query(sql, values);
    return Object.values(rows[0])[0];
  }

  #connectWork() {
    const connecting = this.#connect('fenced_session work', (client) => {
      // The call running on it rejects with its own error.
      if (this.#workClient === connecting) this.#workClient = null;
      client.end().catch(() => {});
    });
    connecting.catch(() => {
      if (this.#workClient === connecting) this.#workClient = null;
    });
    return connecting;
  }

  async #connect(name, onError) {
    const client = await connectClient(this.connection, `${name} ${this.holder}`, onError);
    try {
      // READ COMMITTED, so that the open also sweeps expired sessions (it
      // does at that level only), and neither an acquire that meets a
      // just-changed lease row nor a renewal that meets a concurrent close
      // fails with 40001.
      await client.query("SET default_transaction_isolation = 'read committed'");
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    return client;
  }

  async #endHeartbeatClient() {
    const client = this.#heartbeatClient;
    this.#heartbeatClient = null;
    if (client !== null) await client.end().catch(() => {});
  }

  async #endClients() {
    const connecting = this.#workClient;
    this.#workClient = null;
    const work = await Promise.resolve(connecting).catch(() => null);
    await Promise.all([this.#endHeartbeatClient(), work?.end().catch(() => {})]);
  }
}

// Opens a session, runs fn(session), and closes it whatever fn did (every
// lease in it released): the counterpart of Python's `with FencedSession(...)`.
export async function withSession(options, fn) {
  const session = await FencedSession.open(options);
  let result;
  try {
    result = await fn(session);
  } catch (err) {
    await session.close().catch(() => {}); // do not hide fn's error; the session ends after ttl
    throw err;
  }
  await session.close();
  return result;
}
