"""Tests of fenced_lease, fenced_session and follower against a live server with pg_fencing installed.

    python3 -m unittest discover -s examples/python -v

The connection comes from libpq's PG* variables (psycopg2.connect('')); the
role must be allowed to create the extension, and roles.  Each test uses lock
names of its own; the module makes (and drops) a protected table of its own.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import uuid
from unittest import mock

import psycopg2

import fenced_lease
from follower import LeaderFollower
from fenced_lease import (
    FencedLease,
    LeaseLostError,
    LeaseUnavailableError,
    MissingTokenError,
    StaleTokenError,
    fenced_execute,
)
from fenced_session import FencedSession

DSN = ""  # libpq's PG* variables
RUN = uuid.uuid4().hex[:8]  # in table, role and holder names: runs sharing a database do not meet
TABLE = "py_example_" + RUN
ROWS = 6  # 1-3 for FencedLeaseTest, 4-6 for FencedSessionTest
HERE = os.path.dirname(os.path.abspath(__file__))
admin = None


def setUpModule():
    global admin
    admin = psycopg2.connect(DSN)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing")
        cur.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, token fencing_token, val text)")
        cur.execute("SELECT fencing_protect(%s)", (TABLE,))
        cur.execute(f"INSERT INTO {TABLE} (id) SELECT generate_series(1, %s)", (ROWS,))


def tearDownModule():
    with admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    admin.close()


def sql(query, params=()):
    """Runs a statement that returns nothing, on the admin connection."""
    with admin.cursor() as cur:
        cur.execute(query, params)


def sql1(query, params=()):
    """The first column of the first row, on the autocommit admin connection."""
    with admin.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchone()[0]


def leader(lock):
    return sql1("SELECT fencing_leader(%s)", (lock,))


def row_val(row_id):
    return sql1(f"SELECT val FROM {TABLE} WHERE id = %s", (row_id,))


def terminate_lease_connection(lease):
    """Cuts the lease's own connection, as a network partition would."""
    return sql1(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
        (f"fenced_lease {lease.holder}"[:63],),
    )


def backend_of(application_name):
    """(pid, state, wait_event_type, backend_xmin, backend_xid) of the one
    backend with that application_name, or None; read afresh each call (the
    admin connection is in autocommit, so each query has its own snapshot of
    pg_stat_activity)."""
    with admin.cursor() as cur:
        cur.execute(
            "SELECT pid, state, wait_event_type, backend_xmin::text, backend_xid::text"
            " FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
        rows = cur.fetchall()
    assert len(rows) <= 1, f"{len(rows)} backends named {application_name!r}"
    return rows[0] if rows else None


def leases_of(locks):
    """{lock_name: (state, token, session_id, holder)} of fencing_leases, read now."""
    with admin.cursor() as cur:
        cur.execute(
            "SELECT lock_name, state, token::bigint, session_id, holder FROM fencing_leases"
            " WHERE lock_name = ANY(%s)", (list(locks),))
        return {row[0]: row[1:] for row in cur.fetchall()}


def wait_until(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def served_without_snapshot(test, acquire, application_name, release):
    """Runs acquire() (a wait for a lock that another holder has) in a
    thread, watches its backend, found by application_name, every 0.1 s
    while it waits, then release()s the other holder's lease: the token
    acquire() returned.  Fails the test unless B (the waiter) was still
    waiting when released, was seen asleep in its wait at least 5 times with
    no backend_xmin and no backend_xid each time, and was then served."""
    outcome = {}

    def take():
        try:
            outcome["token"] = acquire()
        except BaseException as error:  # reported by the assertions below
            outcome["error"] = error

    waiter = threading.Thread(target=take, name="waiter B")
    waiter.start()
    waiting = []  # (backend_xmin, backend_xid) each time B was seen asleep in its wait
    try:
        end = time.monotonic() + 5.0
        while len(waiting) < 8 and waiter.is_alive() and time.monotonic() < end:
            row = backend_of(application_name)
            # Asleep on its latch between attempts (an attempt itself is a
            # short transaction, which has a snapshot while it runs).
            if row is not None and row[1] == "active" and row[2] == "Extension":
                waiting.append((row[3], row[4]))
            time.sleep(0.1)
        test.assertTrue(waiter.is_alive(), f"B stopped waiting while the lock was held: {outcome}")
    finally:
        released = release()
        waiter.join(10.0)
    test.assertTrue(released, "the holder's lease was not live")
    test.assertFalse(waiter.is_alive(), "B still waits after the release")
    test.assertNotIn("error", outcome)
    test.assertGreaterEqual(len(waiting), 5, f"B was seen waiting only {len(waiting)} times")
    test.assertEqual(waiting, [(None, None)] * len(waiting),
                     "(backend_xmin, backend_xid) of B while it waited")
    test.assertIsNotNone(outcome["token"], "B did not get the lock once it was released")
    return outcome["token"]


def assert_connections_closed(test, application_name_prefix):
    """Every lease or session of this run gave back its connections (their
    application_name is the prefix, then the holder, which ends in RUN)."""
    open_conns = lambda: sql1(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"{application_name_prefix} %-{RUN}",),
    )
    test.assertTrue(wait_until(lambda: open_conns() == 0, 2.0),
                    f"{open_conns()} {application_name_prefix} connections left open")


class FencedLeaseTest(unittest.TestCase):
    def setUp(self):
        self.lock = f"py-{self._testMethodName}-{uuid.uuid4().hex[:8]}"
        self.conn = psycopg2.connect(DSN)
        self.leases = []

    def tearDown(self):
        for lease in self.leases:
            try:
                lease.release()
            except psycopg2.Error:
                pass
        self.conn.close()
        assert_connections_closed(self, "fenced_lease")

    def lease(self, name, **kwargs):
        """A FencedLease on this test's lock; its holder is name-RUN."""
        kwargs.setdefault("ttl", 1.0)
        lease = FencedLease(DSN, self.lock, holder=f"{name}-{RUN}", **kwargs)
        self.leases.append(lease)
        return lease

    def write(self, row_id, token, val):
        return fenced_execute(
            self.conn, f"UPDATE {TABLE} SET token = %s, val = %s WHERE id = %s", (token, val, row_id)
        )

    def test_acquire_gets_a_token(self):
        a = self.lease("A")
        token = a.acquire()
        self.assertIsInstance(token, int)
        self.assertGreater(token, 0)
        self.assertEqual(a.token, token)
        self.assertTrue(a.held)
        self.assertFalse(a.lost)
        self.assertEqual(a.check(), token)
        self.assertEqual(leader(self.lock), a.holder)
        self.assertEqual(
            sql1("SELECT token::bigint FROM fencing_leases WHERE lock_name = %s", (self.lock,)), token
        )

    def test_second_holder_is_refused_while_the_lease_is_live(self):
        a = self.lease("A")
        self.assertIsNotNone(a.acquire())
        self.assertIsNone(self.lease("B").acquire())
        with self.assertRaises(LeaseUnavailableError):
            with self.lease("C"):
                self.fail("entered the block without the lock")
        start = time.monotonic()
        self.assertIsNone(self.lease("D", wait=0.3).acquire())
        self.assertGreaterEqual(time.monotonic() - start, 0.25, "did not wait")
        self.assertEqual(leader(self.lock), a.holder)
        self.assertTrue(a.held)

    def test_wait_gets_the_lock_once_it_is_released(self):
        a = self.lease("A")
        a_token = a.acquire()
        releaser = threading.Timer(0.5, a.release)
        releaser.start()
        start = time.monotonic()
        b = self.lease("B", wait=5.0)
        b_token = b.acquire()
        releaser.join()
        self.assertIsNotNone(b_token)
        self.assertGreater(b_token, a_token)
        self.assertGreaterEqual(time.monotonic() - start, 0.4, "B did not wait for A")
        self.assertEqual(leader(self.lock), b.holder)

    def test_a_waiting_acquire_holds_no_snapshot_and_no_xid(self):
        # B waits in CALL fencing_await, which commits each attempt before it
        # sleeps: its backend pins no xmin horizon.  The function form
        # fencing_acquire(..., wait) would show a backend_xmin all along.
        a = self.lease("A", ttl=30.0)
        a_token = a.acquire()
        b = self.lease("B", ttl=5.0, wait=20.0)
        b_token = served_without_snapshot(self, b.acquire, f"fenced_lease {b.holder}"[:63], a.release)
        self.assertGreater(b_token, a_token)
        self.assertEqual(leader(self.lock), b.holder)
        self.assertTrue(b.held, b.lost_reason)

    def test_a_wait_that_runs_out_is_unavailable(self):
        a = self.lease("A", ttl=30.0)
        self.assertIsNotNone(a.acquire())
        with self.assertRaises(LeaseUnavailableError):
            with self.lease("B", wait=0):  # one attempt
                self.fail("entered the block without the lock")
        self.assertIsNone(self.lease("C", wait=0.2).acquire())
        self.assertEqual(leader(self.lock), a.holder)

    def test_heartbeat_keeps_the_lease_across_several_ttls(self):
        lost = []
        a = self.lease("A", ttl=0.6, on_lost=lost.append)
        token = a.acquire()
        time.sleep(4 * 0.6)
        self.assertEqual(lost, [])
        self.assertTrue(a.held, a.lost_reason)
        self.assertEqual(leader(self.lock), a.holder, "the server let the lease expire")
        self.assertIsNone(self.lease("B").acquire())
        self.assertEqual(self.write(1, a.check(), "A after 4 ttls"), 1)
        self.assertEqual(
            sql1("SELECT token::bigint FROM fencing_leases WHERE lock_name = %s", (self.lock,)), token
        )

    def test_lost_when_a_renewal_fails(self):
        lost = []
        a = self.lease("A", ttl=1.0, on_lost=lost.append)
        a.acquire()
        self.assertEqual(terminate_lease_connection(a), 1)
        self.assertTrue(wait_until(lambda: lost, 1.0), "on_lost was not called within the ttl")
        self.assertEqual(len(lost), 1)
        self.assertIn("renewal failed", lost[0])
        self.assertTrue(a.lost)
        self.assertFalse(a.held)
        with self.assertRaises(LeaseLostError):
            a.check()

    def test_lost_is_judged_on_the_monotonic_clock(self):
        a = self.lease("A", ttl=5.0)
        a.acquire()
        self.assertFalse(a.lost)
        # Five seconds later on the monotonic clock, with no renewal since: the
        # lease counts as lost before any heartbeat has had a chance to say so.
        later = time.monotonic() + 5.0
        with mock.patch.object(fenced_lease.time, "monotonic", return_value=later):
            self.assertTrue(a.lost)
            with self.assertRaises(LeaseLostError):
                a.check()

    def test_stale_write_raises_stale_token_error(self):
        a = self.lease("A", ttl=0.6)
        a_token = a.acquire()
        self.assertEqual(self.write(2, a_token, "A"), 1)
        # A is cut off: its heartbeat cannot renew and the server lets the lease expire.
        terminate_lease_connection(a)
        b = self.lease("B", ttl=0.6, wait=3.0)
        b_token = b.acquire()
        self.assertIsNotNone(b_token, "B did not get the lock after A's lease expired")
        self.assertGreater(b_token, a_token)
        self.assertTrue(a.lost)
        self.assertEqual(self.write(2, b_token, "B"), 1)
        with self.assertRaises(StaleTokenError) as caught:
            self.write(2, a_token, "A, stale")  # A writes on, unaware
        self.assertEqual(caught.exception.pgcode, "55Z01")
        self.assertEqual(caught.exception.table, TABLE)
        self.assertEqual(row_val(2), "B")
        self.assertEqual(self.write(2, b_token, "B again"), 1, "the connection is not usable after the error")

    def test_write_without_token_raises_missing_token_error(self):
        a = self.lease("A")
        token = a.acquire()
        self.assertEqual(self.write(3, token, "with token"), 1)
        with self.assertRaises(MissingTokenError) as caught:
            fenced_execute(self.conn, f"UPDATE {TABLE} SET val = %s WHERE id = 3", ("no token",))
        self.assertEqual(caught.exception.pgcode, "55Z02")
        with self.assertRaises(MissingTokenError):
            self.write(3, None, "NULL token")
        self.assertEqual(row_val(3), "with token")

    def test_release_frees_the_lock(self):
        a = self.lease("A", ttl=30.0)
        a_token = a.acquire()
        self.assertTrue(a.release())
        self.assertFalse(a.held)
        self.assertFalse(a.lost)
        self.assertIsNone(leader(self.lock))
        b = self.lease("B", ttl=30.0)
        b_token = b.acquire()  # at once, no wait, long before 30 s
        self.assertIsNotNone(b_token)
        self.assertGreater(b_token, a_token)
        self.assertFalse(a.release(), "released twice")
        self.assertEqual(leader(self.lock), b.holder)

    def test_leaving_the_with_block_releases(self):
        with self.lease("A", ttl=30.0) as a:
            self.assertTrue(a.held)
            self.assertEqual(leader(self.lock), a.holder)
        self.assertFalse(a.held)
        self.assertIsNone(leader(self.lock))
        self.assertIsNotNone(self.lease("B").acquire())


# A process of its own, so that it can really be paused (SIGSTOP): it opens
# a session, takes every lock it is given, prints its id and tokens, and
# waits for a line on stdin.  Resumed, it says what it sees and what its
# writes under its old tokens got.
PAUSED_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import psycopg2
from fenced_lease import LeaseLostError, StaleTokenError, fenced_execute
from fenced_session import FencedSession

table, holder, locks = sys.argv[2], sys.argv[3], sys.argv[4:]
lost = []
session = FencedSession("", holder=holder, ttl=1.0, on_lost=lost.append)
tokens = session.acquire_all(locks)
db = psycopg2.connect("")
print(json.dumps({"id": session.id, "tokens": tokens}), flush=True)
sys.stdin.readline()  # SIGSTOP'd around here; resumed after another holder took over
report = {"held_on_waking": session.held}

def write(row, token):
    try:
        fenced_execute(db, f"UPDATE {table} SET token = %s, val = 'paused' WHERE id = %s", (token, row))
        return "written"
    except StaleTokenError:
        return "StaleTokenError"
    except psycopg2.Error as error:
        return error.pgcode

report["write_row_4"] = write(4, tokens[0])  # the new holder wrote row 4
report["write_row_5"] = write(5, tokens[1])  # nobody took that lock since
try:
    session.acquire(locks[0])
    report["acquire"] = "acquired"
except LeaseLostError:
    report["acquire"] = "LeaseLostError"
time.sleep(0.5)  # time for a second on_lost, if there were one
report["lost"] = lost
report["close"] = session.close()
print(json.dumps(report), flush=True)
"""


class FencedSessionTest(unittest.TestCase):
    def setUp(self):
        self.lock = f"py-{self._testMethodName[5:]}-{uuid.uuid4().hex[:8]}"
        self.sessions = []
        self.conn = psycopg2.connect(DSN)

    def tearDown(self):
        for session in self.sessions:
            try:
                session.close()
            except psycopg2.Error:
                pass
        self.conn.close()
        assert_connections_closed(self, "fenced_session")

    def locks(self, n):
        return [f"{self.lock}-{i}" for i in range(n)]

    def session(self, name, **kwargs):
        kwargs.setdefault("ttl", 1.0)
        session = FencedSession(DSN, holder=f"{name}-{RUN}", **kwargs)
        self.sessions.append(session)
        return session

    write = FencedLeaseTest.write  # a fenced UPDATE of one row of TABLE, on self.conn

    def test_the_heartbeat_keeps_every_lease_past_the_ttl(self):
        locks = self.locks(3)
        lost = []
        s = self.session("A", ttl=1.0, on_lost=lost.append)
        self.assertTrue(s.held)
        tokens = [s.acquire(locks[0]), s.acquire(locks[1])] + s.acquire_all(locks[2:])
        self.assertTrue(all(isinstance(t, int) for t in tokens), tokens)
        self.assertEqual(len(set(tokens)), 3)
        start = time.monotonic()
        while time.monotonic() - start < 2.5:  # two and a half ttls: only the session is renewed
            self.assertEqual(
                leases_of(locks),
                {lock: ("live", token, s.id, s.holder) for lock, token in zip(locks, tokens)},
                f"after {time.monotonic() - start:.2f} s",
            )
            self.assertTrue(s.held, s.lost_reason)
            time.sleep(0.1)
        self.assertEqual(lost, [])
        self.assertEqual(
            sql1("SELECT row(live, leases, holder)::text FROM fencing_sessions WHERE session_id = %s",
                 (s.id,)),
            f"(t,3,{s.holder})",
        )
        self.assertIsNone(self.session("B").acquire(locks[1]), "another session took a live lease")
        self.assertEqual(self.write(6, tokens[1], "A after 2.5 ttls"), 1)

    def test_a_paused_process_loses_every_lease_at_once(self):
        locks = self.locks(3)
        child = subprocess.Popen(
            [sys.executable, "-c", PAUSED_CHILD, HERE, TABLE, f"paused-{RUN}", *locks],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            line = child.stdout.readline()
            if not line:
                child.wait(5)
                self.fail(f"the child said nothing: {child.stderr.read()}")
            started = json.loads(line)
            tokens = started["tokens"]
            self.assertEqual({s for s, *_ in leases_of(locks).values()}, {"live"})
            os.kill(child.pid, signal.SIGSTOP)
            live = lambda: sum(s == "live" for s, *_ in leases_of(locks).values())
            self.assertTrue(wait_until(lambda: live() == 0, 3.0), "the leases outlived the paused session")
            self.assertEqual(
                sql1("SELECT count(DISTINCT expires_at) FROM fencing_leases WHERE lock_name = ANY(%s)",
                     (locks,)), 1, "the leases did not end together, at the session's end")
            self.assertEqual({s for s, *_ in leases_of(locks).values()}, {"expired"})
            # Another holder takes one of the locks at once, and writes.
            b = self.session("B", ttl=2.0)
            b_token = b.acquire(locks[0])
            self.assertIsNotNone(b_token, "the lock of an ended session was not free")
            self.assertGreater(b_token, tokens[0])
            self.assertEqual(self.write(4, b_token, "B"), 1)
            os.kill(child.pid, signal.SIGCONT)
            out, err = child.communicate("go\n", timeout=10)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                child.wait()
        self.assertEqual(child.returncode, 0, err)
        report = json.loads(out)
        self.assertFalse(report["held_on_waking"])
        self.assertEqual(len(report["lost"]), 1, report["lost"])
        self.assertIn("paused", report["lost"][0])
        self.assertEqual(report["write_row_4"], "StaleTokenError", "55Z01: a newer token wrote the row")
        self.assertEqual(report["write_row_5"], "55Z04", "the COMMIT of a write under an ended lease")
        self.assertEqual(report["acquire"], "LeaseLostError")
        self.assertEqual(report["close"], 0)
        self.assertEqual(row_val(4), "B")
        self.assertNotEqual(row_val(5), "paused")

    def test_lost_once_when_the_server_ends_the_session(self):
        # A superuser closes the session; the heartbeat is not due before
        # 0.8 s, so the acquire is the first to hear of it (55Z05).
        lost = []
        s = self.session("A", ttl=1.0, heartbeat=0.8, on_lost=lost.append)
        a, b = self.locks(2)
        self.assertIsNotNone(s.acquire(a))
        self.assertEqual(sql1("SELECT fencing_session_close(%s)", (s.id,)), 1)
        with self.assertRaises(LeaseLostError) as caught:
            s.acquire(b)
        self.assertEqual(caught.exception.__cause__.pgcode, "55Z05")
        self.assertFalse(s.held)
        self.assertTrue(s.lost)
        self.assertEqual(len(lost), 1, lost)
        time.sleep(1.0)  # the heartbeat's renewal is refused meanwhile: no second report
        self.assertEqual(len(lost), 1, lost)
        self.assertEqual(leases_of([a])[a][0], "released")
        self.assertEqual(s.close(), 0)

    def test_held_is_judged_on_the_monotonic_clock(self):
        s = self.session("A", ttl=5.0)
        self.assertTrue(s.held)
        later = time.monotonic() + 5.0
        with mock.patch.object(fenced_lease.time, "monotonic", return_value=later):
            self.assertFalse(s.held)
            with self.assertRaises(LeaseLostError):
                s.check()
            with self.assertRaises(LeaseLostError):
                s.acquire(self.lock)  # not even sent
        self.assertEqual(leases_of([self.lock]), {})

    def test_close_releases_every_lease_at_once(self):
        locks = self.locks(4)
        s = self.session("A", ttl=30.0)
        tokens = s.acquire_all(locks)
        self.assertIsNotNone(tokens)
        # One lease released on its own: out of the session, not counted by close.
        self.assertTrue(s.release(locks[3], tokens[3]))
        self.assertFalse(s.release(locks[3], tokens[3]), "released twice")
        self.assertEqual(leases_of(locks[3:])[locks[3]][:3], ("released", tokens[3], None))
        self.assertEqual(s.close(), 3)
        self.assertEqual(
            leases_of(locks),
            {lock: ("released", token, None, s.holder) for lock, token in zip(locks, tokens)},
        )
        self.assertEqual(sql1("SELECT count(*) FROM fencing_sessions WHERE session_id = %s", (s.id,)), 0)
        self.assertFalse(s.held)
        self.assertFalse(s.lost)
        self.assertEqual(s.close(), 0, "idempotent")
        self.assertFalse(s.release(locks[0], tokens[0]))
        with self.assertRaises(LeaseLostError):
            s.acquire(locks[0])
        # At once, without a wait, long before the 30 s ttl.
        again = self.session("B", ttl=30.0).acquire_all(locks)
        self.assertIsNotNone(again, "the released locks were not free")
        self.assertTrue(all(new > old for new, old in zip(again, tokens)), (again, tokens))

    def test_acquire_all_takes_every_lock_or_none(self):
        a, b, c = self.locks(3)
        other = self.session("other", ttl=30.0)
        b_token = other.acquire(b)
        s = self.session("A", ttl=30.0)
        start = time.monotonic()
        self.assertIsNone(s.acquire_all([c, b, a], wait=0.3))
        self.assertGreaterEqual(time.monotonic() - start, 0.25, "did not wait")
        # Neither a nor c: not held by s, not even seen outside its transaction.
        self.assertEqual(leases_of([a, b, c]), {b: ("live", b_token, other.id, other.holder)})
        self.assertEqual(sql1("SELECT leases FROM fencing_sessions WHERE session_id = %s", (s.id,)), 0)
        self.assertIsNone(s.acquire_all([a, b]), "no wait")
        self.assertEqual(leases_of([a]), {})
        # Once b is free: all of them, in the order given; a name twice gets
        # its token twice, and any name goes through as it is.
        self.assertTrue(other.release(b, b_token))
        odd = self.lock + '-{x,"y\\z}'
        tokens = s.acquire_all([c, a, odd, b, c])
        self.assertIsNotNone(tokens)
        self.assertEqual(tokens[0], tokens[4])
        found = leases_of([a, b, c, odd])
        self.assertEqual({lock: row[0] for lock, row in found.items()}, dict.fromkeys([a, b, c, odd], "live"))
        self.assertEqual(tokens, [found[lock][1] for lock in (c, a, odd, b, c)])
        self.assertEqual({row[2] for row in found.values()}, {s.id})

    def test_a_waiting_acquire_gets_the_lock_once_it_is_released(self):
        other = self.session("other", ttl=30.0)
        other_token = other.acquire(self.lock)
        releaser = threading.Timer(0.4, other.close)
        releaser.start()
        s = self.session("A", ttl=30.0)
        start = time.monotonic()
        token = s.acquire(self.lock, wait=5.0)
        releaser.join()
        self.assertIsNotNone(token)
        self.assertGreater(token, other_token)
        self.assertGreaterEqual(time.monotonic() - start, 0.3, "did not wait for the release")
        self.assertEqual(s.acquire(self.lock), token, "the same lock again in the session")

    def test_a_waiting_acquire_holds_no_snapshot_and_no_xid(self):
        # acquire(wait=) waits in CALL fencing_await(..., session =>), which
        # commits each attempt before it sleeps.  The function form
        # fencing_session_acquire(..., wait) would show a backend_xmin all
        # along.  A short ttl: the heartbeat renews while the work connection
        # waits.
        other = self.session("other", ttl=30.0)
        other_token = other.acquire(self.lock)
        s = self.session("B", ttl=1.0)
        token = served_without_snapshot(
            self, lambda: s.acquire(self.lock, wait=20.0),
            f"fenced_session work {s.holder}"[:63],
            lambda: other.release(self.lock, other_token),
        )
        self.assertGreater(token, other_token)
        self.assertEqual(leases_of([self.lock]), {self.lock: ("live", token, s.id, s.holder)})
        self.assertTrue(s.held, s.lost_reason)
        self.assertTrue(other.held, other.lost_reason)

    def test_another_role_may_not_act_in_the_session(self):
        role = f"py_session_other_{RUN}"
        sql(f'CREATE ROLE "{role}" LOGIN PASSWORD %s', ("other",))
        try:
            s = self.session("A", ttl=30.0)
            token = s.acquire(self.lock)
            hostile = psycopg2.connect(DSN, user=role, password="other")
            hostile.autocommit = True
            try:
                for call, args in [
                    ("fencing_session_renew(%s)", (s.id,)),
                    ("fencing_session_renew(%s, '1 hour')", (s.id,)),
                    ("fencing_session_close(%s)", (s.id,)),
                    ("fencing_session_acquire(%s, %s)", (s.id, self.lock + "-2")),
                    ("fencing_session_acquire_all(%s, %s::text[])", (s.id, [self.lock + "-3"])),
                ]:
                    with self.subTest(call=call), hostile.cursor() as cur:
                        with self.assertRaises(psycopg2.Error) as caught:
                            cur.execute("SELECT " + call, args)
                        self.assertEqual(caught.exception.pgcode, "42501", str(caught.exception))
                with hostile.cursor() as cur:
                    cur.execute("SELECT count(*) FROM fencing_sessions WHERE session_id = %s", (s.id,))
                    self.assertEqual(cur.fetchone()[0], 0, "the other role sees the session")
            finally:
                hostile.close()
            self.assertTrue(s.held, s.lost_reason)
            self.assertEqual(leases_of([self.lock]), {self.lock: ("live", token, s.id, s.holder)})
            self.assertEqual(sql1("SELECT count(*) FROM fencing_leases WHERE lock_name LIKE %s",
                                  (self.lock + "-%",)), 0)
            self.assertEqual(s.close(), 1)
        finally:
            sql(f'DROP ROLE IF EXISTS "{role}"')

    def test_a_bad_heartbeat_is_refused_before_connecting(self):
        with self.assertRaises(ValueError):
            FencedSession("host=/nonexistent", ttl=1.0, heartbeat=1.0)
        with self.assertRaises(ValueError):
            FencedSession("host=/nonexistent", ttl=0)


class Changes:
    """What a LeaderFollower reported, for waiting on and asserting."""

    def __init__(self):
        self.leaders = []
        self.errors = []
        self.cond = threading.Condition()

    def on_change(self, leader):
        with self.cond:
            self.leaders.append(leader)
            self.cond.notify_all()

    def on_error(self, message):
        with self.cond:
            self.errors.append(message)
            self.cond.notify_all()

    def wait_for(self, holder, timeout=5.0):
        """Waits until the last report is holder (None: no leader)."""
        def last_is():
            if not self.leaders:
                return False
            last = self.leaders[-1]
            return last is None if holder is None else last is not None and last.holder == holder
        with self.cond:
            return self.cond.wait_for(last_is, timeout)

    def holders(self):
        with self.cond:
            return [leader and leader.holder for leader in self.leaders]


class LeaderFollowerTest(unittest.TestCase):
    """The followers here have no reread period, unless a test is about it:
    nothing but a notification, a reconnect or the lease's expiry makes them
    read, so each test fails if the path it is about is missing."""

    def setUp(self):
        self.lock = f"py-{self._testMethodName}-{uuid.uuid4().hex[:8]}"
        self.changes = Changes()
        self.followers = []
        self.leases = []

    def tearDown(self):
        for follower in self.followers:
            follower.stop()
        for lease in self.leases:
            try:
                lease.release()
            except psycopg2.Error:
                pass

    def make_lock(self, announce):
        sql1("SELECT fencing_create_lock(%s)::text", (self.lock,))
        sql1("SELECT fencing_set_announce(%s, %s)::text", (self.lock, announce))

    def follow(self, **kwargs):
        kwargs.setdefault("reread_period", None)
        follower = LeaderFollower(DSN, self.lock, self.changes.on_change,
                                  on_error=self.changes.on_error, **kwargs)
        self.followers.append(follower)
        return follower.start()

    def lease(self, name, ttl=30.0):
        lease = FencedLease(DSN, self.lock, holder=f"{name}-{RUN}", ttl=ttl)
        self.leases.append(lease)
        self.assertIsNotNone(lease.acquire())
        return lease

    def notify(self, payload):
        sql1("SELECT pg_notify('fencing_events', %s)::text", (payload,))

    def test_reports_the_leader_at_start_then_a_grant_and_a_release(self):
        self.make_lock(announce=True)
        a = self.lease("A")
        follower = self.follow()
        self.assertEqual(follower.leader.holder, a.holder, "start() read the leader")
        self.assertEqual(follower.leader.token, a.token)
        self.assertTrue(self.changes.wait_for(a.holder), self.changes.holders())
        a.release()
        self.assertTrue(self.changes.wait_for(None), f"release not seen: {self.changes.holders()}")
        b = self.lease("B")  # another connection's grant
        self.assertTrue(self.changes.wait_for(b.holder), f"grant not seen: {self.changes.holders()}")
        self.assertEqual(follower.leader.token, b.token)
        self.assertEqual(self.changes.errors, [])

    def test_its_idle_connection_holds_no_snapshot(self):
        # Between reads it sits LISTENing: idle in autocommit, not idle in a
        # transaction that would pin the xmin horizon.
        self.make_lock(announce=True)
        a = self.lease("A")
        self.follow()
        self.assertTrue(self.changes.wait_for(a.holder), self.changes.holders())
        name = f"leader_follower {self.lock}"[:63]
        seen = []
        for _ in range(5):
            row = backend_of(name)
            self.assertIsNotNone(row, "the follower's connection was not found")
            seen.append(row[1:2] + row[3:])
            time.sleep(0.05)
        self.assertEqual(seen, [("idle", None, None)] * 5, "(state, backend_xmin, backend_xid)")
        self.assertEqual(self.changes.errors, [])

    def test_reports_neither_a_rolled_back_grant_nor_a_forged_notification(self):
        self.make_lock(announce=True)
        self.follow(reread_period=0.1)  # many reads, each of which could report wrongly
        self.assertTrue(self.changes.wait_for(None))
        other = psycopg2.connect(DSN)
        try:
            with other.cursor() as cur:
                cur.execute("SELECT fencing_acquire(%s, 'ghost', '30 s')", (self.lock,))
            # The follower reads while the grant is pending.
            self.notify(json.dumps({"lock_name": self.lock, "event": "granted"}))
            time.sleep(0.3)
            other.rollback()
        finally:
            other.close()
        self.notify(json.dumps({"lock_name": self.lock, "event": "granted",
                                "holder": "forged", "token": "999999"}))
        self.notify(json.dumps({"lock_id": "1", "event": "granted", "truncated": True}))
        real = self.lease("real")
        self.assertTrue(self.changes.wait_for(real.holder), self.changes.holders())
        self.notify(json.dumps({"lock_name": self.lock, "event": "released", "holder": real.holder}))
        time.sleep(0.5)
        self.assertEqual(self.changes.holders(), [None, real.holder])
        self.assertEqual(self.changes.errors, [])

    def test_sees_an_expiry_that_nobody_announces(self):
        self.make_lock(announce=False)
        sql1("SELECT fencing_acquire(%s, 'short', '700 milliseconds')::text", (self.lock,))
        self.follow()
        self.assertTrue(self.changes.wait_for("short"))
        self.assertTrue(self.changes.wait_for(None), f"expiry not seen: {self.changes.holders()}")

    def test_reads_again_after_its_connection_is_terminated(self):
        self.make_lock(announce=False)  # only a read finds the grant
        follower = self.follow()
        self.assertTrue(self.changes.wait_for(None))
        a = self.lease("A", ttl=60.0)
        time.sleep(0.3)
        self.assertEqual(self.changes.holders(), [None], "read without a reason")
        self.assertEqual(sql1(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (f"leader_follower {self.lock}"[:63],)), 1)
        self.assertTrue(self.changes.wait_for(a.holder, timeout=10.0), self.changes.holders())
        self.assertEqual(follower.leader.token, a.token)
        self.assertGreaterEqual(len(self.changes.errors), 1, "on_error not called")
        self.assertTrue(follower.connected)

    def test_reread_period_catches_a_lock_that_is_not_announced(self):
        self.make_lock(announce=False)
        self.follow(reread_period=0.2)
        self.assertTrue(self.changes.wait_for(None))
        a = self.lease("A")
        self.assertTrue(self.changes.wait_for(a.holder), self.changes.holders())


if __name__ == "__main__":
    unittest.main()
