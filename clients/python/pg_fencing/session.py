"""Sessions (pg_fencing 1.8): one keepalive for many leases.

    with client.session(ttl=10, on_lost=cb) as session:
        p3 = session.lock("partition-3")             # a SessionLease
        a, b = session.lock_all(["acct-7", "acct-9"])  # every lock or none
        p3.execute(db, "UPDATE parts SET token = %s, v = %s WHERE id = 3", (p3.token, v))
    # leaving the block closes the session, releasing every lease in it

One heartbeat renews the session (fencing_session_renew), and with it every
lease in it; its loss is every lease's, reported once.  Two connections:
the heartbeat's (a renewal never queues behind an acquire that waits; the
close goes there too, so that it ends a wait on another thread instead of
queueing behind it) and the work connection the acquires that wait take
turns on (the wait for the turn counts against theirs).  A release, or an
acquire without a wait, that finds it busy uses a connection of its own.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import psycopg

from ._heartbeat import Heartbeat, LeaseClock
from ._wire import Connection, interval
from .errors import SESSION_ENDED, LeaseLost, LockTimeout, seconds

# How long close() lets a wait on the work connection take to end once the
# server has closed the session, before it cancels the statement.
WORK_GRACE = 2.0
from .lease import KINDS, Judged, _Held, default_holder, describe_lock


@contextmanager
def ended_by_the_server(session_id: int, beat: LeaseClock) -> Iterator[None]:
    """The server's 55Z05 (it ended the session -- expired, or closed by an
    operator -- before the heartbeat noticed) is the session's loss:
    on_lost once, and LeaseLost with the server's error as its cause."""
    try:
        yield
    except psycopg.Error as error:
        if error.sqlstate != SESSION_ENDED:
            raise
        message = error.diag.message_primary or str(error).strip()
        beat.mark_lost(f"the server has ended the session: {message}")
        raise LeaseLost(f"fencing session {session_id} is no longer held: {message}") from error


class InSession(Judged):
    """A lease in a session, threaded or asyncio: held() is the session's,
    and False once released."""

    def __init__(self, session, lock_name: str, kind: str, token: int):
        self.session = session
        self.lock_name = lock_name
        self.kind = kind
        self.token = token
        self._released = False

    def describe(self) -> str:
        return f"{describe_lock(self.kind, self.lock_name)} in fencing session {self.session.id}"

    def held(self) -> bool:
        return not self._released and self.session.held()

    @property
    def lost_reason(self) -> Optional[str]:
        return "released" if self._released else self.session.lost_reason


class SessionLease(InSession, _Held):
    def release(self) -> bool:
        """fencing_release of this lease only; the session lives on."""
        if self._released:
            return False
        self._released = True
        return self.session._release(self.lock_name, self.token)


class Session:
    def __init__(self, conninfo: str, *, ttl: float = 10.0, holder: Optional[str] = None,
                 on_lost: Optional[Callable[[str], None]] = None,
                 heartbeat: Optional[float] = None):
        self.conninfo = conninfo
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self._beat = Heartbeat("session", self.ttl, heartbeat, renew=self._renew,
                               drop=self._drop_heartbeat,
                               refused="the session ended, or was closed", on_lost=on_lost)
        self._work_lock = threading.Lock()
        self._closing = threading.Lock()
        self._closed = False
        self._beat_conn = Connection(conninfo, f"pg_fencing session {self.holder}")
        try:
            self._work = Connection(conninfo, f"pg_fencing session {self.holder}")
            sent = time.monotonic()
            self.id = int(self._beat_conn.row("SELECT fencing_session_open(%s, %s::interval)",
                                              (self.holder, interval(self.ttl)))[0])
        except BaseException:
            self._beat_conn.close()
            raise
        self._beat.begin(sent)
        self._beat.start(name=f"pg_fencing session {self.id}")

    def held(self) -> bool:
        return not self._closed and self._beat.lost_reason is None

    @property
    def lost_reason(self) -> Optional[str]:
        return "closed" if self._closed else self._beat.lost_reason

    def check(self) -> None:
        if not self.held():
            raise LeaseLost(f"fencing session {self.id} is no longer held: {self.lost_reason}")

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        return self._beat.wait_lost(timeout)

    def lock(self, lock_name: str, *, wait: Optional[float] = None, kind: str = "exclusive",
             permits: Optional[int] = None, payload: Optional[str] = None) -> SessionLease:
        """Takes lock_name in the session, of any kind; LockTimeout when it
        stays busy.  A wait is CALL fencing_await(..., session =>): no
        snapshot held while it sleeps."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if payload is not None and kind != "exclusive":
            raise ValueError("a payload needs an exclusive lease")
        with self._on_work(wait, f'lock "{lock_name}"') as (conn, left):
            if left is None:
                conn.row("BEGIN ISOLATION LEVEL READ COMMITTED")
                try:
                    token = conn.row(
                        "SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb, kind => %s, "
                        "permits => %s::integer)", (self.id, lock_name, payload, kind, permits))[0]
                    conn.row("COMMIT")
                except BaseException:
                    if not conn.closed:
                        conn.row("ROLLBACK")
                    raise
            else:
                token = conn.row(
                    "CALL fencing_await(%s, session => %s, wait => %s::interval, kind => %s, "
                    "permits => %s::integer, payload => %s::jsonb)",
                    (lock_name, self.id, interval(left), kind, permits, payload))[0]
        if token is None:
            raise LockTimeout(f'lock "{lock_name}" is busy'
                              + (f" (waited {seconds(wait)})" if wait is not None else ""))
        return SessionLease(self, lock_name, kind, int(token))

    def lock_all(self, lock_names: Sequence[str], *, wait: Optional[float] = None) -> List[SessionLease]:
        """Every lock or none (fencing_session_acquire_all), in the order
        given; LockTimeout when not all could be had.  Never deadlocks with
        another session's lock_all."""
        names = list(lock_names)
        with self._on_work(wait, f"all of {names}") as (conn, left):
            conn.row("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                tokens = conn.row(
                    "SELECT fencing_session_acquire_all(%s, %s::text[], %s::interval)::bigint[]",
                    (self.id, names, None if left is None else interval(left)))[0]
                conn.row("COMMIT")
            except BaseException:
                if not conn.closed:
                    conn.row("ROLLBACK")
                raise
        if tokens is None:
            raise LockTimeout(f"not all of {names} could be had"
                              + (f" (waited {seconds(wait)})" if wait is not None else ""))
        return [SessionLease(self, n, "exclusive", int(t)) for n, t in zip(names, tokens)]

    @contextmanager
    def _on_work(self, wait: Optional[float], what: str) -> Iterator[Tuple[Connection, Optional[float]]]:
        """A connection for an acquire, once the session is known held, and
        what is left of the wait (None: no wait); the server's 55Z05 as
        LeaseLost.  The acquires that wait take turns on the work connection,
        the wait for the turn counting against theirs (LockTimeout if it was
        not had in time); one that does not wait never queues behind
        another thread's wait."""
        with ended_by_the_server(self.id, self._beat):
            self.check()
            if wait is None:
                with self._free_connection() as conn:
                    yield conn, None
                return
            start = time.monotonic()
            if not self._work_lock.acquire(timeout=wait):
                raise LockTimeout(f"{what} not tried: the session's connection stayed busy with "
                                  f"another thread's wait for the whole {seconds(wait)}")
            try:
                self.check()  # closed meanwhile?
                self._reconnect_work()
                yield self._work, max(0.0, wait - (time.monotonic() - start))
            finally:
                self._end_turn()

    @contextmanager
    def _free_connection(self) -> Iterator[Connection]:
        """The work connection if it is free now, else one of its own (for
        one statement that does not wait: a release, an acquire without a
        wait)."""
        if not self._work_lock.acquire(blocking=False):
            own = Connection(self.conninfo, f"pg_fencing session {self.holder}")
            try:
                yield own
            finally:
                own.close()
            return
        try:
            self._reconnect_work()
            yield self._work
        finally:
            self._end_turn()

    def _end_turn(self) -> None:
        if self._closed:  # close() gave up waiting for this turn to end
            self._work.close()
        self._work_lock.release()

    def _reconnect_work(self) -> None:
        """Under _work_lock: a work connection that broke (the network, a
        terminated backend) is made again, rather than fail every later
        call of a session the heartbeat still keeps."""
        if self._work.closed:
            self._work = Connection(self.conninfo, f"pg_fencing session {self.holder}")

    def close(self) -> int:
        """Stops the heartbeat and closes the session, releasing every lease
        in it: how many.  Idempotent: later calls return 0.  A wait in the
        session on another thread ends with LeaseLost (the server ends a
        session's waits when it closes it): the close goes over the
        heartbeat's connection, not behind the wait on the work connection."""
        self._beat.stop()  # first: no on_lost during the close
        with self._closing:
            if self._closed:
                return 0
            self._closed = True
        try:
            return self._close_on_the_server()
        finally:
            self._beat_conn.close()
            self._close_work()

    def _close_on_the_server(self) -> int:
        # The heartbeat gave its connection up after a failed renewal: a new one.
        if self._beat_conn.closed:
            self._beat_conn = Connection(self.conninfo, f"pg_fencing session {self.holder}")
        try:
            return int(self._beat_conn.row("SELECT fencing_session_close(%s)", (self.id,))[0])
        except psycopg.Error as error:
            if error.sqlstate == SESSION_ENDED:
                return 0  # ended already: nothing left to release
            raise

    def _close_work(self) -> None:
        """Closes the work connection once a wait on it has ended; one that
        goes on past WORK_GRACE is cancelled, and closed by its thread."""
        if self._work_lock.acquire(timeout=WORK_GRACE):
            try:
                self._work.close()
            finally:
                self._work_lock.release()
        else:
            self._work.cancel()

    def _release(self, lock_name: str, token: int) -> bool:
        """Never queues behind another thread's wait (_free_connection)."""
        if self._closed:
            return False
        with self._free_connection() as conn:
            return bool(conn.row("SELECT fencing_release(%s, %s::fencing_token)", (lock_name, token))[0])

    def _renew(self, deadline: float) -> bool:
        return self._beat_conn.value_by("SELECT fencing_session_renew($1::bigint, $2::interval)",
                                        [str(self.id), interval(self.ttl)], deadline,
                                        what=f"the renewal of fencing session {self.id}") == "t"

    def _drop_heartbeat(self) -> None:
        self._beat_conn.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.close()
        except Exception:
            if exc_info[0] is None:
                raise

    def __repr__(self) -> str:
        return f"<Session {self.id} holder={self.holder!r} {'held' if self.held() else 'not held'}>"
