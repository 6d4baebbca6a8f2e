// Sessions (pg_fencing 1.8): one keepalive for many leases.
//
// One heartbeat renews the session (fencing_session_renew), and with it
// every lease in it; its loss is every lease's, emitted once as the
// session's 'lost'.  Two connections: the heartbeat's (a renewal never
// queues behind an acquire that waits) and the work connection, which the
// acquires, releases and the close take turns on, in the order they were
// called.  Both come from the same config, so both are the role that opened
// the session: only that role may act in it.

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import { connect, defaultHolder, end, interval, keepConfig, millis, value, withConnection } from './connection.js';
import { LeaseLostError, LockTimeoutError, SESSION_ENDED } from './errors.js';
import { Heartbeat } from './heartbeat.js';
import { checkLockOptions, describeLock, fenced, payloadText } from './lease.js';
import { awaitGrant } from './wait.js';

// A lease in a session: held() is the session's, and false once released.
export class SessionLease {
  constructor(session, name, kind, token) {
    this.session = session;
    this.name = name;
    this.kind = kind;
    this.token = token;
    this.#released = false;
  }

  #released;

  describe() {
    return `${describeLock(this.kind, this.name)} in fencing session ${this.session.id}`;
  }

  held() {
    return !this.#released && this.session.held();
  }

  get lostReason() {
    return this.#released ? 'released' : this.session.lostReason;
  }

  // fencing_release of this lease only; the session lives on.  True if it
  // was still live; later calls resolve to false.
  async release() {
    if (this.#released) return false;
    this.#released = true;
    return this.session._release(this.name, this.token);
  }
}
Object.assign(SessionLease.prototype, fenced);

export class Session extends EventEmitter {
  // Opens a session (made by Client.session) and starts its heartbeat.
  static async open(config, options = {}) {
    const session = new Session(config, options);
    await session.#open();
    return session;
  }

  constructor(config, { ttl = 10, holder, heartbeat, onLost } = {}) {
    super();
    keepConfig(this, config);
    this.holder = holder ?? defaultHolder();
    this.ttl = ttl;
    this.id = null; // fencing_sessions.session_id, a BigInt once open
    this.#ttlMs = millis(ttl, 'ttl');
    this.#beat = new Heartbeat({
      what: 'session',
      ttlMs: this.#ttlMs,
      periodMs: heartbeat === undefined ? undefined : millis(heartbeat, 'heartbeat'),
      renew: () => this.#renew(),
      refused: 'the session ended, or was closed',
      onLost: (reason) => {
        // A renewal may still be on its way: never reuse its connection.
        const client = this.#beatClient;
        this.#beatClient = null;
        end(client);
        this.emit('lost', reason);
      },
    });
    if (onLost) this.once('lost', onLost);
  }

  #ttlMs;
  #beat;
  #beatClient = null;
  #work = null; // a promise of the work connection; null: make one at the next call
  #turn = Promise.resolve(); // the work connection's queue
  #closed = false;

  async #open() {
    try {
      this.#beatClient = await this.#connect((client, err) => {
        if (client === this.#beatClient && this.id !== null) this.#beat.markLost(`connection failed: ${err.message}`);
      });
      const sent = performance.now();
      // Read as text: a process-wide int8 parser the application may have
      // set (pg.types.setTypeParser(20, Number) is common) would round an
      // id past 2^53, and the session would then be renewed by a wrong id.
      const id = await value(this.#beatClient, 'SELECT fencing_session_open($1, $2::interval)::text', [
        this.holder, interval(this.#ttlMs),
      ]);
      this.id = BigInt(id);
      this.#beat.begin(sent);
      this.#beat.start();
    } catch (err) {
      end(this.#beatClient);
      throw err;
    }
  }

  held() {
    return this.id !== null && !this.#closed && this.#beat.lostReason === null;
  }

  get lostReason() {
    return this.#closed ? 'closed' : this.#beat.lostReason;
  }

  get deadline() {
    return this.#beat.deadline;
  }

  // LeaseLostError unless the session is held.
  check() {
    if (!this.held()) throw new LeaseLostError(`fencing session ${this.id} is no longer held: ${this.lostReason}`);
  }

  // Takes name in the session, of any kind: a SessionLease; LockTimeoutError
  // when it stays busy (for wait seconds, if given: CALL fencing_await(...,
  // session =>), no snapshot held while it sleeps; signal cancels it, on the
  // server too).  LeaseLostError unless the session is held.
  lock(name, { wait, kind = 'exclusive', permits, payload, signal } = {}) {
    const waitMs = checkLockOptions(kind, { permits, payload, wait });
    return this.#inSession(async (client) => {
      let token;
      if (waitMs === null) {
        await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        try {
          token = await value(
            client,
            'SELECT fencing_session_acquire($1, $2, payload => $3::jsonb, kind => $4, permits => $5::integer)',
            [this.id, name, payloadText(payload), kind, permits ?? null],
          );
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      } else {
        ({ token } = await awaitGrant({
          client,
          config: this.config,
          waitMs,
          signal,
          release: { lockName: name, holder: this.holder },
          statement: (sliceMs) => [
            'CALL fencing_await($1, session => $2, wait => $3::interval, kind => $4, permits => $5::integer, payload => $6::jsonb)',
            [name, this.id, interval(sliceMs, 0), kind, permits ?? null, payloadText(payload)],
          ],
        }));
      }
      if (token === null) {
        throw new LockTimeoutError(`${describeLock(kind, name)} is busy` + (waitMs === null ? '' : ` (waited ${waitMs / 1000} s)`));
      }
      return new SessionLease(this, name, kind, BigInt(token));
    });
  }

  // Every lock of names or none (fencing_session_acquire_all), in the order
  // given: their SessionLeases; LockTimeoutError when not all could be had.
  // Never deadlocks with another session's lockAll.  Its wait is the
  // function form's (there is no procedure for it), which holds a snapshot
  // while it waits: keep it short.
  lockAll(names, { wait } = {}) {
    if (!Array.isArray(names) || names.length === 0) throw new TypeError('lockAll needs a non-empty array of lock names');
    const waitMs = wait == null ? null : millis(wait, 'wait', { zeroOk: true });
    return this.#inSession(async (client) => {
      await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      let tokens;
      try {
        tokens = await value(client, 'SELECT fencing_session_acquire_all($1, $2::text[], $3::interval)::text[]', [
          this.id, names, waitMs === null ? null : interval(waitMs, 0),
        ]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
      if (tokens === null) {
        throw new LockTimeoutError(`not all of ${JSON.stringify(names)} could be had` + (waitMs === null ? '' : ` (waited ${waitMs / 1000} s)`));
      }
      return names.map((name, i) => new SessionLease(this, name, 'exclusive', BigInt(tokens[i])));
    });
  }

  // Stops the heartbeat and closes the session, releasing every lease in
  // it: how many.  Idempotent: later calls resolve to 0.  The close goes on
  // a connection of its own rather than queueing on the work connection,
  // where a pending wait would hold it up for as long as the wait or the
  // session's ttl; that wait's next attempt then ends it with 55Z05 (a
  // LeaseLostError), and the close resolves once the calls made before it
  // have ended.
  async close() {
    this.#beat.stop(); // no renewal, and no 'lost', after the close
    if (this.#closed || this.id === null) return 0;
    this.#closed = true;
    let released;
    try {
      released = await withConnection(this.config, `pg_fencing session ${this.holder}`, (client) =>
        value(client, 'SELECT fencing_session_close($1)', [this.id]),
      );
      await this.#turn;
    } finally {
      end(this.#beatClient);
      end(await Promise.resolve(this.#work).catch(() => null));
      this.#beatClient = this.#work = null;
    }
    return released;
  }

  // For SessionLease.release().
  _release(name, token) {
    if (this.#closed) return Promise.resolve(false);
    return this.#serially((client) => value(client, 'SELECT fencing_release($1, $2::fencing_token)', [name, token]));
  }

  // fn(workConnection) for a session that must be held; the server's
  // 55Z05 (it ended the session before the heartbeat noticed) is the loss.
  #inSession(fn) {
    return this.#serially(async (client) => {
      this.check();
      try {
        return await fn(client);
      } catch (err) {
        if (err?.code !== SESSION_ENDED) throw err;
        this.#beat.markLost(`the server has ended the session: ${err.message}`);
        throw new LeaseLostError(`fencing session ${this.id} is no longer held: ${err.message}`, { cause: err });
      }
    });
  }

  // fn(workConnection), after every call made before it; a connection that
  // failed is made anew for the next call.  (A cancelled wait leaves it
  // usable: awaitGrant waits for the cancelled CALL's answer.)
  #serially(fn) {
    const run = this.#turn.then(async () => {
      // After close() nothing is sent, and no connection is made again.
      if (this.#closed && this.#work === null) throw new LeaseLostError(`fencing session ${this.id} is no longer held: closed`);
      if (this.#work === null) {
        const made = this.#connect((client) => {
          if (this.#work === made) this.#work = null; // the call running on it rejects with its own error
          end(client);
        });
        this.#work = made;
      }
      const work = this.#work;
      const client = await work.catch((err) => {
        if (this.#work === work) this.#work = null;
        throw err;
      });
      return fn(client);
    });
    this.#turn = run.catch(() => {});
    return run;
  }

  async #renew() {
    return value(this.#beatClient, 'SELECT fencing_session_renew($1, $2::interval)', [this.id, interval(this.#ttlMs)]);
  }

  #connect(onError) {
    return connect(this.config, `pg_fencing session ${this.holder}`, onError);
  }
}
