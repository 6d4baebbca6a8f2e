"""pg_fencing leases and fenced writes from Python, with psycopg2.

    from fenced_lease import FencedLease, fenced_execute, StaleTokenError

    with FencedLease("dbname=app", "nightly-report", ttl=10, wait=30,
                     on_lost=lambda why: print("lost:", why)) as lease:
        db = psycopg2.connect("dbname=app")
        lease.check()                                  # LeaseLostError once lost
        fenced_execute(db, "UPDATE reports SET token = %s, body = %s WHERE id = %s",
                       (lease.token, body, 7))         # StaleTokenError, MissingTokenError
    # leaving the block releases the lock

What each part does, and what it cannot do:

- FencedLease takes the lock with fencing_acquire() on a connection of its
  own, renews it every ttl/3 from a heartbeat thread on that same connection,
  and gives it back with fencing_release() on exit.  Renew and release must
  come from the role that acquired, which one connection guarantees.
- Given a wait, it waits with CALL fencing_await() (pg_fencing 1.7), not with
  the function form fencing_acquire(..., wait): a follower's wait may last
  hours, and a function waits inside one statement whose snapshot pins the
  xmin horizon of the whole database all along (VACUUM removes nothing that
  died since, in any table).  The procedure commits each attempt before it
  sleeps, so while it waits the backend holds no snapshot and no
  transaction id.  It cannot run inside a transaction block (25001): the
  lease's connection is asynchronous, which psycopg2 keeps in autocommit,
  and the CALL is sent on its own.  Its attempts run at READ COMMITTED
  whatever default_transaction_isolation says.
- `lost` is judged on the client's monotonic clock, conservatively: the lease
  counts as lost once the send time of the last successful acquire or renew,
  plus ttl, minus a safety margin, has passed -- whether or not the heartbeat
  thread ran meanwhile (the whole process may have been paused).  The server
  starts the ttl when it runs the request, after the client sent it, so this
  deadline is never later than the server's (clock rates aside).
- The heartbeat uses an asynchronous psycopg2 connection and waits for each
  renewal's answer only until that deadline: a renewal stuck behind a lock or
  a dead network cannot delay the loss.  on_lost(reason) is called once, from
  the heartbeat thread, when a renewal is refused, fails, or can no longer
  land in time.
- None of this makes the client safe by itself: a pause between check() and
  the write is invisible to it.  That is what the token and the table's guard
  (fencing_protect) are for; fenced_execute() turns the guard's refusals
  (SQLSTATE 55Z01, 55Z02) into StaleTokenError and MissingTokenError.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence

import psycopg2
import psycopg2.extensions

__all__ = [
    "FencedLease",
    "FencingError",
    "LeaseLostError",
    "LeaseUnavailableError",
    "MissingTokenError",
    "StaleTokenError",
    "fenced_execute",
]

STALE_TOKEN = "55Z01"
MISSING_TOKEN = "55Z02"


class FencingError(Exception):
    """Base of the errors this module raises."""


class GuardError(FencingError):
    """The table's fencing guard refused a write; the statement changed nothing.

    `cause` is the psycopg2 error; `detail`, `table` and `column` come from its
    fields.
    """

    def __init__(self, cause: psycopg2.Error):
        super().__init__(cause.diag.message_primary or str(cause).strip())
        self.cause = cause
        self.detail = cause.diag.message_detail
        self.pgcode = cause.pgcode
        self.table = cause.diag.table_name
        self.column = cause.diag.column_name


class StaleTokenError(GuardError):
    """55Z01: the token is lower than one the row (or lock) has already seen.

    Another holder took over: stop acting on this lease.
    """


class MissingTokenError(GuardError):
    """55Z02: the write did not set the token column, or set it to NULL."""


class LeaseUnavailableError(FencingError):
    """Another holder has a live lease (after waiting, if a wait was given)."""


class LeaseLostError(FencingError):
    """The lease is no longer held: lost, expired or released."""


def fenced_execute(conn, sql: str, params: Sequence[Any] | dict = ()) -> int:
    """Runs one write in its own transaction and returns its row count.

    The guard's refusals become StaleTokenError (55Z01) and MissingTokenError
    (55Z02); the transaction is rolled back and the connection stays usable.
    Other errors propagate unchanged.
    """
    try:
        with conn, conn.cursor() as cur:  # commit on success, roll back on error
            cur.execute(sql, params)
            return cur.rowcount
    except psycopg2.Error as error:
        if error.pgcode == STALE_TOKEN:
            raise StaleTokenError(error) from error
        if error.pgcode == MISSING_TOKEN:
            raise MissingTokenError(error) from error
        raise


class _Timeout(Exception):
    """No answer from the server before the deadline."""


def _interval(seconds: float, at_least_ms: int = 1) -> str:
    """'1500 milliseconds': a text the SQL casts to interval."""
    return f"{max(at_least_ms, round(seconds * 1000))} milliseconds"


def default_holder() -> str:
    """host:pid:random, new at each call: two leases or sessions of one
    process never share a holder."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def safety_margin(ttl: float) -> float:
    """How long before the computed expiry the client stops trusting a lease."""
    return min(max(ttl / 10, 0.05), ttl / 2)


def _wait(conn, deadline: Optional[float]) -> None:
    """Polls an asynchronous connection until its statement has answered;
    _Timeout once time.monotonic() passes deadline (None: no deadline)."""
    while True:
        state = conn.poll()  # raises the server's error, if any
        if state == psycopg2.extensions.POLL_OK:
            return
        timeout = None
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise _Timeout()
        if state == psycopg2.extensions.POLL_READ:
            select.select([conn.fileno()], [], [], timeout)
        elif state == psycopg2.extensions.POLL_WRITE:
            select.select([], [conn.fileno()], [], timeout)
        else:
            raise psycopg2.OperationalError(f"unexpected poll state {state}")


class _AsyncConnection:
    """An asynchronous psycopg2 connection (so in autocommit: no BEGIN is ever
    sent) whose statements wait for their answer only until a deadline."""

    def __init__(self, dsn: str, application_name: str):
        self._conn = psycopg2.connect(dsn, async_=1, application_name=application_name[:63])
        try:
            _wait(self._conn, deadline=None)
        except BaseException:
            self._conn.close()
            raise

    def query(self, sql: str, params: Sequence[Any] = (), deadline: Optional[float] = None):
        """Runs one statement and returns its first row (None if it has none)."""
        cur = self._conn.cursor()
        cur.execute(sql, params)
        _wait(self._conn, deadline)
        return cur.fetchone() if cur.description else None

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def close(self) -> None:
        if not self._conn.closed:
            self._conn.close()


class _Heartbeat:
    """The keepalive of a lease or a session: a thread that renews it every
    `period` seconds, and the judgement of whether it is still held.

    Held is judged on the monotonic clock, conservatively: it is lost once the
    send time of the last successful acquire, open or renewal (begin(),
    renewed()), plus ttl, minus the safety margin, has passed -- whether or not
    the thread ran meanwhile (the whole process may have been paused).

    renew(deadline) sends one renewal and returns whether the server took it,
    waiting for the answer only until deadline (_Timeout then; psycopg2.Error
    when it fails).  After a renewal that timed out or failed, drop() gives up
    its connection: an answer may still be on its way.  on_lost(reason) is
    called once, from the thread, unless stop() came first.
    """

    def __init__(
        self,
        what: str,
        ttl: float,
        period: Optional[float],
        renew: Callable[[float], bool],
        drop: Callable[[], None],
        refused: str,
        on_lost: Optional[Callable[[str], None]],
    ):
        self.what = what  # "lease", "session": in the reasons
        self.ttl = ttl
        self.margin = safety_margin(ttl)
        self.period = period if period is not None else ttl / 3
        if not 0 < self.period < ttl - self.margin:
            raise ValueError("heartbeat must be positive and shorter than ttl minus the safety margin")
        self._renew = renew
        self._drop = drop
        self._refused = refused
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self._valid_from = 0.0  # monotonic send time of the last successful acquire/open/renew
        self._lost_reason: Optional[str] = None

    def begin(self, sent: float) -> None:
        """The send time of the request that took the lease or opened the session."""
        with self._lock:
            self._valid_from = sent

    def renewed(self, sent: float) -> None:
        with self._lock:
            self._valid_from = max(self._valid_from, sent)

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stops the thread (waiting for a renewal in flight, up to its
        deadline); no on_lost from then on.  False if it was stopped already."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        return True

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopped

    @property
    def deadline(self) -> float:
        """time.monotonic() after which it no longer counts as held."""
        with self._lock:
            return self._valid_from + self.ttl - self.margin

    @property
    def lost_reason(self) -> Optional[str]:
        now = time.monotonic()
        with self._lock:
            if self._lost_reason is not None:
                return self._lost_reason
            if now >= self._valid_from + self.ttl - self.margin:
                # The thread has not run since the deadline passed (say the
                # whole process was paused); it reports the same when it does.
                return "not renewed within ttl minus the safety margin"
        return None

    def mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._stopped or self._lost_reason is not None:
                return
            self._lost_reason = reason
        if self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:
                pass  # the callback's exception has nowhere to go on this thread

    def _run(self) -> None:
        try:
            while True:
                now = time.monotonic()
                deadline = self.deadline
                if now >= deadline:
                    self.mark_lost(
                        f"not renewed before the {self.what}'s safe deadline; was the process paused?"
                    )
                    return
                due = self._valid_from + self.period
                if now < due:
                    if self._stop.wait(min(due, deadline) - now):
                        return
                    continue
                sent = time.monotonic()
                try:
                    renewed = self._renew(deadline)
                except _Timeout:
                    self._drop()
                    self.mark_lost(f"renewal got no answer before the {self.what}'s safe deadline")
                    return
                except psycopg2.Error as error:
                    self._drop()
                    self.mark_lost(f"renewal failed: {str(error).strip()}")
                    return
                if not renewed:
                    self.mark_lost(f"renewal refused: {self._refused}")
                    return
                self.renewed(sent)
                if self._stop.is_set():
                    return
        except Exception as error:  # never let anything out of the thread silently
            self.mark_lost(f"heartbeat failed: {error!r}")


class FencedLease:
    """A pg_fencing lease kept alive by a heartbeat thread.

    dsn       libpq connection string ('' takes everything from PG* variables)
    lock_name the lease's name
    holder    the application's label; default host:pid:random, unique per
              FencedLease, so two leases of one process never share a grant
    ttl       seconds; the server ends the lease ttl after the last renewal
    wait      seconds to wait for a busy lock, with CALL fencing_await (None:
              do not wait; 0: one attempt)
    on_lost   called once, with a reason, from the heartbeat thread
    heartbeat seconds between renewals (default ttl/3)
    """

    def __init__(
        self,
        dsn: str,
        lock_name: str,
        *,
        holder: Optional[str] = None,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        on_lost: Optional[Callable[[str], None]] = None,
        heartbeat: Optional[float] = None,
    ):
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        if wait is not None and wait < 0:
            raise ValueError("wait must not be negative")
        self.dsn = dsn
        self.lock_name = lock_name
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.wait = wait
        self.on_lost = on_lost
        self._beat = _Heartbeat(
            "lease", self.ttl, heartbeat, renew=self._renew, drop=self._close,
            refused="the lease expired, was released or taken over", on_lost=on_lost,
        )
        self.margin = self._beat.margin
        self.heartbeat = self._beat.period

        self.token: Optional[int] = None
        self._conn: Optional[_AsyncConnection] = None

    # -- taking and giving back ---------------------------------------------

    def acquire(self) -> Optional[int]:
        """Takes the lock: its token, or None when another holder has it."""
        if self.token is not None:
            raise RuntimeError("this FencedLease was already acquired; make a new one")
        self._conn = self._connect()
        sent = time.monotonic()
        try:
            if self.wait is None:
                # In READ COMMITTED, whatever the role's
                # default_transaction_isolation says: at a stricter level an
                # acquire that meets a just-changed lease row fails with 40001.
                self._query("BEGIN ISOLATION LEVEL READ COMMITTED")
                row = self._query(
                    "SELECT fencing_acquire(%s, %s, %s::interval)",
                    (self.lock_name, self.holder, _interval(self.ttl)),
                )
                self._query("COMMIT")
            else:
                # On its own, outside a transaction block: an asynchronous
                # connection is in autocommit, and no BEGIN is sent.  The
                # procedure commits each attempt, so that nothing pins the
                # database's xmin horizon while it waits; its one row is the
                # token, NULL when the wait ran out.
                row = self._query(
                    "CALL fencing_await(%s, %s, %s::interval, %s::interval, kind => 'exclusive')",
                    (self.lock_name, self.holder, _interval(self.ttl), _interval(self.wait)),
                )
        except BaseException:
            self._close()
            raise
        if row[0] is None:
            self._close()
            return None
        self.token = int(row[0])
        self._beat.begin(sent)
        try:
            # A wait can outlast much of the ttl: the server started the lease
            # when it granted it, not when we asked.  Renew once right away for
            # a send time close to the grant.
            if self.wait is not None and time.monotonic() - sent > self.margin:
                renew_sent = time.monotonic()
                if not self._renew(deadline=renew_sent + self.ttl):
                    raise LeaseUnavailableError(
                        f'lock "{self.lock_name}" was granted (token {self.token}) but expired '
                        "before it could be renewed; ttl too short?"
                    )
                self._beat.renewed(renew_sent)
        except BaseException:
            self._release_quietly()
            raise
        self._beat.start(name=f"lease {self.lock_name}")
        return self.token

    def release(self) -> bool:
        """Gives the lock back: True if it was still ours on the server."""
        if self.token is None or not self._beat.stop():
            return False
        if self._conn is None or self._conn.closed:
            # The heartbeat gave up on its connection (a renewal timed out or
            # the connection broke): release on a new one rather than leave the
            # lock to expire.  A second release of a token just returns False.
            self._conn = self._connect()
        try:
            return bool(self._query(
                "SELECT fencing_release(%s, %s::fencing_token)", (self.lock_name, self.token)
            )[0])
        finally:
            self._close()

    def __enter__(self) -> "FencedLease":
        if self.acquire() is None:
            waited = f" (waited {self.wait} s)" if self.wait is not None else ""
            raise LeaseUnavailableError(
                f'lock "{self.lock_name}" is held by another holder{waited}'
            )
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.release()
        except psycopg2.Error:
            if exc_info[0] is None:
                raise
            # Do not hide the block's own exception; the lease ends after ttl.

    # -- state ----------------------------------------------------------------

    @property
    def _released(self) -> bool:
        return self._beat.stopped

    @property
    def deadline(self) -> float:
        """time.monotonic() after which the lease no longer counts as held."""
        return self._beat.deadline

    @property
    def lost(self) -> bool:
        """True once a renewal failed or the deadline passed (and not released)."""
        return self.token is not None and not self._released and self.lost_reason is not None

    @property
    def held(self) -> bool:
        return self.token is not None and not self._released and self.lost_reason is None

    @property
    def lost_reason(self) -> Optional[str]:
        return self._beat.lost_reason if self.token is not None else None

    def check(self) -> int:
        """The token, or LeaseLostError if the lease is not held any more."""
        if not self.held:
            reason = "released" if self._released else self.lost_reason or "never acquired"
            raise LeaseLostError(f'lock "{self.lock_name}" (token {self.token}): {reason}')
        return self.token

    # -- heartbeat (_Heartbeat) ------------------------------------------------

    def _renew(self, deadline: float) -> bool:
        row = self._query(
            "SELECT fencing_renew(%s, %s::fencing_token, %s::interval)",
            (self.lock_name, self.token, _interval(self.ttl)),
            deadline=deadline,
        )
        return bool(row[0])

    # -- the lease's own asynchronous connection -----------------------------

    def _connect(self) -> _AsyncConnection:
        return _AsyncConnection(self.dsn, f"fenced_lease {self.holder}")

    def _query(self, sql: str, params: Sequence[Any] = (), deadline: Optional[float] = None):
        """Runs one statement and returns its first row (None if it has none)."""
        return self._conn.query(sql, params, deadline)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _release_quietly(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "held" if self.held else "lost" if self.lost else "not held"
        return f"<FencedLease {self.lock_name!r} holder={self.holder!r} token={self.token} {state}>"
