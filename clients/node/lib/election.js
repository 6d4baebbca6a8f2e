// Leader election on one lock: campaign, proclaim, leader, observe, resign.
//
// The leader is whoever holds the lock's live exclusive lease.  observe()
// reports what it reads from the view fencing_leases, never what a
// notification says: notifications (LISTEN fencing_events) only make it
// read sooner.  A forged one (any role may NOTIFY on any channel), a lost
// one, or one for a lock whose owner did not turn announcements on changes
// nothing: it also reads when the live lease is due to end by the server's
// clock, every `reread` seconds, and after every reconnect (LISTEN first,
// then the read, so that no change slips between).

import { setTimeout as sleep } from 'node:timers/promises';

import { connect, defaultHolder, end, interval, keepConfig, millis, withConnection } from './connection.js';
import { LeaseLostError } from './errors.js';
import { Lease, payloadText } from './lease.js';

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

// Whether observe() should connect again after err: a broken or refused
// connection (no SQLSTATE: a socket error or an unexpected end; class 08;
// 57P0x, the server shutting down or starting; 53, too many connections)
// may mend by itself.  Anything else -- a wrong password (28P01), a database
// or extension that is not there, a privilege missing -- would fail the same
// way forever, and is thrown instead of being retried in silence.
function mayMend(err) {
  const code = typeof err?.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : null;
  return code === null || /^(08|53|57P0)/.test(code);
}

// After the first failure at once, then 100 ms, doubling up to 5 s.
function reconnectDelayMs(failures) {
  return failures <= 1 ? 0 : Math.min(5000, 100 * 2 ** (failures - 2));
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

export class Election {
  // Made by Client.election(name, holder, { ttl, onLost }).
  constructor(config, name, holder, { ttl = 10, onLost } = {}) {
    if (typeof name !== 'string' || name === '') throw new TypeError('a lock name (a non-empty string) is required');
    millis(ttl, 'ttl'); // checked now rather than at the first campaign
    keepConfig(this, config);
    this.name = name;
    this.holder = holder ?? defaultHolder();
    this.ttl = ttl;
    this.onLost = onLost;
    this.lease = null;
  }

  // Resolves once this candidate leads, to its Lease (LockTimeoutError after
  // timeout seconds, if given; signal.reason once signal aborts, the wait
  // ended on the server too).  The wait is CALL fencing_await in slices: a
  // follower waiting for hours holds no snapshot.
  async campaign(payload, { timeout, signal } = {}) {
    if (this.lease?.held()) return this.lease;
    this.lease = await Lease.acquire(this.config, this.name, 'exclusive', {
      holder: this.holder,
      ttl: this.ttl,
      wait: timeout ?? Infinity,
      payload,
      signal,
      onLost: this.onLost,
    });
    return this.lease;
  }

  // Publishes a new payload as the live leader: the acquire by the live
  // holder replaces it and keeps the token.  LeaseLostError unless this
  // candidate leads.
  async proclaim(payload) {
    const lease = this.lease;
    if (!lease?.held()) throw new LeaseLostError(`${this.holder} is not the leader of "${this.name}"`);
    await withConnection(this.config, `pg_fencing election ${this.holder}`, async (client) => {
      await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      const { rows } = await client.query('SELECT fencing_acquire($1, $2, $3::interval, payload => $4::jsonb)::text AS token', [
        this.name, this.holder, interval(millis(this.ttl, 'ttl')), payloadText(payload),
      ]);
      await client.query('COMMIT');
      const token = rows[0].token === null ? null : BigInt(rows[0].token);
      if (token === lease.token) return;
      // Ours had ended: that was a new grant, not a proclamation.
      if (token !== null) await client.query('SELECT fencing_release($1, $2::fencing_token)', [this.name, token]);
      throw new LeaseLostError(`${this.holder} is no longer the leader of "${this.name}" (token ${lease.token})`);
    });
  }

  isLeader() {
    return this.lease !== null && this.lease.held();
  }

  // The live leader as the database sees it now ({ holder, token, payload }), or null.
  leader() {
    return withConnection(this.config, 'pg_fencing election', async (client) => (await readLeader(client, this.name)).leader);
  }

  // Gives leadership up (fencing_release): whether it was still ours.
  async resign() {
    const lease = this.lease;
    this.lease = null;
    return lease === null ? false : lease.release();
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
