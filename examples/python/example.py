#!/usr/bin/env python3
"""pg_fencing from Python: a lease with a heartbeat, fenced writes, a stale write refused.

    python3 examples/python/example.py [--dsn DSN] [--ttl SECONDS]

It uses the package in clients/python (pg_fencing, on psycopg 3: Debian's
python3-psycopg), found relative to this file, so it runs from any
directory.  The connection comes from --dsn, or else from libpq's PG*
variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE).  The role must be
allowed to create the extension (a superuser), a table, and to take leases.

1. Heartbeat: a lease with a short ttl is held for several ttls while the
   package's heartbeat renews it, and every write carries its token.
2. Pause: worker A (a child process) holds the lease, checks it still holds
   it, and stops itself with SIGSTOP between that check and its write -- a GC
   pause it cannot see coming.  Its lease expires; B takes the lock with the
   next token and writes.  A is resumed with SIGCONT and writes with the token
   it checked: the table's guard refuses it (SQLSTATE 55Z01, StaleTokenError)
   and B's value survives.

Exits 0 when all of that happened as described, 1 otherwise.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import psycopg  # noqa: E402

import pg_fencing  # noqa: E402

TABLE = "example_resource"
LOCK = "example-resource"
UPDATE = f"UPDATE {TABLE} SET token = %s, val = %s WHERE id = 1"


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing")
        db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id int PRIMARY KEY, token fencing_token, val text)")
        db.execute("SELECT fencing_protect(%s)", (TABLE,))
        db.execute(f"INSERT INTO {TABLE} (id) VALUES (1) ON CONFLICT DO NOTHING")


def heartbeat_part(dsn: str, ttl: float) -> bool:
    print(f"\n== 1. heartbeat: a lease of ttl {ttl} s held for {4 * ttl:.1f} s", flush=True)
    client = pg_fencing.Client(dsn)
    lost = []
    with psycopg.connect(dsn, autocommit=True) as db:
        with client.lock(LOCK, holder="heartbeat-demo", ttl=ttl, wait=5 * ttl, on_lost=lost.append) as lease:
            print(f"acquired {LOCK!r}: token {lease.token}")
            for i in range(1, 5):
                time.sleep(ttl)
                lease.execute(db, UPDATE, (lease.token, f"heartbeat write {i}"))
                print(f"t={i * ttl:.1f} s: still held ({i} ttl), wrote with token {lease.token}", flush=True)
    print("released on leaving the with block")
    return not lost


def worker_a(dsn: str, ttl: float) -> int:
    """Child process: hold the lease, pause between check and write, write anyway."""

    def say(msg):
        print(f"   A: {msg}", flush=True)

    client = pg_fencing.Client(dsn)
    with psycopg.connect(dsn, autocommit=True) as db:
        with client.lock(LOCK, holder="worker-A", ttl=ttl, wait=5 * ttl,
                         on_lost=lambda why: say(f"on_lost: {why}")) as lease:
            say(f"acquired token {lease.token}; writing")
            lease.execute(db, UPDATE, (lease.token, "A before the pause"))
            token = lease.check()  # still held: the check passes...
            say("check() passed, about to write -- pausing (SIGSTOP) now")
            os.kill(os.getpid(), signal.SIGSTOP)  # ...and the process freezes here
            # lease.execute() would now refuse to send (held() is False after
            # the pause); a write already past its check cannot ask again, so
            # it goes out as it was: the database is the one that refuses it.
            say(f"resumed; writing with token {token}, as a write already past its check would")
            try:
                pg_fencing.fenced_execute(db, UPDATE, (token, "A after the pause"))
            except pg_fencing.StaleTokenError as error:
                say(f"write refused: StaleTokenError ({error.sqlstate}): {error}")
                return 0
            say("write ACCEPTED with a stale token")
            return 1


def pause_part(dsn: str, ttl: float) -> bool:
    print(f"\n== 2. pause: A stops between its check and its write; its lease (ttl {ttl} s) expires",
          flush=True)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker-a", "--dsn", dsn, "--ttl", str(ttl)]
    )
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        print("B: worker A ended before it paused")
        return False
    paused_at = time.monotonic()
    client = pg_fencing.Client(dsn)
    with psycopg.connect(dsn, autocommit=True) as db:
        with client.lock(LOCK, holder="worker-B", ttl=ttl, wait=5 * ttl) as lease:
            print(f"B: acquired token {lease.token} {time.monotonic() - paused_at:.2f} s after A "
                  "paused (A's lease had to expire first); writing", flush=True)
            lease.execute(db, UPDATE, (lease.token, "B"))
            print("B: resuming A (SIGCONT)", flush=True)
            os.kill(child.pid, signal.SIGCONT)
            a_refused = child.wait(timeout=30) == 0
        token, val = db.execute(f"SELECT token::bigint, val FROM {TABLE} WHERE id = 1").fetchone()
    print(f"row 1 now: token {token}, val {val!r}")
    return a_refused and val == "B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="", help="libpq connection string (default: PG* variables)")
    parser.add_argument("--ttl", type=float, default=1.0, help="lease ttl in seconds (default 1)")
    parser.add_argument("--worker-a", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_a:
        return worker_a(args.dsn, args.ttl)

    setup(args.dsn)
    ok = heartbeat_part(args.dsn, args.ttl)
    ok = pause_part(args.dsn, args.ttl) and ok
    print("\nresult:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
