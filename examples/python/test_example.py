"""Runs the examples against a live server with pg_fencing installed.

    python3 -m unittest discover -s examples/python -v

The connection comes from libpq's PG* variables; the role must be allowed to
create the extension (the throwaway cluster's superuser).  What the examples
do is the package's (clients/python, with tests of its own); these check
that the scripts do what they say.
"""

import json
import os
import select
import subprocess
import sys
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import psycopg  # noqa: E402

import pg_fencing  # noqa: E402


def read_line(proc, timeout):
    if not select.select([proc.stdout], [], [], timeout)[0]:
        raise AssertionError(f"no line from pid {proc.pid} within {timeout} s")
    return proc.stdout.readline().strip()


class ExampleTest(unittest.TestCase):
    def test_the_paused_workers_stale_write_is_refused_with_55Z01(self):
        # From another directory: the script finds the package by its own path.
        run = subprocess.run([sys.executable, os.path.join(HERE, "example.py")], cwd="/",
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("A: write refused: StaleTokenError (55Z01)", run.stdout)
        self.assertIn("t=4.0 s: still held (4 ttl)", run.stdout)
        self.assertIn("val 'B'", run.stdout)
        with psycopg.connect("", autocommit=True) as db:
            self.assertEqual(db.execute("SELECT val FROM example_resource WHERE id = 1").fetchone()[0], "B")


class FollowerTest(unittest.TestCase):
    def test_prints_the_leader_when_taken_and_no_leader_when_released(self):
        lock = "py-follower-" + uuid.uuid4().hex[:8]
        with psycopg.connect("", autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing")
            # Announced, and a reread period of a minute: only the
            # notifications make the follower read within the test's bounds.
            db.execute("SELECT fencing_create_lock(%s)", (lock,))
            db.execute("SELECT fencing_set_announce(%s, true)", (lock,))
            follower = subprocess.Popen([sys.executable, os.path.join(HERE, "follower.py"), lock,
                                         "--reread", "60"],
                                        stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(read_line(follower, 10), f"{lock}: no leader")
                client = pg_fencing.Client("")
                with client.lock(lock, holder="the-holder", ttl=10, payload='{"n": 1}') as lease:
                    self.assertEqual(read_line(follower, 10),
                                     f'{lock}: the-holder leads with token {lease.token} {{"n": 1}}')
                    forged = {"lock_name": lock, "event": "granted", "holder": "mallory", "token": 1}
                    db.execute("SELECT pg_notify('fencing_events', %s)", (json.dumps(forged),))
                # The next line is the release, not the forged notification.
                self.assertEqual(read_line(follower, 10), f"{lock}: no leader")
            finally:
                follower.terminate()
                follower.wait(10)
                follower.stdout.close()


if __name__ == "__main__":
    unittest.main()
