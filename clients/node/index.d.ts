// Type declarations of pg-fencing, written by hand; test/typed-usage.ts
// is compiled against them (tsc --noEmit) by run-tests.sh.

import { EventEmitter } from 'node:events';

/** A pg.Client config (passed to `new pg.Client(config)`), or a connection string.
 *  Undefined: everything from the PG* variables. */
export type ConnectionConfig = string | { [option: string]: unknown } | undefined;

/** Anything with node-postgres's `query(text, values)`: a pg.Client, a pg.Pool, a pool's client. */
export interface Queryable<R = any> {
  query(text: string, values?: unknown[]): Promise<R>;
}

/** A JSON value: what a payload is published as (jsonb) and read back as. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** The live leader of a lock: the holder of its exclusive lease. */
export interface Leader {
  holder: string;
  token: bigint;
  payload: Json;
}

export interface LockOptions {
  /** Seconds: the server ends the lease this long after the last renewal. Default 10. */
  ttl?: number;
  /** Seconds to wait for a busy lock (Infinity: until granted). Default: one attempt. */
  wait?: number;
  /** The application's label of the lease. Default host:pid:random. */
  holder?: string;
  /** Seconds between renewals (sent by the client's one heartbeat, with its other leases' and
   *  sessions'). Default ttl/3. */
  heartbeat?: number;
  /** Called once, with the reason, when the lease is lost (the 'lost' event). */
  onLost?: (reason: string) => void;
  /** Cancels the wait, on the server too; the promise rejects with signal.reason. */
  signal?: AbortSignal;
}

export interface ExclusiveLockOptions extends LockOptions {
  /** Published with the lease in fencing_leases (JSON). */
  payload?: Json;
}

export type LeaseKind = 'exclusive' | 'shared' | 'permit';

/** What every lease has, of its own or in a session. */
export interface FencedLease {
  readonly name: string;
  readonly kind: LeaseKind;
  /** The fencing token: 64 bits, so a bigint. */
  readonly token: bigint;
  /** Whether the lease can still be trusted, judged on the monotonic clock. */
  held(): boolean;
  /** Why it is not held ('released', the loss's reason), or null while held. */
  readonly lostReason: string | null;
  /** The token, or throws LeaseLostError once the lease is not held. */
  check(): bigint;
  /** A fenced statement: LeaseLostError without sending when known lost; the guard's
   *  refusals as StaleTokenError, MissingTokenError, NeverGrantedTokenError, LeaseEndedError. */
  query<R = any>(db: Queryable<R>, sql: string, values?: unknown[]): Promise<R>;
  /** Gives the lease back: whether it was still live. Idempotent. */
  release(): Promise<boolean>;
  describe(): string;
}

export declare class Lease extends EventEmitter implements FencedLease {
  private constructor();
  readonly name: string;
  readonly kind: LeaseKind;
  readonly token: bigint;
  readonly holder: string;
  /** Seconds. */
  readonly ttl: number;
  /** For a permit: the semaphore's number of permits; else null. */
  readonly permits: number | null;
  held(): boolean;
  readonly lostReason: string | null;
  /** performance.now() after which the lease no longer counts as held. */
  readonly deadline: number;
  check(): bigint;
  query<R = any>(db: Queryable<R>, sql: string, values?: unknown[]): Promise<R>;
  release(): Promise<boolean>;
  describe(): string;

  on(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
  off(event: 'lost', listener: (reason: string) => void): this;
  emit(event: 'lost', reason: string): boolean;
}

export interface SessionOptions {
  /** Seconds: the server ends the session, and every lease in it, this long after the last renewal. Default 10. */
  ttl?: number;
  holder?: string;
  /** Seconds between renewals. Default ttl/3. */
  heartbeat?: number;
  onLost?: (reason: string) => void;
}

export interface SessionLockOptions {
  /** Seconds to wait for a busy lock (Infinity: until granted). Default: one attempt.
   *  The wait, of every kind, is a place in the lock's line (pg_fencing 1.10): short
   *  statements, no server connection held between them. The server keeps one place per
   *  session and lock: a second wait for a shared lease or a permit of a lock where the session
   *  has a place already is CALL fencing_await, which holds a connection for the whole wait. */
  wait?: number;
  kind?: LeaseKind;
  /** For kind 'permit'. */
  permits?: number;
  /** For kind 'exclusive'. */
  payload?: Json;
  signal?: AbortSignal;
}

export declare class SessionLease implements FencedLease {
  private constructor();
  readonly session: Session;
  readonly name: string;
  readonly kind: LeaseKind;
  readonly token: bigint;
  /** Its place in the lock's line (pg_fencing 1.10) if it waited there, else null. */
  readonly place: bigint | null;
  held(): boolean;
  readonly lostReason: string | null;
  check(): bigint;
  query<R = any>(db: Queryable<R>, sql: string, values?: unknown[]): Promise<R>;
  /** Gives the lease back (a lease taken through the line leaves its place too). */
  release(): Promise<boolean>;
  describe(): string;
}

export declare class Session extends EventEmitter {
  private constructor();
  /** fencing_sessions.session_id. */
  readonly id: bigint;
  readonly holder: string;
  readonly ttl: number;
  held(): boolean;
  readonly lostReason: string | null;
  readonly deadline: number;
  /** Throws LeaseLostError unless the session is held. */
  check(): void;
  lock(name: string, options?: SessionLockOptions): Promise<SessionLease>;
  /** Every lock or none, in the order given. With a wait (seconds), in line one lock at a
   *  time (byte order of the names); at the deadline, on signal's abort or an error, what it
   *  took meanwhile is given back. */
  lockAll(names: string[], options?: { wait?: number; signal?: AbortSignal }): Promise<SessionLease[]>;
  /** Closes the session, releasing every lease in it (and ending its places in line): how
   *  many. Idempotent. A wait pending in the session ends with LeaseLostError; calls made
   *  after the close reject with it. */
  close(): Promise<number>;

  on(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
  off(event: 'lost', listener: (reason: string) => void): this;
  emit(event: 'lost', reason: string): boolean;
}

export interface ElectionOptions {
  /** Seconds: the ttl of the candidate's session, renewed every ttl/3. Default 10. */
  ttl?: number;
  /** Called once, with the reason, when the leader's lease is lost. */
  onLost?: (reason: string) => void;
}

/** The leader's lease, in its candidate's session of its own: what a Lease has, and the
 *  session and place in line it was granted to. */
export declare class ElectionLease extends EventEmitter implements FencedLease {
  private constructor();
  readonly name: string;
  readonly kind: 'exclusive';
  readonly token: bigint;
  readonly holder: string;
  /** Seconds: the session's. */
  readonly ttl: number;
  readonly permits: null;
  /** The candidate's session (its heartbeat keeps the lease). */
  readonly session: Session;
  /** The place in the lock's line the lease was granted to. */
  readonly place: bigint;
  held(): boolean;
  readonly lostReason: string | null;
  /** performance.now() after which the lease no longer counts as held. */
  readonly deadline: number;
  check(): bigint;
  query<R = any>(db: Queryable<R>, sql: string, values?: unknown[]): Promise<R>;
  /** Gives the lease back (the next place in line is told) and closes the session. */
  release(): Promise<boolean>;
  describe(): string;

  on(event: 'lost', listener: (reason: string) => void): this;
  once(event: 'lost', listener: (reason: string) => void): this;
  off(event: 'lost', listener: (reason: string) => void): this;
  emit(event: 'lost', reason: string): boolean;
}

export declare class Election {
  private constructor();
  readonly name: string;
  readonly holder: string;
  readonly ttl: number;
  /** The lease while this candidate leads, else null. */
  readonly lease: ElectionLease | null;
  /** Resolves once this candidate leads, having waited as a place in the lock's line in a
   *  session of its own. timeout: seconds (LockTimeoutError after it); signal: rejects with
   *  signal.reason. Either way the place is left, and a grant made meanwhile given back. */
  campaign(payload?: Json, options?: { timeout?: number; signal?: AbortSignal }): Promise<ElectionLease>;
  /** A new payload, same token; LeaseLostError unless this candidate leads. */
  proclaim(payload: Json): Promise<void>;
  isLeader(): boolean;
  leader(): Promise<Leader | null>;
  /** The leader now, then each change of (holder, token), read from fencing_leases.
   *  Reconnects after a broken connection; rejects with an error no reconnect can mend
   *  (a wrong password, a missing extension), or with signal.reason once signal aborts. */
  observe(options?: { reread?: number; signal?: AbortSignal }): AsyncGenerator<Leader | null, void, undefined>;
  /** Gives the lease back (the next place in line is told) and closes the candidate's
   *  session: whether it was still ours. */
  resign(): Promise<boolean>;
}

export interface ClientOptions {
  /** One connection LISTENs on fencing_line while a wait of this client is in line, so that
   *  a place polls as soon as its number is announced. Only for a config that can LISTEN (the
   *  server, or a session pool), not a transaction pooler. Default false. */
  listen?: boolean;
  /** Seconds between two polls of a place in line. Default 0.5 (2 with listen). */
  poll?: number;
}

/** The entry point. Every lease, session and election it makes is renewed by its one heartbeat
 *  connection (application_name 'pg_fencing heartbeat'), one statement for all those due, opened
 *  for the first renewal and closed when nothing is left to renew. A session also has a work
 *  connection (its acquires, waits in line, releases); a lease of its own, a connection while it
 *  is acquired and a short one for its release; with `listen`, one connection LISTENs for all the
 *  client's waits in line. */
export declare class Client {
  constructor(config?: ConnectionConfig, options?: ClientOptions);
  /** Not enumerable: util.inspect, loggers and JSON.stringify leave it (and its password) out. */
  readonly config: ConnectionConfig;
  readonly listen: boolean;
  /** Seconds, as given; null: the default. */
  readonly poll: number | null;
  lock(name: string, options?: ExclusiveLockOptions): Promise<Lease>;
  semaphore(name: string, permits: number, options?: LockOptions): Promise<Lease>;
  shared(name: string, options?: LockOptions): Promise<Lease>;
  withLock<T>(name: string, options: ExclusiveLockOptions, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  session(options?: SessionOptions): Promise<Session>;
  election(name: string, holder?: string, options?: ElectionOptions): Election;
  leader(name: string): Promise<Leader | null>;
}

/** The shape of node-postgres's DatabaseError that the guard errors keep. */
export interface ServerError extends Error {
  code?: string;
  detail?: string;
  table?: string;
  column?: string;
}

export declare class FencingError extends Error {}

/** A write the guard refused; it changed nothing. */
export declare class GuardError extends FencingError {
  constructor(cause: ServerError);
  /** The server's SQLSTATE. */
  readonly code: string;
  readonly sqlstate: string;
  readonly detail: string | undefined;
  readonly table: string | undefined;
  readonly column: string | undefined;
  readonly cause: ServerError;
}
/** 55Z01 */
export declare class StaleTokenError extends GuardError {}
/** 55Z02 */
export declare class MissingTokenError extends GuardError {}
/** 55Z03 */
export declare class NeverGrantedTokenError extends GuardError {}
/** 55Z04 */
export declare class LeaseEndedError extends GuardError {}
export declare class LeaseLostError extends FencingError {}
export declare class LockTimeoutError extends FencingError {}

/** db.query() with the guard's refusals mapped to the GuardError subclasses. */
export declare function fencedQuery<R = any>(db: Queryable<R>, sql: string, values?: unknown[]): Promise<R>;
/** The GuardError for a guard's refusal; any other error unchanged. */
export declare function mapGuardError(err: unknown): unknown;
