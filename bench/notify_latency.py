#!/usr/bin/python3
"""How soon a follower hears of a new leader: the delay from a grant's commit
to the arrival of its announcement on fencing_events at a LISTENing session,
and from a lease's end to the arrival of its expiry (the background worker).

Run against the cluster in the environment (PG* variables), which must
preload pg_fencing for the expiry part.  One process, two connections:
the writer takes and releases a lock in autocommit; the listener's socket
is watched with select().  The grant commits before its reply is sent, so
"from the reply" (arrival - the moment the acquire returned) is a lower
bound of the delay from the commit and often negative (the announcement
came first); "from the call" (arrival - the moment the acquire was sent)
is an upper bound.  Prints CSV: measure,statistic,milliseconds.
"""
import json
import select
import statistics
import sys
import time

import psycopg2
import psycopg2.extensions

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
EXPIRIES = int(sys.argv[2]) if len(sys.argv) > 2 else 10


def connect():
    conn = psycopg2.connect("")
    conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    return conn


def wait_for(listener, event, holder, timeout=10.0):
    """The arrival time of the first announcement of event by holder."""
    deadline = time.monotonic() + timeout
    while True:
        listener.poll()
        while listener.notifies:
            note = listener.notifies.pop(0)
            payload = json.loads(note.payload)
            if payload.get("event") == event and payload.get("holder") == holder:
                return time.monotonic(), payload
        left = deadline - time.monotonic()
        if left <= 0:
            raise SystemExit(f"no {event} announcement for {holder} within {timeout} s")
        select.select([listener], [], [], left)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def report(name, values):
    ms = [v * 1000 for v in values]
    for stat, value in (("p50", pct(ms, 50)), ("p99", pct(ms, 99)), ("max", max(ms)),
                        ("mean", statistics.mean(ms))):
        print(f"{name},{stat},{value:.3f}")


def main():
    writer, listener = connect(), connect()
    w, l = writer.cursor(), listener.cursor()
    w.execute("SELECT fencing_create_lock('bench-watch') WHERE NOT EXISTS "
              "(SELECT FROM fencing_locks WHERE lock_name = 'bench-watch')")
    w.execute("SELECT fencing_set_announce('bench-watch', true)")
    l.execute("LISTEN fencing_events")
    from_reply, from_call = [], []
    for i in range(ROUNDS):
        holder = f"h{i}"
        sent = time.monotonic()
        w.execute("SELECT fencing_acquire('bench-watch', %s, '1 minute')", (holder,))
        token = w.fetchone()[0]
        returned = time.monotonic()
        arrived, payload = wait_for(listener, "granted", holder)
        assert payload["token"] == str(token), (payload, token)
        from_reply.append(arrived - returned)
        from_call.append(arrived - sent)
        w.execute("SELECT fencing_release('bench-watch', %s)", (str(token),))
        wait_for(listener, "released", holder)
    report("grant_to_follower_from_reply", from_reply)
    report("grant_to_follower_from_call", from_call)

    # Expiries: a 300 ms lease left to run out; the delay from its end (the
    # server's expires_at, read back on the server's clock at arrival).
    delays = []
    for i in range(EXPIRIES):
        holder = f"e{i}"
        w.execute("SELECT fencing_acquire('bench-watch', %s, '300 ms')", (holder,))
        token = w.fetchone()[0]
        wait_for(listener, "expired", holder)
        w.execute("SELECT extract(epoch FROM clock_timestamp() - expires_at) "
                  "FROM fencing_leases WHERE lock_name = 'bench-watch'")
        delays.append(float(w.fetchone()[0]))
        assert token is not None
    report("expiry_to_follower", delays)


if __name__ == "__main__":
    main()
