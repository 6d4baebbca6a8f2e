"""Leader election on one lock: campaign, proclaim, leader, observe, resign.

    election = client.election("scheduler", holder="node-2", ttl=10)
    lease = election.campaign(payload='{"addr": "10.0.0.2:7000"}')  # blocks until leader
    ... lease.execute(db, sql, (lease.token, ...)) ...
    election.resign()

    for leader in client.election("scheduler").observe():   # followers
        print(leader)                                       # Leader(...) or None

A candidate campaigns in a fencing session of its own (1.8), which its
client's heartbeat (one connection and one statement for every session
and lease of the client, each renewed every ttl/3) keeps in the lock's
line while it waits (1.10: a place the database keeps, polled by short
statements, no server connection held between them) and keeps its lease
once it leads.  resign() releases the lease -- the next place in line is
told -- and closes the session; a candidate that gives up (timeout) leaves
the line, giving back anything granted to it meanwhile.

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
import threading
import time

import psycopg
from typing import Callable, Iterator, NamedTuple, Optional

from ._heartbeat import Heartbeat, default_heartbeat
from ._line import Listener
from ._wire import Connection
from .errors import LeaseLost, LockTimeout
from .lease import busy_message, default_holder, describe_lock
from .session import Session, SessionLease

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


class Candidacy:
    """One campaign's session's on_lost: the election's on_lost once the
    candidate leads, nothing before (a session lost while waiting is the
    campaign's to mend, with a new session)."""

    def __init__(self, on_lost: Optional[Callable[[str], None]]):
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._leading = False
        self._lost: Optional[str] = None

    def session_lost(self, reason: str) -> None:
        with self._lock:
            self._lost = reason
            leading = self._leading
        if leading and self._on_lost is not None:
            self._on_lost(reason)

    def lead(self) -> bool:
        """From now on a loss is the leader's (on_lost); False if the
        session was lost already, unreported."""
        with self._lock:
            if self._lost is not None:
                return False
            self._leading = True
            return True


class ElectionLease(SessionLease):
    """The leader's lease, in its candidate's session of its own: token,
    held(), execute(), wait_lost() as every lease's; release() gives it
    back (the next place in line is told) and closes the session."""

    def release(self) -> bool:
        try:
            released = super().release()
        except BaseException:
            close_quietly(self.session)
            raise
        self.session.close()
        return released


def close_quietly(session: Optional[Session]) -> None:
    if session is None:
        return
    try:
        session.close()
    except Exception:
        pass  # the session ends at its ttl, the places and leases in it with it


class Election:
    def __init__(self, conninfo: str, lock_name: str, *, holder: Optional[str] = None,
                 ttl: float = 10.0, on_lost: Optional[Callable[[str], None]] = None,
                 listener: Optional[Listener] = None, poll: Optional[float] = None,
                 shared_heartbeat: Optional[Heartbeat] = None):
        """shared_heartbeat: the client's, which renews the candidate's
        sessions (pg_fencing.Client passes its own); None, the process's
        default one for conninfo."""
        self.conninfo = conninfo
        self.lock_name = lock_name
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.on_lost = on_lost
        self.lease: Optional[ElectionLease] = None
        # The candidate's session of its own, while it campaigns or leads.
        self.session: Optional[Session] = None
        self._listener = listener
        self._poll = poll
        self._heartbeat = shared_heartbeat or default_heartbeat(conninfo)

    def campaign(self, payload: Optional[str] = None, timeout: Optional[float] = None) -> ElectionLease:
        """Blocks until this candidate leads (LockTimeout after timeout
        seconds, if given, the line left), and returns its lease.  It waits
        as a place in the lock's line, in a session of its own: no
        connection held on the server between its polls, arrival order
        kept.  A session lost while it waits (its renewals failed) is
        replaced by a new one, which joins the line again at the back."""
        if self.lease is not None and self.lease.held():
            return self.lease
        self._end_term()
        end = None if timeout is None else time.monotonic() + timeout
        failures = 0
        while True:
            candidacy = Candidacy(self.on_lost)
            session = Session(self.conninfo, ttl=self.ttl, holder=self.holder,
                              on_lost=candidacy.session_lost, listener=self._listener, poll=self._poll,
                              shared_heartbeat=self._heartbeat)
            self.session = session
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                token, place = session._wait(self.lock_name, left, payload=payload)
                granted = token is not None and candidacy.lead()
            except LeaseLost:
                token, granted = None, False
            except BaseException:
                self._end_term()
                raise
            if granted:
                self.lease = ElectionLease(session, self.lock_name, "exclusive", token, place)
                return self.lease
            self._end_term()  # closing the session gives back a grant it got
            if token is None and end is not None and time.monotonic() >= end:
                raise LockTimeout(busy_message(describe_lock("exclusive", self.lock_name),
                                               "exclusive", timeout))
            # The session was lost while it waited: a new one, at the back.
            failures += 1
            time.sleep(reconnect_delay(failures))

    def _end_term(self) -> None:
        """Closes what is left of the candidate's session (and with it its
        place and any lease in it)."""
        session, self.session, self.lease = self.session, None, None
        close_quietly(session)

    def proclaim(self, payload: str) -> None:
        """Publishes a new payload as the live leader (an acquire in its
        session of the lock it holds replaces it, with the same token);
        LeaseLost unless this candidate leads."""
        lease = self.lease
        if lease is None or not lease.held():
            raise LeaseLost(f'not the leader of "{self.lock_name}"')
        token = lease.session._reacquire(self.lock_name, payload)
        if token is not None and token != lease.token:
            # Ours had ended: that was a new grant, not a proclamation.
            lease.session._release(self.lock_name, token)
        if token is None or token != lease.token:
            raise LeaseLost(f'no longer the leader of "{self.lock_name}"')

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
        """Gives leadership up (fencing_release: the next place in line is
        told) and closes the candidate's session; whether it was still ours."""
        lease = self.lease
        if lease is None:
            self._end_term()
            return False
        self.lease = self.session = None
        return lease.release()


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
