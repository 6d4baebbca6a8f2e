"""The line (pg_fencing 1.10): a wait in a session -- for an exclusive
lease, a shared lease or a permit -- as a place the database keeps,
instead of a statement that runs for the whole wait (CALL fencing_await)
and holds a server connection meanwhile.

    join    SELECT place, token FROM fencing_line_join(session, lock, wait, payload, kind, permits)
    poll    SELECT state, token FROM fencing_line_poll(ARRAY[place])
    leave   SELECT fencing_line_leave(place)

Each is one short statement in autocommit, so between them the candidate
holds no transaction, no snapshot and -- through a transaction-pooling
PgBouncer -- no server connection: what it costs the server is one row of
fencing_line.  A place in its turn takes the lease itself when it joins
or polls (the first exclusive place; a shared place once no exclusive
place waits and the exclusive lease has ended; a permit place while the
semaphore has a free permit for each permit place ahead of it); nobody
else may take what it waits for meanwhile, so arrival order holds however
long the wait.  A place is polled every
`poll` seconds (POLL without LISTEN, so that a hand-over is seen within
a second), and at once when a Listener hears its number on the channel
fencing_line (NOTIFYed at the commit of every change that may free the
lock, with the number of the first place waiting for an exclusive lease,
or, when none waits, of each of the first 16 waiting for a shared lease or
a permit).  LISTEN is optional:
through a transaction pooler it cannot be relied on (the LISTEN stays on
whichever server connection ran it), and the timer alone is enough.

Shared by the threaded client (Listener, a thread of its own) and the
asyncio one (pg_fencing.aio's listener, a reader on the event loop): the
statements, the poll periods and the Board of numbers heard.
"""

from __future__ import annotations

import collections
import select
import threading
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional, Set

import psycopg

CHANNEL = "fencing_line"
POLL = 0.5            # seconds between polls of a place, without LISTEN
POLL_LISTENING = 2.0  # with LISTEN: a notification wakes the place sooner
# How long a wait lets the listener take to LISTEN before it joins (and
# polls on the timer alone if it has not by then).
LISTEN_STARTUP = 2.0
# A wait with a deadline polls its place once more just before it, then
# leaves: a wait shorter than the poll period, or a candidate that comes
# back with such waits, takes its turn when its place is first (a place
# that is never polled holds the line up, and leaves the lock free when it
# leaves).  That last poll is made this long before the deadline -- or the
# join's round trip before it, if longer: the server ends the place at
# joined_at + wait, which is the client's deadline give or take a round
# trip, and a poll that reaches it after that finds the place gone.
LAST_POLL_AHEAD = 0.02

JOIN = ("SELECT place, token::bigint FROM fencing_line_join(%s, %s, %s::interval, %s::jsonb, "
        "kind => %s, permits => %s::integer)")
POLL_PLACE = "SELECT state, token::bigint FROM fencing_line_poll(ARRAY[%s]::bigint[])"
LEAVE = "SELECT fencing_line_leave(%s)"
# A lease taken through the line: released, then its place (kept by the
# server while the lease lives) left.  One statement: the select list is
# evaluated in order, so the release's answer is the lease's own.
RELEASE_AND_LEAVE = "SELECT fencing_release(%s, %s::fencing_token), fencing_line_leave(%s)"
# Of the lock names given, those the session holds an exclusive lease of
# now, and the tokens: lock_all in line keeps them, rather than wait for
# them and give them back with what it took (one array each, so one row).
HELD_IN_SESSION = ("SELECT coalesce(array_agg(lock_name), '{}'), coalesce(array_agg(token::bigint), '{}') "
                   "FROM fencing_leases WHERE session_id = %s AND live AND lock_name = ANY(%s::text[])")
# What a session's wait in line answers on a server without the line.
NO_LINE = object()


def acquire_order(names) -> list:
    """The distinct names in byte order (UTF-8, as COLLATE "C"): the one
    order in which every lock_all takes its locks, fencing_session_acquire_all
    too, so that two with overlapping sets cannot deadlock."""
    return sorted(set(names), key=lambda n: n.encode())


def plain_names(names) -> bool:
    """Whether lock_all may wait in line for names: some, each a non-empty
    text; otherwise fencing_session_acquire_all refuses them, as always."""
    return bool(names) and all(isinstance(n, str) and n for n in names)


def not_all_message(names, wait) -> str:
    """lock_all's LockTimeout."""
    from .errors import seconds
    return (f"not all of {list(names)} could be had"
            + (f" (waited {seconds(wait)})" if wait is not None else ""))


def poll_period(poll: Optional[float], listening: bool) -> float:
    """Seconds between two polls of a waiting place."""
    if poll is None:
        return POLL_LISTENING if listening else POLL
    if poll <= 0:
        raise ValueError(f"poll must be positive, got {poll}")
    return float(poll)


def last_poll_at(end: Optional[float], sent: float, answered: float) -> Optional[float]:
    """When (time.monotonic()) a wait that ends at end makes its last poll,
    its place joined by a statement sent at sent and answered at answered;
    None for a wait without a deadline."""
    if end is None:
        return None
    return end - max(LAST_POLL_AHEAD, answered - sent)


class Board:
    """Which place numbers are waited for (each with a wake-up), and the
    numbers heard lately, so that a number heard between a join and the
    follow() of the place it returned is not missed."""

    def __init__(self, remembered: int = 4096):
        self._lock = threading.Lock()
        self._wakes: Dict[int, Set[Callable[[], None]]] = {}
        self._heard: "collections.deque[tuple[int, int]]" = collections.deque(maxlen=remembered)
        self._seq = 0

    def mark(self) -> int:
        """A point in what was heard: follow(place, since=mark) also wakes
        for the place heard after it."""
        with self._lock:
            return self._seq

    def follow(self, place: int, since: int, wake: Callable[[], None]) -> Callable[[], None]:
        """Calls wake() whenever place is heard (now too, if it was heard
        after since); returns the call that stops it."""
        with self._lock:
            self._wakes.setdefault(place, set()).add(wake)
            missed = any(seq > since and heard == place for seq, heard in self._heard)
        if missed:
            wake()

        def unfollow() -> None:
            with self._lock:
                wakes = self._wakes.get(place)
                if wakes is not None:
                    wakes.discard(wake)
                    if not wakes:
                        del self._wakes[place]
        return unfollow

    def heard(self, payload: str) -> None:
        try:
            place = int(payload)
        except ValueError:
            return  # not a place number: anyone may NOTIFY on any channel
        with self._lock:
            self._seq += 1
            self._heard.append((self._seq, place))
            wakes = list(self._wakes.get(place, ()))
        for wake in wakes:
            wake()

    def wake_all(self) -> None:
        """After the listener was deaf for a while (a reconnect): every
        place polls, in case its number went by."""
        with self._lock:
            wakes = [w for ws in self._wakes.values() for w in ws]
        for wake in wakes:
            wake()


class Watch:
    """One wait's wake-up: set when its place is heard, or when its session
    is closed (nudge); wait(timeout) sleeps until then or the timeout."""

    def __init__(self, board: Optional[Board] = None, since: int = 0):
        self.event = threading.Event()
        self._board = board
        self._since = since
        self._unfollow: Optional[Callable[[], None]] = None

    def follow(self, place: int) -> None:
        self.close()
        if self._board is not None:
            self._unfollow = self._board.follow(place, self._since, self.event.set)

    def wait(self, timeout: float) -> bool:
        woken = self.event.wait(max(0.0, timeout))
        self.event.clear()
        return woken

    def close(self) -> None:
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None


class Listener:
    """One connection LISTENing on fencing_line for every wait of a client
    (pg_fencing.Client(listen=True)), in a thread of its own, open while
    some wait uses it.  It wakes a wait whose place number it hears; a
    broken connection is made again (the waits poll meanwhile, and once
    more after it, in case their number went by).  An error no reconnect
    mends ends it (the waits go on polling on their timer)."""

    def __init__(self, conninfo: str):
        self.conninfo = conninfo
        self.board = Board()
        self.failure: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._users = 0
        self._listening = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @contextmanager
    def watching(self) -> Iterator[Watch]:
        """A Watch for one wait, once LISTEN is in effect (LISTEN_STARTUP at
        most): a number heard from then on reaches it."""
        with self._lock:
            self._users += 1
            if self._thread is None:
                self._listening.clear()
                self._thread = threading.Thread(target=self._run, name="pg_fencing line listener",
                                                daemon=True)
                self._thread.start()
        watch: Optional[Watch] = None
        try:
            self._listening.wait(LISTEN_STARTUP)
            watch = Watch(self.board, self.board.mark())
            yield watch
        finally:
            if watch is not None:
                watch.close()
            with self._lock:
                self._users -= 1

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def _run(self) -> None:
        from ._wire import Connection  # here: _wire is imported by everything
        from .election import may_mend, reconnect_delay
        conn: Optional[Connection] = None
        failures = 0
        try:
            while True:
                with self._lock:
                    if self._users == 0:
                        self._thread = None
                        self._listening.clear()
                        return
                if conn is None:
                    try:
                        conn = Connection(self.conninfo, "pg_fencing line")
                        conn.row(f"LISTEN {CHANNEL}")
                    except psycopg.Error as error:
                        if conn is not None:
                            conn.close()
                        conn = None
                        if not may_mend(error):
                            self.failure = error
                            self._quit()
                            return
                        failures += 1
                        time.sleep(max(0.1, reconnect_delay(failures)))
                        continue
                    failures = 0
                    self.failure = None
                    self._listening.set()
                    self.board.wake_all()
                try:
                    pg = conn.conn.pgconn
                    if select.select([pg.socket], [], [], 0.2)[0]:
                        pg.consume_input()
                        while True:
                            notify = pg.notifies()
                            if notify is None:
                                break
                            if notify.relname == CHANNEL.encode():
                                self.board.heard(notify.extra.decode(errors="replace"))
                except (psycopg.Error, OSError, ValueError):
                    conn.close()
                    conn = None
                    self._listening.clear()
        except Exception as error:  # nothing leaves the thread silently; the waits poll on
            self.failure = error
            self._quit()
        finally:
            if conn is not None:
                conn.close()

    def _quit(self) -> None:
        """The thread ends: the next wait starts another."""
        with self._lock:
            self._thread = None
            self._listening.clear()
