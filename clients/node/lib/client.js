// Client: the entry point.  Every lease, session and election it makes uses
// connections of its own, from the same config (and so as the same role,
// which renewals and releases require).

import { keepConfig, withConnection } from './connection.js';
import { Election, readLeader } from './election.js';
import { Lease } from './lease.js';
import { Session } from './session.js';

export class Client {
  // config: a pg.Client config or a connection string; undefined takes
  // everything from the PG* variables.
  constructor(config) {
    keepConfig(this, config);
  }

  // An exclusive lease, held once the promise resolves.
  lock(name, options = {}) {
    return Lease.acquire(this.config, name, 'exclusive', options);
  }

  // One of `permits` permits of the semaphore `name`, each with its own token.
  semaphore(name, permits, options = {}) {
    return Lease.acquire(this.config, name, 'permit', { ...options, permits });
  }

  // A shared lease of `name`, beside other shared holders.
  shared(name, options = {}) {
    return Lease.acquire(this.config, name, 'shared', options);
  }

  // Takes the lock, runs fn(lease), and releases it whatever fn did: fn's result.
  async withLock(name, options, fn) {
    const lease = await this.lock(name, options);
    let result;
    try {
      result = await fn(lease);
    } catch (err) {
      await lease.release().catch(() => {}); // fn's error goes on; the lease ends after its ttl
      throw err;
    }
    await lease.release();
    return result;
  }

  // Opens a session (pg_fencing 1.8).
  session(options = {}) {
    return Session.open(this.config, options);
  }

  // A candidate `holder` (default host:pid:random) in the election on lock `name`.
  election(name, holder, options = {}) {
    return new Election(this.config, name, holder, options);
  }

  // The live holder of name's exclusive lease ({ holder, token, payload }), or null.
  leader(name) {
    return withConnection(this.config, 'pg_fencing leader', async (client) => (await readLeader(client, name)).leader);
  }
}
