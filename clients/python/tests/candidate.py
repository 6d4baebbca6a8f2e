"""A leader candidate: campaigns, says "leader TOKEN" once it leads, and
writes under its token every 100 ms until its lease is lost or stdin
closes."""

import select
import sys

import psycopg

import pg_fencing

conninfo, lock, table, me = sys.argv[1:5]
election = pg_fencing.Client(conninfo).election(lock, holder=me, ttl=1.0)
db = psycopg.connect(conninfo, autocommit=True)
while True:
    lease = election.campaign()
    print("leader", lease.token, flush=True)
    while lease.held():
        try:
            lease.execute(db, f"UPDATE {table} SET token = %s, v = %s WHERE id = 1", (lease.token, me))
        except (pg_fencing.LeaseLost, pg_fencing.StaleTokenError):
            break
        if select.select([sys.stdin], [], [], 0.1)[0] and not sys.stdin.readline():
            election.resign()
            sys.exit(0)
