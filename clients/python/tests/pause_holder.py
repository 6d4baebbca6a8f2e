"""The pause scenario's holder A: takes the lock, checks it, says "ready",
and waits for a line; the test stops it (SIGSTOP) meanwhile, lets its lease
run out and another holder write, then resumes it.  A then writes with its
token, as a client that checked before the pause has every reason to, and
says what the database answered."""

import sys

import psycopg

import pg_fencing

conninfo, lock, table = sys.argv[1:4]
client = pg_fencing.Client(conninfo)
db = psycopg.connect(conninfo, autocommit=True)
with client.lock(lock, ttl=1.0) as lease:
    lease.check()
    print("ready", lease.token, flush=True)
    sys.stdin.readline()  # stopped here, then resumed
    try:
        pg_fencing.fenced_execute(db, f"UPDATE {table} SET token = %s, v = 'A' WHERE id = 1",
                                  (lease.token,))
        print("accepted", flush=True)
    except pg_fencing.StaleTokenError as error:
        print("rejected", error.sqlstate, flush=True)
