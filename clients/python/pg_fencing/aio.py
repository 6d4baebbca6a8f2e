"""The asyncio twin of pg_fencing, with the same names:

    from pg_fencing import aio
    client = aio.Client("dbname=app")
    async with client.lock("nightly-report", ttl=10, wait=30) as lease:
        await lease.execute(db, "UPDATE reports SET token = %s WHERE id = 7", (lease.token,))

db is a psycopg.AsyncConnection.  One task per client (and event loop),
on one AsyncConnection of its own (AsyncHeartbeat), renews every lease
and session of the client, in one statement whenever any is due, as the
threaded client's heartbeat thread does (pg_fencing._heartbeat: the same
scheduling and judgement); each statement is given up at the earliest
safe deadline of the leases and sessions in it (asyncio.wait_for; the
connection is then closed).  held() is judged on the monotonic clock as in
the threaded client, so an event loop that was blocked (or a process that
was paused) wakes up to held() False.
A wait in a session (for an exclusive lease, a shared lease or a permit),
and a campaign, is a place in the lock's line (1.10, pg_fencing._line):
short statements, no server connection held between them; with
aio.Client(listen=True) one connection per client LISTENs on
fencing_line, read by the event loop, and wakes the place whose number it
hears.  lock_all with a wait waits in line for one lock after the other
(as the threaded Session.lock_all).  Cancelling the awaiting task leaves
the line (giving back a grant made meanwhile, and lock_all what it took).
The other waits (a lease of its own; on a server before 1.10 every wait
in a session) are one statement (CALL fencing_await, a waiting function),
holding no snapshot while they sleep, and cancelling the awaiting task
cancels the wait (the statement is cancelled with it).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg

from ._heartbeat import (RENEW, RENEWAL_ERRORS, Beat, default_heartbeat, heartbeat_name, plan,
                         renewal_param, renewal_round)
from ._line import (CHANNEL as LINE_CHANNEL, HELD_IN_SESSION, JOIN, LEAVE, LISTEN_STARTUP, NO_LINE,
                    POLL_PLACE, RELEASE_AND_LEAVE, Board, Watch, acquire_order, last_poll_at,
                    not_all_message, plain_names, poll_period)
from ._wire import NoAnswer, connect, interval
from .election import (_READ_LEADER, _UNSET, CHANNEL, Candidacy, Leader, _changed, may_mend,
                       reconnect_delay)
from .errors import (SESSION_ENDED, FencingError, GuardError, LeaseEndedError, LeaseLost, LockTimeout,
                     MissingTokenError, NeverGrantedTokenError, StaleTokenError, raise_mapped,
                     seconds)
from . import client
from .lease import (KINDS, Judged, acquire_statement, busy_message, check_lease_arguments,
                    default_holder, describe_lock)
from .session import BRIEF, WORK_GRACE, InSession, ended_by_the_server, interval_or_none

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


class AsyncBeat(Beat):
    """pg_fencing._heartbeat.Beat for asyncio: on_lost is called from the
    heartbeat's task, wait_lost() is a coroutine."""

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        end = None if timeout is None else time.monotonic() + timeout
        while not self._lost_reported.is_set():
            if end is not None and time.monotonic() >= end:
                return False
            await asyncio.sleep(0.02)
        return True


class _LoopBeats:
    """What an AsyncHeartbeat renews in one event loop, and its task."""

    def __init__(self) -> None:
        self.beats: set = set()
        self.changed = asyncio.Event()
        self.task: Optional[asyncio.Task] = None


class AsyncHeartbeat:
    """pg_fencing._heartbeat.Heartbeat for asyncio: a client's one task (per
    event loop) renewing every lease and session added to it, on one
    AsyncConnection of its own (application_name: self.application_name),
    opened at the first renewal and closed once nothing is left."""

    def __init__(self, conninfo: str, application_name: Optional[str] = None):
        self.conninfo = conninfo
        self.application_name = application_name or heartbeat_name()
        self._loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBeats]" = \
            weakref.WeakKeyDictionary()

    def beat(self, what: str, ttl: float, period: Optional[float], refused: str,
             on_lost: OnLost) -> AsyncBeat:
        return AsyncBeat(self, what, ttl, period, refused, on_lost)

    def add(self, beat: AsyncBeat) -> None:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopBeats()
        beat._loop_beats = state  # type: ignore[attr-defined]
        state.beats.add(beat)
        if state.task is None:
            state.task = loop.create_task(self._run(state))
        state.changed.set()

    def remove(self, beat: AsyncBeat) -> None:
        state = getattr(beat, "_loop_beats", None)
        if state is not None:
            state.beats.discard(beat)
            try:
                state.changed.set()
            except RuntimeError:
                pass  # its event loop is closed: its task went with it

    def renewing_here(self) -> bool:
        return False  # on_lost is called from the task: the event loop's only thread

    async def _run(self, state: _LoopBeats) -> None:
        conn: Optional[psycopg.AsyncConnection] = None
        try:
            while True:
                state.beats = {beat for beat in state.beats if not beat.ended}
                if not state.beats:
                    state.task = None  # at once: the next add() starts another
                    return
                state.changed.clear()
                beats = [beat for beat in list(state.beats) if not beat.overdue()]
                batch, wake_at = plan(beats, time.monotonic())
                if batch:
                    conn = await self._renew(conn, batch)
                elif wake_at is not None:
                    try:
                        await asyncio.wait_for(state.changed.wait(), max(0.0, wake_at - time.monotonic()))
                    except asyncio.TimeoutError:
                        pass
        except asyncio.CancelledError:
            raise
        except Exception as error:  # nothing leaves the task silently
            beats, state.beats = list(state.beats), set()
            state.task = None
            for beat in beats:
                beat.mark_lost(f"heartbeat failed: {error!r}")
        finally:
            if state.task is asyncio.current_task():
                state.task = None
            if conn is not None:
                try:
                    await conn.close()
                except Exception:
                    pass

    async def _renew(self, conn: Optional[psycopg.AsyncConnection],
                     batch: list) -> Optional[psycopg.AsyncConnection]:
        """One round (renewal_round), each statement bounded by its bound;
        the connection to use next (None: none usable)."""
        rounds = renewal_round(batch)
        part, bound = next(rounds)
        while True:
            sent = time.monotonic()
            allowed = max(0.0, bound - sent)
            held = [conn]
            rows = error = None
            try:
                rows = await asyncio.wait_for(self._attempt(held, part), allowed)
            except asyncio.TimeoutError:
                error = NoAnswer(f"the renewal of {len(part)} leases and sessions", allowed)
                await _dropped_quietly(held[0])
                held[0] = None
            except RENEWAL_ERRORS as failure:
                error = failure
                if held[0] is not None and held[0].closed:
                    await _dropped_quietly(held[0])
                    held[0] = None
            conn = held[0]
            try:
                part, bound = rounds.send((rows, error, conn is not None, sent))
            except StopIteration:
                return conn

    async def _attempt(self, held: list, part: list) -> list:
        if held[0] is None:
            held[0] = await _connect(self.conninfo, self.application_name)
        cur = await held[0].execute(RENEW.format("%s"), (renewal_param(part),))
        return [(int(i), bool(renewed)) for i, renewed in await cur.fetchall()]


async def _dropped_quietly(conn: Optional[psycopg.AsyncConnection]) -> None:
    if conn is not None:
        try:
            await conn.close()
        except Exception:
            pass


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
                 payload: Optional[str] = None, heartbeat: Optional[float] = None,
                 shared_heartbeat: Optional[AsyncHeartbeat] = None):
        check_lease_arguments(kind, permits, payload, wait)
        self.conninfo, self.lock_name, self.kind, self.permits = conninfo, lock_name, kind, permits
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.wait = wait
        self.payload = payload
        self._beat = (shared_heartbeat or default_heartbeat(conninfo, AsyncHeartbeat)).beat(
            "lease", self.ttl, heartbeat, "the lease expired, was released, revoked or taken over",
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
        self._beat.start({"lock_name": self.lock_name, "id": self.token, "ttl": interval(self.ttl)})
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
        self._beat.stop()
        try:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    # Broken while it sat idle: release on a new one.
                    self._conn = await _connect(self.conninfo, f"pg_fencing lease {self.holder}")
                try:
                    return bool((await _row(self._conn, "SELECT fencing_release(%s, %s::fencing_token)",
                                            (self.lock_name, self.token)))[0])
                except psycopg.OperationalError:
                    if attempt == 2 or not self._conn.closed:
                        raise  # an error of the statement's own, or broken twice
            raise AssertionError("not reached")
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
        """The renewal right after a long wait (the heartbeat's from then on)."""
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
        return await self.session._release(self.lock_name, self.token, self.place)

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        return await self.session.wait_lost(timeout)


class AsyncWatch(Watch):
    """pg_fencing._line.Watch on the event loop."""

    def __init__(self, board: Optional[Board] = None, since: int = 0):
        super().__init__(board, since)
        self.event = asyncio.Event()  # type: ignore[assignment]

    async def wait(self, timeout: float) -> bool:  # type: ignore[override]
        try:
            await asyncio.wait_for(self.event.wait(), max(0.0, timeout))
            woken = True
        except asyncio.TimeoutError:
            woken = False
        self.event.clear()
        return woken


class Listener:
    """pg_fencing._line.Listener on the event loop: one connection per
    client LISTENing on fencing_line while some wait uses it, read by a
    task when its socket is readable (loop.add_reader), no statement run."""

    def __init__(self, conninfo: str):
        self.conninfo = conninfo
        self.board = Board()
        self.failure: Optional[BaseException] = None
        self._users = 0
        self._task: Optional[asyncio.Task] = None
        self._listening: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[AsyncWatch]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # the client is used from a new event loop
            self._loop, self._task, self._users = loop, None, 0
            self._listening = asyncio.Event()
        assert self._listening is not None
        self._users += 1
        if self._task is None or self._task.done():
            self._listening.clear()
            self._task = loop.create_task(self._run())
        watch: Optional[AsyncWatch] = None
        try:
            try:
                await asyncio.wait_for(self._listening.wait(), LISTEN_STARTUP)
            except asyncio.TimeoutError:
                pass  # the wait polls on its timer meanwhile
            watch = AsyncWatch(self.board, self.board.mark())
            yield watch
        finally:
            if watch is not None:
                watch.close()
            self._users -= 1
            if self._users == 0 and self._task is not None:
                self._task.cancel()  # it closes its connection
                self._task = None

    @property
    def listening(self) -> bool:
        return self._listening is not None and self._listening.is_set()

    async def _run(self) -> None:
        assert self._listening is not None
        loop = asyncio.get_running_loop()
        conn: Optional[psycopg.AsyncConnection] = None
        failures = 0
        readable = asyncio.Event()
        try:
            while True:
                if conn is None:
                    try:
                        conn = await _connect(self.conninfo, "pg_fencing line")
                        await conn.execute(f"LISTEN {LINE_CHANNEL}")
                    except psycopg.Error as error:
                        conn = await _dropped(conn)
                        if not may_mend(error):
                            self.failure = error
                            return  # the waits poll on their timer
                        failures += 1
                        await asyncio.sleep(max(0.1, reconnect_delay(failures)))
                        continue
                    failures = 0
                    self.failure = None
                    self._listening.set()
                    self.board.wake_all()
                pg = conn.pgconn
                fd = pg.socket
                readable.clear()
                loop.add_reader(fd, readable.set)
                try:
                    await readable.wait()
                finally:
                    loop.remove_reader(fd)
                try:
                    pg.consume_input()
                    while True:
                        notify = pg.notifies()
                        if notify is None:
                            break
                        if notify.relname == LINE_CHANNEL.encode():
                            self.board.heard(notify.extra.decode(errors="replace"))
                except (psycopg.Error, OSError):
                    self._listening.clear()
                    conn = await _dropped(conn)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # nothing leaves the task silently; the waits poll on
            self.failure = error
        finally:
            self._listening.clear()
            try:
                await _dropped(conn)
            except Exception:
                pass


class Session:
    """pg_fencing.Session for asyncio; open it with `await client.session(...)`."""

    def __init__(self, conninfo: str, *, ttl: float = 10.0, holder: Optional[str] = None,
                 on_lost: OnLost = None, heartbeat: Optional[float] = None,
                 listener: Optional[Listener] = None, poll: Optional[float] = None,
                 shared_heartbeat: Optional[AsyncHeartbeat] = None):
        self.conninfo = conninfo
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self._listener = listener
        self._poll = poll_period(poll, listener is not None)
        self._has_line: Optional[bool] = None  # whether the server has the line (1.10)
        # How many places the session has in each lock's line: see _wait().
        self._places: Dict[str, int] = {}
        self._nudges: set = set()  # the events of the waits in line, set by close()
        self._beat = (shared_heartbeat or default_heartbeat(conninfo, AsyncHeartbeat)).beat(
            "session", self.ttl, heartbeat, "the session ended, or was closed", on_lost)
        self._work_lock = asyncio.Lock()
        self._closed = False
        self.id: int = 0

    async def open(self) -> "Session":
        self._work = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
        try:
            sent = time.monotonic()
            self.id = int((await _row(self._work, "SELECT fencing_session_open(%s, %s::interval)",
                                      (self.holder, interval(self.ttl))))[0])
        except BaseException:
            await _dropped_quietly(self._work)
            raise
        self._beat.begin(sent)
        self._beat.start({"id": self.id, "ttl": interval(self.ttl)})
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
        """As the threaded Session.lock(): a wait, of any kind, is a place in
        the lock's line; cancelling the task leaves it."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if payload is not None and kind != "exclusive":
            raise ValueError("a payload needs an exclusive lease")
        if wait is not None and wait < 0:
            raise ValueError(f"wait must not be negative, got {wait}")
        if wait is not None:
            token, place = await self._wait(lock_name, wait, kind, permits, payload)
            if token is None:
                raise LockTimeout(f'lock "{lock_name}" is busy (waited {seconds(wait)})')
            return SessionLease(self, lock_name, kind, token, place)
        async with self._on_work(None, f'lock "{lock_name}"') as (conn, _):
            row = await _in_read_committed(
                conn, "SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb, "
                "kind => %s, permits => %s::integer)", (self.id, lock_name, payload, kind, permits))
        if row[0] is None:
            raise LockTimeout(f'lock "{lock_name}" is busy')
        return SessionLease(self, lock_name, kind, int(row[0]))

    async def lock_all(self, lock_names: Sequence[str], *,
                       wait: Optional[float] = None) -> List[SessionLease]:
        """As the threaded Session.lock_all(): with a wait, one lock after
        the other in line, in byte order of the names; cancelling the task
        gives back what it took and leaves its place."""
        names = list(lock_names)
        if wait is not None and wait > 0 and self._has_line is not False and plain_names(names):
            leases = await self._lock_all_in_line(names, wait)
            if leases is not None:
                return leases
        async with self._on_work(wait, f"all of {names}") as (conn, left):
            tokens = (await _in_read_committed(
                conn, "SELECT fencing_session_acquire_all(%s, %s::text[], %s::interval)::bigint[]",
                (self.id, names, None if left is None else interval(left))))[0]
        if tokens is None:
            raise LockTimeout(not_all_message(names, wait))
        return [SessionLease(self, n, "exclusive", int(t)) for n, t in zip(names, tokens)]

    async def _lock_all_in_line(self, names: List[str], wait: float) -> Optional[List[SessionLease]]:
        """As the threaded Session._lock_all_in_line()."""
        end = time.monotonic() + wait
        held = dict(zip(*(await self._line_row(HELD_IN_SESSION, (self.id, names)))))
        had: Dict[str, Tuple[int, Optional[int]]] = {n: (int(t), None) for n, t in held.items()}
        taken: List[Tuple[str, int]] = []  # (lock name, place) of the leases this call took
        try:
            for lock_name in acquire_order(names):
                if lock_name in had:
                    continue  # held already: kept, and not given back
                if not self._take_place(lock_name, "exclusive"):
                    raise AssertionError("an exclusive wait always has a place")
                token, place = await self._place_wait(lock_name, max(0.0, end - time.monotonic()))
                if token is NO_LINE:
                    return None
                if token is None:
                    raise LockTimeout(not_all_message(names, wait))
                taken.append((lock_name, place))
                had[lock_name] = (token, place)
        except BaseException:
            for lock_name, place in reversed(taken):
                self._forget_place(lock_name)
                if not self._closed:  # gives back the lease the place took
                    await asyncio.shield(self._leave_quietly(place))
            raise
        return [SessionLease(self, n, "exclusive", *had[n]) for n in names]

    async def _wait(self, lock_name: str, wait: Optional[float], kind: str = "exclusive",
                    permits: Optional[int] = None,
                    payload: Optional[str] = None) -> Tuple[Optional[int], Optional[int]]:
        """As the threaded Session._wait(): in line (1.10), or CALL
        fencing_await in the session where the line cannot hold the wait (a
        server before 1.10; a second shared lease or permit of a lock where
        the session has a place already)."""
        if self._has_line is not False and self._take_place(lock_name, kind):
            token, place = await self._place_wait(lock_name, wait, kind, permits, payload)
            if token is not NO_LINE:
                return token, place
        return await self._await_in_session(lock_name, wait, kind, permits, payload)

    async def _place_wait(self, lock_name: str, wait: Optional[float], kind: str = "exclusive",
                          permits: Optional[int] = None, payload: Optional[str] = None) -> tuple:
        """As the threaded Session._place_wait()."""
        try:
            token, place = await self._wait_in_line(lock_name, wait, kind, permits, payload)
        except psycopg.errors.UndefinedFunction as error:
            self._forget_place(lock_name)
            if "fencing_line_join" not in str(error):
                raise
            self._has_line = False
            return NO_LINE, None
        except BaseException:
            self._forget_place(lock_name)
            raise
        if token is None:
            self._forget_place(lock_name)
        return token, place

    def _take_place(self, lock_name: str, kind: str) -> bool:
        if kind != "exclusive" and self._places.get(lock_name, 0) > 0:
            return False
        self._places[lock_name] = self._places.get(lock_name, 0) + 1
        return True

    def _forget_place(self, lock_name: str) -> None:
        left = self._places.get(lock_name, 0) - 1
        if left > 0:
            self._places[lock_name] = left
        else:
            self._places.pop(lock_name, None)

    async def _await_in_session(self, lock_name: str, wait: Optional[float], kind: str,
                                permits: Optional[int],
                                payload: Optional[str]) -> Tuple[Optional[int], None]:
        """As the threaded Session._await_in_session(); cancelled, the
        statement is cancelled on the server, and the session goes on, on a
        new work connection made at the next turn."""
        end = None if wait is None else time.monotonic() + wait
        while True:
            chunk = 30.0 if end is None else max(0.0, end - time.monotonic())
            async with self._on_work(chunk, f'lock "{lock_name}"') as (conn, left):
                try:
                    row = await _row(conn, "CALL fencing_await(%s, session => %s, wait => %s::interval, "
                                     "kind => %s, permits => %s::integer, payload => %s::jsonb)",
                                     (lock_name, self.id, interval(left), kind, permits, payload))
                except asyncio.CancelledError:
                    await _cancelled(conn)
                    raise
            if row[0] is not None:
                return int(row[0]), None
            if end is not None:
                return None, None

    async def _wait_in_line(self, lock_name: str, wait: Optional[float], kind: str,
                            permits: Optional[int],
                            payload: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
        """As the threaded Session._wait_in_line(): (token, place) once
        granted, (None, None) when the wait ran out and the place was left;
        cancelled, it leaves the place too (shielded from a second cancel)."""
        end = None if wait is None else time.monotonic() + wait
        async with self._watch() as watch:
            self.check()
            place: Optional[int] = None
            token = None
            try:
                sent = time.monotonic()
                place, token = await self._line_row(JOIN, (self.id, lock_name, interval_or_none(wait),
                                                           payload, kind, permits))
                last = last_poll_at(end, sent, time.monotonic())
                watch.follow(place)
                while token is None:
                    left = None if last is None else last - time.monotonic()
                    if left is not None and left <= 0:
                        break  # the last poll (or the join) was just made: leave
                    await watch.wait(self._poll if left is None else min(self._poll, left))
                    # The last sleep ends just before the deadline
                    # (last_poll_at), and the place is polled then too.
                    self.check()
                    state, token = await self._line_row(POLL_PLACE, (place,))
                    if state == "gone" and token is None:
                        # Ended by the server: its session (the join says so),
                        # its wait, or a grant that ended unseen.  Again, at the back.
                        left = None if end is None else end - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        sent = time.monotonic()
                        place, token = await self._line_row(JOIN, (self.id, lock_name,
                                                                   interval_or_none(left), payload,
                                                                   kind, permits))
                        last = last_poll_at(end, sent, time.monotonic())
                        watch.follow(place)
                if token is not None:
                    return int(token), place
                leaving, place = place, None
                await self._line_row(LEAVE, (leaving,), check=False)
                return None, None
            except BaseException:
                if place is not None and not self._closed:
                    await asyncio.shield(self._leave_quietly(place))
                raise

    async def _leave_quietly(self, place: int) -> None:
        try:
            await self._line_row(LEAVE, (place,), check=False)
        except Exception:
            pass  # the place ends with its wait on the server, or with the session

    @asynccontextmanager
    async def _watch(self) -> AsyncIterator[AsyncWatch]:
        if self._listener is not None:
            async with self._listener.watching() as watch:
                self._nudges.add(watch.event)
                try:
                    yield watch
                finally:
                    self._nudges.discard(watch.event)
            return
        watch = AsyncWatch()
        self._nudges.add(watch.event)
        try:
            yield watch
        finally:
            self._nudges.discard(watch.event)

    def _nudge(self) -> None:
        for event in list(self._nudges):
            event.set()

    async def _line_row(self, sql: str, params: tuple, check: bool = True) -> tuple:
        """As the threaded Session._line_row(); a statement cancelled with
        its task is cancelled on the server, and its connection closed."""
        with ended_by_the_server(self.id, self._beat):
            for attempt in (1, 2):
                if check:
                    self.check()
                async with self._free_connection(patience=BRIEF) as conn:
                    try:
                        return await _row(conn, sql, params)
                    except asyncio.CancelledError:
                        await _cancelled(conn)
                        raise
                    except psycopg.OperationalError as error:
                        if attempt == 2 or error.sqlstate is not None or not conn.closed:
                            raise
        raise AssertionError("not reached")

    async def _reacquire(self, lock_name: str, payload: Optional[str]) -> Optional[int]:
        """As the threaded Session._reacquire() (Election.proclaim)."""
        with ended_by_the_server(self.id, self._beat):
            self.check()
            async with self._free_connection() as conn:
                row = await _in_read_committed(
                    conn, "SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb)",
                    (self.id, lock_name, payload))
        return None if row[0] is None else int(row[0])

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
    async def _free_connection(self, patience: float = 0.0) -> AsyncIterator[psycopg.AsyncConnection]:
        """The work connection if it is free now (or within patience
        seconds), else one of its own."""
        had = False
        if not self._work_lock.locked():
            await self._work_lock.acquire()  # free: had at once
            had = True
        elif patience > 0:
            try:
                await asyncio.wait_for(self._work_lock.acquire(), patience)
                had = True
            except asyncio.TimeoutError:
                pass
        if not had:
            own = await _connect(self.conninfo, f"pg_fencing session {self.holder}")
            try:
                yield own
            finally:
                await own.close()
            return
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
        """As the threaded Session.close(): on the work connection if it is
        free, else on a connection of its own (_free_connection), so that
        it ends a wait in another task instead of queueing behind it."""
        self._beat.stop()  # first: no on_lost during the close
        if self._closed:
            return 0
        self._closed = True
        self._nudge()  # a wait in line in another task sees the close at once
        try:
            try:
                async with self._free_connection() as conn:
                    return int((await _row(conn, "SELECT fencing_session_close(%s)", (self.id,)))[0])
            except psycopg.Error as error:
                if error.sqlstate == SESSION_ENDED:
                    return 0  # ended already: nothing left to release
                raise
        finally:
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

    async def _release(self, lock_name: str, token: int, place: Optional[int] = None) -> bool:
        """Never queues behind another task's wait (_free_connection); a
        lease taken through the line leaves its place too."""
        if place is not None:
            self._forget_place(lock_name)
        if self._closed:
            return False
        async with self._free_connection() as conn:
            if place is not None:
                return bool((await _row(conn, RELEASE_AND_LEAVE, (lock_name, token, place)))[0])
            return bool((await _row(conn, "SELECT fencing_release(%s, %s::fencing_token)",
                                    (lock_name, token)))[0])

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


class ElectionLease(SessionLease):
    """pg_fencing.election.ElectionLease for asyncio: release() gives the
    lease back and closes the candidate's session."""

    async def release(self) -> bool:
        try:
            released = await super().release()
        except BaseException:
            await _close_quietly(self.session)
            raise
        await self.session.close()
        return released


async def _close_quietly(session: Optional[Session]) -> None:
    if session is None:
        return
    try:
        await session.close()
    except Exception:
        pass  # the session ends at its ttl, the places and leases in it with it


class Election:
    """pg_fencing.Election for asyncio: a candidate waits as a place in the
    lock's line, in a session of its own; cancelling campaign() leaves the
    line and closes the session."""

    def __init__(self, conninfo: str, lock_name: str, *, holder: Optional[str] = None,
                 ttl: float = 10.0, on_lost: OnLost = None, listener: Optional[Listener] = None,
                 poll: Optional[float] = None, shared_heartbeat: Optional[AsyncHeartbeat] = None):
        self.conninfo, self.lock_name = conninfo, lock_name
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self.on_lost = on_lost
        self.lease: Optional[ElectionLease] = None
        self.session: Optional[Session] = None
        self._listener = listener
        self._poll = poll
        self._heartbeat = shared_heartbeat or default_heartbeat(conninfo, AsyncHeartbeat)

    async def campaign(self, payload: Optional[str] = None,
                       timeout: Optional[float] = None) -> ElectionLease:
        if self.lease is not None and self.lease.held():
            return self.lease
        await self._end_term()
        end = None if timeout is None else time.monotonic() + timeout
        failures = 0
        while True:
            candidacy = Candidacy(self.on_lost)
            session = Session(self.conninfo, ttl=self.ttl, holder=self.holder,
                              on_lost=candidacy.session_lost, listener=self._listener, poll=self._poll,
                              shared_heartbeat=self._heartbeat)
            try:
                await session.open()
            except BaseException:
                await _close_quietly(session)
                raise
            self.session = session
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                token, place = await session._wait(self.lock_name, left, payload=payload)
                granted = token is not None and candidacy.lead()
            except LeaseLost:
                token, granted = None, False
            except BaseException:
                await asyncio.shield(self._end_term())
                raise
            if granted:
                self.lease = ElectionLease(session, self.lock_name, "exclusive", token, place)
                return self.lease
            await self._end_term()  # closing the session gives back a grant it got
            if token is None and end is not None and time.monotonic() >= end:
                raise LockTimeout(busy_message(describe_lock("exclusive", self.lock_name),
                                               "exclusive", timeout))
            failures += 1
            await asyncio.sleep(reconnect_delay(failures))

    async def _end_term(self) -> None:
        session, self.session, self.lease = self.session, None, None
        await _close_quietly(session)

    async def proclaim(self, payload: str) -> None:
        lease = self.lease
        if lease is None or not lease.held():
            raise LeaseLost(f'not the leader of "{self.lock_name}"')
        token = await lease.session._reacquire(self.lock_name, payload)
        if token is not None and token != lease.token:
            await lease.session._release(self.lock_name, token)
        if token is None or token != lease.token:
            raise LeaseLost(f'no longer the leader of "{self.lock_name}"')

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
        lease = self.lease
        if lease is None:
            await self._end_term()
            return False
        self.lease = self.session = None
        return await lease.release()


class Client(client.Client):
    """pg_fencing.Client for asyncio: lock(), semaphore(), shared() and
    election() as there (leases for `async with`); session() and leader()
    are coroutines."""

    _lease_class = Lease
    _election_class = Election
    _listener_class = Listener
    _heartbeat_class = AsyncHeartbeat  # type: ignore[assignment]

    async def session(self, ttl: float = 10.0, holder: Optional[str] = None,  # type: ignore[override]
                      on_lost: OnLost = None, heartbeat: Optional[float] = None) -> Session:
        return await Session(self.conninfo, ttl=ttl, holder=holder, on_lost=on_lost,
                             heartbeat=heartbeat, listener=self._listener, poll=self.poll,
                             shared_heartbeat=self._heartbeat).open()

    async def leader(self, name: str) -> Optional[Leader]:  # type: ignore[override]
        conn = await _connect(self.conninfo, "pg_fencing leader")
        try:
            return (await _read_leader(conn, name))[0]
        finally:
            await conn.close()
