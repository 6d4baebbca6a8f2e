// pg_fencing leases and fenced writes from Node.js, with node-postgres (pg).
//
//   import pg from 'pg';
//   import { withLease, fencedQuery, StaleTokenError } from './fenced-lease.js';
//
//   const db = new pg.Client();                       // PG* variables, or a config
//   await db.connect();
//   await withLease({ lockName: 'nightly-report', ttlMs: 10_000, waitMs: 30_000 }, async (lease) => {
//     lease.on('lost', (why) => { /* stop acting now */ });
//     await fencedQuery(db, 'UPDATE reports SET token = $1, body = $2 WHERE id = $3',
//                       [lease.check(), body, 7]);   // StaleTokenError, MissingTokenError
//   });                                               // released here, also on a throw
//
// What each part does, and what it cannot do:
//
// - FencedLease takes the lock with fencing_acquire() on a pg.Client of its
//   own, renews it every ttl/3 from a setInterval heartbeat on that client, and
//   gives it back with fencing_release().  Renew and release must come from
//   the role that acquired, which one connection guarantees.
// - Given waitMs, it waits with CALL fencing_await() (pg_fencing 1.7), not
//   with the function form fencing_acquire(..., wait): a follower's wait may
//   last hours, and a function waits inside one statement whose snapshot pins
//   the xmin horizon of the whole database all along (VACUUM removes nothing
//   that died since, in any table).  The procedure commits each attempt before
//   it sleeps, so while it waits the backend holds no snapshot and no
//   transaction id.  It cannot run inside a transaction block (25001): it is
//   sent as a plain query, outside BEGIN, which is autocommit.  Its attempts
//   run at READ COMMITTED whatever default_transaction_isolation says.
// - `lost` is judged on the monotonic clock (performance.now()),
//   conservatively: the lease counts as lost once the send time of the last
//   successful acquire or renew, plus ttl, minus a safety margin, has passed --
//   whether or not any timer ran meanwhile (the event loop may have been
//   blocked).  The server starts the ttl when it runs the request, after the
//   client sent it, so this deadline is never later than the server's.
// - A timer set for that deadline emits 'lost' even while a renewal is stuck
//   behind a lock or a dead network; a renewal that is refused or fails emits
//   it at once.  'lost' is emitted once, with a reason.
// - None of this makes the client safe by itself: a pause between check() and
//   the write is invisible to it.  That is what the token and the table's guard
//   (fencing_protect) are for; fencedQuery() turns the guard's refusals
//   (SQLSTATE 55Z01, 55Z02) into StaleTokenError and MissingTokenError.
//
// Tokens are BigInts (a fencing_token goes up to 2^63 - 1); pg sends a BigInt
// parameter as its decimal text.

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';

import pg from 'pg';

export const STALE_TOKEN = '55Z01';
export const MISSING_TOKEN = '55Z02';

export class FencingError extends Error {
  get name() {
    return this.constructor.name;
  }
}

// The table's fencing guard refused a write; the statement changed nothing.
// `cause` is pg's DatabaseError; code, detail, table and column come from it.
export class GuardError extends FencingError {
  constructor(cause) {
    super(cause.message, { cause });
    this.code = cause.code;
    this.detail = cause.detail;
    this.table = cause.table;
    this.column = cause.column;
  }
}

// 55Z01: the token is lower than one the row (or lock) has already seen.
export class StaleTokenError extends GuardError {}

// 55Z02: the write did not set the token column, or set it to NULL.
export class MissingTokenError extends GuardError {}

// Another holder has a live lease (after waiting, if a wait was given).
export class LeaseUnavailableError extends FencingError {}

// The lease is no longer held: lost, expired or released.
export class LeaseLostError extends FencingError {}

// The guard's errors as StaleTokenError / MissingTokenError; others unchanged.
export function mapGuardError(err) {
  if (err?.code === STALE_TOKEN) return new StaleTokenError(err);
  if (err?.code === MISSING_TOKEN) return new MissingTokenError(err);
  return err;
}

// client.query(), with the guard's refusals mapped.  Outside a transaction
// the statement is its own transaction, and the client stays usable after a
// refusal; inside one, the refusal aborts it, as any error does.
export async function fencedQuery(client, text, values) {
  try {
    return await client.query(text, values);
  } catch (err) {
    throw mapGuardError(err);
  }
}

// host:pid:random, new at each call: two leases or sessions of one process
// never share a holder.
export function defaultHolder() {
  return `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

// How long before the computed expiry the client stops trusting a lease.
export function safetyMarginMs(ttlMs) {
  return Math.min(Math.max(ttlMs / 10, 50), ttlMs / 2);
}

// '1500 milliseconds': a text the SQL casts to interval.  Internal, shared
// with fenced-session.js.
export function interval(ms, atLeastMs = 1) {
  return `${Math.max(atLeastMs, Math.round(ms))} milliseconds`;
}

// A pg.Client of the lease's or session's own, from a pg.Client config or a
// connection string, named applicationName unless the config names it.  Its
// 'error' event (an unexpected end of the connection: server restart,
// terminated backend, network) goes to onError: unhandled, it would crash
// the process.  Internal, shared with fenced-session.js.
export async function connectClient(connection, applicationName, onError) {
  const config = typeof connection === 'string' ? { connectionString: connection } : { ...connection };
  config.application_name ??= applicationName.slice(0, 63);
  const client = new pg.Client(config);
  client.on('error', (err) => onError(client, err));
  await client.connect();
  return client;
}

// The keepalive of a lease or a session: a setInterval that renews it every
// heartbeatMs, and the judgement of whether it is still held.  Internal,
// shared with fenced-session.js.
//
// Held is judged on the monotonic clock (performance.now()), conservatively:
// it is lost once the send time of the last successful acquire, open or
// renewal (begin(), and each renewal), plus ttl, minus the safety margin,
// has passed -- whether or not any timer ran meanwhile.  A timer set for that
// deadline reports the loss even while a renewal is stuck.
//
// renew() sends one renewal and resolves to whether the server took it.
// onLost(reason) is called once, unless stop() came first; onRenewed() after
// each successful renewal.
export class Heartbeat {
  constructor({ what, ttlMs, heartbeatMs, renew, refused, onLost, onRenewed = () => {} }) {
    this.what = what; // 'lease', 'session': in the reasons
    this.ttlMs = ttlMs;
    this.marginMs = safetyMarginMs(ttlMs);
    this.heartbeatMs = heartbeatMs ?? ttlMs / 3;
    if (!(this.heartbeatMs > 0 && this.heartbeatMs < ttlMs - this.marginMs)) {
      throw new RangeError('heartbeatMs must be positive and shorter than ttl minus the safety margin');
    }
    this.#renew = renew;
    this.#refused = refused;
    this.#onLost = onLost;
    this.#onRenewed = onRenewed;
  }

  #renew;
  #refused;
  #onLost;
  #onRenewed;
  #validFrom = 0; // performance.now() when the last successful acquire/open/renew was sent
  #lostReason = null;
  #stopped = false;
  #interval = null;
  #deadlineTimer = null;
  #renewing = false;

  // The send time of the request that took the lease or opened the session.
  begin(sent) {
    this.#validFrom = sent;
  }

  renewed(sent) {
    this.#validFrom = Math.max(this.#validFrom, sent);
  }

  start() {
    this.#interval = setInterval(() => this.#beat(), this.heartbeatMs);
    this.#armDeadline();
  }

  // No renewal and no onLost from now on; false if it was stopped already.
  stop() {
    if (this.#stopped) return false;
    this.#stopped = true;
    this.#clearTimers();
    return true;
  }

  get stopped() {
    return this.#stopped;
  }

  // A renewal is on its way.
  get renewing() {
    return this.#renewing;
  }

  // performance.now() after which it no longer counts as held.
  get deadline() {
    return this.#validFrom + this.ttlMs - this.marginMs;
  }

  // Why it is lost, or null while it is held.
  get lostReason() {
    if (this.#lostReason !== null) return this.#lostReason;
    if (performance.now() >= this.deadline) {
      // No timer has run since the deadline passed (say the event loop was
      // blocked); the deadline timer reports the same when it runs.
      return 'not renewed within ttl minus the safety margin';
    }
    return null;
  }

  markLost(reason) {
    if (this.#stopped || this.#lostReason !== null) return;
    this.#lostReason = reason;
    this.#clearTimers();
    this.#onLost(reason);
  }

  async #beat() {
    if (this.#renewing || this.#stopped || this.#lostReason !== null) return;
    if (performance.now() >= this.deadline) {
      this.markLost(`not renewed before the ${this.what}'s safe deadline; was the event loop blocked?`);
      return;
    }
    this.#renewing = true;
    const sent = performance.now();
    try {
      const renewed = await this.#renew();
      if (this.#stopped || this.#lostReason !== null) return; // too late to count
      if (!renewed) {
        this.markLost(`renewal refused: ${this.#refused}`);
        return;
      }
      this.renewed(sent);
      this.#armDeadline();
      this.#onRenewed();
    } catch (err) {
      this.markLost(`renewal failed: ${err.message}`);
    } finally {
      this.#renewing = false;
    }
  }

  // Fires at the deadline, so that a renewal stuck on the wire cannot delay
  // the loss; every successful renewal moves it.
  #armDeadline() {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = setTimeout(() => {
      if (this.#stopped || this.#lostReason !== null) return;
      if (performance.now() >= this.deadline) {
        this.markLost(
          this.#renewing
            ? `renewal got no answer before the ${this.what}'s safe deadline`
            : `not renewed before the ${this.what}'s safe deadline; was the event loop blocked?`,
        );
      } else {
        this.#armDeadline();
      }
    }, Math.max(0, this.deadline - performance.now()) + 1);
  }

  #clearTimers() {
    clearInterval(this.#interval);
    clearTimeout(this.#deadlineTimer);
    this.#interval = this.#deadlineTimer = null;
  }
}

export class FencedLease extends EventEmitter {
  // connection  pg.Client config or connection string (default: PG* variables)
  // lockName    the lease's name
  // holder      the application's label; default host:pid:random, unique per
  //             FencedLease, so two leases of one process never share a grant
  // ttlMs       the server ends the lease ttl after the last renewal
  // waitMs      how long to wait for a busy lock, with CALL fencing_await
  //             (default: do not wait; 0: one attempt)
  // heartbeatMs between renewals (default ttl/3)
  constructor({ connection, lockName, holder, ttlMs = 10_000, waitMs = null, heartbeatMs } = {}) {
    super();
    if (!lockName) throw new TypeError('lockName is required');
    if (!(ttlMs > 0)) throw new RangeError('ttlMs must be positive');
    if (waitMs != null && !(waitMs >= 0)) throw new RangeError('waitMs must not be negative');
    this.connection = connection;
    this.lockName = lockName;
    this.holder = holder ?? defaultHolder();
    this.ttlMs = ttlMs;
    this.waitMs = waitMs;
    this.#beat = new Heartbeat({
      what: 'lease',
      ttlMs,
      heartbeatMs,
      renew: () => this.#renew(),
      refused: 'the lease expired, was released or taken over',
      onLost: (reason) => {
        // A renewal may still be on its way: drop the client (release()
        // makes a new one).
        this.#closeClient();
        this.emit('lost', reason);
      },
      onRenewed: () => this.emit('renewed', this.token),
    });
    this.marginMs = this.#beat.marginMs;
    this.heartbeatMs = this.#beat.heartbeatMs;
    this.token = null;
  }

  #client = null;
  #beat;
  #started = false;

  // -- taking and giving back ------------------------------------------------

  // The token, or null when another holder has the lock.
  async acquire() {
    if (this.#started) throw new Error('this FencedLease was already acquired; make a new one');
    this.#started = true;
    this.#client = await this.#connect();
    const sent = performance.now();
    let value;
    try {
      if (this.waitMs == null) {
        // In READ COMMITTED, whatever the role's default_transaction_isolation
        // says: at a stricter level an acquire that meets a just-changed lease
        // row fails with 40001.
        await this.#client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        const { rows } = await this.#client.query('SELECT fencing_acquire($1, $2, $3::interval) AS token', [
          this.lockName, this.holder, interval(this.ttlMs),
        ]);
        await this.#client.query('COMMIT');
        value = rows[0].token;
      } else {
        // On its own, outside a transaction block (autocommit).  The procedure
        // commits each attempt, so that nothing pins the database's xmin
        // horizon while it waits; its one row is the token, null when the wait
        // ran out.
        const { rows } = await this.#client.query(
          "CALL fencing_await($1, $2, $3::interval, $4::interval, kind => 'exclusive')",
          [this.lockName, this.holder, interval(this.ttlMs), interval(this.waitMs)],
        );
        value = rows[0].token;
      }
    } catch (err) {
      await this.#closeClient();
      throw err;
    }
    if (value === null) {
      await this.#closeClient();
      return null;
    }
    this.token = BigInt(value);
    this.#beat.begin(sent);
    try {
      // A wait can outlast much of the ttl: the server started the lease when
      // it granted it, not when we asked.  Renew once, right away, for a send time
      // close to the grant.
      if (this.waitMs != null && performance.now() - sent > this.marginMs) {
        const renewSent = performance.now();
        if (!(await this.#renew())) {
          throw new LeaseUnavailableError(
            `lock "${this.lockName}" was granted (token ${this.token}) but expired before it could be renewed; ttl too short?`,
          );
        }
        this.#beat.renewed(renewSent);
      }
    } catch (err) {
      await this.release().catch(() => {});
      throw err;
    }
    this.#beat.start();
    return this.token;
  }

  // Gives the lock back: true if it was still ours on the server.
  async release() {
    if (this.token === null) return false;
    const renewing = this.#beat.renewing;
    if (!this.#beat.stop()) return false;
    try {
      // A renewal still in flight would hold the release up behind it (it may
      // be stuck), and the client is gone if the lease was lost: release on a
      // new client then, rather than leave the lock to expire.  A second
      // release of a token just returns false.
      if (renewing) await this.#closeClient();
      if (this.#client === null) this.#client = await this.#connect();
      const { rows } = await this.#client.query(
        'SELECT fencing_release($1, $2::fencing_token) AS released',
        [this.lockName, this.token],
      );
      return rows[0].released;
    } finally {
      await this.#closeClient();
    }
  }

  // -- state -------------------------------------------------------------------

  // performance.now() after which the lease no longer counts as held.
  get deadline() {
    return this.#beat.deadline;
  }

  // Why the lease is lost, or null while it is held (or was released).
  get lostReason() {
    return this.token !== null ? this.#beat.lostReason : null;
  }

  get lost() {
    return this.token !== null && !this.#beat.stopped && this.lostReason !== null;
  }

  get held() {
    return this.token !== null && !this.#beat.stopped && this.lostReason === null;
  }

  // The token, or LeaseLostError if the lease is not held any more.
  check() {
    if (!this.held) {
      const reason = this.#beat.stopped ? 'released' : (this.lostReason ?? 'never acquired');
      throw new LeaseLostError(`lock "${this.lockName}" (token ${this.token}): ${reason}`);
    }
    return this.token;
  }

  // -- heartbeat (Heartbeat) -------------------------------------------------------

  async #renew() {
    const { rows } = await this.#client.query(
      'SELECT fencing_renew($1, $2::fencing_token, $3::interval) AS renewed',
      [this.lockName, this.token, interval(this.ttlMs)],
    );
    return rows[0].renewed;
  }

  // -- the lease's own client ----------------------------------------------------

  #connect() {
    return connectClient(this.connection, `fenced_lease ${this.holder}`, (client, err) => {
      if (client === this.#client && this.token !== null) {
        this.#beat.markLost(`connection failed: ${err.message}`);
      }
    });
  }

  async #closeClient() {
    const client = this.#client;
    this.#client = null;
    if (client !== null) await client.end().catch(() => {});
  }
}

// Acquires (LeaseUnavailableError if the lock is busy), runs fn(lease), and
// releases whatever fn did: the counterpart of Python's `with FencedLease(...)`.
export async function withLease(options, fn) {
  const lease = new FencedLease(options);
  if ((await lease.acquire()) === null) {
    const waited = options.waitMs != null ? ` (waited ${options.waitMs} ms)` : '';
    throw new LeaseUnavailableError(`lock "${lease.lockName}" is held by another holder${waited}`);
  }
  let result;
  try {
    result = await fn(lease);
  } catch (err) {
    await lease.release().catch(() => {}); // do not hide fn's error; the lease ends after ttl
    throw err;
  }
  await lease.release();
  return result;
}
