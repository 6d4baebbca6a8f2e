// Sessions (pg_fencing 1.8): one keepalive for many leases.
//
// The Client's one heartbeat (./heartbeat.js) renews the session
// (fencing_session_renew), and with it every lease in it, in one statement
// with the Client's other sessions and leases, on a connection of its own
// (a renewal never queues behind a statement that waits); the session's
// loss is every lease's, emitted once as the session's 'lost'.  The
// session's own connection is the work connection, made at its open, which
// the open, the acquires, the statements of the line and the releases take
// turns on, in the order they were called; its close goes on a short one
// of its own.  All come from the Client's config, so all are the role that
// opened the session: only that role may act in it.
//
// Every wait in a session (lock(name, { wait }), of every kind: an
// exclusive lease, a shared lease, a permit) is a place in the lock's line
// (pg_fencing 1.10, ./line.js): joined, then polled, each a short statement
// in autocommit on the work connection, which is free between them --
// through a transaction pooler no server connection is held between polls.
// lockAll() with a wait waits in line too, for one lock after the other.
// One wait is still one statement that waits on the work connection: a
// wait the line cannot hold -- a second shared lease or permit of a lock
// where the session has a place already (the server keeps one place per
// session and lock): CALL fencing_await(..., session =>).  While one is
// pending, a statement of the line or a release goes on a connection of its
// own rather than queue behind it.

import { Buffer } from 'node:buffer';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import { connect, defaultHolder, end, interval, keepConfig, mayMend, millis, value, withConnection } from './connection.js';
import { LeaseLostError, LockTimeoutError, SESSION_ENDED } from './errors.js';
import { Heartbeat, Heartbeats } from './heartbeat.js';
import { checkLockOptions, describeLock, fenced, payloadText } from './lease.js';
import { GIVE_BACK, JOIN, LEAVE, POLL, Watch, lastPollAt, pollPeriodMs } from './line.js';
import { awaitGrant } from './wait.js';

// A lease in a session: held() is the session's, and false once released.
export class SessionLease {
  constructor(session, name, kind, token, place = null) {
    this.session = session;
    this.name = name;
    this.kind = kind;
    this.token = token;
    this.place = place; // its place in the lock's line (a BigInt) if it waited there, else null
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

  // fencing_release of this lease only (and, if it waited in line, its
  // place left); the session lives on.  True if it was still live; later
  // calls resolve to false.
  async release() {
    if (this.#released) return false;
    this.#released = true;
    return this.session._release(this.name, this.token, this.place);
  }
}
Object.assign(SessionLease.prototype, fenced);

export class Session extends EventEmitter {
  // Opens a session (made by Client.session) and starts its heartbeat.
  // shared: the Client's { listener, poll } for the waits in line, and
  // heartbeats, its one heartbeat.  A session opened without a Client (not
  // the package's API) gets a heartbeat of its own, with a connection of
  // its own while the session lives.
  static async open(config, options = {}, shared = {}) {
    const session = new Session(config, options, shared);
    await session.#open();
    return session;
  }

  constructor(config, { ttl = 10, holder, heartbeat, onLost } = {}, { listener = null, poll, heartbeats = new Heartbeats(config) } = {}) {
    super();
    keepConfig(this, config);
    this.#listener = listener;
    this.#pollMs = pollPeriodMs(poll, listener !== null);
    this.holder = holder ?? defaultHolder();
    this.ttl = ttl;
    this.id = null; // fencing_sessions.session_id, a BigInt once open
    this.#ttlMs = millis(ttl, 'ttl');
    this.#beat = new Heartbeat({
      what: 'session',
      ttlMs: this.#ttlMs,
      periodMs: heartbeat === undefined ? undefined : millis(heartbeat, 'heartbeat'),
      renewal: () => ({ session: this.id, ttl: interval(this.#ttlMs) }),
      refused: 'the session ended, or was closed',
      onLost: (reason) => this.emit('lost', reason),
      heartbeats,
    });
    if (onLost) this.once('lost', onLost);
  }

  #ttlMs;
  #beat;
  #work = null; // a promise of the work connection; null: make one at the next call
  #turn = Promise.resolve(); // the work connection's queue
  #closed = false;
  #listener; // the Client's Listener, or null
  #pollMs;
  #watches = new Set(); // the wake-ups of the waits in line, woken by close()
  #places = new Map(); // lock name -> the session's places in its line: waiting, or kept by a lease taken through it
  #longWaits = 0; // statements that wait (CALL fencing_await), pending on the work connection

  // On the work connection, made for it: the session's first call.
  async #open() {
    let opened;
    try {
      opened = await this.#serially(async (client) => {
        const sent = performance.now();
        // Read as text: a process-wide int8 parser the application may have
        // set (pg.types.setTypeParser(20, Number) is common) would round an
        // id past 2^53, and the session would then be renewed by a wrong id.
        const id = await value(client, 'SELECT fencing_session_open($1, $2::interval)::text', [
          this.holder, interval(this.#ttlMs),
        ]);
        return { id, sent };
      });
    } catch (err) {
      this.#closed = true; // nothing more is sent, and no connection made again
      end(await Promise.resolve(this.#work).catch(() => null));
      this.#work = null;
      throw err;
    }
    this.id = BigInt(opened.id);
    this.#beat.begin(opened.sent);
    this.#beat.start();
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
  // when it stays busy (for wait seconds, if given).  LeaseLostError unless
  // the session is held.
  //
  // A wait, of every kind, is a place in the lock's line (1.10): short
  // statements, no server connection held between them, arrival order kept
  // (exclusive places first; a semaphore's free permits to its places in
  // the order they joined); at its end, or when signal aborts, the place is
  // left, giving back a grant made meanwhile.  The server keeps one place
  // per session and lock: a second wait for a shared lease or a permit of a
  // lock where the session has a place (waiting, or kept by a lease taken
  // through it) cannot be a place, and is CALL fencing_await(...,
  // session =>) in slices, as before the line: no snapshot held while it
  // sleeps, but a connection held for the whole wait (signal cancels it on
  // the server).
  lock(name, { wait, kind = 'exclusive', permits, payload, signal } = {}) {
    const waitMs = checkLockOptions(kind, { permits, payload, wait });
    if (waitMs !== null) {
      if (this.#takePlace(name, kind)) return this.#lockInLine(name, waitMs, { kind, permits, payload, signal });
      return this.#awaitInSession(name, waitMs, { kind, permits, payload, signal });
    }
    return this.#inSession(async (client) => {
      let token;
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
      if (token === null) throw new LockTimeoutError(`${describeLock(kind, name)} is busy`);
      return new SessionLease(this, name, kind, BigInt(token));
    });
  }

  async #lockInLine(name, waitMs, { kind, permits, payload, signal }) {
    let granted = null;
    try {
      granted = await this._waitInLine(name, waitMs, { kind, permits, payload, signal });
    } finally {
      if (granted === null) this.#forgetPlace(name); // no place kept: the wait ended without a lease
    }
    if (granted === null) throw new LockTimeoutError(`${describeLock(kind, name)} is busy (waited ${waitMs / 1000} s)`);
    return new SessionLease(this, name, kind, granted.token, granted.place);
  }

  // Counts a wait's place in name's line: false (nothing counted) for a
  // shared lease or a permit when the session has a place there already.
  // A join again would answer that place and its lease: for an exclusive
  // lease the one the session would be given again anyway, but a second
  // shared lease or permit is another lease.
  #takePlace(name, kind) {
    const places = this.#places.get(name) ?? 0;
    if (kind !== 'exclusive' && places > 0) return false;
    this.#places.set(name, places + 1);
    return true;
  }

  // A place counted by #takePlace left: its wait ended without a lease, or
  // its lease was released.
  #forgetPlace(name) {
    const places = this.#places.get(name) ?? 0;
    if (places <= 1) this.#places.delete(name);
    else this.#places.set(name, places - 1);
  }

  // A wait the line cannot hold: CALL fencing_await(..., session =>) on the
  // work connection, in slices; signal cancels it on the server, and a
  // grant made meanwhile is given back.
  #awaitInSession(name, waitMs, { kind, permits, payload, signal }) {
    return this.#waiting(true, () => this.#inSession(async (client) => {
      const { token } = await awaitGrant({
        client,
        config: this.config,
        waitMs,
        signal,
        release: { lockName: name, holder: this.holder },
        statement: (sliceMs) => [
          'CALL fencing_await($1, session => $2, wait => $3::interval, kind => $4, permits => $5::integer, payload => $6::jsonb)',
          [name, this.id, interval(sliceMs, 0), kind, permits ?? null, payloadText(payload)],
        ],
      });
      if (token === null) throw new LockTimeoutError(`${describeLock(kind, name)} is busy (waited ${waitMs / 1000} s)`);
      return new SessionLease(this, name, kind, BigInt(token));
    }));
  }

  // Waits for a lease of name (kind, permits as lock() takes them) as a
  // place in its line, waitMs at most (Infinity: as long as the session
  // lives): { token, place } (BigInts) once granted; null when the wait ran
  // out, the place left (a grant made meanwhile given back).  Joined, then
  // polled every pollMs, and at once when the listener hears the place's
  // number; each statement short and in autocommit.  Whatever else ends it
  // -- signal (rejecting with signal.reason), LeaseLostError, an error --
  // leaves the place too, unless the session is closed (its places went
  // with it).  Also Election.campaign's.
  async _waitInLine(name, waitMs, { kind = 'exclusive', permits, payload, signal } = {}) {
    signal?.throwIfAborted();
    this.check();
    const until = performance.now() + waitMs;
    const left = () => until - performance.now();
    let watch = null;
    let place = null;
    try {
      watch = this.#listener === null ? new Watch() : await this.#listener.watch();
      this.#watches.add(watch);
      const onAbort = () => watch.wake();
      signal?.addEventListener('abort', onAbort);
      try {
        signal?.throwIfAborted();
        let token;
        let sent = performance.now();
        const join = async (ms) => {
          ({ place, token } = await this.#join(name, ms, { kind, permits, payload }));
        };
        await join(waitMs);
        let last = lastPollAt(until, sent, performance.now());
        watch.follow(place);
        while (token === null) {
          const toLast = last - performance.now();
          // The last poll (or the join) was just made: leave.  (Within 1 ms:
          // a timer may fire that much early.)
          if (toLast <= 1) break;
          await watch.sleep(Math.min(this.#pollMs, toLast));
          // The last sleep ends just before the deadline (lastPollAt), and
          // the place is polled then too.
          signal?.throwIfAborted();
          this.check();
          let row;
          try {
            row = await this.#lineRow(POLL, [place]);
          } catch (err) {
            if (err instanceof LeaseLostError || !mayMend(err)) throw err;
            continue; // a broken connection: made again for the next poll
          }
          if (row.state === 'granted') {
            token = row.token;
          } else if (row.state === 'gone') {
            // The server ended the place: its session (the join says so,
            // 55Z05: LeaseLostError), its wait (at the deadline), or a grant
            // that ended before it was seen.  Joined again, at the back.
            if (left() <= 0) break;
            sent = performance.now();
            await join(left());
            last = lastPollAt(until, sent, performance.now());
            watch.follow(place);
          }
        }
        if (token !== null) return { token: BigInt(token), place: BigInt(place) };
        // The deadline: leave, which gives back a lease granted to the place
        // meanwhile (by a poll whose answer was lost, say).
        const leaving = place;
        place = null;
        await this.#lineRow(LEAVE, [leaving], { check: false });
        return null;
      } finally {
        signal?.removeEventListener('abort', onAbort);
      }
    } catch (err) {
      if (place !== null && !this.#closed) await this.#lineRow(LEAVE, [place], { check: false }).catch(() => {});
      throw err;
    } finally {
      if (watch !== null) {
        this.#watches.delete(watch);
        watch.close();
      }
    }
  }

  // fencing_line_join: { place, token } as text (token null: waiting).
  #join(name, waitMs, { kind, permits, payload }) {
    return this.#lineRow(JOIN, [
      this.id, name, waitMs === Infinity ? null : interval(waitMs, 0), payloadText(payload), kind, permits ?? null,
    ]);
  }

  // One short statement (of the line, a release, a proclamation) on the
  // work connection, or on one of its own while a statement that waits
  // holds it; once more on a new connection if the first broke (a join, a
  // poll and a leave may be repeated: joined again, the same place).
  // check: LeaseLostError first if the session is known lost (not for a
  // leave or a release, which give back what a lost session may still
  // hold).  The server's 55Z05 is the session's loss.
  async #lineRow(sql, values, { check = true } = {}) {
    for (let attempt = 1; ; attempt += 1) {
      if (check) this.check();
      try {
        return await this.#brief(async (client) => (await client.query(sql, values)).rows[0]);
      } catch (err) {
        if (err?.code === SESSION_ENDED) throw this.#endedByTheServer(err);
        if (attempt >= 2 || err instanceof LeaseLostError || !mayMend(err)) throw err;
      }
    }
  }

  // fn(client): on the work connection in its turn, unless a statement that
  // waits is pending there (then on a connection of its own).
  #brief(fn) {
    if (this.#longWaits === 0 || this.#closed) return this.#serially(fn);
    return withConnection(this.config, `pg_fencing session ${this.holder}`, fn);
  }

  // call(), counted as a statement that waits while pending (if it waits).
  async #waiting(waits, call) {
    if (!waits) return call();
    this.#longWaits += 1;
    try {
      return await call();
    } finally {
      this.#longWaits -= 1;
    }
  }

  // fencing_session_acquire of a lock the session holds, with a new payload
  // (Election.proclaim): its token, the same while the lease lives; null if
  // the lock is busy.
  async _reacquire(name, payload) {
    this.check();
    try {
      return await this.#brief(async (client) => {
        await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        try {
          const token = await value(client, 'SELECT fencing_session_acquire($1, $2, payload => $3::jsonb)::text', [
            this.id, name, payloadText(payload),
          ]);
          await client.query('COMMIT');
          return token === null ? null : BigInt(token);
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      });
    } catch (err) {
      if (err?.code === SESSION_ENDED) throw this.#endedByTheServer(err);
      throw err;
    }
  }

  #endedByTheServer(err) {
    this.#beat.markLost(`the server has ended the session: ${err.message}`);
    return new LeaseLostError(`fencing session ${this.id} is no longer held: ${err.message}`, { cause: err });
  }

  // Every lock of names or none, in the order given: their SessionLeases (a
  // name given twice, the same lease twice); LockTimeoutError when not all
  // could be had.  Never deadlocks with another session's lockAll.
  //
  // Without a wait it is one statement, fencing_session_acquire_all, which
  // takes every lock or none at once.  With a wait it waits in line, holding
  // no server connection, snapshot or transaction between its short
  // statements: one lock at a time, in the byte order of the distinct names
  // (the order fencing_session_acquire_all takes them in, so two lockAlls
  // with overlapping sets cannot wait for each other), each as lock(name,
  // { wait }) waits, for the time left.  A lock taken while it waits for the
  // next is the session's meanwhile, and others see it held: all or none
  // holds for the result, not for every instant.  When one is not had by
  // the deadline, or signal aborts, or an error stops it, every lease it
  // took is given back and every place it had left (a lock the session held
  // before the call stays held).
  lockAll(names, { wait, signal } = {}) {
    if (!Array.isArray(names) || names.length === 0) throw new TypeError('lockAll needs a non-empty array of lock names');
    const waitMs = wait == null ? null : millis(wait, 'wait', { zeroOk: true });
    if (waitMs > 0 && names.every((name) => typeof name === 'string' && name !== '')) {
      return this.#lockAllInLine(names, waitMs, signal);
    }
    // Without a wait: one statement that never sleeps (and refuses bad names).
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
      if (tokens === null) throw new LockTimeoutError(`not all of ${JSON.stringify(names)} could be had`);
      return names.map((name, i) => new SessionLease(this, name, 'exclusive', BigInt(tokens[i])));
    });
  }

  // lockAll's wait: each distinct name in byte order, a place in its line
  // (_waitInLine) for the time left of the whole wait, after one attempt
  // for a lock the session held before (its token back, as the one
  // statement would give it; not the call's to give back).  On any failure
  // what it took through the line is given back.
  async #lockAllInLine(names, waitMs, signal) {
    signal?.throwIfAborted();
    this.check();
    const until = performance.now() + waitMs;
    // Byte order, as strcmp (the server's COLLATE "C"): UTF-8 bytes compare
    // as code points, which UTF-16's < does not (a surrogate pair sorts below
    // U+E000..U+FFFF there).
    const bytes = new Map(names.map((name) => [name, Buffer.from(name, 'utf8')]));
    const distinct = [...bytes.keys()].sort((a, b) => Buffer.compare(bytes.get(a), bytes.get(b)));
    const heldBefore = await this.#liveExclusive(distinct);
    const taken = new Map(); // name -> SessionLease
    const ours = []; // the leases the call took, to give back if it fails
    try {
      for (const name of distinct) {
        let lease = null;
        if (heldBefore.has(name)) {
          lease = await this.#tryAgain(name);
          // Not the one held before (it ended meanwhile): the call's.
          if (lease !== null && lease.token !== heldBefore.get(name)) ours.push(lease);
        }
        if (lease === null) {
          this.#takePlace(name, 'exclusive'); // always counted for an exclusive lease
          let granted = null;
          try {
            // At least a millisecond: the last ones get one look at their
            // turn (a free lock is taken) rather than none.
            granted = await this._waitInLine(name, Math.max(until - performance.now(), 1), { signal });
          } finally {
            if (granted === null) this.#forgetPlace(name);
          }
          if (granted === null) {
            throw new LockTimeoutError(`not all of ${JSON.stringify(names)} could be had (waited ${waitMs / 1000} s; ` +
              `${describeLock('exclusive', name)} stayed busy)`);
          }
          lease = new SessionLease(this, name, 'exclusive', granted.token, granted.place);
          ours.push(lease);
        }
        taken.set(name, lease);
      }
    } catch (err) {
      await this.#giveBackAll(ours);
      throw err;
    }
    return names.map((name) => taken.get(name));
  }

  // The locks of names the session holds an exclusive lease of now: lock
  // name -> token (a BigInt).
  async #liveExclusive(names) {
    const { rows } = await this.#brief((client) => client.query(
      "SELECT lock_name, token::text AS token FROM fencing_leases WHERE session_id = $1 AND state = 'live' AND lock_name = ANY($2::text[])",
      [this.id, names],
    ));
    return new Map(rows.map((row) => [row.lock_name, BigInt(row.token)]));
  }

  // fencing_session_acquire of a lock the session holds: its lease (without
  // a place) while it lives, else null.
  async #tryAgain(name) {
    try {
      return await this.lock(name);
    } catch (err) {
      if (err instanceof LockTimeoutError) return null;
      throw err;
    }
  }

  // Gives back the leases a lockAll that failed took (through the line:
  // their places left too); those the session held before it, kept.  Nothing
  // to do once the session is lost or closed: its leases and places went,
  // or go, with it.  A give-back that fails is left to the session's end.
  async #giveBackAll(leases) {
    if (!this.held()) return;
    for (const lease of leases) await lease.release().catch(() => {});
  }

  // Stops the heartbeat and closes the session, releasing every lease in
  // it: how many.  Idempotent: later calls resolve to 0.  The close goes on
  // a short connection of its own rather than queueing on the work
  // connection, where a pending wait would hold it up for as long as the
  // wait or the session's ttl (nor on the heartbeat's, shared with the
  // Client's other sessions and leases, whose renewals it would hold up, or
  // which a stuck round would hold up); that wait's next attempt then ends
  // it with 55Z05 (a LeaseLostError), and the close resolves once the calls
  // made before it have ended; a wait in line is woken, and ends with
  // LeaseLostError at once.
  async close() {
    this.#beat.stop(); // no renewal, and no 'lost', after the close
    if (this.#closed || this.id === null) return 0;
    this.#closed = true;
    for (const watch of this.#watches) watch.wake();
    let released;
    try {
      released = await withConnection(this.config, `pg_fencing session ${this.holder}`, (client) =>
        value(client, 'SELECT fencing_session_close($1)', [this.id]),
      );
      await this.#turn;
    } finally {
      end(await Promise.resolve(this.#work).catch(() => null));
      this.#work = null;
    }
    return released;
  }

  // For SessionLease.release(), and Election's: a lease taken through the
  // line (place) leaves its place too, which releases it.  Never queues
  // behind a statement that waits.
  async _release(name, token, place = null) {
    if (place !== null) this.#forgetPlace(name);
    if (this.#closed) return false;
    const [sql, values] = place === null
      ? ['SELECT fencing_release($1, $2::fencing_token) AS released', [name, token]]
      : [GIVE_BACK, [name, token, place]];
    return (await this.#lineRow(sql, values, { check: false })).released;
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
        throw this.#endedByTheServer(err);
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

  #connect(onError) {
    return connect(this.config, `pg_fencing session ${this.holder}`, onError);
  }
}
