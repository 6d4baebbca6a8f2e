#!/usr/bin/env python3
"""pg_fencing from Python: a lease with a heartbeat, fenced writes, a stale write refused.

    python3 examples/python/example.py [--dsn DSN] [--ttl SECONDS]

The connection comes from --dsn, or else from libpq's PG* variables (PGHOST,
PGPORT, PGUSER, PGPASSWORD, PGDATABASE).  The role must be allowed to create
the extension (a superuser), a table, and to take leases.

1. Heartbeat: a lease with a short ttl is held for several ttls while its
   heartbeat thread renews it, and every write carries its token.
2. Pause: worker A (a child process) holds the lease, checks it still holds
   it, and stops itself with SIGSTOP between that check and its write -- a GC
   pause it cannot see coming.  Its lease expires; B takes the lock with the
   next token and writes.  A is resumed with SIGCONT and writes with its stale
   token: the table's guard refuses it (SQLSTATE 55Z01, StaleTokenError) and
   B's value survives.

Exits 0 when all of that happened as described, 1 otherwise.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

import psycopg2

from fenced_lease import FencedLease, StaleTokenError, fenced_execute

TABLE = "example_resource"
LOCK = "example-resource"


def setup(dsn: str) -> None:
    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id int PRIMARY KEY, token fencing_token, val text)"
        )
        cur.execute("SELECT fencing_protect(%s)", (TABLE,))
        cur.execute(f"INSERT INTO {TABLE} (id) VALUES (1) ON CONFLICT DO NOTHING")
    conn.close()


def write(conn, token: int, val: str) -> None:
    fenced_execute(conn, f"UPDATE {TABLE} SET token = %s, val = %s WHERE id = 1", (token, val))


def read(conn):
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT token::bigint, val FROM {TABLE} WHERE id = 1")
        return cur.fetchone()


def heartbeat_part(dsn: str, ttl: float) -> bool:
    print(f"\n== 1. heartbeat: a lease of ttl {ttl} s held for {4 * ttl:.1f} s")
    conn = psycopg2.connect(dsn)
    lost = []
    with FencedLease(dsn, LOCK, holder="heartbeat-demo", ttl=ttl, on_lost=lost.append) as lease:
        print(f"acquired {LOCK!r}: token {lease.token}")
        for i in range(1, 5):
            time.sleep(ttl)
            write(conn, lease.check(), f"heartbeat write {i}")
            print(f"t={i * ttl:.1f} s: still held ({i} ttl), wrote with token {lease.token}")
    print("released on leaving the with block")
    conn.close()
    return not lost


def worker_a(dsn: str, ttl: float) -> int:
    """Child process: hold the lease, pause between check and write, write anyway."""
    conn = psycopg2.connect(dsn)

    def say(msg):
        print(f"   A: {msg}", flush=True)

    lease = FencedLease(dsn, LOCK, holder="worker-A", ttl=ttl, wait=5 * ttl,
                        on_lost=lambda why: say(f"on_lost: {why}"))
    with lease:
        say(f"acquired token {lease.token}; writing")
        write(conn, lease.token, "A before the pause")
        token = lease.check()  # still held: the check passes...
        say("check() passed, about to write -- pausing (SIGSTOP) now")
        os.kill(os.getpid(), signal.SIGSTOP)  # ...and the process freezes here
        say(f"resumed; writing with token {token}, unaware of the pause")
        try:
            write(conn, token, "A after the pause")
        except StaleTokenError as error:
            say(f"write refused: StaleTokenError ({error.pgcode}): {error}")
            return 0
        say("write ACCEPTED with a stale token")
        return 1


def pause_part(dsn: str, ttl: float) -> bool:
    print(f"\n== 2. pause: A stops between its check and its write; its lease (ttl {ttl} s) expires")
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker-a", "--dsn", dsn, "--ttl", str(ttl)]
    )
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        print("B: worker A ended before it paused")
        return False
    paused_at = time.monotonic()
    conn = psycopg2.connect(dsn)
    with FencedLease(dsn, LOCK, holder="worker-B", ttl=ttl, wait=5 * ttl) as lease:
        print(f"B: acquired token {lease.token} {time.monotonic() - paused_at:.2f} s after A "
              "paused (A's lease had to expire first); writing", flush=True)
        write(conn, lease.token, "B")
        print("B: resuming A (SIGCONT)", flush=True)
        os.kill(child.pid, signal.SIGCONT)
        a_refused = child.wait() == 0
    token, val = read(conn)
    conn.close()
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
