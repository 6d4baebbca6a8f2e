"""The errors of pg_fencing's Python client.

Every one is a FencingError.  The guard's refusals carry the server's
SQLSTATE and its error (``cause``, a psycopg.Error) so that nothing the
server said is lost.
"""

from __future__ import annotations

from typing import Optional

import psycopg

STALE_TOKEN = "55Z01"
MISSING_TOKEN = "55Z02"
NEVER_GRANTED_TOKEN = "55Z03"
LEASE_ENDED = "55Z04"
SESSION_ENDED = "55Z05"


class FencingError(Exception):
    """Base of every error this package raises."""


class GuardError(FencingError):
    """A write the database refused on pg_fencing's account; it changed nothing."""

    sqlstate: str = ""

    def __init__(self, cause: psycopg.Error):
        diag = cause.diag
        super().__init__(diag.message_primary or str(cause).strip())
        self.cause = cause
        self.detail: Optional[str] = diag.message_detail
        self.table: Optional[str] = diag.table_name
        self.column: Optional[str] = diag.column_name


class StaleTokenError(GuardError):
    """55Z01: the token is lower than one the row (or lock) has seen: another
    holder has taken over; stop acting on this lease."""

    sqlstate = STALE_TOKEN


class MissingTokenError(GuardError):
    """55Z02: the write did not set the table's token column."""

    sqlstate = MISSING_TOKEN


class NeverGrantedTokenError(GuardError):
    """55Z03: a token the database never granted: a bug, not a lost lease."""

    sqlstate = NEVER_GRANTED_TOKEN


class LeaseEndedError(GuardError):
    """55Z04: the COMMIT of a transaction that wrote under a lease which ended
    before it: nothing it did was kept."""

    sqlstate = LEASE_ENDED


class LeaseLost(FencingError):
    """The lease (or session) is known lost: expired, refused, released, or
    no longer renewable in time.  Raised before anything is sent."""


class LockTimeout(FencingError):
    """The lock stayed busy for the whole wait (or, without a wait, was busy)."""


def seconds(value: float) -> str:
    """A duration for a message, to the millisecond: '3 s', '2.5 s' (what
    is left of a wait counted down to a deadline would print as
    2.9999992590001057 s)."""
    return f"{value:.3f}".rstrip("0").rstrip(".") + " s"


_GUARD_ERRORS = {c.sqlstate: c for c in (StaleTokenError, MissingTokenError,
                                          NeverGrantedTokenError, LeaseEndedError)}


def raise_mapped(error: psycopg.Error) -> None:
    """Raises the package's error for a guard's refusal, else error itself."""
    mapped = _GUARD_ERRORS.get(error.sqlstate or "")
    if mapped is not None:
        raise mapped(error) from error
    raise error
