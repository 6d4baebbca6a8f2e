"""The keepalive of leases and sessions, and the judgement of whether each
is still held.

Held is judged on the monotonic clock, conservatively, for each lease and
session on its own (its Beat): it is lost once the send time of its last
successful acquire, open or renewal, plus its ttl, minus a safety margin,
has passed -- whether or not the heartbeat ran meanwhile (the whole
process may have been paused, SIGSTOP or a long GC).  The server starts
the ttl when it runs the request, after the client sent it, so this
deadline is never later than the server's end (clock rates aside).
on_lost(reason) is called once when a renewal is refused, fails, or can no
longer land in time; never after stop() has returned.

One heartbeat per client object renews them all (Heartbeat here, a thread;
pg_fencing.aio's twin, a task): one connection of its own, opened when the
first renewal is due and closed when nothing is left to renew, and, when
any Beat is due, ONE statement (RENEW) renewing every Beat due within half
its period -- sessions with fencing_session_renew, leases of their own with
fencing_renew -- each row's answer applied to its Beat.  The statement is
the unnamed one in autocommit: nothing is left on the connection between
rounds (no transaction, no snapshot, no prepared statement), so it may go
through a transaction-pooling PgBouncer.  Its answer is waited for until
the earliest safe deadline of the Beats in it, at most: one that does not
come makes each of them whose deadline has passed lost, and the others go
in the next round, on a new connection.  A failed statement -- the
connection broken -- is a failed renewal of every Beat in it; one the
server refused with an error of the statement's own (one lease whose lock
its role may no longer use, 42501, say) is sent again in halves, so that
the error is the loss of the Beat it belongs to alone.

The scheduling and the judgement (plan, renewal_round) are pure, shared by
the thread and the task, which only do the I/O.

A lease, session or election made without a client (Lease(conninfo, ...),
Session(conninfo, ...), Election(conninfo, ...)) is renewed by the
process's default heartbeat for its conninfo (default_heartbeat): one per
process and conninfo, as a client's is one per client.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Callable, Dict, Generator, List, Optional, Sequence, Set, Tuple

import psycopg

from ._wire import Connection, NoAnswer, StatementFailed


def safety_margin(ttl: float) -> float:
    """How long before the computed end the client stops trusting a lease."""
    return min(max(ttl / 10, 0.05), ttl / 2)


class LeaseClock:
    """The judgement of one lease or session: the deadline on the monotonic
    clock, the loss once recorded, on_lost called once, never after
    stop()."""

    def __init__(self, what: str, ttl: float, period: Optional[float], refused: str,
                 on_lost: Optional[Callable[[str], None]]):
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        self.what = what
        self.ttl = float(ttl)
        self.margin = safety_margin(self.ttl)
        self.period = period if period is not None else self.ttl / 3
        if not 0 < self.period < self.ttl - self.margin:
            raise ValueError(f"heartbeat must be positive and shorter than ttl minus the "
                             f"safety margin ({self.ttl - self.margin:.3f} s), got {self.period}")
        self.refused = refused
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._stopped = False
        self._valid_from = 0.0
        self._lost_reason: Optional[str] = None
        self._lost_reported = threading.Event()
        self._reporter: Optional[threading.Thread] = None  # the thread calling on_lost
        self.renewals = 0  # renewals the server took

    def begin(self, sent: float) -> None:
        with self._lock:
            self._valid_from = sent

    def renewed(self, sent: float) -> None:
        with self._lock:
            self._valid_from = max(self._valid_from, sent)
            self.renewals += 1

    def mark_stopped(self) -> bool:
        """No on_lost from now on; False if stopped already."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            return True

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopped

    @property
    def ended(self) -> bool:
        """Stopped, or its loss recorded: nothing more to renew."""
        with self._lock:
            return self._stopped or self._lost_reason is not None

    @property
    def deadline(self) -> float:
        """time.monotonic() after which it no longer counts as held."""
        with self._lock:
            return self._valid_from + self.ttl - self.margin

    @property
    def due(self) -> float:
        """When the next renewal is due."""
        with self._lock:
            return self._valid_from + self.period

    @property
    def lost_reason(self) -> Optional[str]:
        now = time.monotonic()
        with self._lock:
            if self._lost_reason is not None:
                return self._lost_reason
            if now >= self._valid_from + self.ttl - self.margin:
                # The heartbeat has not run since the deadline passed (the
                # process was paused, say); it reports the same when it does.
                return "not renewed within ttl minus the safety margin"
        return None

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the loss has been reported (on_lost called)."""
        return self._lost_reported.wait(timeout)

    def mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._stopped or self._lost_reason is not None:
                return
            self._lost_reason = reason
        self._report(reason)

    def _report(self, reason: str) -> None:
        """Calls on_lost (here, in this thread) and says it was called."""
        self._reporter = threading.current_thread()
        try:
            if self._on_lost is not None:
                self._on_lost(reason)
        except Exception:
            pass  # the callback's exception has nowhere to go from the heartbeat
        finally:
            self._lost_reported.set()

    def _await_report(self) -> None:
        """After mark_stopped(): waits for an on_lost running on another
        thread to return, so that none runs once stop() has returned."""
        with self._lock:
            reporting = self._lost_reason is not None
        if reporting and self._reporter is not threading.current_thread():
            self._lost_reported.wait()

    def judge(self, outcome: "Optional[bool]", error: Optional[BaseException] = None) -> bool:
        """Records a renewal's outcome (True renewed, False refused, None
        with error: no answer or failed); whether the heartbeat goes on."""
        if error is not None:
            if isinstance(error, NoAnswer):
                self.mark_lost(f"renewal got no answer before the {self.what}'s safe deadline")
            else:
                self.mark_lost(f"renewal failed: {str(error).strip()}")
            return False
        if not outcome:
            self.mark_lost(f"renewal refused: {self.refused}")
            return False
        return True

    def overdue(self) -> bool:
        """Marks the loss when the deadline has passed unrenewed."""
        if time.monotonic() >= self.deadline:
            self.mark_lost(f"not renewed before the {self.what}'s safe deadline; "
                           "was the process paused?")
            return True
        return False


RENEWAL_ERRORS = (NoAnswer, StatementFailed, psycopg.Error)

# Every Beat in a round, one row each: (its index in the round, renewed).
# A session (lock_name NULL) is renewed with fencing_session_renew, a lease
# of its own with fencing_renew (id is then its token).  {} is the
# parameter's placeholder: $1 (libpq) or %s (psycopg).
RENEW = ("SELECT r.i, CASE WHEN r.lock_name IS NULL THEN fencing_session_renew(r.id, r.ttl) "
         "ELSE fencing_renew(r.lock_name, r.id::fencing_token, r.ttl) END "
         "FROM jsonb_to_recordset({}::jsonb) AS r(i integer, lock_name text, id bigint, ttl interval)")

# A Beat due within this fraction of its period of now goes in the round
# too: Beats of the same period fall into step, one statement a period.
EARLY = 0.5


class Beat(LeaseClock):
    """The clock of one lease or session, renewed by its client's heartbeat
    (start(), with what to renew) until stop()."""

    def __init__(self, heartbeat, what: str, ttl: float, period: Optional[float], refused: str,
                 on_lost: Optional[Callable[[str], None]]):
        super().__init__(what, ttl, period, refused, on_lost)
        self.heartbeat = heartbeat
        self.renewal: Dict[str, object] = {}

    def start(self, renewal: Dict[str, object]) -> None:
        """Renewed from now on: renewal is {"id": session} or {"lock_name":
        lock, "id": token}, and "ttl" (an interval's text)."""
        self.renewal = renewal
        self.heartbeat.add(self)

    def stop(self) -> bool:
        """No renewal and no on_lost from then on; False if stopped already."""
        if not self.mark_stopped():
            return False
        self.heartbeat.remove(self)
        self._await_report()
        return True

    def _report(self, reason: str) -> None:
        # From the renewing thread, on a thread of its own: a callback that
        # blocks (or closes its session over a dead network) holds up no
        # other lease's renewal.
        if self._on_lost is not None and self.heartbeat.renewing_here():
            threading.Thread(target=super()._report, args=(reason,), daemon=True,
                             name=f"pg_fencing on_lost of a {self.what}").start()
        else:
            super()._report(reason)


def plan(beats: Sequence[LeaseClock], now: float) -> Tuple[List[LeaseClock], Optional[float]]:
    """(the round to send now, []) when some Beat is due -- with every Beat
    due within EARLY of its period --, else ([], when the next is due)."""
    dues = [(beat.due, beat) for beat in beats]
    if not any(due <= now for due, _ in dues):
        return [], min((due for due, _ in dues), default=None)
    return [beat for due, beat in dues if due <= now + EARLY * beat.period], None


def renewal_param(part: Sequence[Beat]) -> str:
    """RENEW's parameter for a part of a round: its Beats, numbered."""
    return json.dumps([dict(beat.renewal, i=i) for i, beat in enumerate(part)])


def refused_by_the_statement(error: BaseException, usable: bool) -> bool:
    """Whether a renewal's error is the statement's own (a lease whose lock
    its role may no longer use, a deadlock), the connection still usable,
    rather than a broken connection or a server going away."""
    sqlstate = getattr(error, "sqlstate", None)
    return usable and bool(sqlstate) and not sqlstate.startswith(("08", "57P", "53"))


Outcome = Tuple[Optional[Sequence[Tuple[int, Optional[bool]]]], Optional[BaseException], bool, float]


def renewal_round(batch: Sequence[LeaseClock]) -> Generator[Tuple[List[LeaseClock], float], Outcome, None]:
    """One round of renewals, without I/O: yields (part, bound) -- the
    Beats to renew in one statement, and the time.monotonic() by which its
    answer must have come (the earliest deadline of the Beats not judged
    yet in the round) -- and is sent back (rows, error, usable, sent): the
    rows [(index in part, renewed)], or the error; whether the connection
    is still usable; when the statement was sent.  Each Beat is judged as
    its own heartbeat judged it."""
    pending = [list(batch)]
    while pending:
        part = pending.pop(0)
        bound = min(beat.deadline for p in (part, *pending) for beat in p)
        rows, error, usable, sent = yield part, bound
        if error is None:
            answers = {int(i): renewed for i, renewed in rows or ()}
            for i, beat in enumerate(part):
                if beat.judge(bool(answers.get(i))):
                    beat.renewed(sent)
        elif isinstance(error, NoAnswer):
            # The bound passed: each Beat whose deadline did is lost; the
            # others go in the next round, on a new connection.
            now = time.monotonic()
            for beat in (beat for p in (part, *pending) for beat in p):
                if now >= beat.deadline:
                    beat.judge(None, error)
            return
        elif len(part) > 1 and refused_by_the_statement(error, usable):
            half = len(part) // 2
            pending[:0] = [part[:half], part[half:]]
        else:
            for beat in part:
                beat.judge(None, error)


_defaults: Dict[Tuple[type, str], object] = {}
_defaults_lock = threading.Lock()


def default_heartbeat(conninfo: str, cls: Optional[type] = None):
    """The process's heartbeat of class cls (Heartbeat, or pg_fencing.aio's
    AsyncHeartbeat) for conninfo, for what is made without a client."""
    cls = cls or Heartbeat
    with _defaults_lock:
        heartbeat = _defaults.get((cls, conninfo))
        if heartbeat is None:
            heartbeat = _defaults[(cls, conninfo)] = cls(conninfo)
        return heartbeat


def heartbeat_name() -> str:
    """The application_name of a heartbeat's connection: the process and
    the client object (several clients in one process have one each)."""
    return f"pg_fencing heartbeat {os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeat:
    """A client's heartbeat (threaded): renews every Beat added to it, from
    one thread, on one connection (application_name: self.application_name).
    The thread starts with the first Beat and ends, its connection closed,
    once none is left."""

    def __init__(self, conninfo: str, application_name: Optional[str] = None):
        self.conninfo = conninfo
        self.application_name = application_name or heartbeat_name()
        self._lock = threading.Lock()
        self._beats: Set[Beat] = set()
        self._changed = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def beat(self, what: str, ttl: float, period: Optional[float], refused: str,
             on_lost: Optional[Callable[[str], None]]) -> Beat:
        """The clock of a lease or session it is to renew (once started)."""
        return Beat(self, what, ttl, period, refused, on_lost)

    def add(self, beat: Beat) -> None:
        with self._lock:
            self._beats.add(beat)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=self.application_name)
                self._thread.start()
        self._changed.set()

    def remove(self, beat: Beat) -> None:
        with self._lock:
            self._beats.discard(beat)
        self._changed.set()

    def renewing_here(self) -> bool:
        """Whether the caller is the renewing thread."""
        return threading.current_thread() is self._thread

    def _live(self) -> List[Beat]:
        """The Beats left to renew; [] ends the thread (under the lock, so
        that the next add() starts another)."""
        with self._lock:
            self._beats = {beat for beat in self._beats if not beat.ended}
            if not self._beats:
                self._thread = None
            self._changed.clear()
            return list(self._beats)

    def _run(self) -> None:
        conn: Optional[Connection] = None
        try:
            while True:
                beats = self._live()
                if not beats:
                    return
                beats = [beat for beat in beats if not beat.overdue()]
                batch, wake_at = plan(beats, time.monotonic())
                if batch:
                    conn = self._renew(conn, batch)
                elif wake_at is not None:
                    self._changed.wait(max(0.0, wake_at - time.monotonic()))
        except Exception as error:  # nothing leaves the thread silently
            with self._lock:
                beats, self._beats, self._thread = list(self._beats), set(), None
            for beat in beats:
                beat.mark_lost(f"heartbeat failed: {error!r}")
        finally:
            if conn is not None:
                conn.close()

    def _renew(self, conn: Optional[Connection], batch: List[Beat]) -> Optional[Connection]:
        """One round (renewal_round) on conn, opened or opened again as
        needed; the connection to use next (None: none usable)."""
        rounds = renewal_round(batch)
        part, bound = next(rounds)
        while True:
            sent = time.monotonic()
            rows = error = None
            try:
                if conn is None:
                    conn = self._connect(bound)
                rows = [(int(i), renewed == "t") for i, renewed in
                        conn.rows_by(RENEW.format("$1"), [renewal_param(part)], bound,
                                     what=f"the renewal of {len(part)} leases and sessions")]
            except RENEWAL_ERRORS as failure:
                error = failure
                if conn is not None and not conn.usable:
                    conn.close()
                    conn = None
            try:
                part, bound = rounds.send((rows, error, conn is not None, sent))
            except StopIteration:
                return conn

    def _connect(self, deadline: float) -> Connection:
        """A connection for the renewals, made by deadline at most (NoAnswer
        then: a connection attempt can hang far longer, and the loss must
        not wait for it); one made after that is closed."""
        made: Dict[str, object] = {}
        lock = threading.Lock()
        done = threading.Event()

        def connect() -> None:
            try:
                conn = Connection(self.conninfo, self.application_name)
            except BaseException as error:
                made["error"] = error
            else:
                with lock:
                    if made.get("abandoned"):
                        conn.close()
                    else:
                        made["conn"] = conn
            finally:
                done.set()

        threading.Thread(target=connect, daemon=True, name=self.application_name).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            with lock:
                made["abandoned"] = True
                conn = made.pop("conn", None)
            if conn is None:
                raise NoAnswer("a connection for the renewals", deadline - time.monotonic())
        if "error" in made:
            raise made["error"]  # type: ignore[misc]
        return made["conn"]  # type: ignore[return-value]
