"""The paused session's holder: opens a session, takes every lock it is
given, prints {"id", "tokens"} and waits for a line; the test stops it
(SIGSTOP) meanwhile, lets the session run out and another holder write,
then resumes it.  It then writes under its old tokens, as a client past its
check has every reason to, and prints what it saw and what the database
answered."""

import json
import sys
import time

import psycopg

import pg_fencing

conninfo, table, *locks = sys.argv[1:]
lost = []
session = pg_fencing.Client(conninfo).session(ttl=1.0, on_lost=lost.append)
leases = session.lock_all(locks)
db = psycopg.connect(conninfo, autocommit=True)
print(json.dumps({"id": session.id, "tokens": [l.token for l in leases]}), flush=True)
sys.stdin.readline()  # stopped here, then resumed
report = {"held_on_waking": session.held()}


def write(row: int, token: int) -> str:
    try:
        pg_fencing.fenced_execute(db, f"UPDATE {table} SET token = %s, v = 'paused' WHERE id = %s",
                                  (token, row))
        return "written"
    except pg_fencing.GuardError as error:
        return type(error).__name__


report["write_row_1"] = write(1, leases[0].token)  # the new holder wrote row 1
report["write_row_2"] = write(2, leases[1].token)  # nobody took that lock since
try:
    session.lock(locks[0])
    report["lock"] = "acquired"
except pg_fencing.LeaseLost:
    report["lock"] = "LeaseLost"
time.sleep(0.5)  # time for a second on_lost, if there were one
report["lost"] = lost
report["close"] = session.close()
print(json.dumps(report), flush=True)
