"""pg_fencing sessions (extension 1.8) from Python: one heartbeat for many leases.

    from fenced_session import FencedSession

    with FencedSession("dbname=app", holder="worker-17", ttl=10,
                       on_lost=lambda why: print("lost:", why)) as session:
        p3 = session.acquire("partition-3")             # a token, or None if busy
        both = session.acquire_all(["acct-7", "acct-9"])  # every token, or None
        session.check()                                 # LeaseLostError once lost
        fenced_execute(db, "UPDATE parts SET token = %s, body = %s WHERE id = 3",
                       (p3, body))
    # leaving the block closes the session, which releases every lease in it

What each part does, and what it cannot do:

- FencedSession opens the session with fencing_session_open() on a
  connection of its own and renews it (fencing_session_renew) every ttl/3
  from a heartbeat thread on that connection: one renewal keeps every lease
  in the session alive, whatever their number.  The heartbeat is
  fenced_lease's, with the same rules: `held` is judged on the monotonic
  clock (send time of the last successful open or renewal, plus ttl, minus
  the safety margin), so a process that was paused wakes up to held False;
  a renewal waits for its answer only until that deadline; on_lost(reason)
  is called once, from the heartbeat thread, when a renewal is refused (the
  session ended, or was closed by a superuser), fails, or can no longer land
  in time -- or from the caller's thread, when an acquire is refused because
  the server has ended the session (55Z05) before the heartbeat noticed.
- acquire, acquire_all, release and close run on a second connection, so
  that a renewal never queues behind an acquire that waits.  Threads take
  turns on it.  Each call is its own transaction (autocommit) at READ
  COMMITTED, whatever the role's default_transaction_isolation says.  Both
  connections come from the same dsn, so both are the role that opened the
  session: only that role (or one with its privileges, or a superuser) may
  act in it (42501 otherwise).
- acquire given a wait waits with CALL fencing_await(lock, session => id,
  wait => w) (pg_fencing 1.8), as FencedLease does for a plain lease: the
  procedure commits each attempt before it sleeps, so while it waits the
  work connection holds no snapshot and no transaction id (a wait of hours
  pins no xmin horizon).  It cannot run inside a transaction block (25001):
  the work connection is in autocommit.  A wait ends at the session's end
  at the latest (55Z05, the loss).  acquire_all has no procedure: its wait
  goes to the function form (fencing_session_acquire_all(..., wait)), whose
  statement holds a snapshot all along, which pins the xmin horizon of the
  whole database (VACUUM removes nothing that died since, in any table).
  Keep its waits short, or retry.
- As with a lease, none of this makes the client safe by itself: a pause
  between check() and the write is invisible to it.  The tokens and the
  tables' guard (fencing_protect) are what refuse a write under a lease that
  ended with its session.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Sequence

import psycopg2

from fenced_lease import LeaseLostError, _AsyncConnection, _Heartbeat, _interval, default_holder

__all__ = ["FencedSession", "SESSION_ENDED"]

SESSION_ENDED = "55Z05"


class FencedSession:
    """A pg_fencing session kept alive by a heartbeat thread, and the leases
    taken in it.  Opened by the constructor; see the module's docstring.

    dsn       libpq connection string ('' takes everything from PG* variables)
    holder    the application's label, the holder of every lease in the
              session; default host:pid:random
    ttl       seconds; the server ends the session, and every lease in it,
              ttl after the last renewal
    on_lost   called once, with a reason (see the module's docstring)
    heartbeat seconds between renewals (default ttl/3)
    """

    def __init__(
        self,
        dsn: str,
        *,
        holder: Optional[str] = None,
        ttl: float = 10.0,
        on_lost: Optional[Callable[[str], None]] = None,
        heartbeat: Optional[float] = None,
    ):
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.dsn = dsn
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.on_lost = on_lost
        self._beat = _Heartbeat(
            "session", self.ttl, heartbeat, renew=self._renew, drop=self._drop_heartbeat,
            refused="the session ended, or was closed", on_lost=on_lost,
        )
        self.margin = self._beat.margin
        self.heartbeat = self._beat.period
        self.id: Optional[int] = None  # fencing_sessions.session_id
        self._work_lock = threading.Lock()  # acquire, acquire_all, release, close take turns
        self._closed = False  # under _work_lock
        self._work = None
        self._hb = _AsyncConnection(dsn, f"fenced_session {self.holder}")
        try:
            # READ COMMITTED, so that the open also sweeps expired sessions
            # (it does at that level only), and a renewal that meets a
            # concurrent close is refused rather than failed with 40001.
            self._hb.query("SET default_transaction_isolation = 'read committed'")
            self._work = self._connect_work()
            sent = time.monotonic()
            self.id = int(self._hb.query(
                "SELECT fencing_session_open(%s, %s::interval)", (self.holder, _interval(self.ttl))
            )[0])
            self._beat.begin(sent)
            self._beat.start(name=f"session {self.id}")
        except BaseException:
            # Close what was opened rather than let it linger a ttl.
            try:
                if self.id is not None:
                    self.close()
            except Exception:
                pass
            self._close_connections()
            raise

    # -- leases in the session ------------------------------------------------

    def acquire(self, lock_name: str, wait: Optional[float] = None) -> Optional[int]:
        """Takes lock_name in the session (fencing_session_acquire): its
        token, or None when another holder has it.

        wait: seconds to wait for a busy lock (None: do not wait), with CALL
        fencing_await(..., session =>), which holds no snapshot and no
        transaction id while it sleeps.  The lease ends when the session
        does, unless released first; the same lock again in the session
        gives back its token.  LeaseLostError unless the session is held
        (also when the server says it has ended, 55Z05, before or during the
        wait).
        """
        if wait is None:
            value = self._in_session(
                "SELECT fencing_session_acquire(%s, %s)::bigint", (self.id, lock_name)
            )
        else:
            # On its own, outside a transaction block (the work connection is
            # in autocommit): the procedure commits each attempt before it
            # sleeps.  Its one row is the token, NULL when the wait ran out.
            value = self._in_session(
                "CALL fencing_await(%s, session => %s, wait => %s::interval)",
                (lock_name, self.id, _wait_interval(wait)),
            )
        return None if value is None else int(value)

    def acquire_all(
        self, lock_names: Sequence[str], wait: Optional[float] = None
    ) -> Optional[List[int]]:
        """Every lock of lock_names or none (fencing_session_acquire_all):
        their tokens in the order given, or None when not all could be had
        within wait (seconds; None: no wait).  Never deadlocks with another
        session's acquire_all.  A wait goes to the function form, which holds
        a snapshot while it waits (there is no procedure for it): keep it
        short."""
        if isinstance(lock_names, str):
            raise TypeError("lock_names must be a sequence of names, not one string")
        value = self._in_session(
            "SELECT fencing_session_acquire_all(%s, %s::text[], %s::interval)::bigint[]",
            (self.id, list(lock_names), _wait_interval(wait)),
        )
        return None if value is None else [int(token) for token in value]

    def release(self, lock_name: str, token: int) -> bool:
        """Releases one lease of the session (fencing_release): True if it was
        still live.  False after close()."""
        with self._work_lock:
            if self._closed:
                return False
            return bool(self._work_query(
                "SELECT fencing_release(%s, %s::fencing_token)", (lock_name, token)
            ))

    def close(self) -> int:
        """Stops the heartbeat and closes the session (fencing_session_close),
        which releases every lease in it at once: how many.  Idempotent: later
        calls return 0.  A session already ended on the server releases 0."""
        self._beat.stop()  # no renewal, and no on_lost, after the close
        with self._work_lock:
            if self._closed:
                return 0
            self._closed = True
            try:
                return int(self._work_query("SELECT fencing_session_close(%s)", (self.id,)))
            finally:
                self._close_connections()

    def __enter__(self) -> "FencedSession":
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.close()
        except psycopg2.Error:
            if exc_info[0] is None:
                raise
            # Do not hide the block's own exception; the session ends after ttl.

    # -- state -------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """time.monotonic() after which the session no longer counts as held."""
        return self._beat.deadline

    @property
    def lost_reason(self) -> Optional[str]:
        return self._beat.lost_reason

    @property
    def held(self) -> bool:
        """False once the session is lost (judged on the monotonic clock), and
        after close(): every lease in it is then over, or about to be."""
        return not self._beat.stopped and self.lost_reason is None

    @property
    def lost(self) -> bool:
        """True once a renewal failed or the deadline passed (and not closed)."""
        return not self._beat.stopped and self.lost_reason is not None

    def check(self) -> None:
        """LeaseLostError unless the session is held."""
        if not self.held:
            reason = "closed" if self._beat.stopped else self.lost_reason
            raise LeaseLostError(f"fencing session {self.id} of {self.holder!r}: {reason}")

    # -- the connections ------------------------------------------------------------

    def _renew(self, deadline: float) -> bool:
        row = self._hb.query(
            "SELECT fencing_session_renew(%s, %s::interval)", (self.id, _interval(self.ttl)),
            deadline=deadline,
        )
        return bool(row[0])

    def _drop_heartbeat(self) -> None:
        self._hb.close()

    def _in_session(self, sql: str, params: Sequence) -> object:
        """sql on the work connection, for a session that must be held."""
        ended = None
        with self._work_lock:
            self.check()  # also after close(), which stops the heartbeat first
            try:
                return self._work_query(sql, params)
            except psycopg2.Error as error:
                if error.pgcode != SESSION_ENDED:
                    raise
                ended = error
        # Outside the lock: on_lost may call close().
        self._beat.mark_lost(f"the server has ended the session: {str(ended).strip()}")
        raise LeaseLostError(f"fencing session {self.id} of {self.holder!r}: "
                             f"{str(ended).strip()}") from ended

    def _work_query(self, sql: str, params: Sequence) -> object:
        """The first column of sql's one row, on the work connection (under
        _work_lock); a broken connection is made anew for the next call."""
        if self._work is None or self._work.closed:
            self._work = self._connect_work()
        with self._work.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone()[0]

    def _connect_work(self):
        conn = psycopg2.connect(
            self.dsn, application_name=f"fenced_session work {self.holder}"[:63]
        )
        try:
            # Each call its own transaction, none left open; and CALL
            # fencing_await refuses to run inside a transaction block.
            conn.autocommit = True
            with conn.cursor() as cur:
                # A waiting acquire_all needs READ COMMITTED: at a stricter
                # level one that meets a just-changed lease row fails with
                # 40001.  (CALL fencing_await runs its attempts at READ
                # COMMITTED whatever the level.)
                cur.execute("SET default_transaction_isolation = 'read committed'")
        except BaseException:
            conn.close()
            raise
        return conn

    def _close_connections(self) -> None:
        self._hb.close()
        if self._work is not None and not self._work.closed:
            self._work.close()

    def __repr__(self) -> str:
        state = "held" if self.held else "lost" if self.lost else "closed"
        return f"<FencedSession {self.id} holder={self.holder!r} {state}>"


def _wait_interval(wait: Optional[float]) -> Optional[str]:
    """A wait as an interval text; None (SQL NULL) for no wait."""
    if wait is None:
        return None
    if wait < 0:
        raise ValueError("wait must not be negative")
    return _interval(wait, at_least_ms=0)
