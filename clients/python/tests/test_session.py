"""Sessions against a live server, beyond the conformance scenario in
test_client.py: the heartbeat past the ttl, a paused holder, the server
ending a session, close, waits."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

import pg_fencing
from conftest import await_place, places_of, start_script, waits_on_the_server


def leases_of(db, locks):
    """{lock_name: (state, token, session_id)} of fencing_leases, read now."""
    rows = db.execute("SELECT lock_name, state, token::bigint, session_id FROM fencing_leases "
                      "WHERE lock_name = ANY(%s)", (list(locks),)).fetchall()
    return {r[0]: r[1:] for r in rows}


def row_table(db, table: str, rows: int) -> None:
    """A table whose rows are each fenced by the tokens written to them."""
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, token fencing_token, v text)")
    db.execute(f"INSERT INTO {table} SELECT generate_series(1, %s), NULL, 'initial'", (rows,))
    db.execute("SELECT fencing_protect(%s)", (table,))


def test_the_heartbeat_keeps_every_lease_past_the_ttl(client, db, name):
    locks = [f"{name}_{i}" for i in range(3)]
    lost = []
    with client.session(ttl=1.0, on_lost=lost.append) as session:
        leases = [session.lock(locks[0])] + session.lock_all(locks[1:])
        time.sleep(2.5)  # two and a half ttls: only the session is renewed
        assert lost == [] and all(l.held() for l in leases)
        assert leases_of(db, locks) == {l.lock_name: ("live", l.token, session.id) for l in leases}
        assert db.execute("SELECT live, leases FROM fencing_sessions WHERE session_id = %s",
                          (session.id,)).fetchone() == (True, 3)


def test_a_paused_holder_loses_every_lease_of_its_session_at_once(client, db, name):
    row_table(db, name, 2)
    locks = [f"{name}_a", f"{name}_b", f"{name}_c"]
    child = start_script("pause_session", name, *locks)
    try:
        started = json.loads(child.stdout.readline())
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 3
        while any(s == "live" for s, *_ in leases_of(db, locks).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {s for s, *_ in leases_of(db, locks).values()} == {"expired"}
        assert db.execute("SELECT count(DISTINCT expires_at) FROM fencing_leases WHERE lock_name = ANY(%s)",
                          (locks,)).fetchone()[0] == 1, "they ended together, with the session"
        with client.lock(locks[0], ttl=5) as successor:
            assert successor.token > started["tokens"][0]
            successor.execute(db, f"UPDATE {name} SET token = %s, v = 'B' WHERE id = 1", (successor.token,))
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate("go\n", timeout=10)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    report = json.loads(out)
    assert report["held_on_waking"] is False
    assert len(report["lost"]) == 1 and "paused" in report["lost"][0], report["lost"]
    assert report["write_row_1"] == "StaleTokenError", "55Z01: a newer token wrote the row"
    assert report["write_row_2"] == "LeaseEndedError", "55Z04: the COMMIT of a write under an ended lease"
    assert report["lock"] == "LeaseLost"
    assert report["close"] == 0
    assert [r[0] for r in db.execute(f"SELECT v FROM {name} ORDER BY id")] == ["B", "initial"]


def test_the_servers_end_of_a_session_is_its_loss_at_the_next_lock(client, db, name):
    lost = []
    # The heartbeat is not due before 0.8 s: the lock is the first to hear (55Z05).
    session = client.session(ttl=1.0, heartbeat=0.8, on_lost=lost.append)
    lease = session.lock(name + "_a")
    assert db.execute("SELECT fencing_session_close(%s)", (session.id,)).fetchone()[0] == 1
    with pytest.raises(pg_fencing.LeaseLost) as caught:
        session.lock(name + "_b")
    assert caught.value.__cause__.sqlstate == "55Z05"
    assert not session.held() and not lease.held()
    assert len(lost) == 1, lost
    time.sleep(1.0)  # the heartbeat's renewal is refused meanwhile: no second report
    assert len(lost) == 1, lost
    assert session.close() == 0


def test_close_releases_every_lease_and_is_idempotent(client, db, name):
    locks = [f"{name}_{i}" for i in range(3)]
    odd = name + '-{x,"y\\z}'  # a name that must go through the text[] as it is
    session = client.session(ttl=30)
    leases = session.lock_all([*locks, odd, locks[0]])
    assert leases[0].token == leases[4].token, "a name twice gets its token twice"
    assert leases[1].release() and not leases[1].release()
    assert leases_of(db, [locks[1]])[locks[1]][0] == "released"
    assert session.close() == 3, "the lease released on its own is not counted"
    assert session.close() == 0, "idempotent"
    assert {s for s, *_ in leases_of(db, [*locks, odd]).values()} == {"released"}
    with pytest.raises(pg_fencing.LeaseLost):
        session.lock(locks[0])
    with client.session(ttl=30) as again:  # at once, long before the 30 s ttl
        assert all(n.token > o.token for n, o in zip(again.lock_all(locks), leases))


def test_a_wait_in_a_session_holds_no_snapshot_and_gets_the_lock_once_released(client, db, name):
    with client.session(ttl=30) as other, client.session(ttl=1.0) as session:
        held = other.lock(name)
        got = {}
        # An exclusive lease: a place in the lock's line (1.10), polled; no
        # statement runs between the polls.
        waiter = threading.Thread(target=lambda: got.update(lease=session.lock(name, wait=10)))
        waiter.start()
        place = await_place(db, session.id)
        app = f"pg_fencing session {session.holder}"[:63]
        states = []
        for _ in range(10):
            states += [r for r in db.execute(
                "SELECT state, backend_xmin IS NULL AND backend_xid IS NULL FROM pg_stat_activity "
                "WHERE application_name = %s", (app,)).fetchall()]
            time.sleep(0.1)
        assert waiter.is_alive(), "it stopped waiting while the lock was held"
        assert places_of(db, session.id) == [(place, name, False)], "it kept its place"
        assert all(snapshotless for _, snapshotless in states), states
        assert not any(state.startswith("idle in transaction") for state, _ in states), states
        assert [state for state, _ in states].count("active") <= 2, \
            f"between its polls its connections sit idle: {states}"
        assert held.release()
        waiter.join(5)
        assert got["lease"].token > held.token and got["lease"].held()
        assert got["lease"].place == place

        # A shared lease: a place in line too, behind the live exclusive
        # lease; no statement runs between its polls.
        waiter = threading.Thread(target=lambda: got.update(shared=other.lock(name, wait=10, kind="shared")))
        waiter.start()
        shared_place = await_place(db, other.id)
        app = f"pg_fencing session {other.holder}"[:63]
        states = []
        for _ in range(5):
            states += [r[0] for r in db.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s",
                                                (app,)).fetchall()]
            time.sleep(0.1)
        assert waiter.is_alive(), "it stopped waiting while the lock was held"
        assert places_of(db, other.id) == [(shared_place, name, False)]
        assert states.count("active") <= 1 and "idle in transaction" not in states, states
        assert got["lease"].release()
        assert places_of(db, session.id) == [], "the release left the place"
        waiter.join(5)
        assert got["shared"].token > got["lease"].token and got["shared"].held()
        assert got["shared"].place == shared_place


def wait_is_on_the_server(db, session) -> bool:
    """The session's wait, of any kind, is a place in line (1.10)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if places_of(db, session.id):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_closing_a_session_ends_its_wait_on_another_thread(client, db, name, kind):
    with client.session(ttl=5) as holder:
        holder.lock(name)
        # A ttl far beyond the bounds below: the session must not just run out meanwhile.
        waiter = client.session(ttl=60, holder="closed-" + name)
        application = "pg_fencing session closed-" + name
        outcome = {}

        def wait_for_the_lock():
            try:
                outcome["granted"] = waiter.lock(name, wait=20, kind=kind)
            except Exception as error:
                outcome["error"] = error

        waiting = threading.Thread(target=wait_for_the_lock, daemon=True)
        waiting.start()
        assert wait_is_on_the_server(db, waiter), "the wait is on the server"
        closing = threading.Thread(target=lambda: outcome.update(closed=waiter.close()), daemon=True)
        closing.start()
        closing.join(5)
        closed_in_time = not closing.is_alive()
        waiting.join(5)
        ended_in_time = not waiting.is_alive()
    # holder's close let a close stuck behind the wait finish (the waiter got the lock)
    closing.join(5)
    waiting.join(5)
    assert closed_in_time, "close() waited for the session's wait on another thread"
    assert ended_in_time, "the wait went on after the close"
    assert isinstance(outcome.get("error"), pg_fencing.LeaseLost), outcome
    assert outcome["closed"] == 0, "the session held no lease"
    assert waits_on_the_server(db, application) == 0
    assert places_of(db, waiter.id) == []
    with pytest.raises(pg_fencing.LeaseLost):
        waiter.lock(name)


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_another_threads_wait_in_the_session_holds_up_no_release_and_no_lock(client, db, name, kind):
    # The holder's session is closed first, so that without the fix the wait ends (granted).
    with client.session(ttl=5, holder="busy-" + name) as session, client.session(ttl=5) as holder:
        holder.lock(name + "_busy")
        mine = session.lock(name + "_mine")

        def wait_for_the_busy_lock():
            try:
                session.lock(name + "_busy", wait=20, kind=kind)
            except pg_fencing.FencingError:
                pass  # the session's close ends it, as wanted

        waiting = threading.Thread(target=wait_for_the_busy_lock, daemon=True)
        waiting.start()
        assert wait_is_on_the_server(db, session)
        outcome = {}

        def release_then_lock():
            outcome["released"] = mine.release()
            outcome["at_once"] = session.lock(name + "_free")
            try:
                outcome["timed"] = session.lock(name + "_other", wait=0.3, kind=kind)
            except Exception as error:
                outcome["timed"] = error

        other = threading.Thread(target=release_then_lock, daemon=True)
        other.start()
        other.join(5)
        assert outcome.get("released") is True, "the release waited behind the wait"
        assert isinstance(outcome.get("at_once"), pg_fencing.SessionLease), \
            f"a lock without a wait queued behind the wait: {outcome}"
        # A wait in line holds the work connection only for its polls:
        # another thread's wait takes its turn at once.
        assert isinstance(outcome.get("timed"), pg_fencing.SessionLease), outcome
        assert leases_of(db, [name + "_mine", name + "_free"]) == {
            name + "_mine": ("released", mine.token, None),
            name + "_free": ("live", outcome["at_once"].token, session.id)}
        assert waiting.is_alive(), "the wait goes on"
    waiting.join(5)


def test_a_bad_heartbeat_is_refused_before_connecting():
    nowhere = pg_fencing.Client("host=/nonexistent")
    with pytest.raises(ValueError, match="heartbeat"):
        nowhere.session(ttl=1.0, heartbeat=1.0)
    with pytest.raises(ValueError, match="ttl"):
        nowhere.session(ttl=0)


def test_a_session_that_took_a_permit_in_line_waits_for_another_one(client, db, name):
    """The line keeps one place per session and lock, and a join again
    answers that place's lease: a second wait for a permit of a semaphore
    whose permit the session took through the line waits for another
    permit (CALL fencing_await in the session) instead of answering the
    first one's token."""
    with client.session(ttl=30) as session, client.session(ttl=30) as other:
        first = session.lock(name, wait=5, kind="permit", permits=2)
        assert first.place is not None, "taken through the line"
        theirs = other.lock(name, kind="permit", permits=2)
        got = {}
        thread = threading.Thread(
            target=lambda: got.update(second=session.lock(name, wait=10, kind="permit", permits=2)),
            daemon=True)
        thread.start()
        time.sleep(0.5)
        assert got == {} and thread.is_alive(), f"no permit was free: {got}"
        assert theirs.release()
        thread.join(5)
        second = got["second"]
        assert second.token != first.token and first.held() and second.held()

        def live_tokens():
            return {r[0] for r in db.execute("SELECT token::bigint FROM fencing_permits WHERE lock_name = %s "
                                             "AND live AND session_id = %s", (name, session.id))}

        assert live_tokens() == {first.token, second.token}
        assert first.release()
        assert live_tokens() == {second.token} and places_of(db, session.id) == []
        third = session.lock(name, wait=5, kind="permit", permits=2)
        assert third.place is not None and live_tokens() == {second.token, third.token}
        assert second.release() and third.release()
        assert live_tokens() == set()


def test_lock_all_with_a_wait_holds_no_snapshot_and_no_connection_and_gets_both_once_released(
        client, db, name):
    """lock_all with a wait waits in line, one lock after the other in byte
    order of the names: while both are busy its connections sit idle with
    no snapshot (no xmin horizon held), the lock it took first is visible
    as the session's while it waits for the next, and once both are
    released it has both, tokens in the caller's order."""
    first, second = name + "_a", name + "_b"
    with client.session(ttl=30) as other, client.session(ttl=30, holder="all-" + name) as session:
        held = {n: other.lock(n) for n in (first, second)}
        got = {}
        waiter = threading.Thread(
            target=lambda: got.update(leases=session.lock_all([second, first], wait=10)))
        waiter.start()
        try:
            time.sleep(0.3)  # the wait has begun
            app = f"pg_fencing session {session.holder}"[:63]
            states = []
            for _ in range(10):
                states += [tuple(r) for r in db.execute(
                    "SELECT state, backend_xmin IS NULL AND backend_xid IS NULL FROM pg_stat_activity "
                    "WHERE application_name = %s", (app,)).fetchall()]
                time.sleep(0.1)
            assert waiter.is_alive(), "it stopped waiting while both locks were held"
            # A statement running now (a poll, a renewal) has a snapshot while it runs.
            assert states and all(s == "active" or snapshotless for s, snapshotless in states), states
            assert not any(s.startswith("idle in transaction") for s, _ in states), states
            assert [s for s, _ in states].count("active") <= 2, \
                f"between its polls its connections sit idle, holding no snapshot: {states}"
            assert [p[1:] for p in places_of(db, session.id)] == [(first, False)], \
                "it waits for the first lock in byte order first"

            assert held[first].release()
            deadline = time.monotonic() + 5
            while [p[1:] for p in places_of(db, session.id)] != [(first, True), (second, False)] \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            assert [p[1:] for p in places_of(db, session.id)] == [(first, True), (second, False)], \
                "it took the first and waits in the second's line"
            assert leases_of(db, [first])[first][0] == "live" and \
                leases_of(db, [first])[first][2] == session.id, "the first is the session's meanwhile"
            assert waiter.is_alive()

            assert held[second].release()
            waiter.join(5)
            assert not waiter.is_alive()
        finally:
            waiter.join(15)
        leases = got["leases"]
        assert [lease.lock_name for lease in leases] == [second, first], "in the caller's order"
        now = leases_of(db, [first, second])
        assert [lease.token for lease in leases] == [now[second][1], now[first][1]]
        assert all(now[n][0] == "live" and now[n][2] == session.id for n in (first, second)), now
        assert all(lease.held() for lease in leases)
        assert all(lease.release() for lease in leases)
        assert places_of(db, session.id) == [], "released: their places left too"


def test_lock_all_that_times_out_gives_back_what_it_took_and_leaves_no_place(client, db, name):
    """All or none on timeout: lock_all with a wait takes the free lock,
    waits in line for the busy one, and when its wait runs out gives the
    lock it took back, leaves every place, and keeps a lock the session
    held before the call."""
    before, free, busy = name + "_a", name + "_b", name + "_c"
    with client.session(ttl=30) as other, client.session(ttl=30) as session:
        blocker = other.lock(busy)
        kept = session.lock(before)
        seen = []

        def watch():
            deadline = time.monotonic() + 1.4
            while time.monotonic() < deadline:
                seen.append(leases_of(db, [free]).get(free))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        with pytest.raises(pg_fencing.LockTimeout, match="not all of"):
            session.lock_all([busy, free, before], wait=1.5)
        took = time.monotonic() - started
        watcher.join()
        assert 1.3 < took < 4, took
        assert ("live", session.id) in [(s[0], s[2]) for s in seen if s], \
            f"it took the free lock while it waited for the busy one: {seen}"
        state, _, session_id = leases_of(db, [free])[free]
        assert state == "released" and session_id is None, "the lock it took is given back"
        assert places_of(db, session.id) == [], "no place of the session remains"
        assert db.execute("SELECT count(*) FROM fencing_lines WHERE session_id = %s",
                          (session.id,)).fetchone()[0] == 0
        assert leases_of(db, [before])[before] == ("live", kept.token, session.id), \
            "the lock it held before is kept"
        assert kept.held() and blocker.held()
        # The freed lock is anyone's at once; the session goes on.
        assert other.lock(free).held()
        assert session.lock_all([before], wait=1)[0].token == kept.token
