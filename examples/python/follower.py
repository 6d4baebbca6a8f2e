"""Following the leader of a pg_fencing lock from Python, with psycopg2.

    from follower import LeaderFollower

    def on_change(leader):              # a Leader(holder, token, payload), or None
        print("leader:", leader and leader.holder)

    with LeaderFollower("dbname=app", "nightly-report", on_change) as follower:
        ...                             # follower.leader: the one last reported

    python3 examples/python/follower.py LOCK [DSN]     # prints each new leader

How it works, and what it promises:

- It LISTENs on channel fencing_events on a connection of its own and takes
  the notifications as hints only: what it reports is always what it read
  from the view fencing_leases, never a payload.  A notification that was
  missed (the connection was down), forged (any role may NOTIFY on any
  channel) or about a transaction that rolled back (none is sent then
  anyway) changes nothing.
- It reads when it starts and after every reconnect (LISTEN first, then
  read, so that nothing committed in between slips through), on every
  notification that may concern its lock, when the live lease is due to
  expire by the server's clock (an expiry nobody announces is seen at once),
  and every reread_period seconds (default 5; None or 0: never), the
  fallback for a lock whose owner did not call fencing_set_announce(lock,
  true): announcements are opt-in per lock.
- on_change(leader) is called from the follower's thread, first with the
  leader at start, then whenever (holder, token) differs from the last one
  reported: a renewal, or a re-acquire by the live holder, is no change.
- The connection breaks: on_error(message) is called (if given) and the
  follower reconnects at once, then after 0.1 s, doubling up to 5 s.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

import psycopg2

__all__ = ["Leader", "LeaderFollower"]

CHANNEL = "fencing_events"

# The live lease, and how long it has to run by the server's clock (so that
# the client's clock and the server's never meet).
_READ_LEADER = (
    "SELECT holder, token::text, payload,"
    " ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
    " FROM fencing_leases WHERE lock_name = %s AND state = 'live'"
)


class Leader(NamedTuple):
    holder: str
    token: int
    payload: Any  # what the holder published (parsed JSON), or None


def _backoff(failures: int) -> float:
    """At once after a connection that worked, then 0.1 s, doubling, up to 5 s."""
    return 0.0 if failures <= 1 else min(0.1 * 2 ** (failures - 2), 5.0)


def _same(a: Optional[Leader], b: Optional[Leader]) -> bool:
    if a is None or b is None:
        return a is b
    return (a.holder, a.token) == (b.holder, b.token)


class LeaderFollower:
    """Reports each change of leader of one lock; see the module's docstring."""

    def __init__(
        self,
        dsn: str,
        lock_name: str,
        on_change: Callable[[Optional[Leader]], None],
        *,
        reread_period: Optional[float] = 5.0,
        on_error: Optional[Callable[[str], None]] = None,
    ):
        if reread_period is not None and reread_period < 0:
            raise ValueError("reread_period must not be negative")
        self.dsn = dsn
        self.lock_name = lock_name
        self.on_change = on_change
        self.on_error = on_error
        self.reread_period = reread_period or None
        self._lock = threading.Lock()
        self._leader: Optional[Leader] = None
        self._reported = False
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()  # stop() writes a byte: select() wakes
        self._conn = None
        self._thread: Optional[threading.Thread] = None
        self._next_periodic: Optional[float] = None
        self._expiry_due: Optional[float] = None

    # -- starting and stopping --------------------------------------------------

    def start(self) -> "LeaderFollower":
        """Connects, LISTENs and reads (raising if it cannot), then follows."""
        if self._thread is not None or self._stop.is_set():
            raise RuntimeError("this LeaderFollower was already started; make a new one")
        try:
            self._connect()
            initial = self._read()
        except BaseException:
            self._drop()
            raise
        with self._lock:
            self._leader = initial
        self._thread = threading.Thread(
            target=self._run, args=(initial,), name=f"follower {self.lock_name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stops following; cancels a read in progress.  Idempotent."""
        self._stop.set()
        if self._wake_w is not None:
            os.write(self._wake_w, b"x")
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel()  # a read stuck behind a lock
            except psycopg2.Error:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._wake_r is not None and (self._thread is None or not self._thread.is_alive()):
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = None

    def __enter__(self) -> "LeaderFollower":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def leader(self) -> Optional[Leader]:
        """The leader last reported (or about to be); None: no live lease."""
        with self._lock:
            return self._leader

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed

    # -- the follower's thread --------------------------------------------------

    def _run(self, initial: Optional[Leader]) -> None:
        self._report(initial)
        failures = 0
        while not self._stop.is_set():
            try:
                if self._conn is None:
                    if self._stop.wait(_backoff(failures)):
                        break
                    self._connect()
                    self._report(self._read())
                    failures = 0
                else:
                    self._wait_and_read()
            except (psycopg2.Error, OSError) as error:
                self._drop()
                if self._stop.is_set():
                    break
                failures += 1
                self._error(f'lock "{self.lock_name}": connection failed, reconnecting: '
                            f"{str(error).strip()}")
        self._drop()

    def _wait_and_read(self) -> None:
        conn = self._conn
        conn.poll()  # takes in what has arrived; raises if the connection broke
        concerned = any(self._concerns(n.payload) for n in conn.notifies)
        del conn.notifies[:]
        now = time.monotonic()
        due = [t for t in (self._expiry_due, self._next_periodic) if t is not None]
        due = min(due) if due else None
        if concerned or (due is not None and now >= due):
            self._report(self._read())
            return
        select.select([conn, self._wake_r], [], [], None if due is None else due - now)

    def _concerns(self, payload: str) -> bool:
        """Whether a notification may be about our lock: unless it names another."""
        try:
            event = json.loads(payload)
        except ValueError:
            return True
        name = event.get("lock_name") if isinstance(event, dict) else None
        return not isinstance(name, str) or name == self.lock_name

    def _report(self, leader: Optional[Leader]) -> None:
        with self._lock:
            if self._reported and _same(self._leader, leader):
                return
            self._reported = True
            self._leader = leader
        try:
            self.on_change(leader)
        except Exception as error:  # nowhere else to go on this thread
            self._error(f"on_change raised {error!r}")

    def _error(self, message: str) -> None:
        if self.on_error is not None:
            try:
                self.on_error(message)
            except Exception:
                pass

    # -- the connection ---------------------------------------------------------

    def _connect(self) -> None:
        conn = psycopg2.connect(
            self.dsn, fallback_application_name=f"leader_follower {self.lock_name}"[:63]
        )
        self._conn = conn
        # Notifications are delivered between transactions only.
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"LISTEN {CHANNEL}")

    def _read(self) -> Optional[Leader]:
        with self._conn.cursor() as cur:
            cur.execute(_READ_LEADER, (self.lock_name,))
            row = cur.fetchone()
        now = time.monotonic()
        self._next_periodic = now + self.reread_period if self.reread_period else None
        if row is None:
            self._expiry_due = None
            return None
        holder, token, payload, remaining_ms = row
        # Early, the read would find the lease still live and come again.
        self._expiry_due = now + max(remaining_ms, 0) / 1000 + 0.005
        return Leader(holder, int(token), payload)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg2.Error:
                pass


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3:
        print(f"usage: {argv[0]} LOCK [DSN]", file=sys.stderr)
        return 2
    lock, dsn = argv[1], argv[2] if len(argv) == 3 else ""

    def on_change(leader: Optional[Leader]) -> None:
        if leader is None:
            print(f"{lock}: no leader", flush=True)
        else:
            published = "" if leader.payload is None else " " + json.dumps(leader.payload)
            print(f"{lock}: {leader.holder} leads with token {leader.token}{published}", flush=True)

    with LeaderFollower(dsn, lock, on_change, on_error=lambda m: print(m, file=sys.stderr)):
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
