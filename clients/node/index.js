// pg-fencing: fencing-token leases, sessions and leader election on
// PostgreSQL (the pg_fencing extension), with node-postgres.
//
//   import { Client } from 'pg-fencing';
//   const client = new Client();                      // PG* variables, or a pg config
//   await client.withLock('nightly-report', { ttl: 10, wait: 30 }, (lease) =>
//     lease.query(db, 'UPDATE reports SET token = $1, body = $2 WHERE id = 7',
//                 [lease.token, body]));              // StaleTokenError once another took over

export { Client } from './lib/client.js';
export { Election, ElectionLease } from './lib/election.js';
export {
  FencingError,
  GuardError,
  LeaseEndedError,
  LeaseLostError,
  LockTimeoutError,
  MissingTokenError,
  NeverGrantedTokenError,
  StaleTokenError,
  mapGuardError,
} from './lib/errors.js';
export { Lease, fencedQuery } from './lib/lease.js';
export { Session, SessionLease } from './lib/session.js';
