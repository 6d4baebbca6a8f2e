// Leader election on one lock: campaign, proclaim, leader, observe, resign.
//
// A candidate campaigns in a fencing session of its own (1.8), whose
// renewal every ttl/3 -- by the Client's one heartbeat, in one statement
// with the Client's other sessions and leases -- keeps it in the lock's
// line while it waits (1.10: a place the database keeps, polled
// by short statements, no server connection held between them, arrival
// order kept) and keeps its lease once it leads.  resign() gives the lease
// back -- the next place in line is told -- and closes the session; a
// candidate that gives up (timeout, signal) leaves the line, giving back
// anything granted to it meanwhile, and closes its session.
//
// The leader is whoever holds the lock's live exclusive lease.  observe()
// reports what it reads from the view fencing_leases, never what a
// notification says: notifications (LISTEN fencing_events) only make it
// read sooner.  A forged one (any role may NOTIFY on any channel), a lost
// one, or one for a lock whose owner did not turn announcements on changes
// nothing: it also reads when the live lease is due to end by the server's
// clock, every `reread` seconds, and after every reconnect (LISTEN first,
// then the read, so that no change slips between).

import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

import { connect, defaultHolder, end, keepConfig, mayMend, millis, reconnectDelayMs, withConnection } from './connection.js';
import { LeaseLostError, LockTimeoutError } from './errors.js';
import { busyMessage, describeLock, fenced } from './lease.js';
import { Session } from './session.js';

const CHANNEL = 'fencing_events';

// The live lease, and how long it has to run by the server's clock, so that
// the client's clock and the server's never meet.
const READ_LEADER = `
  SELECT holder, token::text AS token, payload,
         ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8 AS left_ms
    FROM fencing_leases WHERE lock_name = $1 AND state = 'live'`;

// { leader: { holder, token, payload } or null, leftMs: null when none }.
export async function readLeader(client, name) {
  const { rows } = await client.query(READ_LEADER, [name]);
  const row = rows[0];
  if (!row) return { leader: null, leftMs: null };
  return { leader: { holder: row.holder, token: BigInt(row.token), payload: row.payload }, leftMs: row.left_ms };
}

// A change is a new (holder, token): a renewal or a proclamation is none.
function changed(last, leader) {
  if (last === null || leader === null) return last !== leader;
  return last.holder !== leader.holder || last.token !== leader.token;
}

// Whether a notification may be about lock name: unless it names another.
function concerns(payload, name) {
  try {
    const lockName = JSON.parse(payload)?.lock_name;
    return typeof lockName !== 'string' || lockName === name;
  } catch {
    return true;
  }
}

const UNSET = Symbol('nothing reported yet');

// The leader's lease, in its candidate's session of its own: what a Lease
// has (token, held(), check(), query(), 'lost' once, release()), and the
// session and the place in line it was granted to.  release() gives it back
// (the next place in line is told) and closes the session.
export class ElectionLease extends EventEmitter {
  constructor(election, session, token, place) {
    super();
    this.name = election.name;
    this.kind = 'exclusive';
    this.token = token;
    this.holder = election.holder;
    this.ttl = election.ttl;
    this.permits = null;
    this.session = session;
    this.place = place;
    // The session's loss is the lease's, emitted once; never after release().
    session.once('lost', (reason) => {
      if (!this.#released) this.emit('lost', reason);
    });
  }

  #released = false;

  describe() {
    return `${describeLock(this.kind, this.name)} (election) in fencing session ${this.session.id}`;
  }

  held() {
    return !this.#released && this.session.held();
  }

  get lostReason() {
    return this.#released ? 'released' : this.session.lostReason;
  }

  get deadline() {
    return this.session.deadline;
  }

  // Gives the lease back and closes the session: true if it was still ours.
  // Idempotent: later calls resolve to false.
  async release() {
    if (this.#released) return false;
    this.#released = true;
    try {
      return await this.session._release(this.name, this.token, this.place);
    } finally {
      await this.session.close().catch(() => {}); // else it ends at its ttl
    }
  }
}
Object.assign(ElectionLease.prototype, fenced);

export class Election {
  // Made by Client.election(name, holder, { ttl, onLost }); shared: the
  // Client's { listener, poll, heartbeats }, for its sessions.
  constructor(config, name, holder, { ttl = 10, onLost } = {}, shared = {}) {
    if (typeof name !== 'string' || name === '') throw new TypeError('a lock name (a non-empty string) is required');
    millis(ttl, 'ttl'); // checked now rather than at the first campaign
    keepConfig(this, config);
    this.name = name;
    this.holder = holder ?? defaultHolder();
    this.ttl = ttl;
    this.onLost = onLost;
    this.lease = null;
    this.#shared = shared;
  }

  #shared;
  #session = null; // the candidate's session, while it campaigns or leads

  // Resolves once this candidate leads, to its ElectionLease
  // (LockTimeoutError after timeout seconds, if given, the line left;
  // signal.reason once signal aborts, the line left too).  It waits as a
  // place in the lock's line, in a session of its own: no connection held
  // on the server between its polls, arrival order kept.  A session lost
  // while it waits (its renewals failed) is replaced by a new one, which
  // joins the line again, at the back.
  async campaign(payload, { timeout, signal } = {}) {
    if (this.lease?.held()) return this.lease;
    const waitMs = timeout == null ? Infinity : millis(timeout, 'timeout', { zeroOk: true, infinityOk: true });
    await this.#endTerm();
    const end = performance.now() + waitMs;
    for (let failures = 1; ; failures += 1) {
      signal?.throwIfAborted();
      const session = await Session.open(this.config, { ttl: this.ttl, holder: this.holder }, this.#shared);
      this.#session = session;
      let granted;
      try {
        granted = await session._waitInLine(this.name, Math.max(0, end - performance.now()), { payload, signal });
      } catch (err) {
        await this.#endTerm();
        if (!(err instanceof LeaseLostError)) throw err;
        granted = undefined; // the session was lost while it waited
      }
      if (granted && session.held()) {
        const lease = new ElectionLease(this, session, granted.token, granted.place);
        if (this.onLost) lease.once('lost', this.onLost);
        this.lease = lease;
        return lease;
      }
      await this.#endTerm(); // closing the session gives back a grant in it
      if (granted === null || performance.now() >= end) {
        throw new LockTimeoutError(busyMessage(describeLock('exclusive', this.name), 'exclusive', waitMs));
      }
      // A new session, at the back of the line.
      await sleep(Math.max(100, reconnectDelayMs(failures)), undefined, { signal }).catch(() => signal.throwIfAborted());
    }
  }

  // Closes what is left of the candidate's session (and with it its place
  // and any lease in it).
  async #endTerm() {
    const session = this.#session;
    this.#session = null;
    this.lease = null;
    await session?.close().catch(() => {}); // else it ends at its ttl
  }

  // Publishes a new payload as the live leader: an acquire in its session
  // of the lock it holds replaces it and keeps the token.  LeaseLostError
  // unless this candidate leads.
  async proclaim(payload) {
    const lease = this.lease;
    if (!lease?.held()) throw new LeaseLostError(`${this.holder} is not the leader of "${this.name}"`);
    const token = await lease.session._reacquire(this.name, payload);
    if (token === lease.token) return;
    // Ours had ended: that was a new grant, not a proclamation.
    if (token !== null) await lease.session._release(this.name, token);
    throw new LeaseLostError(`${this.holder} is no longer the leader of "${this.name}" (token ${lease.token})`);
  }

  isLeader() {
    return this.lease !== null && this.lease.held();
  }

  // The live leader as the database sees it now ({ holder, token, payload }), or null.
  leader() {
    return withConnection(this.config, 'pg_fencing election', async (client) => (await readLeader(client, this.name)).leader);
  }

  // Gives leadership up (the lease released, the next place in line told)
  // and closes the candidate's session: whether it was still ours.
  async resign() {
    const lease = this.lease;
    if (lease === null) {
      await this.#endTerm();
      return false;
    }
    this.lease = null;
    this.#session = null;
    return lease.release();
  }

  // An async iterator: the leader now, then each change of (holder, token),
  // as { holder, token, payload } or null.  `reread` seconds: the fallback
  // read period.  It ends when the loop breaks, or throws signal.reason
  // once signal aborts.  A broken connection is made again (at once, then
  // after 0.1 s, doubling up to 5 s), LISTENing before it reads; an error
  // no reconnect can mend (a wrong password, say) is thrown.
  async *observe({ reread = 5, signal } = {}) {
    const rereadMs = millis(reread, 'reread');
    let client = null;
    let broken = false; // the connection in use failed
    let poked = false; // something came in since the last read
    let wake = () => {};
    const poke = () => {
      poked = true;
      wake();
    };
    signal?.addEventListener('abort', poke);
    let failures = 0;
    let last = UNSET;
    try {
      for (;;) {
        signal?.throwIfAborted();
        let read;
        try {
          if (broken) {
            end(client);
            client = null;
          }
          if (client === null) {
            broken = false;
            client = await this.#listen((failed) => {
              if (failed !== client) return; // one given up already
              broken = true;
              poke();
            }, poke);
          }
          poked = false;
          read = await readLeader(client, this.name);
        } catch (err) {
          end(client);
          client = null;
          if (!mayMend(err)) throw err;
          failures += 1;
          await sleep(reconnectDelayMs(failures), undefined, { signal }).catch(() => {});
          continue;
        }
        failures = 0;
        if (last === UNSET || changed(last, read.leader)) {
          last = read.leader;
          yield read.leader;
        }
        if (poked || broken) continue;
        // Until something comes in, the lease is due to end, or the period passes.
        const dueMs = read.leftMs === null ? rereadMs : Math.min(rereadMs, Math.max(0, read.leftMs) + 10);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, dueMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = () => {};
      }
    } finally {
      signal?.removeEventListener('abort', poke);
      end(client);
    }
  }

  // A connection LISTENing on the channel: onBroken(client) when it fails,
  // onNotice() for a notification that may be about this lock.
  async #listen(onBroken, onNotice) {
    const client = await connect(this.config, 'pg_fencing observe', onBroken);
    client.on('end', () => onBroken(client));
    client.on('notification', (msg) => {
      if (msg.channel === CHANNEL && concerns(msg.payload, this.name)) onNotice();
    });
    try {
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      end(client);
      throw err;
    }
    return client;
  }
}
