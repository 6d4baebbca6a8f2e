// Following the leader of a pg_fencing lock from Node.js, with node-postgres (pg).
//
//   import { LeaderFollower } from './follower.js';
//
//   const follower = new LeaderFollower({ lockName: 'nightly-report' });
//   follower.on('leader', (leader) => {            // { holder, token, payload }, or null
//     console.log('leader:', leader?.holder ?? 'none');
//   });
//   await follower.start();                        // rejects if it cannot connect
//   ...
//   await follower.stop();
//
//   node examples/node/follower.js LOCK            # prints each new leader
//
// How it works, and what it promises:
//
// - It LISTENs on channel fencing_events on a pg.Client of its own and takes
//   the notifications as hints only: what it reports is always what it read
//   from the view fencing_leases, never a payload.  A notification that was
//   missed (the connection was down), forged (any role may NOTIFY on any
//   channel) or about a transaction that rolled back (none is sent then
//   anyway) changes nothing.
// - It reads when it starts and after every reconnect (LISTEN first, then
//   read, so that nothing committed in between slips through), on every
//   notification that may concern its lock, when the live lease is due to
//   expire by the server's clock (an expiry nobody announces is seen at
//   once), and every rereadPeriodMs (default 5000; 0: never), the fallback
//   for a lock whose owner did not call fencing_set_announce(lock, true):
//   announcements are opt-in per lock.
// - 'leader' is emitted first with the leader at start, then whenever
//   (holder, token) differs from the last one emitted: a renewal, or a
//   re-acquire by the live holder, is no change.
// - The connection breaks: 'reconnecting' is emitted with the error, and the
//   follower reconnects at once, then after 100 ms, doubling up to 5 s.
//
// Tokens are BigInts, as in fenced-lease.js.

import { EventEmitter } from 'node:events';

import pg from 'pg';

const CHANNEL = 'fencing_events';

// The live lease, and how long it has to run by the server's clock (so that
// the client's clock and the server's never meet).
const READ_LEADER = `
  SELECT holder, token::text AS token, payload,
         ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8 AS remaining_ms
    FROM fencing_leases WHERE lock_name = $1 AND state = 'live'`;

// At once after a connection that worked, then 100 ms, doubling, up to 5 s.
function backoffMs(failures) {
  return failures <= 1 ? 0 : Math.min(100 * 2 ** (failures - 2), 5000);
}

function same(a, b) {
  return a === null || b === null ? a === b : a.holder === b.holder && a.token === b.token;
}

export class LeaderFollower extends EventEmitter {
  // connection      pg.Client config or connection string (default: PG* variables)
  // lockName        the lock to follow
  // rereadPeriodMs  fallback read period; 0: only notifications, reconnects, expiries
  constructor({ connection, lockName, rereadPeriodMs = 5000 } = {}) {
    super();
    if (!lockName) throw new TypeError('lockName is required');
    if (!(rereadPeriodMs >= 0)) throw new RangeError('rereadPeriodMs must not be negative');
    this.connection = connection;
    this.lockName = lockName;
    this.rereadPeriodMs = rereadPeriodMs;
    this.leader = null; // the one last emitted; null: no live lease
  }

  #client = null; // the connection in use: LISTENing, read at least once
  #started = false;
  #stopped = false;
  #emitted = false;
  #reading = null; // the read in progress, on #readingClient
  #readingClient = null;
  #readAgain = false; // something came in during it
  #timer = null; // the next read that is due
  #reconnectTimer = null;
  #failures = 0;

  get connected() {
    return this.#client !== null;
  }

  // Connects, LISTENs and reads (rejecting if it cannot), then follows.
  // 'leader' with the leader at start is emitted on the next tick, so that a
  // listener added after `await start()` still gets it.
  async start() {
    if (this.#started) throw new Error('this LeaderFollower was already started; make a new one');
    this.#started = true;
    const client = await this.#open();
    this.#client = client;
    let leader;
    try {
      leader = await this.#read(client);
    } catch (err) {
      await this.stop();
      throw err;
    }
    this.leader = leader;
    process.nextTick(() => this.#report(leader));
  }

  // Stops following; ends the client.
  async stop() {
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#reconnectTimer);
    const client = this.#client;
    this.#client = null;
    if (client !== null) await client.end().catch(() => {});
  }

  // -- reading -----------------------------------------------------------------

  async #read(client) {
    const { rows } = await client.query(READ_LEADER, [this.lockName]);
    const row = rows[0];
    const leader = row ? { holder: row.holder, token: BigInt(row.token), payload: row.payload } : null;
    if (client !== this.#client) return leader; // a connection given up meanwhile: no timers
    clearTimeout(this.#timer);
    let dueMs = this.rereadPeriodMs > 0 ? this.rereadPeriodMs : null;
    // Early, the read would find the lease still live and come again.
    if (row) dueMs = Math.min(dueMs ?? Infinity, Math.max(row.remaining_ms, 0) + 5);
    if (dueMs !== null) this.#timer = setTimeout(() => this.#readSoon(), dueMs);
    return leader;
  }

  // One read at a time on a connection; whatever comes in during one makes
  // one more.  A failed read is a lost connection.
  #readSoon() {
    const client = this.#client;
    if (this.#stopped || client === null) return;
    if (this.#reading !== null && this.#readingClient === client) {
      this.#readAgain = true;
      return;
    }
    const reading = this.#read(client)
      .then((leader) => {
        if (client !== this.#client) return; // older than what the new connection reads
        this.#failures = 0;
        this.#report(leader);
      })
      .catch((err) => this.#lost(client, err))
      .finally(() => {
        if (this.#reading !== reading) return;
        this.#reading = this.#readingClient = null;
        if (this.#readAgain) {
          this.#readAgain = false;
          this.#readSoon();
        }
      });
    this.#reading = reading;
    this.#readingClient = client;
  }

  #report(leader) {
    if (this.#stopped || (this.#emitted && same(this.leader, leader))) return;
    this.#emitted = true;
    this.leader = leader;
    this.emit('leader', leader);
  }

  // Whether a notification may be about our lock: unless it names another.
  #concerns(payload) {
    let event;
    try {
      event = JSON.parse(payload);
    } catch {
      return true;
    }
    const name = event?.lock_name;
    return typeof name !== 'string' || name === this.lockName;
  }

  // -- the connection --------------------------------------------------------------

  // A new client, LISTENing; its events count only once it is #client.
  async #open() {
    const config =
      typeof this.connection === 'string' ? { connectionString: this.connection } : { ...this.connection };
    config.application_name ??= `leader_follower ${this.lockName}`.slice(0, 63);
    const client = new pg.Client(config);
    // An unexpected end of the connection is an 'error' event: unhandled, it
    // would crash the process.
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client, new Error('the connection ended')));
    client.on('notification', (msg) => {
      if (client === this.#client && msg.channel === CHANNEL && this.#concerns(msg.payload)) {
        this.#readSoon();
      }
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    return client;
  }

  // The connection in use failed: drop it, reconnect after the back-off.
  #lost(client, err) {
    if (client !== this.#client || this.#stopped) return;
    this.#client = null;
    clearTimeout(this.#timer);
    client.end().catch(() => {});
    this.#retry(err);
  }

  #retry(err) {
    this.#failures += 1;
    this.emit('reconnecting', err);
    this.#reconnectTimer = setTimeout(() => this.#reconnect(), backoffMs(this.#failures));
  }

  // LISTEN again, then read: what changed while it was away is reported now.
  async #reconnect() {
    let client;
    try {
      client = await this.#open();
    } catch (err) {
      if (!this.#stopped) this.#retry(err);
      return;
    }
    if (this.#stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.#client = client;
    this.#readSoon();
  }
}

// node follower.js LOCK: prints each new leader until interrupted.
if (import.meta.url === `file://${process.argv[1]}`) {
  const lockName = process.argv[2];
  if (!lockName) {
    console.error('usage: node follower.js LOCK');
    process.exit(2);
  }
  const follower = new LeaderFollower({ lockName });
  follower.on('leader', (leader) =>
    console.log(
      leader === null
        ? `${lockName}: no leader`
        : `${lockName}: ${leader.holder} leads with token ${leader.token}` +
            (leader.payload === null ? '' : ` ${JSON.stringify(leader.payload)}`),
    ),
  );
  follower.on('reconnecting', (err) => console.error(`reconnecting: ${err.message}`));
  await follower.start();
  process.once('SIGINT', () => follower.stop());
}
