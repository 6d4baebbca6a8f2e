"""The asyncio twin of pg_fencing, with the same names:

    from pg_fencing import aio
    client = aio.Client("dbname=app")
    async with client.lock("nightly-report", ttl=10, wait=30) as lease:
        await lease.execute(db, "UPDATE reports SET token = %s WHERE id = 7", (lease.token,))

db is a psycopg.AsyncConnection.  Each lease and session renews from a
task of its own on its own AsyncConnection, each renewal given up at the
safe deadline (asyncio.wait_for; the connection is then closed); held() is
judged on the monotonic clock as in the threaded client, so an event loop
that was blocked (or a process that was paused) wakes up to held() False.
Waits are CALL fencing_await, holding no snapshot while they sleep, and
cancelling the awaiting task cancels the wait (the statement is cancelled
with it).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, List, Optional, Sequence, Tuple

import psycopg

from ._heartbeat import RENEWAL_ERRORS, LeaseClock
from ._wire import NoAnswer, connect, interval
from .election import _READ_LEADER, _UNSET, CHANNEL, Leader, _changed, may_mend, reconnect_delay
from .errors import (SESSION_ENDED, FencingError, GuardError, LeaseEndedError, LeaseLost, LockTimeout,
                     MissingTokenError, NeverGrantedTokenError, StaleTokenError, raise_mapped,
                     seconds)
from . import client
from .lease import (KINDS, Judged, acquire_statement, busy_message, check_lease_arguments,
                    default_holder, describe_lock)
from .session import WORK_GRACE, InSession, ended_by_the_server

__all__ = [
    "Client", "Election", "FencingError", "GuardError", "Leader", "Lease", "LeaseEndedError",
    "LeaseLost", "LockTimeout", "MissingTokenError", "NeverGrantedTokenError", "Session",
    "SessionLease", "StaleTokenError", "fenced_execute",
]

OnLost = Optional[Callable[[str], None]]


async def _connect(conninfo: str, name: str) -> psycopg.AsyncConnection:
    # _wire.connect: autocommit, and no named prepared statements (PgBouncer).
    return await connect(psycopg.AsyncConnection, conninfo, name)


async def _cancelled(conn: psycopg.AsyncConnection) -> None:
    """After a task awaiting conn was cancelled: the statement is cancelled
    on the server too (psycopg 3.1 leaves it running -- a wait would go on
    in the server for all its length), and the connection closed."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, conn.cancel)
    except Exception:
        pass  # the connection is closed below; the server ends the wait at its end
    try:
        await conn.close()
    except Exception:
        pass


async def _dropped(conn: Optional[psycopg.AsyncConnection]) -> None:
    if conn is not None and not conn.closed:
        await conn.close()
    return None


async def _row(conn: psycopg.AsyncConnection, sql: str, params: Sequence[Any] = ()):
    cur = await conn.execute(sql, params)
    return await cur.fetchone() if cur.description else None


async def _in_read_committed(conn: psycopg.AsyncConnection, sql: str, params: Sequence[Any]):
    """One statement in a READ COMMITTED transaction of its own."""
    await conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
    try:
        row = await _row(conn, sql, params)
        await conn.execute("COMMIT")
    except BaseException:
        if not conn.closed:
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                pass
        raise
    return row


async def fenced_execute(conn: psycopg.AsyncConnection, sql: str,
                         params: Sequence[Any] | dict = ()) -> int:
    """pg_fencing.fenced_execute() on an AsyncConnection."""
    try:
        async with conn.transaction():
            return (await conn.execute(sql, params)).rowcount
    except psycopg.Error as error:
        raise_mapped(error)
        raise  # not reached


class _AsyncHeartbeat(LeaseClock):
    """The renewing task: renew() sends one renewal (NoAnswer past the
    deadline), drop() closes its connection after one that failed."""

    def __init__(self, what, ttl, period, renew, drop, refused, on_lost):
        super().__init__(what, ttl, period, refused, on_lost)
        self._renew = renew
        self._drop = drop
        self._task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> bool:
        if not self.mark_stopped():
            return False
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        return True

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        end = None if timeout is None else time.monotonic() + timeout
        while not self._lost_reported.is_set():
            if end is not None and time.monotonic() >= end:
                return False
            await asyncio.sleep(0.02)
        return True

    async def _run(self) -> None:
        try:
            while not self.overdue():
                now = time.monotonic()
                if now < self.due:
                    await asyncio.sleep(min(self.due, self.deadline) - now)
                    continue
                sent = time.monotonic()
                allowed = max(0.0, self.deadline - time.monotonic())
                try:
                    renewed, error = await asyncio.wait_for(self._renew(), allowed), None
                except asyncio.TimeoutError:
                    renewed, error = None, NoAnswer(f"the renewal of the {self.what}", allowed)
                    await self._drop()
                except RENEWAL_ERRORS as failure:
                    renewed, error = None, failure
                    await self._drop()
                if not self.judge(renewed, error):
                    return
                self.renewed(sent)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # nothing leaves the task silently
            self.mark_lost(f"heartbeat failed: {error!r}")


class _Held(Judged):
    """An asyncio lease: execute() and release() are coroutines."""

    async def execute(self, conn: psycopg.AsyncConnection, sql: str,
                      params: Sequence[Any] | dict = ()) -> int:
        self.check()
        return await fenced_execute(conn, sql, params)

    async def release(self) -> bool:
        raise NotImplementedError

    async def __aexit__(self, *exc_info) -> None:
        try:
            await self.release()
        except psycopg.Error:
            if exc_info[0] is None:
                raise


class Lease(_Held):
    """pg_fencing.Lease for asyncio: the same arguments."""

    def __init__(self, conninfo: str, lock_name: str, *, kind: str = "exclusive",
                 permits: Optional[int] = None, holder: Optional[str] = None,
                 ttl: float = 10.0, wait: Optional[float] = None, on_lost: OnLost = None,
                 payload: Optional[str] = None, heartbeat: Optional[float] = None):
        check_lease_arguments(kind, permits, payload, wait)
        self.conninfo, self.lock_name, self.kind, self.permits = conninfo, lock_name, kind, permits
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.wait = wait
        self.payload = payload
        self._beat = _AsyncHeartbeat("lease", self.ttl, heartbeat, self._renew, self._close,
                                     "the lease expired, was released, revoked or taken over",
                                     on_lost)
        self._conn: Optional[psycopg.AsyncConnection] = None
        self._released = False

    def describe(self) -> str:
        return describe_lock(self.kind, self.lock_name)

    async def acquire(self) -> "Lease":
        if self.token is not None:
            raise RuntimeError("this lease was acquired already; make a new one")
        self._conn = await _connect(self.conninfo, f"pg_fencing lease {self.holder}")
        sent = time.monotonic()
        try:
            token = await self._attempt()
        except asyncio.CancelledError:
            await _cancelled(self._conn)
            raise
        except BaseException:
            await self._close()
            raise
        if token is None:
            await self._close()
            raise LockTimeout(busy_message(self.describe(), self.kind, self.wait))
        self.token = int(token)
        self._beat.begin(sent)
        if self.wait is not None and time.monotonic() - sent > self._beat.margin:
            renew_sent = time.monotonic()
            if not await self._renew():
                await self.release()
                raise LeaseLost(f"{self.describe()} was granted (token {self.token}) but ended "
                                "before it could be renewed; ttl too short?")
            self._beat.renewed(renew_sent)
        self._beat.start()
        return self

    async def _attempt(self) -> Optional[str]:
        assert self._conn is not None
        sql, params = acquire_statement(self.kind, self.lock_name, self.holder, self.ttl,
                                        self.wait, self.permits, self.payload)
        if self.wait is not None:
            return (await _row(self._conn, sql, params))[0]
        return (await _in_read_committed(self._conn, sql, params))[0]

    async def release(self) -> bool:
        if self.token is None or self._released:
            return False
        self._released = True
        await self._beat.stop()
        if self._conn is None or self._conn.closed:
            self._conn = await _connect(self.conninfo, f"pg_fencing lease {self.holder}")
        try:
            return bool((await _row(self._conn, "SELECT fencing_release(%s, %s::fencing_token)",
                                    (self.lock_name, self.token)))[0])
        finally:
            await self._close()

    def held(self) -> bool:
        return self.token is not None and not self._released and self._beat.lost_reason is None

    @property
    def lost_reason(self) -> Optional[str]:
        if self._released:
            return "released"
        return self._beat.lost_reason if self.token is not None else None

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        return await self._beat.wait_lost(timeout)

    async def __aenter__(self) -> "Lease":
        if self.token is None:
            await self.acquire()
        return self

    async def _renew(self) -> bool:
        assert self._conn is not None
        return bool((await _row(self._conn, "SELECT fencing_renew(%s, %s::fencing_token, %s::interval)",
                                (self.lock_name, self.token, interval(self.ttl))))[0])

    async def _close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            await self._conn.close()


class SessionLease(InSession, _Held):
    async def release(self) -> bool:
        if self._released:
            return False
        self._released = True
        return await self.session._release(self.lock_name, self.token)


class Session:
    """pg_fencing.Session for asyncio; open it with `await client.session(...)`."""

    def __init__(self, conninfo: str, *, ttl: float = 10.0, holder: Optional[str] = None,
                 on_lost: OnLost = None, heartbeat: Optional[float] = None):
        self.conninfo = conninfo
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self._beat = _AsyncHeartbeat("session", self.ttl, heartbeat, self._renew,
                                     self._drop_heartbeat, "the session ended, or was closed",
                                     on_lost)
        self._work_lock = asyncio.Lock()
        self._closed = False
        self.id: int = 0

    async def open(self) -> "Session":
        self._beat_conn = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
        self._work = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
        sent = time.monotonic()
        self.id = int((await _row(self._beat_conn, "SELECT fencing_session_open(%s, %s::interval)",
                                  (self.holder, interval(self.ttl))))[0])
        self._beat.begin(sent)
        self._beat.start()
        return self

    def held(self) -> bool:
        return not self._closed and self._beat.lost_reason is None

    @property
    def lost_reason(self) -> Optional[str]:
        return "closed" if self._closed else self._beat.lost_reason

    def check(self) -> None:
        if not self.held():
            raise LeaseLost(f"fencing session {self.id} is no longer held: {self.lost_reason}")

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        return await self._beat.wait_lost(timeout)

    async def lock(self, lock_name: str, *, wait: Optional[float] = None, kind: str = "exclusive",
                   permits: Optional[int] = None, payload: Optional[str] = None) -> SessionLease:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        async with self._on_work(wait, f'lock "{lock_name}"') as (conn, left):
            if left is None:
                row = await _in_read_committed(
                    conn, "SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb, "
                    "kind => %s, permits => %s::integer)", (self.id, lock_name, payload, kind, permits))
            else:
                try:
                    row = await _row(conn,
                                     "CALL fencing_await(%s, session => %s, wait => %s::interval, "
                                     "kind => %s, permits => %s::integer, payload => %s::jsonb)",
                                     (lock_name, self.id, interval(left), kind, permits, payload))
                except asyncio.CancelledError:
                    # The wait is cancelled on the server; the session goes on,
                    # on a new work connection made at the next turn.
                    await _cancelled(conn)
                    raise
        if row[0] is None:
            raise LockTimeout(f'lock "{lock_name}" is busy'
                              + (f" (waited {seconds(wait)})" if wait is not None else ""))
        return SessionLease(self, lock_name, kind, int(row[0]))

    async def lock_all(self, lock_names: Sequence[str], *,
                       wait: Optional[float] = None) -> List[SessionLease]:
        names = list(lock_names)
        async with self._on_work(wait, f"all of {names}") as (conn, left):
            tokens = (await _in_read_committed(
                conn, "SELECT fencing_session_acquire_all(%s, %s::text[], %s::interval)::bigint[]",
                (self.id, names, None if left is None else interval(left))))[0]
        if tokens is None:
            raise LockTimeout(f"not all of {names} could be had"
                              + (f" (waited {seconds(wait)})" if wait is not None else ""))
        return [SessionLease(self, n, "exclusive", int(t)) for n, t in zip(names, tokens)]

    @asynccontextmanager
    async def _on_work(self, wait: Optional[float],
                       what: str) -> AsyncIterator[Tuple[psycopg.AsyncConnection, Optional[float]]]:
        """As the threaded Session._on_work: the acquires that wait take
        turns on the work connection, the wait for the turn counting against
        theirs; one that does not wait never queues behind another task's."""
        with ended_by_the_server(self.id, self._beat):
            self.check()
            if wait is None:
                async with self._free_connection() as conn:
                    yield conn, None
                return
            start = time.monotonic()
            try:
                await asyncio.wait_for(self._work_lock.acquire(), wait)
            except asyncio.TimeoutError:
                raise LockTimeout(f"{what} not tried: the session's connection stayed busy with "
                                  f"another task's wait for the whole {seconds(wait)}") from None
            try:
                self.check()  # closed meanwhile?
                await self._reconnect_work()
                yield self._work, max(0.0, wait - (time.monotonic() - start))
            finally:
                await self._end_turn()

    @asynccontextmanager
    async def _free_connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """The work connection if it is free now, else one of its own."""
        if self._work_lock.locked():
            own = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
            try:
                yield own
            finally:
                await own.close()
            return
        await self._work_lock.acquire()  # free: had at once
        try:
            await self._reconnect_work()
            yield self._work
        finally:
            await self._end_turn()

    async def _end_turn(self) -> None:
        try:
            if self._closed:  # close() gave up waiting for this turn to end
                await self._work.close()
        finally:
            self._work_lock.release()

    async def _reconnect_work(self) -> None:
        """Under _work_lock: a broken or cancelled work connection is made again."""
        if self._work.closed:
            self._work = await _connect(self.conninfo, f"pg_fencing session {self.holder}")

    async def close(self) -> int:
        """As the threaded Session.close(): over the heartbeat's connection,
        so that it ends a wait in another task instead of queueing behind it."""
        await self._beat.stop()  # first: no on_lost during the close
        if self._closed:
            return 0
        self._closed = True
        try:
            if self._beat_conn.closed:  # given up after a failed renewal: a new one
                self._beat_conn = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
            try:
                return int((await _row(self._beat_conn, "SELECT fencing_session_close(%s)",
                                       (self.id,)))[0])
            except psycopg.Error as error:
                if error.sqlstate == SESSION_ENDED:
                    return 0  # ended already: nothing left to release
                raise
        finally:
            await self._drop_heartbeat()
            await self._close_work()

    async def _close_work(self) -> None:
        """Closes the work connection once a wait on it has ended; one that
        goes on past WORK_GRACE is cancelled, and closed by its task."""
        try:
            await asyncio.wait_for(self._work_lock.acquire(), WORK_GRACE)
        except asyncio.TimeoutError:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._work.cancel)
            except psycopg.Error:
                pass  # it ended meanwhile, or the server is gone
            return
        try:
            await self._work.close()
        finally:
            self._work_lock.release()

    async def _release(self, lock_name: str, token: int) -> bool:
        """Never queues behind another task's wait (_free_connection)."""
        if self._closed:
            return False
        async with self._free_connection() as conn:
            return bool((await _row(conn, "SELECT fencing_release(%s, %s::fencing_token)",
                                    (lock_name, token)))[0])

    async def _renew(self) -> bool:
        return bool((await _row(self._beat_conn, "SELECT fencing_session_renew(%s, %s::interval)",
                                (self.id, interval(self.ttl))))[0])

    async def _drop_heartbeat(self) -> None:
        if not self._beat_conn.closed:
            await self._beat_conn.close()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc_info) -> None:
        try:
            await self.close()
        except Exception:
            if exc_info[0] is None:
                raise


async def _read_leader(conn: psycopg.AsyncConnection, lock_name: str):
    row = await _row(conn, _READ_LEADER, (lock_name,))
    if row is None:
        return None, None
    return Leader(row[0], int(row[1]), row[2]), row[3] / 1000.0


class Election:
    """pg_fencing.Election for asyncio."""

    def __init__(self, conninfo: str, lock_name: str, *, holder: Optional[str] = None,
                 ttl: float = 10.0, on_lost: OnLost = None):
        self.conninfo, self.lock_name = conninfo, lock_name
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.on_lost = on_lost
        self.lease: Optional[Lease] = None

    async def campaign(self, payload: Optional[str] = None, timeout: Optional[float] = None) -> Lease:
        if self.lease is not None and self.lease.held():
            return self.lease
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 30.0 if end is None else max(0.0, min(30.0, end - time.monotonic()))
            lease = Lease(self.conninfo, self.lock_name, holder=self.holder, ttl=self.ttl,
                          wait=wait, on_lost=self.on_lost, payload=payload)
            try:
                self.lease = await lease.acquire()
                return self.lease
            except LockTimeout:
                if end is not None and time.monotonic() >= end:
                    raise

    async def proclaim(self, payload: str) -> None:
        lease = self.lease
        if lease is None or not lease.held():
            raise LeaseLost(f'not the leader of "{self.lock_name}"')
        conn = await _connect(self.conninfo, f"pg_fencing election {self.holder}")
        try:
            token = (await _row(conn, "SELECT fencing_acquire(%s, %s, %s::interval, payload => %s::jsonb)",
                                (self.lock_name, self.holder, interval(self.ttl), payload)))[0]
            if token is not None and int(token) != lease.token:
                await _row(conn, "SELECT fencing_release(%s, %s::fencing_token)", (self.lock_name, token))
            if token is None or int(token) != lease.token:
                raise LeaseLost(f'no longer the leader of "{self.lock_name}"')
        finally:
            await conn.close()

    def is_leader(self) -> bool:
        return self.lease is not None and self.lease.held()

    async def leader(self) -> Optional[Leader]:
        conn = await _connect(self.conninfo, "pg_fencing election")
        try:
            return (await _read_leader(conn, self.lock_name))[0]
        finally:
            await conn.close()

    async def observe(self, reread: float = 5.0,
                      timeout: Optional[float] = None) -> AsyncIterator[Optional[Leader]]:
        """The leader now, then each change of (holder, token); what it
        reports is always re-read from fencing_leases, notifications are
        hints only.  A broken connection is made again, and a failure no
        reconnect mends raised, as in the threaded Election.observe()."""
        end = None if timeout is None else time.monotonic() + timeout
        notified = asyncio.Event()
        conn: Optional[psycopg.AsyncConnection] = None
        failures = 0
        last: object = _UNSET
        try:
            while end is None or time.monotonic() < end:
                try:
                    if conn is None:
                        conn = await _connect(self.conninfo, "pg_fencing observe")
                        conn.add_notify_handler(lambda notify: notified.set())
                        await conn.execute(f"LISTEN {CHANNEL}")
                    notified.clear()
                    leader, left = await _read_leader(conn, self.lock_name)
                except psycopg.Error as error:
                    conn = await _dropped(conn)
                    if not may_mend(error):
                        raise
                    failures += 1
                    await asyncio.sleep(reconnect_delay(failures))
                    continue
                failures = 0
                if last is _UNSET or _changed(last, leader):
                    last = leader
                    yield leader
                wake = reread if left is None else min(reread, left + 0.01)
                if end is not None:
                    wake = min(wake, end - time.monotonic())
                try:
                    await self._await_notice(conn, notified, wake)
                except psycopg.Error as error:
                    conn = await _dropped(conn)
                    if not may_mend(error):
                        raise
        finally:
            await _dropped(conn)

    async def _await_notice(self, conn: psycopg.AsyncConnection, notified: asyncio.Event,
                            timeout: float) -> None:
        # Notifications are read while a statement runs: an empty one that
        # waits on the socket's readability, bounded by the timeout.
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        fd = conn.pgconn.socket
        loop.add_reader(fd, readable.set)
        try:
            try:
                await asyncio.wait_for(readable.wait(), max(0.001, timeout))
            except asyncio.TimeoutError:
                return
        finally:
            loop.remove_reader(fd)
        await conn.execute("SELECT 1")  # consumes what arrived; the handler sees notifications

    async def resign(self) -> bool:
        if self.lease is None:
            return False
        try:
            return await self.lease.release()
        finally:
            self.lease = None


class Client(client.Client):
    """pg_fencing.Client for asyncio: lock(), semaphore(), shared() and
    election() as there (leases for `async with`); session() and leader()
    are coroutines."""

    _lease_class = Lease
    _election_class = Election

    async def session(self, ttl: float = 10.0, holder: Optional[str] = None,  # type: ignore[override]
                      on_lost: OnLost = None, heartbeat: Optional[float] = None) -> Session:
        return await Session(self.conninfo, ttl=ttl, holder=holder, on_lost=on_lost,
                             heartbeat=heartbeat).open()

    async def leader(self, name: str) -> Optional[Leader]:  # type: ignore[override]
        conn = await _connect(self.conninfo, "pg_fencing leader")
        try:
            return (await _read_leader(conn, name))[0]
        finally:
            await conn.close()
