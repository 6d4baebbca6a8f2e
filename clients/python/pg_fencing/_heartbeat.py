"""The keepalive of a lease or a session, and the judgement of whether it
is still held.

Held is judged on the monotonic clock, conservatively: it is lost once the
send time of the last successful acquire, open or renewal, plus ttl, minus
a safety margin, has passed -- whether or not the heartbeat thread ran
meanwhile (the whole process may have been paused, SIGSTOP or a long GC).
The server starts the ttl when it runs the request, after the client sent
it, so this deadline is never later than the server's end (clock rates
aside).  on_lost(reason) is called once, from the heartbeat thread, when a
renewal is refused, fails, or can no longer land in time; never after
stop().
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import psycopg

from ._wire import NoAnswer, StatementFailed


def safety_margin(ttl: float) -> float:
    """How long before the computed end the client stops trusting a lease."""
    return min(max(ttl / 10, 0.05), ttl / 2)


class LeaseClock:
    """The judgement both heartbeats share (the thread's, Heartbeat; the
    asyncio task's, pg_fencing.aio): the deadline on the monotonic clock,
    the loss once recorded, on_lost called once, never after stop()."""

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
        try:
            if self._on_lost is not None:
                self._on_lost(reason)
        except Exception:
            pass  # the callback's exception has nowhere to go from the heartbeat
        finally:
            self._lost_reported.set()

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


class Heartbeat(LeaseClock):
    """The thread that renews: renew(deadline) sends one renewal and says
    whether the server took it (NoAnswer, StatementFailed or psycopg.Error
    when it did not answer or failed); drop() gives its connection up after
    such a renewal."""

    def __init__(self, what: str, ttl: float, period: Optional[float],
                 renew: Callable[[float], bool], drop: Callable[[], None], refused: str,
                 on_lost: Optional[Callable[[str], None]]):
        super().__init__(what, ttl, period, refused, on_lost)
        self._renew = renew
        self._drop = drop
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stops the thread; no on_lost from then on.  False if stopped already."""
        if not self.mark_stopped():
            return False
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        return True

    def _run(self) -> None:
        try:
            while not self.overdue():
                now = time.monotonic()
                if now < self.due:
                    if self._stop.wait(min(self.due, self.deadline) - now):
                        return
                    continue
                sent = time.monotonic()
                try:
                    renewed, error = self._renew(self.deadline), None
                except RENEWAL_ERRORS as failure:
                    renewed, error = None, failure
                    self._drop()
                if not self.judge(renewed, error):
                    return
                self.renewed(sent)
                if self._stop.is_set():
                    return
        except Exception as error:  # nothing leaves the thread silently
            self.mark_lost(f"heartbeat failed: {error!r}")
