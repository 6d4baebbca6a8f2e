"""pg_fencing.Client: the entry point.  Every lease, session and election
it makes uses connections of its own, from the same conninfo (and so as
the same role, which renewals and releases require)."""

from __future__ import annotations

from typing import Callable, Optional

from ._wire import Connection
from .election import Election, Leader, read_leader
from .lease import Lease
from .session import Session

OnLost = Optional[Callable[[str], None]]


class Client:
    # The classes it makes; pg_fencing.aio.Client makes the asyncio ones.
    _lease_class = Lease
    _election_class = Election

    def __init__(self, conninfo: str = ""):
        self.conninfo = conninfo  # '' takes everything from the PG* variables

    def lock(self, name: str, ttl: float = 10.0, wait: Optional[float] = None,
             on_lost: OnLost = None, payload: Optional[str] = None,
             holder: Optional[str] = None, heartbeat: Optional[float] = None) -> Lease:
        """An exclusive lease, taken when its with block starts (or at .acquire())."""
        return self._lease_class(self.conninfo, name, ttl=ttl, wait=wait, on_lost=on_lost,
                                 payload=payload, holder=holder, heartbeat=heartbeat)

    def semaphore(self, name: str, permits: int, ttl: float = 10.0, wait: Optional[float] = None,
                  on_lost: OnLost = None, holder: Optional[str] = None,
                  heartbeat: Optional[float] = None) -> Lease:
        """One of `permits` permits of the semaphore `name`, each with its own token."""
        return self._lease_class(self.conninfo, name, kind="permit", permits=permits, ttl=ttl,
                                 wait=wait, on_lost=on_lost, holder=holder, heartbeat=heartbeat)

    def shared(self, name: str, ttl: float = 10.0, wait: Optional[float] = None,
               on_lost: OnLost = None, holder: Optional[str] = None,
               heartbeat: Optional[float] = None) -> Lease:
        """A shared lease of `name`, beside other shared holders."""
        return self._lease_class(self.conninfo, name, kind="shared", ttl=ttl, wait=wait,
                                 on_lost=on_lost, holder=holder, heartbeat=heartbeat)

    def session(self, ttl: float = 10.0, holder: Optional[str] = None, on_lost: OnLost = None,
                heartbeat: Optional[float] = None) -> Session:
        """Opens a session (1.8) at once."""
        return Session(self.conninfo, ttl=ttl, holder=holder, on_lost=on_lost, heartbeat=heartbeat)

    def election(self, name: str, holder: Optional[str] = None, ttl: float = 10.0,
                 on_lost: OnLost = None) -> Election:
        return self._election_class(self.conninfo, name, holder=holder, ttl=ttl, on_lost=on_lost)

    def leader(self, name: str) -> Optional[Leader]:
        """The live holder of `name`'s exclusive lease, or None."""
        conn = Connection(self.conninfo, "pg_fencing leader")
        try:
            return read_leader(conn, name)[0]
        finally:
            conn.close()
