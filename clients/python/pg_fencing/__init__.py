"""pg_fencing: fencing-token leases on PostgreSQL (the pg_fencing extension).

    import pg_fencing
    client = pg_fencing.Client("dbname=app")
    with client.lock("nightly-report", ttl=10, wait=30) as lease:
        lease.execute(db, "UPDATE reports SET token = %s, body = %s WHERE id = 7",
                      (lease.token, body))      # StaleTokenError once another took over
"""

from .client import Client
from .election import Election, Leader
from .errors import (FencingError, GuardError, LeaseEndedError, LeaseLost, LockTimeout,
                     MissingTokenError, NeverGrantedTokenError, StaleTokenError)
from .lease import Lease, fenced_execute
from .session import Session, SessionLease

__all__ = [
    "Client", "Election", "FencingError", "GuardError", "Leader", "Lease", "LeaseEndedError",
    "LeaseLost", "LockTimeout", "MissingTokenError", "NeverGrantedTokenError", "Session",
    "SessionLease", "StaleTokenError", "fenced_execute",
]
__version__ = "1.8.0"
