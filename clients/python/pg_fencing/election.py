"""Leader election on one lock: campaign, proclaim, leader, observe, resign.

    election = client.election("scheduler", holder="node-2", ttl=10)
    lease = election.campaign(payload='{"addr": "10.0.0.2:7000"}')  # blocks until leader
    ... lease.execute(db, sql, (lease.token, ...)) ...
    election.resign()

    for leader in client.election("scheduler").observe():   # followers
        print(leader)                                       # Leader(...) or None

The leader is whoever holds the lock's live exclusive lease; observe()
reports what it reads from the view fencing_leases, never what a
notification says: notifications (LISTEN fencing_events) only make it read
sooner.  A forged one (any role may NOTIFY on any channel), a lost one, or
one for a lock whose owner did not turn announcements on changes nothing:
it also reads when the live lease is due to end by the server's clock, and
every reread seconds.
"""

from __future__ import annotations

import select
import time

import psycopg
from typing import Callable, Iterator, NamedTuple, Optional

from ._wire import Connection
from .errors import LeaseLost, LockTimeout
from .lease import Lease, default_holder

CHANNEL = "fencing_events"
_UNSET = object()  # observe(): nothing reported yet

# The live lease and how long it has to run by the server's clock, so that
# the client's clock and the server's never meet.
_READ_LEADER = (
    "SELECT holder, token::bigint, payload::text,"
    " ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
    " FROM fencing_leases WHERE lock_name = %s AND state = 'live'"
)


class Leader(NamedTuple):
    holder: str
    token: int
    payload: Optional[str]  # JSON text, as the server prints it


def read_leader(conn: Connection, lock_name: str) -> tuple[Optional[Leader], Optional[float]]:
    """The live leader and the seconds its lease has left (None, None: none)."""
    row = conn.row(_READ_LEADER, (lock_name,))
    if row is None:
        return None, None
    return Leader(row[0], int(row[1]), row[2]), row[3] / 1000.0


class Election:
    def __init__(self, conninfo: str, lock_name: str, *, holder: Optional[str] = None,
                 ttl: float = 10.0, on_lost: Optional[Callable[[str], None]] = None):
        self.conninfo = conninfo
        self.lock_name = lock_name
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.on_lost = on_lost
        self.lease: Optional[Lease] = None

    def campaign(self, payload: Optional[str] = None, timeout: Optional[float] = None) -> Lease:
        """Blocks until this candidate leads (LockTimeout after timeout
        seconds, if given), and returns its lease.  Each wait is CALL
        fencing_await, so a follower waiting for hours holds no snapshot."""
        if self.lease is not None and self.lease.held():
            return self.lease
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 30.0 if end is None else max(0.0, min(30.0, end - time.monotonic()))
            lease = Lease(self.conninfo, self.lock_name, holder=self.holder, ttl=self.ttl,
                          wait=wait, on_lost=self.on_lost, payload=payload)
            try:
                self.lease = lease.acquire()
                return self.lease
            except LockTimeout:
                if end is not None and time.monotonic() >= end:
                    raise

    def proclaim(self, payload: str) -> None:
        """Publishes a new payload as the live leader (the acquire by the
        live holder replaces it, with the same token); LeaseLost unless this
        candidate leads."""
        lease = self.lease
        if lease is None or not lease.held():
            raise LeaseLost(f'not the leader of "{self.lock_name}"')
        conn = Connection(self.conninfo, f"pg_fencing election {self.holder}")
        try:
            token = conn.row("SELECT fencing_acquire(%s, %s, %s::interval, payload => %s::jsonb)",
                             (self.lock_name, self.holder, f"{round(self.ttl * 1000)} milliseconds",
                              payload))[0]
            if token is not None and int(token) != lease.token:
                # Ours had ended: that was a new grant, not a proclamation.
                conn.row("SELECT fencing_release(%s, %s::fencing_token)", (self.lock_name, token))
            if token is None or int(token) != lease.token:
                raise LeaseLost(f'no longer the leader of "{self.lock_name}"')
        finally:
            conn.close()

    def is_leader(self) -> bool:
        return self.lease is not None and self.lease.held()

    def leader(self) -> Optional[Leader]:
        """The live leader as the database sees it now, or None."""
        conn = Connection(self.conninfo, "pg_fencing election")
        try:
            return read_leader(conn, self.lock_name)[0]
        finally:
            conn.close()

    def observe(self, reread: float = 5.0, timeout: Optional[float] = None) -> Iterator[Optional[Leader]]:
        """The leader now, then each change of (holder, token): a renewal is
        no change.  A broken connection is made again (at once, then after
        0.1 s, doubling up to 5 s), LISTENing before it reads, so that no
        change slips between; a failure no reconnect mends (may_mend) is
        raised, its connection closed.  Stops after timeout seconds if given."""
        end = None if timeout is None else time.monotonic() + timeout
        conn: Optional[Connection] = None
        failures = 0
        last: object = _UNSET
        try:
            while end is None or time.monotonic() < end:
                try:
                    if conn is None:
                        conn = Connection(self.conninfo, "pg_fencing observe")
                        conn.row(f"LISTEN {CHANNEL}")  # first: nothing slips before the read
                    leader, left = read_leader(conn, self.lock_name)
                except psycopg.Error as error:
                    conn = _dropped(conn)
                    if not may_mend(error):
                        raise
                    failures += 1
                    time.sleep(reconnect_delay(failures))
                    continue
                failures = 0
                if last is _UNSET or _changed(last, leader):
                    last = leader
                    yield leader
                wake = reread if left is None else min(reread, left + 0.01)
                if end is not None:
                    wake = min(wake, end - time.monotonic())
                try:
                    self._await_notice(conn, wake)
                except psycopg.Error as error:
                    conn = _dropped(conn)
                    if not may_mend(error):
                        raise
        finally:
            _dropped(conn)

    def _await_notice(self, conn: Connection, timeout: float) -> None:
        """Sleeps until a notification on the channel arrives or timeout passes."""
        pg = conn.conn.pgconn
        if select.select([pg.socket], [], [], max(0.0, timeout))[0]:
            pg.consume_input()
            while pg.notifies() is not None:
                pass  # a hint only: what counts is the re-read

    def resign(self) -> bool:
        """Gives leadership up (fencing_release); whether it was still ours."""
        if self.lease is None:
            return False
        try:
            return self.lease.release()
        finally:
            self.lease = None


def may_mend(error: psycopg.Error) -> bool:
    """Whether observe() should connect again after error, in both the
    threaded and the asyncio client.  A broken connection (no SQLSTATE: an
    I/O error, a connection closed), class 08, 57P0x (the server shutting
    down or starting up) and class 53 (too many connections) may mend by
    themselves.  Anything else -- a missing extension (42P01, 42883), a
    missing privilege (42501), a wrong password (28P01) -- would fail the
    same way on every attempt: it is raised instead of being retried in
    silence.

    libpq keeps no SQLSTATE for a connection attempt the server refused (the
    error then carries the attempt as .pgconn): one refused after the server
    asked for a password is taken for the login refusal it nearly always is
    -- a wrong or missing password, a role that may not log in, a database
    that is not there -- and raised; one refused before that (the server
    starting up, too many clients, no server listening) is retried."""
    if error.sqlstate is not None:
        return error.sqlstate.startswith(("08", "53", "57P0"))
    if error.pgconn is not None:
        return not error.pgconn.used_password
    # Raised by psycopg itself: a lost connection is an OperationalError;
    # anything else (a connection string it cannot parse, say) is no outage.
    return isinstance(error, psycopg.OperationalError)


def reconnect_delay(failures: int) -> float:
    """After the first failure at once, then 0.1 s, doubling up to 5 s."""
    return 0.0 if failures <= 1 else min(5.0, 0.1 * 2 ** (failures - 2))


def _dropped(conn):
    if conn is not None:
        conn.close()
    return None


def _changed(last: object, leader: Optional[Leader]) -> bool:
    if last is None or leader is None:
        return last is not leader
    assert isinstance(last, Leader)
    return (last.holder, last.token) != (leader.holder, leader.token)
