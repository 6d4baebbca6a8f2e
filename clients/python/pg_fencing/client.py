"""pg_fencing.Client: the entry point.  Every lease, session and election
it makes uses connections from the same conninfo (and so as the same role,
which renewals and releases require):

- one heartbeat connection for the whole client (application_name
  "pg_fencing heartbeat PID:RANDOM"), from which one thread renews every
  lease, session and campaign's session of the client, in one statement
  whenever any is due (pg_fencing._heartbeat); opened at the first
  renewal, closed when nothing is left to renew;
- a connection per lease of its own (its acquire, then idle until its
  release), per session (the work connection: open, acquires, the line's
  statements, releases, the close; one more for a statement that finds it
  busy), per campaign (its session's), and one for each leader() and
  observe();
- with listen=True, one connection LISTENing while any wait is in line.

Every statement runs in autocommit or in a short transaction of its own
(a wait of its own, CALL fencing_await, holds a connection, but no
snapshot, for its wait), and nothing outlives it: no transaction, no
snapshot, no named prepared statement, so the conninfo may name a
transaction-pooling PgBouncer.

A wait in a session (for an exclusive lease, a shared lease or a permit),
and a campaign, is a place in the lock's line (1.10), polled every `poll`
seconds (default 0.5).  With
listen=True the client also keeps one connection LISTENing on
fencing_line while any of its waits is in line, and a place polls at once
when its number is announced (and at the latest every 2 s by default).
Leave it off through a transaction-pooling PgBouncer, where LISTEN cannot
be relied on; turn it on when the conninfo names the server or a session
pool, for hand-overs within milliseconds rather than within a poll."""

from __future__ import annotations

from typing import Callable, Optional

from ._heartbeat import Heartbeat
from ._line import Listener, poll_period
from ._wire import Connection
from .election import Election, Leader, read_leader
from .lease import Lease
from .session import Session

OnLost = Optional[Callable[[str], None]]


class Client:
    # The classes it makes; pg_fencing.aio.Client makes the asyncio ones.
    _lease_class = Lease
    _election_class = Election

    _listener_class = Listener
    _heartbeat_class = Heartbeat

    def __init__(self, conninfo: str = "", *, listen: bool = False, poll: Optional[float] = None):
        self.conninfo = conninfo  # '' takes everything from the PG* variables
        self.listen = bool(listen)
        poll_period(poll, self.listen)  # ValueError now, not at the first wait
        self.poll = poll
        self._listener = self._listener_class(conninfo) if self.listen else None
        # One heartbeat for everything the client makes.
        self._heartbeat = self._heartbeat_class(conninfo)

    def lock(self, name: str, ttl: float = 10.0, wait: Optional[float] = None,
             on_lost: OnLost = None, payload: Optional[str] = None,
             holder: Optional[str] = None, heartbeat: Optional[float] = None) -> Lease:
        """An exclusive lease, taken when its with block starts (or at .acquire())."""
        return self._lease_class(self.conninfo, name, ttl=ttl, wait=wait, on_lost=on_lost,
                                 payload=payload, holder=holder, heartbeat=heartbeat,
                                 shared_heartbeat=self._heartbeat)

    def semaphore(self, name: str, permits: int, ttl: float = 10.0, wait: Optional[float] = None,
                  on_lost: OnLost = None, holder: Optional[str] = None,
                  heartbeat: Optional[float] = None) -> Lease:
        """One of `permits` permits of the semaphore `name`, each with its own token."""
        return self._lease_class(self.conninfo, name, kind="permit", permits=permits, ttl=ttl,
                                 wait=wait, on_lost=on_lost, holder=holder, heartbeat=heartbeat,
                                 shared_heartbeat=self._heartbeat)

    def shared(self, name: str, ttl: float = 10.0, wait: Optional[float] = None,
               on_lost: OnLost = None, holder: Optional[str] = None,
               heartbeat: Optional[float] = None) -> Lease:
        """A shared lease of `name`, beside other shared holders."""
        return self._lease_class(self.conninfo, name, kind="shared", ttl=ttl, wait=wait,
                                 on_lost=on_lost, holder=holder, heartbeat=heartbeat,
                                 shared_heartbeat=self._heartbeat)

    def session(self, ttl: float = 10.0, holder: Optional[str] = None, on_lost: OnLost = None,
                heartbeat: Optional[float] = None) -> Session:
        """Opens a session (1.8) at once."""
        return Session(self.conninfo, ttl=ttl, holder=holder, on_lost=on_lost, heartbeat=heartbeat,
                       listener=self._listener, poll=self.poll, shared_heartbeat=self._heartbeat)

    def election(self, name: str, holder: Optional[str] = None, ttl: float = 10.0,
                 on_lost: OnLost = None) -> Election:
        return self._election_class(self.conninfo, name, holder=holder, ttl=ttl, on_lost=on_lost,
                                    listener=self._listener, poll=self.poll,
                                    shared_heartbeat=self._heartbeat)

    def leader(self, name: str) -> Optional[Leader]:
        """The live holder of `name`'s exclusive lease, or None."""
        conn = Connection(self.conninfo, "pg_fencing leader")
        try:
            return read_leader(conn, name)[0]
        finally:
            conn.close()
