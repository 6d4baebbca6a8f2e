"""Leases: an exclusive lock, one permit of a semaphore, or a shared lease,
kept alive by its client's heartbeat (one per client object, renewing
every lease and session of the client in one statement on one connection:
pg_fencing._heartbeat); a Lease made without a client is renewed by the
process's default heartbeat for its conninfo.

    with client.lock("nightly-report", ttl=10, wait=30) as lease:
        lease.execute(db, "UPDATE reports SET token = %s, body = %s WHERE id = 7",
                      (lease.token, body))

Renewals and the release come from the role that acquired, which one
conninfo guarantees.  The lease keeps the connection it acquired on, idle,
for its release.  A wait is waited with CALL fencing_await (1.7),
which commits each attempt before it sleeps: a follower waiting for hours
holds no snapshot and no transaction id, and VACUUM is never held back by
it.  held() says whether the lease can still be trusted; it cannot close
the window between the check and the write, which is what the token and
the table's guard (fencing_protect) are for.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any, Callable, Optional, Sequence

import psycopg

from ._heartbeat import Heartbeat, default_heartbeat
from ._wire import Connection, NoAnswer, StatementFailed, interval
from .errors import LeaseLost, LockTimeout, raise_mapped, seconds

KINDS = ("exclusive", "shared", "permit")


def default_holder() -> str:
    """host:pid:random, new at each call, so that two leases of one process
    never share a grant."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def fenced_execute(conn: psycopg.Connection, sql: str, params: Sequence[Any] | dict = ()) -> int:
    """Runs one write in a transaction of its own (a savepoint inside one
    already open) and returns its row count.  The guard's refusals become
    StaleTokenError (55Z01), MissingTokenError (55Z02),
    NeverGrantedTokenError (55Z03) and LeaseEndedError (55Z04, at COMMIT);
    the connection stays usable.  Other errors propagate unchanged."""
    try:
        with conn.transaction():
            return conn.execute(sql, params).rowcount
    except psycopg.Error as error:
        raise_mapped(error)
        raise  # not reached


class Judged:
    """What every lease shares, threaded or asyncio: its token, held(),
    lost_reason and check(); describe() names it in messages."""

    lock_name: str
    token: Optional[int] = None

    def held(self) -> bool:
        raise NotImplementedError

    @property
    def lost_reason(self) -> Optional[str]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def check(self) -> int:
        """The token, or LeaseLost once the lease is not held any more."""
        if not self.held():
            raise LeaseLost(f"{self.describe()} (token {self.token}) is no longer held: "
                            f"{self.lost_reason or 'never acquired'}")
        return self.token  # type: ignore[return-value]


def describe_lock(kind: str, lock_name: str) -> str:
    """'lock "x"', 'lock "x" (shared)', 'a permit of semaphore "x"'."""
    if kind == "permit":
        return f'a permit of semaphore "{lock_name}"'
    return f'lock "{lock_name}"' + (" (shared)" if kind == "shared" else "")


def check_lease_arguments(kind: str, permits: Optional[int], payload: Optional[str],
                          wait: Optional[float]) -> None:
    """ValueError for arguments no lease takes."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if (kind == "permit") != (permits is not None):
        raise ValueError("permits is for kind 'permit', and needed there")
    if payload is not None and kind != "exclusive":
        raise ValueError("a payload needs an exclusive lease")
    if wait is not None and wait < 0:
        raise ValueError(f"wait must not be negative, got {wait}")


def acquire_statement(kind: str, lock_name: str, holder: str, ttl: float,
                      wait: Optional[float], permits: Optional[int], payload: Optional[str]):
    """The statement that takes a lease of its own, and its parameters:
    CALL fencing_await when it may wait, else the kind's acquire function
    (to run at READ COMMITTED)."""
    if wait is not None:
        # Alone, outside a transaction block: the procedure commits its
        # attempts.  Its one row is the token, NULL when the wait ran out.
        return ("CALL fencing_await(%s, %s, %s::interval, %s::interval, kind => %s, "
                "permits => %s::integer, payload => %s::jsonb)",
                (lock_name, holder, interval(ttl), interval(wait), kind, permits, payload))
    if kind == "exclusive":
        return ("SELECT fencing_acquire(%s, %s, %s::interval, payload => %s::jsonb)",
                (lock_name, holder, interval(ttl), payload))
    if kind == "shared":
        return ("SELECT fencing_acquire_shared(%s, %s, %s::interval)",
                (lock_name, holder, interval(ttl)))
    return ("SELECT fencing_acquire_permit(%s, %s, %s::integer, %s::interval)",
            (lock_name, holder, permits, interval(ttl)))


def busy_message(what: str, kind: str, wait: Optional[float]) -> str:
    busy = ": every permit is taken" if kind == "permit" else " is held by another holder"
    return f"{what}{busy}" + (f" (waited {seconds(wait)})" if wait is not None else "")


class _Held(Judged):
    """A threaded lease: execute() and release() block."""

    def execute(self, conn: psycopg.Connection, sql: str,
                params: Sequence[Any] | dict = ()) -> int:
        """fenced_execute() after check(): LeaseLost, without sending
        anything, when the lease is known lost; the guard's refusal if the
        lease was lost after the check (a pause no client can see)."""
        self.check()
        return fenced_execute(conn, sql, params)

    def release(self) -> bool:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.release()
        except psycopg.Error:
            if exc_info[0] is None:
                raise
            # The block's own exception goes on; the lease ends after its ttl.


class Lease(_Held):
    """A lease of its own, with its own connection and heartbeat.

    kind      'exclusive' (fencing_acquire), 'shared' (fencing_acquire_shared)
              or 'permit' (one of `permits` of a semaphore, fencing_acquire_permit)
    holder    the application's label; default host:pid:random
    ttl       seconds: the server ends the lease ttl after the last renewal
    wait      seconds to wait for a busy lock (None: one attempt)
    on_lost   called once, with a reason, from a thread of the package's
    payload   JSON text published with an exclusive lease (fencing_leases)
    heartbeat seconds between renewals (default ttl/3)
    shared_heartbeat  the client's heartbeat (pg_fencing.Client passes its
              own); None, the process's default one for conninfo
    """

    def __init__(self, conninfo: str, lock_name: str, *, kind: str = "exclusive",
                 permits: Optional[int] = None, holder: Optional[str] = None,
                 ttl: float = 10.0, wait: Optional[float] = None,
                 on_lost: Optional[Callable[[str], None]] = None,
                 payload: Optional[str] = None, heartbeat: Optional[float] = None,
                 shared_heartbeat: Optional[Heartbeat] = None):
        check_lease_arguments(kind, permits, payload, wait)
        self.conninfo = conninfo
        self.lock_name = lock_name
        self.kind = kind
        self.permits = permits
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.wait = wait
        self.payload = payload
        self._beat = (shared_heartbeat or default_heartbeat(conninfo)).beat(
            "lease", self.ttl, heartbeat,
            refused="the lease expired, was released, revoked or taken over", on_lost=on_lost)
        self._conn: Optional[Connection] = None
        self._released = False

    def describe(self) -> str:
        return describe_lock(self.kind, self.lock_name)

    def acquire(self) -> "Lease":
        """Takes the lock; LockTimeout when it stays busy."""
        if self.token is not None:
            raise RuntimeError("this lease was acquired already; make a new one")
        self._conn = Connection(self.conninfo, f"pg_fencing lease {self.holder}")
        sent = time.monotonic()
        try:
            token = self._attempt()
        except BaseException:
            self._close()
            raise
        if token is None:
            self._close()
            raise LockTimeout(busy_message(self.describe(), self.kind, self.wait))
        self.token = int(token)
        self._beat.begin(sent)
        try:
            # A wait can outlast much of the ttl: the server started the lease
            # when it granted it.  One renewal right away gives a send time
            # close to the grant.
            if self.wait is not None and time.monotonic() - sent > self._beat.margin:
                renew_sent = time.monotonic()
                try:
                    renewed = self._renew(renew_sent + self.ttl)
                except (NoAnswer, StatementFailed) as error:
                    # Internal errors of _wire: what leaves acquire() (and
                    # Election.campaign()) is the package's own.
                    raise LeaseLost(f"{self.describe()} was granted (token {self.token}) but "
                                    f"could not be renewed: {error}") from error
                if not renewed:
                    raise LeaseLost(f"{self.describe()} was granted (token {self.token}) but "
                                    "ended before it could be renewed; ttl too short?")
                self._beat.renewed(renew_sent)
        except BaseException:
            self._release_quietly()
            raise
        self._beat.start({"lock_name": self.lock_name, "id": self.token, "ttl": interval(self.ttl)})
        return self

    def _attempt(self) -> Optional[str]:
        assert self._conn is not None
        sql, params = acquire_statement(self.kind, self.lock_name, self.holder, self.ttl,
                                        self.wait, self.permits, self.payload)
        if self.wait is not None:
            return self._conn.row(sql, params)[0]
        # READ COMMITTED whatever default_transaction_isolation says: at a
        # stricter level an acquire that meets a just-changed row fails (40001).
        self._conn.row("BEGIN ISOLATION LEVEL READ COMMITTED")
        try:
            row = self._conn.row(sql, params)
            self._conn.row("COMMIT")
        except BaseException:
            if not self._conn.closed:
                self._conn.row("ROLLBACK")
            raise
        return row[0]

    def release(self) -> bool:
        """Gives the lock back: True if it was still ours on the server.
        Idempotent: later calls return False."""
        if self.token is None or self._released:
            return False
        self._released = True
        self._beat.stop()
        try:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    # Its connection broke meanwhile (it sat idle while the
                    # heartbeat renewed): release on a new one rather than
                    # leave the lock to run out.
                    self._conn = Connection(self.conninfo, f"pg_fencing lease {self.holder}")
                try:
                    return bool(self._conn.row("SELECT fencing_release(%s, %s::fencing_token)",
                                               (self.lock_name, self.token))[0])
                except psycopg.OperationalError:
                    if attempt == 2 or not self._conn.closed:
                        raise  # an error of the statement's own, or broken twice
            raise AssertionError("not reached")
        finally:
            self._close()

    def held(self) -> bool:
        return self.token is not None and not self._released and self._beat.lost_reason is None

    @property
    def lost_reason(self) -> Optional[str]:
        if self._released:
            return "released"
        return self._beat.lost_reason if self.token is not None else None

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits for on_lost to have been called; False on timeout."""
        return self._beat.wait_lost(timeout)

    def __enter__(self) -> "Lease":
        if self.token is None:
            self.acquire()
        return self

    def _renew(self, deadline: float) -> bool:
        """The renewal right after a long wait, on the lease's connection
        (the heartbeat renews it from then on)."""
        assert self._conn is not None
        return self._conn.value_by("SELECT fencing_renew($1, $2::fencing_token, $3::interval)",
                                   [self.lock_name, str(self.token), interval(self.ttl)],
                                   deadline, what=f"the renewal of {self.describe()}") == "t"

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _release_quietly(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "held" if self.held() else "not held"
        return f"<Lease {self.describe()} holder={self.holder!r} token={self.token} {state}>"
