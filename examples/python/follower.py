#!/usr/bin/env python3
"""Prints each change of leader of a pg_fencing lock, until interrupted.

    python3 examples/python/follower.py LOCK [DSN] [--reread SECONDS]

A thin command line over pg_fencing's Election.observe() (the package in
clients/python, found relative to this file): it prints the leader at start,
then each change of (holder, token) -- "LOCK: HOLDER leads with token N
[PAYLOAD]" or "LOCK: no leader".  What it prints is always read from the view
fencing_leases; notifications (LISTEN fencing_events) only make it read
sooner, so a forged one changes nothing.  It also reads when the live lease
is due to end and every --reread seconds (default 5): the fallback for a lock
without fencing_set_announce(lock, true).  The connection comes from DSN, or
else from libpq's PG* variables.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import pg_fencing  # noqa: E402


def describe(lock: str, leader) -> str:
    if leader is None:
        return f"{lock}: no leader"
    published = "" if leader.payload is None else f" {leader.payload}"
    return f"{lock}: {leader.holder} leads with token {leader.token}{published}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", help="the lock whose leader to follow")
    parser.add_argument("dsn", nargs="?", default="", help="libpq connection string (default: PG* variables)")
    parser.add_argument("--reread", type=float, default=5.0, help="fallback read period in seconds (default 5)")
    args = parser.parse_args()

    election = pg_fencing.Client(args.dsn).election(args.lock)
    # observe() reconnects quietly after a failure; a server that cannot be
    # reached at all should say so at once instead.
    election.leader()
    try:
        for leader in election.observe(reread=args.reread):
            print(describe(args.lock, leader), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
