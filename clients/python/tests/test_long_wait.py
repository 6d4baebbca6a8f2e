"""A wait in line longer than a minute keeps its place (issue 43): no
re-queueing every N seconds, arrival order kept for the whole wait.

It takes about 70 s, so it runs only with PG_FENCING_LONG_WAIT=1 (a script
runs the long test of every client side by side against one cluster);
otherwise it is skipped."""

from __future__ import annotations

import os
import threading
import time

import pytest

from conftest import await_place

LONG = 65.0     # how long the line is watched while the holder holds the lock
CHECK = 5.0     # how often it is looked at meanwhile
HANDOVER = 10.0  # how soon the wait returns once the holder releases


def waiting(db, lock_name: str) -> list:
    """The places waiting in the lock's line, as fencing_lines shows them: [(place, position)]."""
    return [tuple(r) for r in db.execute(
        "SELECT place, position FROM fencing_lines WHERE lock_name = %s ORDER BY place",
        (lock_name,)).fetchall()]


@pytest.mark.skipif(os.environ.get("PG_FENCING_LONG_WAIT") != "1",
                    reason="the 70 s wait in line runs only with PG_FENCING_LONG_WAIT=1")
def test_a_wait_longer_than_a_minute_keeps_its_place_in_line(client, db, name):
    """A holder keeps the lock (a session with a 3 s ttl, renewed by the
    client's heartbeat); A waits for it in a session of the client, 150 s,
    in line and polling (no listener); B joins behind A in plain SQL.  For
    65 s A's wait goes on and the line is A's place (the number it was
    given when it joined) first, B's second; when the holder releases, A
    has the lease within seconds, with a greater token, and B waits on,
    first now.

    What it catches: a wait that re-queues (leaves the line and joins
    again, say every 30 s) gets a new place number, behind B; a wait cut
    into slices (30 s, say) that ends early returns before the 65 s are
    over, and its place is gone from the line."""
    lock_name = "long-wait-" + name
    got = {}
    b_session = None
    with client.session(ttl=3, holder="long-wait-holder") as holder, \
            client.session(ttl=10, holder="long-wait-A") as a:
        held = holder.lock(lock_name)

        def wait_in_line():
            try:
                got["lease"] = a.lock(lock_name, wait=150)
            except BaseException as error:
                got["error"] = error
            got["at"] = time.monotonic()

        thread = threading.Thread(target=wait_in_line, daemon=True)
        thread.start()
        try:
            a_place = await_place(db, a.id)
            assert waiting(db, lock_name) == [(a_place, 1)]
            b_session = db.execute("SELECT fencing_session_open('long-wait-B', '5 min')").fetchone()[0]
            b_place = db.execute("SELECT place FROM fencing_line_join(%s, %s)",
                                 (b_session, lock_name)).fetchone()[0]
            assert a_place < b_place

            started = time.monotonic()
            checks = 0
            while True:
                assert got == {}, f"A's wait returned {time.monotonic() - started:.1f} s into the 65 s: {got}"
                assert waiting(db, lock_name) == [(a_place, 1), (b_place, 2)], \
                    f"{time.monotonic() - started:.1f} s into the 65 s, A (place {a_place}) is no longer " \
                    f"first in line before B (place {b_place})"
                assert held.held(), held.lost_reason
                checks += 1
                if time.monotonic() >= started + LONG:
                    break
                time.sleep(min(CHECK, max(0.0, started + LONG - time.monotonic())))
            assert checks >= LONG / CHECK

            released = time.monotonic()
            assert held.release()
            thread.join(HANDOVER)
            assert "lease" in got, f"A's wait did not return the lease within {HANDOVER} s: {got}"
            lease = got["lease"]
            print(f"long wait: {checks} checks over {released - started:.1f} s, "
                  f"hand-over in {got['at'] - released:.3f} s")
            assert got["at"] - released < HANDOVER
            assert lease.token > held.token
            assert waiting(db, lock_name) == [(b_place, 1)]
            assert db.execute("SELECT state FROM fencing_line_poll(ARRAY[%s]::bigint[])",
                              (b_place,)).fetchone()[0] == "waiting"
            assert lease.release()
        finally:
            if b_session is not None:
                db.execute("SELECT fencing_session_close(%s)", (b_session,))
    thread.join(5)  # the sessions' close ends A's wait, if the test failed during it
