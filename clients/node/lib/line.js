// The line (pg_fencing 1.10): every wait in a session -- for an exclusive
// lease, a shared lease or a permit of a semaphore -- as a place the
// database keeps, instead of a statement that runs for the whole wait (CALL
// fencing_await) and holds a server connection meanwhile.
//
//   join    SELECT place, token FROM fencing_line_join(session, lock, wait, payload, kind, permits)
//   poll    SELECT state, token FROM fencing_line_poll(ARRAY[place])
//   leave   SELECT fencing_line_leave(place)
//
// Each is one short statement in autocommit, so between them a candidate
// holds no transaction, no snapshot and -- through a transaction-pooling
// PgBouncer -- no server connection: what it costs the server is one row of
// fencing_line.  A place takes its lease itself when it joins or polls in
// its turn: exclusive places first, in arrival order; a shared place once
// no exclusive place waits and the exclusive lease has ended; a semaphore's
// free permits to its permit places in arrival order.  Nobody outside the
// line is granted what a waiting place is owed meanwhile.  A place is
// polled every POLL_MS (500 ms), and, with a Listener (Client option
// listen), at once when its number is heard on the channel fencing_line
// (NOTIFYed at the commit of every change that may free the lock, with the
// number of the first place waiting for an exclusive lease, or, when none
// waits, of each of the first 16 places waiting for a shared lease or a
// permit), and every POLL_LISTENING_MS otherwise.  LISTEN is optional:
// through a transaction pooler it cannot be relied on (the LISTEN stays on
// whichever server connection ran it), and the timer alone is enough.
//
// The same statements and periods as the Python client (pg_fencing._line).

import { clearTimeout, setTimeout } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';

import { connect, end, keepConfig, mayMend, millis, reconnectDelayMs } from './connection.js';

export const CHANNEL = 'fencing_line';
export const POLL_MS = 500; // between polls of a place, without LISTEN
export const POLL_LISTENING_MS = 2000; // with LISTEN: a notification wakes the place sooner
// How long a wait lets the listener take to LISTEN before it joins (it
// polls on the timer alone if the listener has not by then).
const LISTEN_STARTUP_MS = 2000;
// A wait with a deadline polls its place once more just before it, then
// leaves: a wait shorter than the poll period, or a candidate that comes
// back with such waits, takes its turn when its place is first (a place
// that is never polled holds the line up, and leaves the lock free when it
// leaves).  That last poll is made this long before the deadline -- or the
// join's round trip before it, if longer: the server ends the place at
// joined_at + wait, which is the client's deadline give or take a round
// trip, and a poll that reaches it after that finds the place gone.
export const LAST_POLL_AHEAD_MS = 20;
// How many numbers heard are remembered, for a place whose number is heard
// between its join's send and its answer.
const REMEMBERED = 4096;

// Place numbers and tokens as text: node-postgres reads an int8 as the
// application's parser says (Number rounds past 2^53).
export const JOIN =
  'SELECT place::text AS place, token::text AS token FROM fencing_line_join($1, $2, $3::interval, $4::jsonb, $5, $6::integer)';
export const POLL = 'SELECT state, token::text AS token FROM fencing_line_poll(ARRAY[$1::bigint])';
export const LEAVE = 'SELECT fencing_line_leave($1::bigint) AS left';
// Gives back a lease taken through the line: leaving releases it and ends
// the place (a fencing_release alone would leave the place's row until the
// session ends); if the place was gone already (the lease ended), the
// release answers whether the lease was still ours.  CASE: in this order.
export const GIVE_BACK = `SELECT CASE WHEN fencing_line_leave($3::bigint) THEN true
                                 ELSE fencing_release($1, $2::fencing_token) END AS released`;

// When (performance.now()) a wait that ends at until makes its last poll,
// its place joined by a statement sent at sent and answered at answered
// (Infinity: a wait without a deadline).
export function lastPollAt(until, sent, answered) {
  return until - Math.max(LAST_POLL_AHEAD_MS, answered - sent);
}

// Milliseconds between two polls of a waiting place.
export function pollPeriodMs(poll, listening) {
  if (poll == null) return listening ? POLL_LISTENING_MS : POLL_MS;
  return millis(poll, 'poll');
}

// Which place numbers are waited for (each with its wake-ups), and the
// numbers heard lately, so that a number heard between a join and the
// follow() of the place it returned is not missed.
class Board {
  #wakes = new Map(); // place (text) -> Set of wake()
  #heard = []; // [seq, place], the last REMEMBERED
  #seq = 0;

  // A point in what was heard: follow(place, since) wakes for the place heard after it.
  mark() {
    return this.#seq;
  }

  // Calls wake() whenever place is heard (now too, if it was heard after
  // since); returns the call that stops it.
  follow(place, since, wake) {
    const key = String(place);
    let wakes = this.#wakes.get(key);
    if (!wakes) this.#wakes.set(key, (wakes = new Set()));
    wakes.add(wake);
    if (this.#heard.some(([seq, heard]) => seq > since && heard === key)) wake();
    return () => {
      wakes.delete(wake);
      if (wakes.size === 0 && this.#wakes.get(key) === wakes) this.#wakes.delete(key);
    };
  }

  heard(payload) {
    // Anyone may NOTIFY on any channel: a number only makes a place poll.
    if (!/^[0-9]{1,19}$/.test(payload ?? '')) return;
    const key = String(BigInt(payload));
    this.#seq += 1;
    this.#heard.push([this.#seq, key]);
    if (this.#heard.length > REMEMBERED) this.#heard.splice(0, this.#heard.length - REMEMBERED);
    for (const wake of [...(this.#wakes.get(key) ?? [])]) wake();
  }

  // After the listener was deaf for a while (a reconnect): every place
  // polls, in case its number went by.
  wakeAll() {
    for (const wakes of [...this.#wakes.values()]) for (const wake of [...wakes]) wake();
  }
}

// One wait's wake-up: woken when its place is heard, when its session is
// closed, when its signal aborts (wake()); sleep(ms) until then.
export class Watch {
  constructor(board = null, since = 0, onClose = () => {}) {
    this.#board = board;
    this.#since = since;
    this.#onClose = onClose;
  }

  #board;
  #since;
  #onClose;
  #unfollow = null;
  #woken = false;
  #wakeUp = null;

  follow(place) {
    this.#unfollow?.();
    this.#unfollow = this.#board === null ? null : this.#board.follow(place, this.#since, () => this.wake());
  }

  wake() {
    this.#woken = true;
    this.#wakeUp?.();
  }

  // Resolves after ms, or sooner once woken (then to true).
  sleep(ms) {
    if (this.#woken) {
      this.#woken = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wakeUp = null;
        resolve(false);
      }, Math.max(0, ms));
      this.#wakeUp = () => {
        clearTimeout(timer);
        this.#wakeUp = null;
        this.#woken = false;
        resolve(true);
      };
    });
  }

  close() {
    this.#unfollow?.();
    this.#unfollow = null;
    const onClose = this.#onClose;
    this.#onClose = () => {};
    onClose();
  }
}

// One connection LISTENing on fencing_line for every wait of a Client
// (new Client(config, { listen: true })), open while some wait uses it.  It
// wakes a wait whose place number it hears; a broken connection is made
// again (the waits poll meanwhile, and once more after it, in case their
// number went by).  An error no reconnect mends ends it (.failure; the
// waits go on polling on their timer; the next wait tries again).
export class Listener {
  constructor(config) {
    keepConfig(this, config);
  }

  board = new Board();
  failure = null;
  #users = 0;
  #running = null;
  #listening = false;
  #started = new Set(); // resolvers of the waits waiting for LISTEN
  #stop = null;

  get listening() {
    return this.#listening;
  }

  // A Watch for one wait, once LISTEN is in effect (LISTEN_STARTUP_MS at
  // most): a number heard from then on reaches it.  watch.close() gives it back.
  async watch() {
    this.#users += 1;
    this.#running ??= this.#run();
    if (!this.#listening) {
      let timer;
      await new Promise((resolve) => {
        timer = setTimeout(resolve, LISTEN_STARTUP_MS);
        this.#started.add(resolve);
      }).finally(() => clearTimeout(timer));
    }
    return new Watch(this.board, this.board.mark(), () => {
      this.#users -= 1;
      if (this.#users === 0) this.#stop?.();
    });
  }

  #startedNow() {
    for (const resolve of this.#started) resolve();
    this.#started.clear();
  }

  async #run() {
    let failures = 0;
    try {
      while (this.#users > 0) {
        let client = null;
        try {
          client = await connect(this.config, 'pg_fencing line');
          client.on('notification', (msg) => {
            if (msg.channel === CHANNEL) this.board.heard(msg.payload);
          });
          await client.query(`LISTEN ${CHANNEL}`);
        } catch (err) {
          await end(client);
          if (!mayMend(err)) {
            this.failure = err;
            return;
          }
          failures += 1;
          await sleep(Math.max(100, reconnectDelayMs(failures)));
          continue;
        }
        failures = 0;
        this.failure = null;
        this.#listening = true;
        this.#startedNow();
        this.board.wakeAll();
        await new Promise((resolve) => {
          this.#stop = resolve;
          client.once('end', resolve);
          client.once('error', resolve);
          if (this.#users === 0) resolve();
        });
        this.#stop = null;
        this.#listening = false;
        await end(client);
      }
    } finally {
      this.#running = null;
      this.#listening = false;
      this.#startedNow(); // nobody waits for a LISTEN that is not coming
    }
  }
}
