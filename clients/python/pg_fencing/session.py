"""Sessions (pg_fencing 1.8): one keepalive for many leases.

    with client.session(ttl=10, on_lost=cb) as session:
        p3 = session.lock("partition-3")             # a SessionLease
        a, b = session.lock_all(["acct-7", "acct-9"])  # every lock or none
        p3.execute(db, "UPDATE parts SET token = %s, v = %s WHERE id = 3", (p3.token, v))
    # leaving the block closes the session, releasing every lease in it

The client's heartbeat renews the session (fencing_session_renew), and
with it every lease in it; its loss is every lease's, reported once.  That
heartbeat is one per client object (pg_fencing._heartbeat.Heartbeat: one
thread and one connection renewing every session and lease of the client
in one statement), so a renewal never queues behind a statement of the
session's; a Session made without a client (Session(conninfo, ...)) is
renewed by the process's default heartbeat for its conninfo.  The session
has one connection of its own, the work connection (open, acquires,
waits, releases, the close).  The close takes it only when it is free,
else a connection of its own for that one statement (as a release does),
so that it ends a wait on another thread instead of queueing behind it.

A wait for a lease of any kind (lock(name, wait=..., kind=...)) is a place
in the lock's line (1.10, pg_fencing._line): joined, then polled, each a
short statement on the work connection, so that the wait holds no server
connection -- through a transaction pooler, none at all between polls.
lock_all(wait=...) waits in
line too, for one lock after the other in byte order of the names (the
order fencing_session_acquire_all takes them in, so that two sessions
with overlapping sets cannot deadlock), giving back what it took when one
is not had in time; without a wait it is one statement
(fencing_session_acquire_all), which never sleeps.  The waits the line
cannot hold are one statement that waits: CALL fencing_await in the
session (on a server before 1.10, or for a second shared lease or permit
of a lock where the session has a place, see Session._wait), and on a
server before 1.10 lock_all(wait=...) (fencing_session_acquire_all with a
wait): such waits take turns on the work connection, the wait for the
turn counting against theirs.  A release, a statement of the
line, or an acquire without a wait, that finds it busy uses a connection
of its own.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import psycopg

from ._heartbeat import Heartbeat, LeaseClock, default_heartbeat
from ._line import (HELD_IN_SESSION, JOIN, LEAVE, NO_LINE, POLL_PLACE, RELEASE_AND_LEAVE, Listener,
                    Watch, acquire_order, last_poll_at, not_all_message, plain_names, poll_period)
from ._wire import Connection, interval
from .errors import SESSION_ENDED, LeaseLost, LockTimeout, seconds

# How long close() lets a wait on the work connection take to end once the
# server has closed the session, before it cancels the statement.
WORK_GRACE = 2.0
# How long a statement of the line (join, poll, leave) waits for the work
# connection before it takes a connection of its own.
BRIEF = 0.25
from .lease import KINDS, Judged, _Held, default_holder, describe_lock


def interval_or_none(seconds: Optional[float]) -> Optional[str]:
    return None if seconds is None else interval(seconds)


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

    def __init__(self, session, lock_name: str, kind: str, token: int,
                 place: Optional[int] = None):
        self.session = session
        self.lock_name = lock_name
        self.kind = kind
        self.token = token
        self.place = place  # its place in the lock's line, if it waited there (1.10)
        self._released = False

    def describe(self) -> str:
        return f"{describe_lock(self.kind, self.lock_name)} in fencing session {self.session.id}"

    def held(self) -> bool:
        return not self._released and self.session.held()

    @property
    def lost_reason(self) -> Optional[str]:
        return "released" if self._released else self.session.lost_reason

    @property
    def holder(self) -> str:
        return self.session.holder

    def wait_lost(self, timeout: Optional[float] = None):
        """Waits for the session's on_lost to have been called; False on timeout."""
        return self.session.wait_lost(timeout)


class SessionLease(InSession, _Held):
    def release(self) -> bool:
        """fencing_release of this lease only; the session lives on."""
        if self._released:
            return False
        self._released = True
        return self.session._release(self.lock_name, self.token, self.place)


class Session:
    def __init__(self, conninfo: str, *, ttl: float = 10.0, holder: Optional[str] = None,
                 on_lost: Optional[Callable[[str], None]] = None,
                 heartbeat: Optional[float] = None, listener: Optional[Listener] = None,
                 poll: Optional[float] = None, shared_heartbeat: Optional[Heartbeat] = None):
        """shared_heartbeat: the client's (pg_fencing.Client passes its
        own); None, the process's default one for conninfo."""
        self.conninfo = conninfo
        self.holder = holder or default_holder()
        self.ttl = float(ttl)
        self._listener = listener
        self._poll = poll_period(poll, listener is not None)
        self._has_line: Optional[bool] = None  # whether the server has the line (1.10)
        # How many places the session has in each lock's line (waiting, or
        # kept by a lease taken through it): see _wait().
        self._places: Dict[str, int] = {}
        self._places_lock = threading.Lock()
        self._nudges: set = set()  # the Watch events of the waits in line, set by close()
        self._nudge_lock = threading.Lock()
        self._beat = (shared_heartbeat or default_heartbeat(conninfo)).beat(
            "session", self.ttl, heartbeat, refused="the session ended, or was closed",
            on_lost=on_lost)
        self._work_lock = threading.Lock()
        self._closing = threading.Lock()
        self._closed = False
        self._work = Connection(conninfo, f"pg_fencing session {self.holder}")
        try:
            sent = time.monotonic()
            self.id = int(self._work.row("SELECT fencing_session_open(%s, %s::interval)",
                                         (self.holder, interval(self.ttl)))[0])
        except BaseException:
            self._work.close()
            raise
        self._beat.begin(sent)
        self._beat.start({"id": self.id, "ttl": interval(self.ttl)})

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
        stays busy.  A wait (for an exclusive lease, a shared lease or a
        permit alike) is a place in the lock's line (1.10): short
        statements, no server connection held between them, arrival order
        kept; at its end the place is left, giving back a grant made
        meanwhile."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if payload is not None and kind != "exclusive":
            raise ValueError("a payload needs an exclusive lease")
        if wait is not None and wait < 0:
            raise ValueError(f"wait must not be negative, got {wait}")
        if wait is not None:
            token, place = self._wait(lock_name, wait, kind, permits, payload)
            if token is None:
                raise LockTimeout(f'lock "{lock_name}" is busy (waited {seconds(wait)})')
            return SessionLease(self, lock_name, kind, token, place)
        with self._on_work(None, f'lock "{lock_name}"') as (conn, _):
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
        if token is None:
            raise LockTimeout(f'lock "{lock_name}" is busy')
        return SessionLease(self, lock_name, kind, int(token))

    def lock_all(self, lock_names: Sequence[str], *, wait: Optional[float] = None) -> List[SessionLease]:
        """Every lock or none, exclusive leases with their tokens in the
        order given; LockTimeout when not all could be had.  Never deadlocks
        with another session's lock_all.

        Without a wait (None, or 0), one statement that never sleeps
        (fencing_session_acquire_all).  With a wait, on a server with the
        line (1.10), one lock after the other in byte order of the names,
        each a place in its line (as lock(name, wait=...)) with what is left
        of the wait: no snapshot and no server connection held meanwhile.
        A lock taken stays taken -- visible to others, and theirs to wait
        for -- while the next is waited for: all or none holds for the
        answer, not for every instant.  When one is not had in time, or the
        wait ends otherwise (an error, KeyboardInterrupt), every lease it
        took is given back and every place left; a lock the session held
        already is kept."""
        names = list(lock_names)
        if wait is not None and wait > 0 and self._has_line is not False and plain_names(names):
            leases = self._lock_all_in_line(names, wait)
            if leases is not None:
                return leases
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
            raise LockTimeout(not_all_message(names, wait))
        return [SessionLease(self, n, "exclusive", int(t)) for n, t in zip(names, tokens)]

    def _lock_all_in_line(self, names: List[str], wait: float) -> Optional[List[SessionLease]]:
        """lock_all(names, wait=wait) in line (1.10): the leases, or None
        when the server has no line (nothing taken, nothing joined)."""
        end = time.monotonic() + wait
        held = dict(zip(*self._line_row(HELD_IN_SESSION, (self.id, names))))
        had: Dict[str, Tuple[int, Optional[int]]] = {n: (int(t), None) for n, t in held.items()}
        taken: List[Tuple[str, int]] = []  # (lock name, place) of the leases this call took
        try:
            for lock_name in acquire_order(names):
                if lock_name in had:
                    continue  # held already: kept, and not given back
                if not self._take_place(lock_name, "exclusive"):
                    raise AssertionError("an exclusive wait always has a place")
                token, place = self._place_wait(lock_name, max(0.0, end - time.monotonic()))
                if token is NO_LINE:
                    return None
                if token is None:
                    raise LockTimeout(not_all_message(names, wait))
                taken.append((lock_name, place))
                had[lock_name] = (token, place)
        except BaseException:
            for lock_name, place in reversed(taken):
                self._forget_place(lock_name)
                if not self._closed:
                    self._leave_quietly(place)  # gives back the lease the place took
            raise
        return [SessionLease(self, n, "exclusive", *had[n]) for n in names]

    def _wait(self, lock_name: str, wait: Optional[float], kind: str = "exclusive",
              permits: Optional[int] = None,
              payload: Optional[str] = None) -> Tuple[Optional[int], Optional[int]]:
        """(token, place) of a lease of lock_name waited for in line (1.10),
        (None, None) when the wait ran out.  CALL fencing_await in the
        session instead, (token, None), where the line cannot hold the wait:
        on a server before 1.10 (no fencing_line_join), and for a shared
        lease or a permit of a lock where the session has a place already
        (the line keeps one place per session and lock, and a join again
        answers that place and its lease: for an exclusive lease the one
        fencing_session_acquire gives again too, but a second shared lease
        or permit is another lease)."""
        if self._has_line is not False and self._take_place(lock_name, kind):
            token, place = self._place_wait(lock_name, wait, kind, permits, payload)
            if token is not NO_LINE:
                return token, place
        return self._await_in_session(lock_name, wait, kind, permits, payload)

    def _place_wait(self, lock_name: str, wait: Optional[float], kind: str = "exclusive",
                    permits: Optional[int] = None, payload: Optional[str] = None) -> tuple:
        """_wait_in_line() for a place counted by _take_place(), which it
        forgets unless the lease was had; (NO_LINE, None) on a server
        without the line (then known: self._has_line)."""
        try:
            token, place = self._wait_in_line(lock_name, wait, kind, permits, payload)
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
        """Counts a wait's place in lock_name's line; False (nothing counted)
        for a shared lease or a permit when the session has one there."""
        with self._places_lock:
            if kind != "exclusive" and self._places.get(lock_name, 0) > 0:
                return False
            self._places[lock_name] = self._places.get(lock_name, 0) + 1
            return True

    def _forget_place(self, lock_name: str) -> None:
        """A place counted by _take_place() left: its wait ended without a
        lease, or its lease was released."""
        with self._places_lock:
            left = self._places.get(lock_name, 0) - 1
            if left > 0:
                self._places[lock_name] = left
            else:
                self._places.pop(lock_name, None)

    def _await_in_session(self, lock_name: str, wait: Optional[float], kind: str,
                          permits: Optional[int],
                          payload: Optional[str]) -> Tuple[Optional[int], None]:
        """CALL fencing_await in the session, on the work connection in its
        turn: (token, None), (None, None) when the wait ran out."""
        end = None if wait is None else time.monotonic() + wait
        while True:
            # In turns of 30 s at most when it waits as long as the session lives.
            chunk = 30.0 if end is None else max(0.0, end - time.monotonic())
            with self._on_work(chunk, f'lock "{lock_name}"') as (conn, left):
                token = conn.row("CALL fencing_await(%s, session => %s, wait => %s::interval, "
                                 "kind => %s, permits => %s::integer, payload => %s::jsonb)",
                                 (lock_name, self.id, interval(left), kind, permits, payload))[0]
            if token is not None:
                return int(token), None
            if end is not None:
                return None, None

    def _wait_in_line(self, lock_name: str, wait: Optional[float], kind: str,
                      permits: Optional[int],
                      payload: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
        """Waits for a lease of lock_name of the kind as a place in its line,
        wait seconds at most (None: as long as the session lives): (token,
        place) once granted; (None, None) when the wait ran out, the place
        left (a grant made meanwhile given back).  Joined, then polled every
        self._poll seconds, and at once when the listener hears the place's
        number; each statement short and in autocommit.  Whatever ends it
        otherwise (LeaseLost, an error, KeyboardInterrupt) leaves the place
        too, unless the session is closed (its places went with it)."""
        end = None if wait is None else time.monotonic() + wait
        with self._watch() as watch:
            self.check()
            place: Optional[int] = None
            token = None
            try:
                sent = time.monotonic()
                place, token = self._line_row(JOIN, (self.id, lock_name, interval_or_none(wait), payload,
                                                     kind, permits))
                last = last_poll_at(end, sent, time.monotonic())
                watch.follow(place)
                while token is None:
                    left = None if last is None else last - time.monotonic()
                    if left is not None and left <= 0:
                        break  # the last poll (or the join) was just made: leave
                    watch.wait(self._poll if left is None else min(self._poll, left))
                    # The last sleep ends just before the deadline
                    # (last_poll_at), and the place is polled then too.
                    self.check()
                    state, token = self._line_row(POLL_PLACE, (place,))
                    if state == "gone" and token is None:
                        # The server ended the place: its session (the join
                        # says so, 55Z05 -> LeaseLost), its wait (at the
                        # deadline, which the loop sees), or a grant that
                        # ended before it was seen.  Joined again, at the back.
                        left = None if end is None else end - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        sent = time.monotonic()
                        place, token = self._line_row(JOIN, (self.id, lock_name,
                                                             interval_or_none(left), payload,
                                                             kind, permits))
                        last = last_poll_at(end, sent, time.monotonic())
                        watch.follow(place)
                if token is not None:
                    return int(token), place
                # The deadline: leave, which gives back a lease granted to the
                # place meanwhile (by a poll whose answer was lost, say).
                leaving, place = place, None
                self._line_row(LEAVE, (leaving,), check=False)
                return None, None
            except BaseException:
                if place is not None and not self._closed:
                    self._leave_quietly(place)
                raise

    def _leave_quietly(self, place: int) -> None:
        try:
            self._line_row(LEAVE, (place,), check=False)
        except Exception:
            pass  # the place ends with its wait on the server, or with the session

    @contextmanager
    def _watch(self) -> Iterator[Watch]:
        """The wake-up of one wait in line: the listener's (LISTEN in effect
        before the join) or a plain one; close() sets it."""
        if self._listener is not None:
            watching = self._listener.watching()
        else:
            watching = nullcontext(Watch())
        with watching as watch:
            with self._nudge_lock:
                self._nudges.add(watch.event)
            try:
                yield watch
            finally:
                with self._nudge_lock:
                    self._nudges.discard(watch.event)

    def _nudge(self) -> None:
        with self._nudge_lock:
            nudges = list(self._nudges)
        for event in nudges:
            event.set()

    def _line_row(self, sql: str, params: tuple, check: bool = True) -> tuple:
        """One statement of the line, short, in autocommit, on the work
        connection (or one of its own when another thread's wait holds it);
        once more on a new connection if the first broke (join, poll and
        leave may be repeated: a join again gives the same place).  check:
        LeaseLost first if the session is known lost (not for a leave,
        which gives back what a lost session may still hold)."""
        with ended_by_the_server(self.id, self._beat):
            for attempt in (1, 2):
                if check:
                    self.check()
                with self._free_connection(patience=BRIEF) as conn:
                    try:
                        return conn.row(sql, params)
                    except psycopg.OperationalError as error:
                        if attempt == 2 or error.sqlstate is not None or not conn.closed:
                            raise
        raise AssertionError("not reached")

    def _reacquire(self, lock_name: str, payload: Optional[str]) -> Optional[int]:
        """fencing_session_acquire of a lock the session holds, with a new
        payload (Election.proclaim): its token, the same while the lease
        lives."""
        with ended_by_the_server(self.id, self._beat):
            self.check()
            with self._free_connection() as conn:
                conn.row("BEGIN ISOLATION LEVEL READ COMMITTED")
                try:
                    token = conn.row("SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb)",
                                     (self.id, lock_name, payload))[0]
                    conn.row("COMMIT")
                except BaseException:
                    if not conn.closed:
                        conn.row("ROLLBACK")
                    raise
        return None if token is None else int(token)

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
    def _free_connection(self, patience: float = 0.0) -> Iterator[Connection]:
        """The work connection if it is free now (or within patience
        seconds), else one of its own (for one statement that does not
        wait: a release, a statement of the line, an acquire without a
        wait)."""
        had = (self._work_lock.acquire(timeout=patience) if patience > 0
               else self._work_lock.acquire(blocking=False))
        if not had:
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
        session's waits when it closes it): the close does not queue behind
        that wait on the work connection (_close_on_the_server)."""
        self._beat.stop()  # first: no on_lost during the close
        with self._closing:
            if self._closed:
                return 0
            self._closed = True
        self._nudge()  # a wait in line on another thread sees the close at once
        try:
            return self._close_on_the_server()
        finally:
            self._close_work()

    def _close_on_the_server(self) -> int:
        # On the work connection if it is free, else on a connection of its
        # own (_free_connection), never behind a statement running on it: a
        # wait there (CALL fencing_await in the session) ends when the
        # server closes the session, which this statement does.  The
        # heartbeat's connection is the client's, busy with its rounds.
        try:
            with self._free_connection() as conn:
                return int(conn.row("SELECT fencing_session_close(%s)", (self.id,))[0])
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

    def _release(self, lock_name: str, token: int, place: Optional[int] = None) -> bool:
        """Never queues behind another thread's wait (_free_connection).  A
        lease taken through the line leaves its place too (the server keeps
        it while the lease lives)."""
        if place is not None:
            self._forget_place(lock_name)
        if self._closed:
            return False
        with self._free_connection() as conn:
            if place is not None:
                return bool(conn.row(RELEASE_AND_LEAVE, (lock_name, token, place))[0])
            return bool(conn.row("SELECT fencing_release(%s, %s::fencing_token)", (lock_name, token))[0])

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
