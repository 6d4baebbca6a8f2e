// Leases: an exclusive lock, one permit of a semaphore, or a shared lease,
// acquired on a pg.Client of its own (which its wait, a CALL fencing_await,
// holds), then kept alive by its Client's one heartbeat (./heartbeat.js),
// which renews it with the Client's other leases and sessions, and released
// on a short connection of its own.
//
// Renewals and the release come from the role that acquired: every
// connection comes from the Client's one config.  held() says whether the
// lease can still be trusted; it cannot close the window between the check
// and the write (a pause no client can see), which is what the token and
// the table's guard (fencing_protect) are for.
//
// Tokens are BigInts: a fencing_token goes up to 2^63 - 1, past the 2^53
// a Number holds exactly, and two tokens must compare exactly (a < b).
// node-postgres sends a BigInt parameter as its decimal text.

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import { connect, defaultHolder, end, interval, keepConfig, millis, value, withConnection } from './connection.js';
import { LeaseLostError, LockTimeoutError, mapGuardError } from './errors.js';
import { Heartbeat, Heartbeats } from './heartbeat.js';
import { awaitGrant } from './wait.js';

export const KINDS = ['exclusive', 'shared', 'permit'];

// db.query() (a pg.Client, a pg.Pool, or any object with that method),
// with the guard's refusals mapped to StaleTokenError (55Z01),
// MissingTokenError (55Z02), NeverGrantedTokenError (55Z03) and
// LeaseEndedError (55Z04, at COMMIT).  Outside a transaction the statement
// is its own; inside one, send the COMMIT through it too, to see 55Z04.
export async function fencedQuery(db, sql, values) {
  try {
    return await db.query(sql, values);
  } catch (err) {
    throw mapGuardError(err);
  }
}

// 'lock "x"', 'lock "x" (shared)', 'a permit of semaphore "x"'.
export function describeLock(kind, name) {
  if (kind === 'permit') return `a permit of semaphore "${name}"`;
  return `lock "${name}"` + (kind === 'shared' ? ' (shared)' : '');
}

// What every lease shares, of its own or in a session: check() and query().
// held(), lostReason and describe() are each kind's.
export const fenced = {
  // The token, or LeaseLostError once the lease is not held any more.
  check() {
    if (!this.held()) {
      throw new LeaseLostError(`${this.describe()} (token ${this.token}) is no longer held: ${this.lostReason}`);
    }
    return this.token;
  },

  // fencedQuery() after check(): LeaseLostError, without sending anything,
  // when the lease is known lost; the guard's refusal if it was lost after
  // the check.
  async query(db, sql, values) {
    this.check();
    return fencedQuery(db, sql, values);
  },
};

// TypeError / RangeError for options no lease takes.  Returns waitMs (null:
// one attempt).
export function checkLockOptions(kind, { permits, payload, wait } = {}) {
  if (!KINDS.includes(kind)) throw new RangeError(`kind must be one of ${KINDS.join(', ')}, got ${kind}`);
  if (kind === 'permit' && !(Number.isInteger(permits) && permits > 0)) {
    throw new RangeError(`permits must be a positive integer, got ${permits}`);
  }
  if (payload !== undefined && kind !== 'exclusive') throw new TypeError('a payload needs an exclusive lease');
  return wait == null ? null : millis(wait, 'wait', { zeroOk: true, infinityOk: true });
}

// JSON text for a jsonb parameter; null for none.
export function payloadText(payload) {
  return payload === undefined ? null : JSON.stringify(payload);
}

function waitedText(waitMs) {
  return waitMs === null ? '' : ` (waited ${waitMs / 1000} s)`;
}

export function busyMessage(what, kind, waitMs) {
  return what + (kind === 'permit' ? ': every permit is taken' : ' is held by another holder') + waitedText(waitMs);
}

export class Lease extends EventEmitter {
  // Takes a lease (made by Client.lock, .semaphore, .shared): resolves once
  // it is held, rejects with LockTimeoutError when it stays busy, with
  // signal.reason when signal aborts the wait.  heartbeats: the Client's;
  // a lease made without a Client (not the package's API) gets a heartbeat
  // of its own, with a connection of its own while it lives.
  static async acquire(config, name, kind, options = {}, heartbeats = new Heartbeats(config)) {
    const lease = new Lease(config, name, kind, options, heartbeats);
    await lease.#acquire(options);
    return lease;
  }

  constructor(config, name, kind, { permits, holder, ttl = 10, heartbeat, onLost } = {}, heartbeats = new Heartbeats(config)) {
    super();
    if (typeof name !== 'string' || name === '') throw new TypeError('a lock name (a non-empty string) is required');
    keepConfig(this, config);
    this.name = name;
    this.kind = kind;
    this.permits = kind === 'permit' ? permits : null;
    this.holder = holder ?? defaultHolder();
    this.ttl = ttl;
    this.token = null;
    this.#ttlMs = millis(ttl, 'ttl');
    this.#beat = new Heartbeat({
      what: 'lease',
      ttlMs: this.#ttlMs,
      periodMs: heartbeat === undefined ? undefined : millis(heartbeat, 'heartbeat'),
      renewal: () => ({ lockName: this.name, token: this.token, ttl: interval(this.#ttlMs) }),
      refused: 'the lease expired, was released, revoked or taken over',
      onLost: (reason) => this.emit('lost', reason),
      heartbeats,
    });
    if (onLost) this.once('lost', onLost);
  }

  #ttlMs;
  #beat;
  #client = null;
  #released = false;

  describe() {
    return describeLock(this.kind, this.name);
  }

  // Whether the lease can still be trusted (judged on the monotonic clock).
  held() {
    return this.token !== null && !this.#released && this.#beat.lostReason === null;
  }

  // Why it is not held: 'released', the loss's reason, or null while held.
  get lostReason() {
    if (this.#released) return 'released';
    return this.token === null ? 'never acquired' : this.#beat.lostReason;
  }

  // performance.now() after which the lease no longer counts as held.
  get deadline() {
    return this.#beat.deadline;
  }

  // Gives the lock back: true if it was still ours on the server.
  // Idempotent: later calls resolve to false.
  //
  // On a short connection of its own, not on the heartbeat's: a round of
  // renewals in flight there (it may be stuck behind a lock) would hold the
  // release up, and a release stuck behind a lock would hold up the
  // renewals of every other lease and session of the Client.  After a loss
  // too, rather than leave the lock to run out.
  async release() {
    if (this.token === null || this.#released) return false;
    this.#released = true;
    this.#beat.stop();
    return withConnection(this.config, `pg_fencing lease ${this.holder}`, (client) =>
      value(client, 'SELECT fencing_release($1, $2::fencing_token)', [this.name, this.token]),
    );
  }

  async #acquire({ wait, payload, signal }) {
    const waitMs = checkLockOptions(this.kind, { permits: this.permits, payload, wait });
    this.#client = await this.#connect();
    let granted;
    try {
      granted = waitMs === null ? await this.#attempt(payload) : await this.#await(waitMs, payload, signal);
    } catch (err) {
      this.#dropClient();
      throw err;
    }
    if (granted.token === null) {
      this.#dropClient();
      throw new LockTimeoutError(busyMessage(this.describe(), this.kind, waitMs));
    }
    this.token = BigInt(granted.token);
    this.#beat.begin(granted.sent);
    try {
      // A wait can outlast much of the ttl: the server started the lease
      // when it granted it, not when the slice was sent.  One renewal right
      // away gives a send time close to the grant.
      if (waitMs !== null && performance.now() - granted.sent > this.#beat.marginMs) {
        const sent = performance.now();
        if (!(await this.#renew())) {
          throw new LeaseLostError(
            `${this.describe()} was granted (token ${this.token}) but ended before it could be renewed; ttl too short?`,
          );
        }
        this.#beat.renewed(sent);
      }
    } catch (err) {
      this.#dropClient();
      await this.release().catch(() => {});
      throw err;
    }
    // Held: the acquiring connection's work is done.  Its renewals go on
    // the heartbeat's connection, its release on one of its own.
    this.#dropClient();
    this.#beat.start();
  }

  // One attempt, at READ COMMITTED whatever default_transaction_isolation
  // says: at a stricter level an acquire that meets a just-changed lease
  // row fails with 40001.
  async #attempt(payload) {
    const ttl = interval(this.#ttlMs);
    const [sql, values] = {
      exclusive: ['SELECT fencing_acquire($1, $2, $3::interval, payload => $4::jsonb)', [this.name, this.holder, ttl, payloadText(payload)]],
      shared: ['SELECT fencing_acquire_shared($1, $2, $3::interval)', [this.name, this.holder, ttl]],
      permit: ['SELECT fencing_acquire_permit($1, $2, $3::integer, $4::interval)', [this.name, this.holder, this.permits, ttl]],
    }[this.kind];
    const sent = performance.now();
    await this.#client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    try {
      const token = await value(this.#client, sql, values);
      await this.#client.query('COMMIT');
      return { token, sent };
    } catch (err) {
      await this.#client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  }

  #await(waitMs, payload, signal) {
    return awaitGrant({
      client: this.#client,
      config: this.config,
      waitMs,
      signal,
      release: { lockName: this.name, holder: this.holder },
      statement: (sliceMs) => [
        'CALL fencing_await($1, $2, $3::interval, $4::interval, kind => $5, permits => $6::integer, payload => $7::jsonb)',
        [this.name, this.holder, interval(this.#ttlMs), interval(sliceMs, 0), this.kind, this.permits, payloadText(payload)],
      ],
    });
  }

  // The one renewal on the acquiring connection, right after a long wait.
  async #renew() {
    return value(this.#client, 'SELECT fencing_renew($1, $2::fencing_token, $3::interval)', [
      this.name, this.token, interval(this.#ttlMs),
    ]);
  }

  #connect() {
    return connect(this.config, `pg_fencing lease ${this.holder}`);
  }

  #dropClient() {
    const client = this.#client;
    this.#client = null;
    end(client);
  }
}
Object.assign(Lease.prototype, fenced);
