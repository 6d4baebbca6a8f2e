"""Connections of the client's own: one statement at a time, in autocommit,
and, for a heartbeat's renewal, an answer waited for only until a deadline.

A renewal stuck behind a lock or a dead network must not delay the report
of a loss, so the renewal goes through libpq's asynchronous calls
(psycopg's pq layer) and a select() bounded by the deadline.  After a
timeout the connection is closed: its answer may still come, and the
connection is never used again.
"""

from __future__ import annotations

import select
import time
from typing import Any, List, Optional, Sequence, Tuple, Type, TypeVar

import psycopg
from psycopg import pq

from .errors import seconds

C = TypeVar("C", psycopg.Connection, psycopg.AsyncConnection)


def connect(cls: Type[C], conninfo: str, application_name: str, **options: Any):
    """Opens one of the package's own connections: cls.connect(), in
    autocommit, named in pg_stat_activity.  The one place every connection
    of the package is made, threaded and asyncio alike (for an
    AsyncConnection it returns the coroutine to await).

    prepare_threshold=None: psycopg would otherwise prepare a statement run
    five times on one connection as a named statement (_pg3_N) that lives
    as long as the server's session.  Behind a transaction-pooling PgBouncer
    the next transaction may run on another server connection (where the
    statement does not exist), or the next client on this one (which then
    fails with DuplicatePreparedStatement).  Without it every statement
    goes as the unnamed one, parsed, bound and run in one message sequence.
    A prepare_threshold in options (an int asks for named statements) wins.
    """
    options.setdefault("prepare_threshold", None)
    options.setdefault("autocommit", True)
    return cls.connect(conninfo, application_name=application_name[:63], **options)


class NoAnswer(Exception):
    """No answer before the deadline; the connection has been closed.

    Internal: the heartbeat reports it as the loss of the lease, and a
    public call that meets it raises LeaseLost instead (with this as its
    __cause__).  Its message says what went unanswered and for how long."""

    def __init__(self, what: str = "a statement", within: Optional[float] = None):
        self.what = what
        self.within = within
        if within is None:
            message = f"no answer from the server to {what} before its deadline"
        else:
            message = f"no answer from the server within {seconds(max(0.0, within))} to {what}"
        super().__init__(message + "; the connection was closed")


class StatementFailed(Exception):
    """The server refused a deadline-bounded statement; .sqlstate says why."""

    def __init__(self, sqlstate: str, message: str):
        super().__init__(message)
        self.sqlstate = sqlstate


def interval(seconds: float) -> str:
    """'1500 milliseconds': a text the SQL casts to interval."""
    return f"{max(1, round(seconds * 1000))} milliseconds"


class Connection:
    """A psycopg connection in autocommit, used by one thread at a time."""

    def __init__(self, conninfo: str, application_name: str):
        self.conn = connect(psycopg.Connection, conninfo, application_name)

    def row(self, sql: str, params: Sequence[Any] = ()) -> Optional[tuple]:
        """Runs one statement (psycopg's %s placeholders): its first row."""
        cur = self.conn.execute(sql, params)
        return cur.fetchone() if cur.description else None

    def value_by(self, sql: str, params: Sequence[Optional[str]], deadline: float,
                 what: Optional[str] = None) -> Optional[str]:
        """Runs one statement ($1 placeholders, text parameters) and returns
        its first value as text, waiting until time.monotonic() reaches
        deadline at most: NoAnswer then (naming `what`, by default the
        statement), StatementFailed for an error."""
        rows = self.rows_by(sql, params, deadline, what)
        return rows[0][0] if rows and rows[0] else None

    def rows_by(self, sql: str, params: Sequence[Optional[str]], deadline: float,
                what: Optional[str] = None) -> List[Tuple[Optional[str], ...]]:
        """value_by(), for every row: each a tuple of texts (None for NULL)."""
        unanswered = NoAnswer(what or f"`{sql}`", deadline - time.monotonic())
        pg = self.conn.pgconn
        pg.nonblocking = 1
        try:
            pg.send_query_params(sql.encode(), [None if p is None else p.encode() for p in params])
            while pg.flush() == 1:
                self._wait(pg, deadline, unanswered, write=True)
            rows: List[Tuple[Optional[str], ...]] = []
            failure: Optional[StatementFailed] = None
            while True:
                pg.consume_input()
                if pg.is_busy():
                    self._wait(pg, deadline, unanswered, write=False)
                    continue
                result = pg.get_result()
                if result is None:
                    break
                if result.status == pq.ExecStatus.TUPLES_OK:
                    rows = [tuple(None if v is None else v.decode()
                                  for v in (result.get_value(r, c) for c in range(result.nfields)))
                            for r in range(result.ntuples)]
                elif result.status == pq.ExecStatus.FATAL_ERROR:
                    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
                    message = (result.error_message or b"").decode().strip()
                    failure = StatementFailed(sqlstate, message)
        finally:
            if not self.conn.closed:
                pg.nonblocking = 0
        if failure is not None:
            raise failure
        return rows

    def _wait(self, pg: pq.abc.PGconn, deadline: float, unanswered: NoAnswer, write: bool) -> None:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            self.close()
            raise unanswered
        sock = pg.socket
        ready = select.select([] if write else [sock], [sock] if write else [], [], timeout)
        if not any(ready):
            self.close()
            raise unanswered

    def cancel(self) -> None:
        """Cancels the statement running on it, from any thread."""
        if not self.conn.closed:
            try:
                self.conn.cancel()
            except psycopg.Error:
                pass  # it ended meanwhile, or the server is gone: nothing to cancel

    @property
    def closed(self) -> bool:
        return self.conn.closed

    @property
    def usable(self) -> bool:
        """Open, and not broken (a statement may be sent on it)."""
        return not self.conn.closed and self.conn.pgconn.status == pq.ConnStatus.OK

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()
