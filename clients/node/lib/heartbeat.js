// The keepalives of leases and sessions: each one's clock and the judgement
// of whether it is still held (Heartbeat), and the one connection that
// renews them all for a Client (Heartbeats).
//
// Held is judged on the monotonic clock (performance.now()),
// conservatively: it is lost once the send time of the last successful
// acquire, open or renewal, plus ttl, minus a safety margin, has passed --
// whether or not any timer ran meanwhile (the event loop may have been
// blocked, or the process stopped).  The server starts the ttl when it runs
// the request, after the client sent it, so this deadline is never later
// than the server's end (clock rates aside).
//
// A renewal is due every period (ttl/3 by default); its answer is waited
// for only until that deadline: a timer set for it reports the loss even
// while a renewal is stuck behind a lock or a dead network.  onLost(reason)
// is called once, when a renewal is refused or fails or the deadline
// passes; never after stop().
//
// The renewals of every lease and session a Client makes (an election's
// sessions too) go on one connection of the Client's (Heartbeats,
// application_name 'pg_fencing heartbeat'), opened when the first renewal
// is due and closed when nothing is left to renew.  Whenever some are due
// it sends one statement renewing all of them (and those due within half
// their period, so that those of one period come to be renewed in one
// round per period), in autocommit, unnamed, holding nothing between
// rounds -- so it works through a transaction pooler -- and gives each
// row's answer to its lease or session: renewed as of the round's send
// time, or refused (lost).  A round is waited for until the earliest
// deadline of the Client's leases and sessions; then its connection is
// given up (a statement may be stuck on it), those whose deadline passed
// are lost, and the others are sent again at once on a new connection.  A
// statement that fails with its connection fails the renewal of every
// lease and session in it, as a renewal of its own did; a connection that
// breaks between rounds costs nothing: the next round makes a new one.
//
// Nothing else goes on the heartbeat's connection: a release or a close
// would wait behind a stuck round, or hold up the renewals of all the
// others while it waits for a lock itself.

import { performance } from 'node:perf_hooks';

import { connect, end, keepConfig, mayMend } from './connection.js';

// How long before the computed end the client stops trusting a lease (ms).
export function safetyMarginMs(ttlMs) {
  return Math.min(Math.max(ttlMs / 10, 50), ttlMs / 2);
}

// One round's renewals in one statement: a session by its id, a lease of
// its own by its lock and token (a lease in a session is renewed with its
// session), each for its own ttl.  One row per item: i, its
// place in the arrays (from 1), and whether the server took the renewal.
// Ids and tokens go as text: no int8 parser of the application's rounds them.
const RENEW = `
  SELECT i::int AS i,
         CASE WHEN s IS NOT NULL THEN fencing_session_renew(s, ttl) ELSE fencing_renew(l, t, ttl) END AS renewed
    FROM unnest($1::bigint[], $2::text[], $3::fencing_token[], $4::interval[]) WITH ORDINALITY AS u(s, l, t, ttl, i)`;

export class Heartbeat {
  // what        'lease' or 'session', in the reasons
  // renewal()   what to renew: { session } (its id) or { lockName, token },
  //             and { ttl }: an interval text
  // refused     why a refused renewal means the loss, in the reason
  // heartbeats  the Heartbeats that renews it
  constructor({ what, ttlMs, periodMs, renewal, refused, onLost, heartbeats }) {
    this.what = what;
    this.ttlMs = ttlMs;
    this.marginMs = safetyMarginMs(ttlMs);
    this.periodMs = periodMs ?? ttlMs / 3;
    if (!(this.periodMs > 0 && this.periodMs < ttlMs - this.marginMs)) {
      throw new RangeError(
        `heartbeat must be positive and shorter than ttl minus the safety margin ` +
          `(${(ttlMs - this.marginMs) / 1000} s), got ${this.periodMs / 1000} s`,
      );
    }
    this.renewal = renewal;
    this.#refused = refused;
    this.#onLost = onLost;
    this.#heartbeats = heartbeats;
  }

  #refused;
  #onLost;
  #heartbeats;
  #validFrom = 0; // performance.now() when the last successful acquire/open/renew was sent
  #triedAt = 0; // performance.now() when the last renewal was sent (or the heartbeat started)
  #lostReason = null;
  #stopped = false;
  #started = false;
  #deadlineTimer = null;
  #renewing = false;
  #unanswered = false; // its last renewal's round was given up without an answer

  // The send time of the request that took the lease or opened the session.
  begin(sent) {
    this.#validFrom = sent;
  }

  renewed(sent) {
    this.#validFrom = Math.max(this.#validFrom, sent);
  }

  start() {
    if (this.#stopped || this.#lostReason !== null) return;
    this.#started = true;
    this.#triedAt = performance.now();
    this.#heartbeats.add(this);
    this.#armDeadline();
  }

  // No renewal and no onLost from now on; false if stopped already.
  stop() {
    if (this.#stopped) return false;
    this.#stopped = true;
    this.#end();
    return true;
  }

  get stopped() {
    return this.#stopped;
  }

  // A renewal is on its way: sent (or sent and given up without an
  // answer, to be sent again), or due while the heartbeat's connection is
  // busy with a round that does not include it.
  get renewing() {
    return (
      this.#renewing || this.#unanswered || (this.#started && this.#heartbeats.busy && performance.now() >= this.dueAt)
    );
  }

  // performance.now() after which it no longer counts as held.
  get deadline() {
    return this.#validFrom + this.ttlMs - this.marginMs;
  }

  // performance.now() when its next renewal is due.
  get dueAt() {
    return this.#triedAt + this.periodMs;
  }

  // Why it is lost, or null while it is held.
  get lostReason() {
    if (this.#lostReason !== null) return this.#lostReason;
    if (performance.now() >= this.deadline) {
      // No timer has run since the deadline passed (the event loop was
      // blocked, say); the deadline timer reports the same when it runs.
      return 'not renewed within ttl minus the safety margin';
    }
    return null;
  }

  markLost(reason) {
    if (this.#stopped || this.#lostReason !== null) return;
    this.#lostReason = reason;
    this.#end();
    try {
      this.#onLost(reason);
    } catch (err) {
      // A listener's throw is the application's, as if a timer of its own
      // threw: it must not stop the heartbeat of the others.
      process.nextTick(() => {
        throw err;
      });
    }
  }

  // What Heartbeats calls.  take(now): whether it goes in the round about
  // to be sent (not if it was stopped or lost meanwhile, nor once its
  // deadline passed: then it is lost, and no timer had run).
  take(now) {
    if (this.#stopped || this.#lostReason !== null) return false;
    if (now >= this.deadline) {
      this.markLost(this.#lapse());
      return false;
    }
    return true;
  }

  // The round with its renewal was sent at sent.
  sending(sent) {
    this.#triedAt = sent;
    this.#renewing = true;
  }

  // Its row of the round's answer: { renewed } or { error } (a statement
  // of its own failed).
  answered(sent, { renewed, error }) {
    this.#renewing = false;
    this.#unanswered = false;
    if (this.#stopped || this.#lostReason !== null) return; // too late to count
    if (error) {
      this.markLost(`renewal failed: ${error.message}`);
    } else if (!renewed) {
      this.markLost(`renewal refused: ${this.#refused}`);
    } else {
      this.renewed(sent);
      this.#armDeadline();
    }
  }

  // The round failed as a whole (its connection broke, say).
  failed(err) {
    this.answered(0, { error: err });
  }

  // The round got no answer before the earliest deadline of the
  // heartbeat's leases and sessions, and was given up: lost if its own
  // deadline has passed, else due again at once (on a new connection).
  unanswered() {
    this.#renewing = false;
    this.#unanswered = true;
    this.#expire();
    this.#triedAt = -Infinity;
  }

  #end() {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = null;
    this.#heartbeats.delete(this);
  }

  // At the deadline: lost, so that a renewal stuck on the wire cannot delay
  // the loss; every successful renewal moves it.
  #expire() {
    if (this.#stopped || this.#lostReason !== null) return;
    if (performance.now() >= this.deadline) {
      this.markLost(this.#lapse());
    } else {
      this.#armDeadline();
    }
  }

  // Why the deadline passed: a renewal without an answer, or none sent
  // (no timer ran: the event loop was blocked, or the process stopped).
  #lapse() {
    return this.renewing
      ? `renewal got no answer before the ${this.what}'s safe deadline`
      : `not renewed before the ${this.what}'s safe deadline; was the process paused?`;
  }

  #armDeadline() {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = setTimeout(() => this.#expire(), Math.max(0, this.deadline - performance.now()) + 1);
  }
}

// The one heartbeat of a Client: one connection and one timer for the
// renewals of all its leases and sessions (each a Heartbeat, add()ed when
// it starts and delete()d when it stops or is lost).
export class Heartbeats {
  constructor(config, applicationName = 'pg_fencing heartbeat') {
    keepConfig(this, config);
    this.#applicationName = applicationName;
  }

  #applicationName;
  #items = new Set();
  #connection = null; // a promise of the pg.Client; null: made at the next round
  #timer = null;
  #round = null; // the round in flight

  // A round is in flight.
  get busy() {
    return this.#round !== null;
  }

  add(item) {
    this.#items.add(item);
    this.#schedule();
  }

  delete(item) {
    if (!this.#items.delete(item)) return;
    if (this.#items.size === 0 && this.#round === null) this.#idle();
  }

  // Nothing left to renew: no timer, no connection.
  #idle() {
    clearTimeout(this.#timer);
    this.#timer = null;
    this.#drop();
  }

  // A timer for the earliest renewal due (none while a round is in flight:
  // its end schedules the next).
  #schedule() {
    if (this.#round !== null) return;
    clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#items.size === 0) return;
    let next = Infinity;
    for (const item of this.#items) next = Math.min(next, item.dueAt);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#startRound();
    }, Math.max(0, next - performance.now()));
  }

  // Every item due, or due within half its period, in one statement: items
  // of one period that started at different times share their rounds from
  // the second on (one round per period), and none is renewed more than
  // twice a period.
  #startRound() {
    if (this.#round !== null) return;
    const now = performance.now();
    const batch = [...this.#items].filter((item) => item.dueAt - item.periodMs / 2 <= now && item.take(now));
    if (batch.length === 0) {
      this.#schedule();
      return;
    }
    this.#round = this.#renew(batch).finally(() => {
      this.#round = null;
      if (this.#items.size === 0) this.#idle();
      else this.#schedule();
    });
  }

  async #renew(batch) {
    const sent = performance.now();
    for (const item of batch) item.sending(sent);
    // The round is waited for until the earliest deadline of every item
    // (of the round, or due meanwhile): a statement stuck behind a lock,
    // or a dead network, holds up no item's loss, and no item's renewal
    // past that.
    // (One not in the round whose deadline passed already is its own
    // timer's to report.)
    let until = Infinity;
    for (const item of batch) until = Math.min(until, item.deadline);
    for (const item of this.#items) if (item.deadline > sent) until = Math.min(until, item.deadline);
    // (A timer may fire a little before performance.now() says its time
    // has come: set again until it has.)
    let timer;
    const late = new Promise((resolve) => {
      const wait = () => {
        const left = until - performance.now();
        if (left <= 0) resolve(null);
        else timer = setTimeout(wait, left + 1);
      };
      wait();
    });
    const answer = this.#send(batch).then(
      (results) => ({ results }),
      (error) => ({ error }),
    );
    const outcome = await Promise.race([answer, late]);
    clearTimeout(timer);
    if (outcome === null) {
      // Never reuse a connection a statement may be stuck on.
      this.#drop();
      for (const item of batch) item.unanswered();
    } else if (outcome.error) {
      this.#drop();
      for (const item of batch) item.failed(outcome.error);
    } else {
      batch.forEach((item, i) => item.answered(sent, outcome.results[i]));
    }
  }

  // The round's statement: one result per item.  An error of the
  // statement's own (a privilege revoked on one lock, say: it has a
  // SQLSTATE no reconnect mends) is not every item's: then each is sent
  // alone, on the same connection, and gets its own answer or error.  An
  // error of the connection's fails the round.
  async #send(batch) {
    const client = await this.#connect();
    try {
      return await this.#statement(client, batch);
    } catch (err) {
      if (batch.length === 1 || mayMend(err)) throw err;
    }
    const results = [];
    for (const item of batch) {
      try {
        results.push(...(await this.#statement(client, [item])));
      } catch (err) {
        if (mayMend(err)) throw err;
        results.push({ error: err });
      }
    }
    return results;
  }

  async #statement(client, batch) {
    const values = [[], [], [], []];
    for (const item of batch) {
      const { session = null, lockName = null, token = null, ttl } = item.renewal();
      values[0].push(session === null ? null : String(session));
      values[1].push(lockName);
      values[2].push(token === null ? null : String(token));
      values[3].push(ttl);
    }
    const { rows } = await client.query(RENEW, values);
    const results = batch.map(() => ({ error: new Error('the server answered no row for it') }));
    for (const row of rows) results[row.i - 1] = { renewed: row.renewed === true };
    return results;
  }

  #connect() {
    if (this.#connection === null) {
      const made = connect(this.config, this.#applicationName, (client) => {
        // Broken between rounds (or under one, whose statement fails with
        // it): made again for the next round.
        if (this.#connection === made) this.#connection = null;
        end(client);
      });
      made.catch(() => {
        if (this.#connection === made) this.#connection = null;
      });
      this.#connection = made;
    }
    return this.#connection;
  }

  #drop() {
    const made = this.#connection;
    this.#connection = null;
    made?.then(end, () => {});
  }
}
