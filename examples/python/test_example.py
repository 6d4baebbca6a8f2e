"""Tests of fenced_lease and follower against a live server with pg_fencing installed.

    python3 -m unittest discover -s examples/python -v

The connection comes from libpq's PG* variables (psycopg2.connect('')); the
role must be allowed to create the extension.  Each test uses a lock name of
its own; the module makes (and drops) a protected table of its own.
"""

import json
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

DSN = ""  # libpq's PG* variables
RUN = uuid.uuid4().hex[:8]  # in table and holder names: runs sharing a database do not meet
TABLE = "py_example_" + RUN
ROWS = 4
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


def wait_until(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


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
        # Every lease gave back its connection.
        open_conns = lambda: sql1(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"fenced_lease %-{RUN}",),
        )
        self.assertTrue(wait_until(lambda: open_conns() == 0, 2.0),
                        f"{open_conns()} lease connections left open")

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
        # A waits in CALL fencing_await, which commits each attempt before it
        # sleeps: its backend pins no xmin horizon.  The function form
        # fencing_acquire(..., wait) would show a backend_xmin all along.
        a = self.lease("A", ttl=30.0)
        a_token = a.acquire()
        b = self.lease("B", ttl=5.0, wait=20.0)
        outcome = {}

        def take():
            try:
                outcome["token"] = b.acquire()
            except BaseException as error:  # reported by the assertions below
                outcome["error"] = error

        waiter = threading.Thread(target=take, name="waiter B")
        waiter.start()
        name = f"fenced_lease {b.holder}"[:63]
        waiting = []  # (backend_xmin, backend_xid) each time B was seen asleep in its wait
        try:
            end = time.monotonic() + 5.0
            while len(waiting) < 8 and waiter.is_alive() and time.monotonic() < end:
                row = backend_of(name)
                # Asleep on its latch between attempts (an attempt itself is a
                # short transaction, which has a snapshot while it runs).
                if row is not None and row[1] == "active" and row[2] == "Extension":
                    waiting.append((row[3], row[4]))
                time.sleep(0.1)
            self.assertTrue(waiter.is_alive(), f"B stopped waiting while A held the lock: {outcome}")
        finally:
            released = a.release()
            waiter.join(10.0)
        self.assertTrue(released, "A's lease was not live")
        self.assertFalse(waiter.is_alive(), "B still waits after A released")
        self.assertNotIn("error", outcome)
        self.assertGreaterEqual(len(waiting), 5, f"B was seen waiting only {len(waiting)} times")
        self.assertEqual(waiting, [(None, None)] * len(waiting),
                         "(backend_xmin, backend_xid) of B while it waited")
        self.assertIsNotNone(outcome["token"], "B did not get the lock once A released it")
        self.assertGreater(outcome["token"], a_token)
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
