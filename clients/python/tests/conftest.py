"""The tests run against a live server named by the PG* variables (say,
inside scripts/lib.sh's with_throwaway_cluster), as a role that may create
the extension and revoke leases (the cluster's superuser)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

import pg_fencing  # noqa: E402

CONNINFO = os.environ.get("PG_FENCING_TEST_DSN", "")


@pytest.fixture(scope="session", autouse=True)
def extension():
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing")


@pytest.fixture
def client() -> pg_fencing.Client:
    return pg_fencing.Client(CONNINFO)


@pytest.fixture
def db():
    conn = psycopg.connect(CONNINFO, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture
def wrong_password(db):
    """(conninfo, role): a LOGIN role made for the test (dropped after it)
    and a conninfo that names it with a password that is not its own."""
    role = "py_" + uuid.uuid4().hex[:12]
    db.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
        sql.Identifier(role), sql.Literal(uuid.uuid4().hex)))
    try:
        yield make_conninfo(CONNINFO, user=role, password="not-" + role), role
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def name() -> str:
    """A lock or table name of this test's own."""
    return "py_" + uuid.uuid4().hex[:12]


def protected_table(db, table: str, lock_name: str) -> None:
    """A table whose one row is written under lock_name's lock-wide fence."""
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, token fencing_token, v text)")
    db.execute(f"INSERT INTO {table} VALUES (1, NULL, 'initial')")
    db.execute("SELECT fencing_protect(%s, lock_name => %s)", (table, lock_name))


def waits_on_the_server(db, application_name: str) -> int:
    """How many CALL fencing_await run now for connections so named."""
    return db.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%%' "
                      "AND state = 'active' AND application_name = %s",
                      (application_name[:63],)).fetchone()[0]


def await_waits_on_the_server(db, application_name: str, expected: int, timeout: float = 5) -> int:
    """Polls waits_on_the_server() until it says expected (timeout s at most): what it says then."""
    deadline = time.monotonic() + timeout
    while waits_on_the_server(db, application_name) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return waits_on_the_server(db, application_name)


def start_script(name: str, *args: str) -> subprocess.Popen:
    """Runs tests/<name>.py in a process of its own, the package importable,
    lines on stdin and stdout."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py"), CONNINFO, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
