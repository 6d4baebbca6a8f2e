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


class Heartbeat:
    """renew(deadline) sends one renewal and says whether the server took
    it (NoAnswer, StatementFailed or psycopg.Error when it did not answer or
    failed); drop() gives its connection up after such a renewal."""

    def __init__(self, what: str, ttl: float, period: Optional[float],
                 renew: Callable[[float], bool], drop: Callable[[], None], refused: str,
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
        self._renew = renew
        self._drop = drop
        self._refused = refused
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self._valid_from = 0.0
        self._lost_reason: Optional[str] = None
        self._lost_reported = threading.Event()

    def begin(self, sent: float) -> None:
        with self._lock:
            self._valid_from = sent

    def renewed(self, sent: float) -> None:
        with self._lock:
            self._valid_from = max(self._valid_from, sent)

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stops the thread; no on_lost from then on.  False if stopped already."""
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
        with self._lock:
            return self._valid_from + self.ttl - self.margin

    @property
    def lost_reason(self) -> Optional[str]:
        now = time.monotonic()
        with self._lock:
            if self._lost_reason is not None:
                return self._lost_reason
            if now >= self._valid_from + self.ttl - self.margin:
                return "not renewed within ttl minus the safety margin"
        return None

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until on_lost has been called (or the loss recorded)."""
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
            pass  # the callback's exception has nowhere to go on this thread
        finally:
            self._lost_reported.set()

    def _run(self) -> None:
        try:
            while True:
                now = time.monotonic()
                deadline = self.deadline
                if now >= deadline:
                    self.mark_lost(f"not renewed before the {self.what}'s safe deadline; "
                                   "was the process paused?")
                    return
                with self._lock:
                    due = self._valid_from + self.period
                if now < due:
                    if self._stop.wait(min(due, deadline) - now):
                        return
                    continue
                sent = time.monotonic()
                try:
                    renewed = self._renew(deadline)
                except NoAnswer:
                    self._drop()
                    self.mark_lost(f"renewal got no answer before the {self.what}'s safe deadline")
                    return
                except (StatementFailed, psycopg.Error) as error:
                    self._drop()
                    self.mark_lost(f"renewal failed: {str(error).strip()}")
                    return
                if not renewed:
                    self.mark_lost(f"renewal refused: {self._refused}")
                    return
                self.renewed(sent)
                if self._stop.is_set():
                    return
        except Exception as error:  # nothing leaves the thread silently
            self.mark_lost(f"heartbeat failed: {error!r}")
