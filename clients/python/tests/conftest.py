"""The tests run against a live server named by the PG* variables (say,
inside scripts/lib.sh's with_throwaway_cluster), as a role that may create
the extension and revoke leases (the cluster's superuser)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
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


def places_of(db, session_id: int) -> list:
    """The places in line (1.10) of a session: [(place, lock_name, has_token)], in order."""
    return [tuple(r) for r in db.execute(
        "SELECT l.place, k.lock_name, l.token IS NOT NULL FROM fencing_line l "
        "JOIN fencing_lock k USING (lock_id) WHERE l.session_id = %s ORDER BY l.place",
        (session_id,)).fetchall()]


def await_place(db, session_id: int, timeout: float = 5) -> int:
    """Polls places_of() until the session has one (timeout s at most): its number."""
    deadline = time.monotonic() + timeout
    while True:
        places = places_of(db, session_id)
        if places or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    assert len(places) == 1, f"session {session_id} has no place in line (or more than one): {places}"
    return places[0][0]


def start_script(name: str, *args: str) -> subprocess.Popen:
    """Runs tests/<name>.py in a process of its own, the package importable,
    lines on stdin and stdout."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py"), CONNINFO, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


PGBOUNCER = "/usr/sbin/pgbouncer"


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def pgbouncer():
    """A real PgBouncer (Debian 12's) in front of the test cluster, as
    test/t/003_pgbouncer.pl starts one: transaction pooling, five server
    connections for everyone (default_pool_size = 5), on a free loopback
    port.  Its conninfo; stopped at the end of the module."""
    yield from running_pgbouncer(pool_size=5)


@pytest.fixture(scope="module")
def pgbouncer_pool_of_1():
    """The same PgBouncer with one server connection for everyone: a
    statement that holds it for a wait holds up every other client."""
    yield from running_pgbouncer(pool_size=1)


def running_pgbouncer(pool_size: int):
    if not os.access(PGBOUNCER, os.X_OK):
        pytest.skip(f"PgBouncer is not installed ({PGBOUNCER})")
    with psycopg.connect(CONNINFO) as conn:
        info = conn.info
        server = make_conninfo(host=info.host, port=info.port, dbname=info.dbname, user=info.user,
                               password=info.password or None)
        user = info.user
    directory = tempfile.mkdtemp(prefix="pg_fencing-pgbouncer.")
    port = free_loopback_port()
    with open(os.path.join(directory, "pgbouncer.ini"), "w") as ini:
        ini.write(f"""[databases]
fencing = {server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 400
server_check_delay = 0
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
""")
    command = [PGBOUNCER]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(directory, "postgres")
        os.chmod(os.path.join(directory, "pgbouncer.ini"), 0o644)
        command += ["-u", "postgres"]
    bouncer = subprocess.Popen(command + [os.path.join(directory, "pgbouncer.ini")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pooled = make_conninfo(host="127.0.0.1", port=port, dbname="fencing", user=user)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if bouncer.poll() is not None or time.monotonic() >= deadline:
                    raise RuntimeError(f"PgBouncer did not start: {bouncer.stderr.read() if bouncer.poll() is not None else ''}")
                time.sleep(0.1)
        yield pooled
    finally:
        bouncer.terminate()
        try:
            bouncer.wait(10)
        except subprocess.TimeoutExpired:
            bouncer.kill()
            bouncer.wait()
        shutil.rmtree(directory, ignore_errors=True)


def short_statements_go_through(conninfo: str, count: int = 10, bound: float = 3.0) -> bool:
    """Whether another client's count short statements (SELECT 1, one after
    another, on a connection of its own) all run within bound seconds.  A
    statement that does not come back in time is left to finish in a
    daemon thread."""
    done = threading.Event()

    def run() -> None:
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
            for _ in range(count):
                conn.execute("SELECT 1")
                time.sleep(0.05)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(bound)


def line_kinds(db, lock_name: str) -> list:
    """The places waiting in the lock's line, as fencing_lines shows them:
    [(holder, kind, position)], in order."""
    return [tuple(r) for r in db.execute(
        "SELECT holder, kind, position FROM fencing_lines WHERE lock_name = %s ORDER BY place",
        (lock_name,)).fetchall()]
