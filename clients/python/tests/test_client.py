"""pg_fencing's Python client against a live server: the conformance
scenarios of clients/README.md that this package covers, and its API."""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time

import psycopg
import pytest

import pg_fencing
from conftest import CONNINFO, protected_table, start_script


def read_line(proc, timeout: float) -> str:
    if not select.select([proc.stdout], [], [], timeout)[0]:
        raise AssertionError(f"no line from pid {proc.pid} within {timeout} s")
    return proc.stdout.readline().strip()


def test_lock_gives_a_token_and_releases_on_exit(client, db, name):
    with client.lock(name, ttl=5) as lease:
        assert isinstance(lease.token, int)
        assert lease.held()
        assert client.leader(name).token == lease.token
        with pytest.raises(pg_fencing.LockTimeout):
            client.lock(name).acquire()
        started = time.monotonic()
        with pytest.raises(pg_fencing.LockTimeout):
            client.lock(name, wait=0.3).acquire()
        assert time.monotonic() - started >= 0.25, "it waited"
    assert not lease.held()
    assert lease.lost_reason == "released"
    assert not lease.release(), "a second release is a no-op"
    assert db.execute("SELECT state FROM fencing_leases WHERE lock_name = %s", (name,)).fetchone()[0] == "released"
    assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                      (f"pg_fencing lease {lease.holder}"[:63],)).fetchone()[0] == 0, "its connection is closed"
    with client.lock(name, ttl=5) as again:
        assert again.token > lease.token


def test_fenced_writes_map_the_guards_refusals(client, db, name):
    protected_table(db, name, name)
    with client.lock(name, ttl=5) as first:
        assert first.execute(db, f"UPDATE {name} SET token = %s, v = 'first' WHERE id = 1", (first.token,)) == 1
        with pytest.raises(pg_fencing.MissingTokenError) as missing:
            first.execute(db, f"UPDATE {name} SET v = 'no token' WHERE id = 1")
        assert isinstance(missing.value, pg_fencing.FencingError)
        assert missing.value.sqlstate == "55Z02"
        with pytest.raises(pg_fencing.MissingTokenError):
            first.execute(db, f"UPDATE {name} SET token = %s, v = 'NULL token' WHERE id = 1", (None,))
    with pytest.raises(pg_fencing.LeaseLost):
        first.execute(db, f"UPDATE {name} SET token = %s, v = 'after release' WHERE id = 1", (first.token,))
    with client.lock(name, ttl=5) as second:
        second.execute(db, f"UPDATE {name} SET token = %s, v = 'second' WHERE id = 1", (second.token,))
        with pytest.raises(pg_fencing.StaleTokenError) as stale:
            pg_fencing.fenced_execute(db, f"UPDATE {name} SET token = %s, v = 'stale' WHERE id = 1",
                                      (first.token,))
        assert isinstance(stale.value, pg_fencing.FencingError)
        assert stale.value.sqlstate == "55Z01"
        assert stale.value.table == name, "the server's table name"
        assert db.execute(f"SELECT v FROM {name}").fetchone()[0] == "second"
        assert second.execute(db, f"UPDATE {name} SET token = %s, v = 'again' WHERE id = 1",
                              (second.token,)) == 1, "the connection is usable after the refusal"


def test_pause_scenario_the_stale_write_bounces(client, db, name):
    protected_table(db, name, name)
    holder = start_script("pause_holder", name, name)
    try:
        word, token = read_line(holder, 10).split()
        assert word == "ready"
        os.kill(holder.pid, signal.SIGSTOP)  # between its check and its write
        with client.lock(name, ttl=5, wait=10) as successor:  # A's lease runs out meanwhile
            assert successor.token > int(token)
            successor.execute(db, f"UPDATE {name} SET token = %s, v = 'B' WHERE id = 1", (successor.token,))
            os.kill(holder.pid, signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert read_line(holder, 10) == "rejected 55Z01"
            assert db.execute(f"SELECT v FROM {name}").fetchone()[0] == "B"
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_lease_loss_is_reported_once(client, db, name):
    reasons = []
    lease = client.lock(name, ttl=3, heartbeat=0.2, on_lost=reasons.append).acquire()
    try:
        db.execute("SELECT fencing_revoke(%s, 'test')", (name,))
        assert lease.wait_lost(3), "on_lost was not called"
        time.sleep(0.6)  # renewals would have come in this time
        assert len(reasons) == 1, reasons
        assert "refused" in reasons[0]
        assert not lease.held()
        with pytest.raises(pg_fencing.LeaseLost):
            lease.check()
    finally:
        lease.release()


def test_a_paused_process_wakes_up_to_held_false(client, name):
    lease = client.lock(name, ttl=1.0).acquire()
    try:
        lease._beat.stop()  # as if the heartbeat thread had been frozen with the process
        assert lease.held()
        time.sleep(1.0)
        assert not lease.held(), "judged on the monotonic clock, not on the thread"
    finally:
        lease._released = False
        lease.release()


def test_semaphore_and_shared_leases(client, name):
    with client.semaphore(name, permits=2, ttl=5) as p1, client.semaphore(name, permits=2, ttl=5) as p2:
        assert p1.token != p2.token
        with pytest.raises(pg_fencing.LockTimeout, match="every permit is taken"):
            client.semaphore(name, permits=2).acquire()
    shared = name + "_rw"
    with client.shared(shared, ttl=5) as r1, client.shared(shared, ttl=5) as r2:
        assert r1.held() and r2.held()
        with pytest.raises(pg_fencing.LockTimeout):
            client.lock(shared).acquire()
    with client.lock(shared, ttl=5) as writer:
        assert writer.held()


def test_election_with_three_candidates_and_a_killed_leader(db, name):
    protected_table(db, name, name)
    candidates = [start_script("candidate", name, name, f"c{i}") for i in range(3)]
    try:
        def next_leader(timeout):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                ready = select.select([c.stdout for c in candidates if c.returncode is None], [], [],
                                      max(0.0, end - time.monotonic()))[0]
                for c in candidates:
                    if c.stdout in ready:
                        line = c.stdout.readline().strip()
                        if line.startswith("leader "):
                            return c, int(line.split()[1])
            raise AssertionError("no leader within the time allowed")

        first, first_token = next_leader(15)
        election = pg_fencing.Client(CONNINFO).election(name)
        assert election.leader().token == first_token
        first.kill()  # kill -9: its lease is left to run out
        first.wait()
        second, second_token = next_leader(10)
        assert second is not first
        assert second_token > first_token
        time.sleep(0.3)
        row = db.execute(f"SELECT token::bigint, v FROM {name}").fetchone()
        assert row[0] == second_token, "the new leader's writes land"
        with pytest.raises(pg_fencing.StaleTokenError):
            pg_fencing.fenced_execute(db, f"UPDATE {name} SET token = %s, v = 'ghost' WHERE id = 1",
                                      (first_token,))
    finally:
        for c in candidates:
            c.kill()
            c.wait()


def test_observe_follows_the_leader_and_ignores_a_forged_notification(client, db, name):
    db.execute("SELECT fencing_create_lock(%s)", (name,))
    db.execute("SELECT fencing_set_announce(%s, true)", (name,))
    election = client.election(name, holder="observed", ttl=5)
    lease = election.campaign(payload='{"addr": "10.0.0.1:1"}')
    seen = []
    stop = threading.Event()

    def follow():
        for leader in client.election(name).observe(reread=60, timeout=8):
            seen.append(leader)
            if stop.is_set():
                return

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen and seen[0].holder == "observed" and seen[0].token == lease.token
        assert json.loads(seen[0].payload) == {"addr": "10.0.0.1:1"}
        # A rival's campaign runs out; its message gives the wait to the millisecond.
        with pytest.raises(pg_fencing.LockTimeout, match=r"is held by another holder \(waited 0\.3 s\)$"):
            client.election(name, holder="rival", ttl=5).campaign(timeout=0.3)
        assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_fencing observe' "
                          "AND state = 'idle' AND backend_xmin IS NULL").fetchone()[0] == 1, \
            "between reads it sits LISTENing, idle, holding no snapshot"
        forged = json.dumps({"lock_name": name, "event": "granted", "holder": "mallory", "token": 1})
        db.execute("SELECT pg_notify('fencing_events', %s)", (forged,))
        time.sleep(0.5)
        assert len(seen) == 1, f"a forged notification changed what it reports: {seen}"
        election.proclaim('{"addr": "10.0.0.1:2"}')
        assert client.leader(name).payload is not None
        time.sleep(0.3)
        assert len(seen) == 1, "a proclamation keeps the same leader and token"
        election.resign()
        successor = client.election(name, holder="next", ttl=5)
        next_lease = successor.campaign()
        stop.set()
        deadline = time.monotonic() + 5
        while (not seen or seen[-1] is None or seen[-1].holder != "next") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen[-1] is not None and seen[-1].holder == "next" and seen[-1].token == next_lease.token
        assert all(s is None or s.holder != "mallory" for s in seen)
        successor.resign()
    finally:
        stop.set()
        follower.join(10)


def test_session_locks_many_and_loses_them_together(client, db, name):
    reasons = []
    with client.session(ttl=3, heartbeat=0.2, on_lost=reasons.append) as session:
        part = session.lock(name + "_p")
        both = session.lock_all([name + "_b", name + "_a"])
        assert [l.lock_name for l in both] == [name + "_b", name + "_a"]
        assert all(l.held() for l in [part, *both])
        with client.session(ttl=3) as other:
            with pytest.raises(pg_fencing.LockTimeout):
                other.lock_all([name + "_a", name + "_z"])
            assert db.execute("SELECT count(*) FROM fencing_leases WHERE lock_name = %s AND live",
                              (name + "_z",)).fetchone()[0] == 0, "none or all"
        assert part.release()
        assert not part.held() and both[0].held()
        db.execute("SELECT fencing_session_close(%s)", (session.id,))  # an operator ends it
        assert session.wait_lost(3)
        time.sleep(0.5)
        assert len(reasons) == 1, reasons
        assert not both[0].held() and not both[1].held()
        with pytest.raises(pg_fencing.LeaseLost):
            session.lock(name + "_c")


def test_observe_reconnects_after_its_connection_is_terminated(client, db, name):
    seen = []

    def follow():
        for leader in client.election(name).observe(reread=60, timeout=15):
            seen.append(leader)
            if leader is not None:
                return

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == [None]
        # Taken while the observer sleeps (not announced: no notification,
        # and the next periodic read is a minute away) ...
        with client.lock(name, ttl=10, holder="after") as lease:
            # ... then its connection is cut: it reconnects and reads again.
            assert db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE application_name = 'pg_fencing observe'").fetchone()[0] == 1
            follower.join(10)
            assert not follower.is_alive(), f"no change reported after the reconnect: {seen}"
            assert seen[-1] is not None and seen[-1].holder == "after" and seen[-1].token == lease.token
    finally:
        follower.join(10)


def test_observe_raises_a_refused_login_instead_of_retrying_it(wrong_password, name):
    # A reconnect mends no wrong password (28P01): it is raised at once,
    # where before it was retried in silence until the timeout.
    conninfo, role = wrong_password
    observer = pg_fencing.Client(conninfo).election(name).observe(reread=60, timeout=5)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match=f'password authentication failed for user "{role}"'):
        next(observer)
    assert time.monotonic() - started < 3, "the refusal was retried before it was raised"


def test_the_heartbeat_keeps_a_lease_across_several_ttls(client, db, name):
    lost = []
    with client.lock(name, ttl=0.6, on_lost=lost.append) as lease:
        time.sleep(4 * 0.6)
        assert lost == [] and lease.held(), lease.lost_reason
        assert db.execute("SELECT token::bigint FROM fencing_leases WHERE lock_name = %s AND state = 'live'",
                          (name,)).fetchone()[0] == lease.token, "the server kept it"
        with pytest.raises(pg_fencing.LockTimeout):
            client.lock(name).acquire()


def test_a_lease_is_lost_once_when_its_connection_fails(client, db, name):
    lost = []
    lease = client.lock(name, ttl=1.0, holder="cut-" + name, on_lost=lost.append).acquire()
    # Its renewals go over the client's heartbeat connection, opened for the first one.
    heartbeat = client._heartbeat.application_name
    assert wait_for(lambda: db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                       (heartbeat[:63],)).fetchone()[0] == 1, 1.0)
    assert db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                      (heartbeat[:63],)).fetchone()[0] == 1
    assert lease.wait_lost(1.0), "on_lost within the ttl"
    time.sleep(0.3)
    assert len(lost) == 1 and "renewal failed" in lost[0], lost
    assert not lease.held()
    assert lease.release(), "released rather than left to run out"


def follow_in_background(client, name, reread):
    """A thread collecting what observe() reports; its stop() ends it."""
    seen = []
    stop = threading.Event()

    def follow():
        for leader in client.election(name).observe(reread=reread, timeout=10):
            seen.append(leader)
            if stop.is_set():
                return

    thread = threading.Thread(target=follow)
    thread.start()
    return seen, stop, thread


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_observe_sees_an_expiry_that_nobody_announces(client, db, name):
    db.execute("SELECT fencing_acquire(%s, 'short', '700 milliseconds')", (name,))
    seen, stop, thread = follow_in_background(client, name, reread=60)
    try:
        assert wait_for(lambda: seen and seen[0] is not None and seen[0].holder == "short", 5), seen
        assert wait_for(lambda: seen[-1] is None, 5), f"the expiry is read at the server's end, not a minute later: {seen}"
    finally:
        stop.set()
        thread.join(11)


def test_observes_reread_period_catches_a_lock_that_is_not_announced(client, name):
    seen, stop, thread = follow_in_background(client, name, reread=0.3)
    try:
        assert wait_for(lambda: seen == [None], 5), seen
        with client.lock(name, ttl=5, holder="quiet"):
            assert wait_for(lambda: seen[-1] is not None and seen[-1].holder == "quiet", 3), seen
    finally:
        stop.set()
        thread.join(11)


def test_observe_never_reports_a_grant_that_rolled_back(client, name):
    seen, stop, thread = follow_in_background(client, name, reread=0.1)  # many reads, each could be wrong
    try:
        assert wait_for(lambda: seen == [None], 5), seen
        with psycopg.connect(CONNINFO) as other:  # a transaction, rolled back at the end
            other.execute("SELECT fencing_acquire(%s, 'ghost', '30 s')", (name,))
            time.sleep(0.5)
            other.rollback()
        with client.lock(name, ttl=5, holder="real"):
            assert wait_for(lambda: seen[-1] is not None, 3), seen
        assert [s and s.holder for s in seen] == [None, "real"], seen
    finally:
        stop.set()
        thread.join(11)


def test_the_packages_connections_prepare_no_named_statements(name):
    # Behind a transaction-pooling PgBouncer a named prepared statement
    # (psycopg makes _pg3_N of a query run 5 times) outlives the transaction
    # on a server connection that others then get: observe() re-reads the
    # leader with one query all its life.
    conn = pg_fencing._wire.Connection(CONNINFO, "pg_fencing test")
    try:
        for _ in range(8):
            pg_fencing.election.read_leader(conn, name)
        assert conn.row("SELECT count(*) FROM pg_prepared_statements")[0] == 0
    finally:
        conn.close()


def test_a_statement_without_answer_by_its_deadline_says_so():
    conn = pg_fencing._wire.Connection(CONNINFO, "pg_fencing test")
    started = time.monotonic()
    with pytest.raises(pg_fencing._wire.NoAnswer,
                       match=r"^no answer from the server within 0\.[23]\d* s to a sleep; the connection was closed$"):
        conn.value_by("SELECT pg_sleep(5)", [], started + 0.3, what="a sleep")
    assert time.monotonic() - started < 2 and conn.closed
