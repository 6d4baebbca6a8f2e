// Compiled, never run: tsc --noEmit checks index.d.ts against the way the
// README and the tests use the package.  The @ts-expect-error lines must
// fail to compile: a declaration that let them through turns the suite red.

import {
  Client,
  Election,
  ElectionLease,
  FencingError,
  GuardError,
  Lease,
  LeaseEndedError,
  LeaseLostError,
  LockTimeoutError,
  MissingTokenError,
  NeverGrantedTokenError,
  Session,
  SessionLease,
  StaleTokenError,
  fencedQuery,
  type Leader,
  type Queryable,
} from 'pg-fencing';

declare const db: Queryable<{ rowCount: number | null }>;

export async function usage(): Promise<void> {
  const client = new Client({ host: 'localhost', application_name: 'typed' });
  new Client('postgresql://localhost/app');
  new Client();

  const lease: Lease = await client.lock('nightly-report', {
    ttl: 10,
    wait: 30,
    payload: { addr: '10.0.0.1:7000' },
    onLost: (reason: string) => console.error(reason),
    signal: AbortSignal.timeout(1000),
  });
  const token: bigint = lease.token;
  const held: boolean = lease.held();
  const reason: string | null = lease.lostReason;
  lease.on('lost', (why: string) => console.error(why)).once('lost', () => {});
  const result = await lease.query(db, 'UPDATE reports SET token = $1 WHERE id = $2', [token, 7]);
  const rows: number | null = result.rowCount;
  const checked: bigint = lease.check();
  const released: boolean = await lease.release();
  void [held, reason, rows, checked, released];

  const permit = await client.semaphore('pool', 3, { ttl: 5 });
  const reader = await client.shared('table', { ttl: 5, wait: Infinity });
  const kind: 'exclusive' | 'shared' | 'permit' = permit.kind;
  void [reader, kind];

  const answer: number = await client.withLock('x', { ttl: 2 }, async (l: Lease) => Number(l.token));
  void answer;

  const session: Session = await client.session({ ttl: 10, onLost: () => {} });
  const id: bigint = session.id;
  const one: SessionLease = await session.lock('partition-3', { wait: 1, kind: 'permit', permits: 2 });
  const all: SessionLease[] = await session.lockAll(['a', 'b'], { wait: 0.5, signal: AbortSignal.timeout(1000) });
  await one.query(db, 'SELECT $1', [one.token]);
  const count: number = await session.close();
  session.on('lost', (why: string) => void why);
  void [id, all, count];

  const election: Election = client.election('scheduler', 'node-2', { ttl: 10 });
  const leading: Lease = await election.campaign({ addr: '10.0.0.2' }, { timeout: 5 }); // what a Lease has
  const inLine: ElectionLease = await election.campaign(null, { signal: AbortSignal.timeout(1000) });
  const place: bigint = inLine.place;
  const itsSession: Session = inLine.session;
  inLine.on('lost', (why: string) => void why);
  const current: ElectionLease | null = election.lease;
  const pooled = new Client('postgresql://pgbouncer:6432/app', { poll: 0.5 });
  const listening = new Client(undefined, { listen: true });
  const listens: boolean = listening.listen;
  const inSessionPlace: bigint | null = one.place;
  void [place, itsSession, current, pooled, listens, inSessionPlace];
  await election.proclaim({ addr: '10.0.0.3' });
  const now: Leader | null = await election.leader();
  if (now !== null) {
    const holder: string = now.holder;
    const leaderToken: bigint = now.token;
    void [holder, leaderToken];
  }
  for await (const leader of election.observe({ reread: 5, signal: AbortSignal.timeout(100) })) {
    const maybe: Leader | null = leader;
    void maybe;
  }
  const resigned: boolean = await election.resign();
  void [leading, resigned, await client.leader('scheduler')];

  try {
    await fencedQuery(db, 'UPDATE t SET token = $1', [1n]);
  } catch (err) {
    if (err instanceof StaleTokenError || err instanceof MissingTokenError || err instanceof NeverGrantedTokenError || err instanceof LeaseEndedError) {
      const guard: GuardError = err;
      const sqlstate: string = guard.sqlstate;
      const code: string = guard.code;
      const causeCode: string | undefined = guard.cause.code;
      const base: FencingError = guard;
      void [sqlstate, code, causeCode, base];
    }
    if (err instanceof LeaseLostError || err instanceof LockTimeoutError) {
      const base: FencingError = err;
      void base;
    }
  }

  // @ts-expect-error tokens are bigints, not numbers
  const asNumber: number = lease.token;
  // @ts-expect-error held() is a method
  const notCalled: boolean = lease.held;
  // @ts-expect-error ttl is a number of seconds
  await client.lock('x', { ttl: '10s' });
  // @ts-expect-error a semaphore needs its number of permits
  await client.semaphore('pool');
  // @ts-expect-error 'lost' listeners get the reason, a string
  lease.on('lost', (why: number) => void why);
  // @ts-expect-error a Lease is made by Client.lock, not constructed
  new Lease();
  // @ts-expect-error poll is a number of seconds
  new Client(undefined, { poll: '500ms' });
  // @ts-expect-error an ElectionLease is made by Election.campaign
  new ElectionLease();
  void [asNumber, notCalled];
}
