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
from typing import Any, Optional, Sequence

import psycopg
from psycopg import pq


class NoAnswer(Exception):
    """No answer before the deadline; the connection has been closed."""


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
        self.conn = psycopg.connect(conninfo, autocommit=True,
                                    application_name=application_name[:63])

    def row(self, sql: str, params: Sequence[Any] = ()) -> Optional[tuple]:
        """Runs one statement (psycopg's %s placeholders): its first row."""
        cur = self.conn.execute(sql, params)
        return cur.fetchone() if cur.description else None

    def value_by(self, sql: str, params: Sequence[Optional[str]], deadline: float) -> Optional[str]:
        """Runs one statement ($1 placeholders, text parameters) and returns
        its first value as text, waiting until time.monotonic() reaches
        deadline at most: NoAnswer then, StatementFailed for an error."""
        pg = self.conn.pgconn
        pg.nonblocking = 1
        try:
            pg.send_query_params(sql.encode(), [None if p is None else p.encode() for p in params])
            while pg.flush() == 1:
                self._wait(pg, deadline, write=True)
            value: Optional[str] = None
            failure: Optional[StatementFailed] = None
            while True:
                pg.consume_input()
                if pg.is_busy():
                    self._wait(pg, deadline, write=False)
                    continue
                result = pg.get_result()
                if result is None:
                    break
                if result.status == pq.ExecStatus.TUPLES_OK and result.ntuples > 0:
                    raw = result.get_value(0, 0)
                    value = None if raw is None else raw.decode()
                elif result.status == pq.ExecStatus.FATAL_ERROR:
                    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
                    message = (result.error_message or b"").decode().strip()
                    failure = StatementFailed(sqlstate, message)
        finally:
            if not self.conn.closed:
                pg.nonblocking = 0
        if failure is not None:
            raise failure
        return value

    def _wait(self, pg: pq.abc.PGconn, deadline: float, write: bool) -> None:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            self.close()
            raise NoAnswer()
        sock = pg.socket
        ready = select.select([] if write else [sock], [sock] if write else [], [], timeout)
        if not any(ready):
            self.close()
            raise NoAnswer()

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

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()
