// The errors of pg-fencing.  Every one is a FencingError.  The guard's
// refusals keep what the server said: its SQLSTATE (.code, .sqlstate), its
// message, and pg's DatabaseError as .cause.

export const STALE_TOKEN = '55Z01';
export const MISSING_TOKEN = '55Z02';
export const NEVER_GRANTED_TOKEN = '55Z03';
export const LEASE_ENDED = '55Z04';
export const SESSION_ENDED = '55Z05';

export class FencingError extends Error {
  get name() {
    return this.constructor.name;
  }
}

// A write the database refused on pg_fencing's account; it changed nothing.
export class GuardError extends FencingError {
  constructor(cause) {
    super(cause.message, { cause });
    this.code = cause.code;
    this.detail = cause.detail;
    this.table = cause.table;
    this.column = cause.column;
  }

  get sqlstate() {
    return this.code;
  }
}

// 55Z01: the token is lower than one the row (or lock) has seen: another
// holder has taken over; stop acting on this lease.
export class StaleTokenError extends GuardError {}

// 55Z02: the write did not set the table's token column (or set it to NULL).
export class MissingTokenError extends GuardError {}

// 55Z03: a token this database never granted: a bug, not a lost lease.
export class NeverGrantedTokenError extends GuardError {}

// 55Z04: the COMMIT of a transaction that wrote under a lease which ended
// before it: nothing it did was kept.
export class LeaseEndedError extends GuardError {}

// The lease (or session) is known lost: expired, refused, released, or no
// longer renewable in time.  Raised before anything is sent.
export class LeaseLostError extends FencingError {}

// The lock stayed busy for the whole wait (or, without a wait, was busy).
export class LockTimeoutError extends FencingError {}

const GUARD_ERRORS = {
  [STALE_TOKEN]: StaleTokenError,
  [MISSING_TOKEN]: MissingTokenError,
  [NEVER_GRANTED_TOKEN]: NeverGrantedTokenError,
  [LEASE_ENDED]: LeaseEndedError,
};

// The package's error for a guard's refusal; any other error unchanged.
export function mapGuardError(err) {
  const mapped = GUARD_ERRORS[err?.code];
  return mapped ? new mapped(err) : err;
}
