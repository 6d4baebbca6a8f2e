"""Waiting in line (pg_fencing 1.10, issue 43: a waiting candidate holds no
server connection): a fleet of candidates behind a transaction-pooling
PgBouncer, a place kept however rarely it is polled, and a wait that runs
out -- or is interrupted -- leaving the line and giving back a grant made
meanwhile."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pg_fencing
from conftest import CONNINFO, await_place, line_kinds, places_of, short_statements_go_through

FLEET = 40
FLEET_SECONDS = 15.0


def lease_row(db, token: int):
    """(holder, state, session_id) of the lease with this token."""
    return db.execute("SELECT holder, state, session_id FROM fencing_leases WHERE token = %s::fencing_token",
                      (token,)).fetchone()


def live_leases(db, lock_name: str) -> list:
    return [tuple(r) for r in db.execute(
        "SELECT holder, token::bigint, session_id FROM fencing_leases WHERE lock_name = %s AND state = 'live'",
        (lock_name,)).fetchall()]


def line_of(db, lock_name: str) -> list:
    """The lock's line as the server keeps it: [(holder of the place's session, granted)], in order."""
    return [tuple(r) for r in db.execute(
        "SELECT s.holder, l.token IS NOT NULL FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
        "JOIN fencing_sessions s USING (session_id) WHERE k.lock_name = %s ORDER BY l.place",
        (lock_name,)).fetchall()]


def lines_rows(db, lock_name: str) -> int:
    """Every row of the lock's line, whatever its session's state."""
    return db.execute("SELECT count(*) FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
                      "WHERE k.lock_name = %s", (lock_name,)).fetchone()[0]


def session_of(election, timeout: float = 5):
    """The candidate's session of its own, once its campaign has opened it."""
    deadline = time.monotonic() + timeout
    while getattr(election, "session", None) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    session = getattr(election, "session", None)
    assert session is not None, f"{election.holder} campaigns in no session of its own"
    return session


def test_a_fleet_of_candidates_waits_in_line_through_a_transaction_pooler(db, name, pgbouncer):
    """40 candidates wait through a PgBouncer with five server connections
    (transaction pooling, no LISTEN) while a leader with a 2 s ttl renews
    through the same pool: the waits hold no server connection, so the
    leader's renewals all go through; when it resigns, the candidate first
    in line leads, within a second or so; nobody else believed it led
    meanwhile; those that give up leave the line and hold nothing."""
    fleet = pg_fencing.Client(pgbouncer)
    lost = []
    leader = fleet.election(name, holder="leader", ttl=2, on_lost=lost.append)
    lease = leader.campaign(timeout=5)
    mutex = threading.Lock()
    believers = {"leader"}  # who believes it leads, as each says
    overlaps = []
    outcome = {}
    resign = threading.Event()
    give_up_at = time.monotonic() + FLEET_SECONDS + 6
    candidates = [fleet.election(name, holder=f"candidate-{i:02d}", ttl=2) for i in range(FLEET)]

    def campaign(election):
        try:
            won = election.campaign(timeout=give_up_at - time.monotonic())
        except Exception as error:
            outcome[election.holder] = error
            return
        with mutex:
            believers.add(election.holder)
            if len(believers) > 1:
                overlaps.append(sorted(believers))
        outcome[election.holder] = (won, time.monotonic())
        resign.wait(60)
        with mutex:
            believers.discard(election.holder)
        election.resign()

    threads = [threading.Thread(target=campaign, args=(c,), daemon=True) for c in candidates]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        samples = 0
        two_leaders = []
        order = []
        while time.monotonic() < started + FLEET_SECONDS:
            # Candidates first, the leader last: a hand-over between the two
            # reads could only make the count smaller.
            leading = [c.holder for c in candidates if c.is_leader()] + (["leader"] if leader.is_leader() else [])
            if len(leading) > 1:
                two_leaders.append(leading)
            assert lost == [], f"the leader lost its lease while {FLEET} candidates waited: {lost}"
            assert lease.held(), lease.lost_reason
            assert [(h, t) for h, t, _ in live_leases(db, name)] == [("leader", lease.token)]
            if not order:
                line = line_of(db, name)
                if len(line) == FLEET + 1:
                    assert line[0] == ("leader", True) and all(not granted for _, granted in line[1:]), line
                    order = [holder for holder, _ in line[1:]]
            samples += 1
            time.sleep(0.25)
        assert order, f"the {FLEET} candidates never all stood in line: {line_of(db, name)}"
        assert live_leases(db, name) == [("leader", lease.token, leader.session.id)], "in its session"
        assert not outcome, f"a candidate stopped waiting while the leader led: {outcome}"
        # Every renewal went through: one every ttl/3, and no loss reported.
        held_for = time.monotonic() - started
        renewals = leader.session._beat.renewals
        assert renewals >= int(held_for / (2 / 3)) - 2, renewals
        assert leader.session._beat.lost_reason is None and lost == []

        with mutex:
            believers.discard("leader")
        resigned = time.monotonic()
        assert leader.resign() is True
        deadline = time.monotonic() + 5
        while order[0] not in outcome and time.monotonic() < deadline:
            time.sleep(0.01)
        assert order[0] in outcome, f"the first in line ({order[0]}) did not lead; outcome: {outcome}"
        won, at = outcome[order[0]]
        assert isinstance(won, pg_fencing.SessionLease), won
        handed_over = at - resigned
        print(f"fleet: {samples} samples, {renewals} renewals of the leader, "
              f"hand-over in {handed_over:.3f} s")
        assert handed_over < 2.0, f"the hand-over took {handed_over:.2f} s"
        assert won.token > lease.token
        assert set(outcome) == {order[0]}, f"only the first in line leads: {outcome}"

        # The others give up at their timeout: they leave the line.
        for thread, candidate in zip(threads, candidates):
            if candidate.holder != order[0]:
                thread.join(max(0.0, give_up_at - time.monotonic()) + 10)
        gave_up = [c.holder for c in candidates if c.holder != order[0]]
        assert all(isinstance(outcome.get(h), pg_fencing.LockTimeout) for h in gave_up), \
            {h: outcome.get(h) for h in gave_up if not isinstance(outcome.get(h), pg_fencing.LockTimeout)}
        assert line_of(db, name) == [(order[0], True)], "only the leader's place is left"
        winner = next(c for c in candidates if c.holder == order[0])
        assert live_leases(db, name) == [(order[0], won.token, winner.session.id)]
        assert db.execute("SELECT count(*) FROM fencing_sessions WHERE holder = ANY(%s) AND live",
                          (gave_up,)).fetchone()[0] == 0, "a candidate that gave up kept its session"
        assert db.execute("SELECT count(*) FROM fencing_leases WHERE lock_name = %s AND holder = ANY(%s)",
                          (name, gave_up)).fetchone()[0] == 0, "a candidate that gave up was granted the lock"
        assert overlaps == [] and two_leaders == [], (overlaps, two_leaders)
    finally:
        resign.set()
        for thread in threads:
            thread.join(30)
        if leader.lease is not None:
            leader.resign()
    assert lines_rows(db, name) == 0, "fencing_line is empty once every candidate resigned or gave up"
    assert live_leases(db, name) == []


def test_a_wait_keeps_its_place_in_line_however_rarely_it_polls(client, db, name):
    """Two candidates join; the first polls every 4 s, the second every
    0.1 s.  When the lock comes free between two polls of the first, it
    stays free for it: the second polls on and on, a third party's plain
    acquire gets nothing, and the first leads before the second."""
    slow = pg_fencing.Client(CONNINFO, poll=4.0)
    fast = pg_fencing.Client(CONNINFO, poll=0.1)
    incumbent = client.election(name, holder="incumbent", ttl=30)
    incumbent.campaign(timeout=5)
    first = slow.election(name, holder="first", ttl=10)
    second = fast.election(name, holder="second", ttl=10)
    got = {}

    def campaign(election):
        try:
            got[election.holder] = (election.campaign(timeout=20), time.monotonic())
        except Exception as error:
            got[election.holder] = (error, time.monotonic())

    waiting = [threading.Thread(target=campaign, args=(e,), daemon=True) for e in (first, second)]
    try:
        waiting[0].start()
        first_place = await_place(db, session_of(first).id)
        joined = time.monotonic()  # its first poll is about 4 s from here
        waiting[1].start()
        second_place = await_place(db, session_of(second).id)
        assert first_place < second_place, "in the order they came"
        time.sleep(max(0.0, joined + 1.0 - time.monotonic()))
        assert incumbent.resign() is True
        acquires = 0
        while time.monotonic() < joined + 3.0:
            assert live_leases(db, name) == [], "the lock was taken before the first in line polled"
            assert db.execute("SELECT fencing_acquire(%s, 'third', '10 s')", (name,)).fetchone()[0] is None, \
                "a third party's plain acquire took the lock kept for the first in line"
            acquires += 1
            time.sleep(0.2)
        with pytest.raises(pg_fencing.LockTimeout):
            client.lock(name, ttl=10).acquire()
        assert acquires >= 5 and got == {}, got
        assert [p for p, _, _ in places_of(db, first.session.id)] == [first_place], "it kept its place"
        assert [p for p, _, _ in places_of(db, second.session.id)] == [second_place]
        waiting[0].join(5)
        lease_1, at_1 = got["first"]
        assert isinstance(lease_1, pg_fencing.SessionLease), lease_1
        assert "second" not in got and waiting[1].is_alive(), "the second led before the first"
        assert live_leases(db, name) == [("first", lease_1.token, first.session.id)]
        assert first.resign() is True
        waiting[1].join(5)
        lease_2, at_2 = got["second"]
        assert isinstance(lease_2, pg_fencing.SessionLease), lease_2
        assert at_1 < at_2 and lease_2.token > lease_1.token
        assert second.resign() is True
        assert lines_rows(db, name) == 0
    finally:
        for election in (incumbent, first, second):
            election.resign()
        for thread in waiting:
            if thread.ident is not None:
                thread.join(25)


def test_a_candidate_that_comes_back_with_short_waits_takes_its_turn(client, db, name):
    """A candidate that loops on waits shorter than its poll period (0.2 s
    waits, a poll every 1 s, its other work between them: as the C++
    demo's leader scenario's 250 ms attempts).  Each wait polls its place
    at its deadline too, so when the holder releases during one of them
    the candidate takes the lock within a few attempts, and a third
    party's plain acquire meanwhile gets nothing (a wait that left at its
    deadline without polling left the lock free and its line empty)."""
    looping = pg_fencing.Client(CONNINFO, poll=1.0)
    attempts: list = []  # when each attempt began
    got: dict = {}
    stop = threading.Event()
    with client.session(ttl=30) as holder, looping.session(ttl=30, holder="looping-" + name) as candidate:
        held = holder.lock(name)

        def loop():
            try:
                while not stop.is_set():
                    attempts.append(time.monotonic())
                    try:
                        got["lease"] = candidate.lock(name, wait=0.2)
                        got["attempt"] = len(attempts)
                        return
                    except pg_fencing.LockTimeout:
                        pass
                    time.sleep(0.1)  # its other work
            except Exception as error:
                got["error"] = error

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            # 50 ms into its third attempt (or a later one), its place in line: the release.
            released_in = None
            deadline = time.monotonic() + 10
            while released_in is None and time.monotonic() < deadline and not got:
                seen = len(attempts)
                if seen >= 3 and time.monotonic() - attempts[seen - 1] < 0.05:
                    time.sleep(max(0.0, attempts[seen - 1] + 0.05 - time.monotonic()))
                    if len(attempts) == seen and places_of(db, candidate.id):
                        assert held.release()
                        released_in = seen
                        continue
                time.sleep(0.002)
            assert released_in is not None, f"no attempt to release during: {got}"
            third = 0
            while not got and time.monotonic() < deadline:
                assert db.execute("SELECT fencing_acquire(%s, 'third', '10 s')", (name,)).fetchone()[0] is None, \
                    f"a third party's plain acquire took the lock after attempt {len(attempts)} of the candidate"
                third += 1
                time.sleep(0.01)
            assert "lease" in got, got
            assert got["attempt"] <= released_in + 2, f"taken at attempt {got['attempt']}, released in {released_in}"
            assert third > 0
            assert live_leases(db, name) == [("looping-" + name, got["lease"].token, candidate.id)]
            assert got["lease"].release()
            assert lines_rows(db, name) == 0
        finally:
            stop.set()
            thread.join(5)


@pytest.mark.parametrize("how", ["session", "election"])
def test_a_wait_that_runs_out_leaves_the_line_and_polls_at_its_deadline(client, db, name, how):
    """A wait that runs out leaves the line, holding nothing.  Polled on a
    timer longer than its wait, it still polls its place just before its
    deadline, and finds the lease granted to its place meanwhile (here by
    the test's own poll, as a superuser may, standing for a poll of the
    candidate's whose answer was lost): a place that never polled would
    hold the line up."""
    rare = pg_fencing.Client(CONNINFO, poll=10.0)  # no poll on its timer before its deadline
    outcome = {}
    with client.session(ttl=30) as holder:
        held = holder.lock(name)
        if how == "session":
            waiter = rare.session(ttl=10, holder="waiter-" + name)
            attempt = lambda wait: waiter.lock(name, wait=wait)  # noqa: E731
            current = lambda: waiter  # noqa: E731
        else:
            election = rare.election(name, holder="waiter-" + name, ttl=10)
            attempt = lambda wait: election.campaign(timeout=wait)  # noqa: E731
            current = lambda: session_of(election)  # noqa: E731

        def run(wait):
            started = time.monotonic()
            try:
                outcome["result"] = attempt(wait)
            except Exception as error:
                outcome["result"] = error
            outcome["waited"] = time.monotonic() - started

        # The lock stays held: the wait runs out, and leaves its place.
        run(1)
        assert isinstance(outcome.get("result"), pg_fencing.LockTimeout), outcome
        assert 0.9 <= outcome["waited"] < 3, outcome
        assert lines_rows(db, name) == 0, "it left the line"
        assert [t for _, t, _ in live_leases(db, name)] == [held.token]

        thread = threading.Thread(target=run, args=(3,), daemon=True)
        thread.start()
        session = current()
        place = await_place(db, session.id)
        assert held.release()
        state, token = db.execute("SELECT state, token::bigint FROM fencing_line_poll(ARRAY[%s]::bigint[])",
                                  (place,)).fetchone()
        assert state == "granted" and lease_row(db, token) == ("waiter-" + name, "live", session.id)
        thread.join(10)
    lease = outcome.get("result")
    assert isinstance(lease, pg_fencing.SessionLease), outcome
    assert lease.token == token
    assert 2.5 <= outcome["waited"] < 5, outcome
    assert live_leases(db, name) == [("waiter-" + name, token, session.id)]
    if how == "session":
        assert lease.release()
        assert places_of(db, session.id) == [], "released: its place left too"
        waiter.close()
    else:
        assert election.resign() is True
    assert lease_row(db, token)[:2] == ("waiter-" + name, "released")
    assert lines_rows(db, name) == 0
    with client.lock(name, ttl=5) as after:  # nobody holds it
        assert after.token > token


def test_an_interrupted_wait_leaves_the_line_and_gives_back_a_grant(client, db, name):
    """Ctrl-C (SIGINT: KeyboardInterrupt in the main thread) during a wait
    in line leaves it, giving back a grant made meanwhile."""
    rare = pg_fencing.Client(CONNINFO, poll=10.0)
    with client.session(ttl=30) as holder, rare.session(ttl=30, holder="interrupted-" + name) as waiter:
        held = holder.lock(name)
        granted = {}

        def grant_then_interrupt():
            place = await_place(db, waiter.id)
            assert held.release()
            granted["row"] = db.execute("SELECT state, token::bigint FROM fencing_line_poll(ARRAY[%s]::bigint[])",
                                        (place,)).fetchone()
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=grant_then_interrupt, daemon=True)
        interrupter.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            waiter.lock(name, wait=30)
        interrupter.join(5)
        assert time.monotonic() - started < 10
        state, token = granted["row"]
        assert state == "granted"
        assert lease_row(db, token)[1] == "released", "the grant was given back"
        assert places_of(db, waiter.id) == [] and waiter.held()
        assert waiter.lock(name).token > token, "the session goes on, the lock free"


def live_permits(db, lock_name: str) -> list:
    """The live permits or shared leases of the lock: [(holder, token, session_id)]."""
    return [tuple(r) for r in db.execute(
        "SELECT holder, token::bigint, session_id FROM fencing_permits WHERE lock_name = %s AND live",
        (lock_name,)).fetchall()]


def held_by_the_waiting_kind(holder, name: str, kind: str) -> list:
    """What keeps a waiter for a lease of the kind waiting: both permits of
    a semaphore of 2, or (for a shared lease) a live exclusive lease."""
    if kind == "permit":
        return [holder.lock(name, kind="permit", permits=2) for _ in range(2)]
    return [holder.lock(name)]


@pytest.mark.parametrize("kind", ["permit", "shared"])
def test_a_sessions_wait_for_a_permit_or_a_shared_lease_holds_no_server_connection(
        client, db, name, pgbouncer_pool_of_1, kind):
    """A session's wait for a permit (a semaphore of 2, both held) or a
    shared lease (behind a live exclusive lease), through a PgBouncer in
    transaction pooling with one server connection, is a place in line:
    it holds that connection only for its short statements, so another
    client's statements go on through the same pool meanwhile; and it
    takes its lease when one is freed (a CALL fencing_await would hold the
    pool's one connection for the whole wait)."""
    pooled = pg_fencing.Client(pgbouncer_pool_of_1, poll=0.2)
    permits = 2 if kind == "permit" else None
    with client.session(ttl=30) as holder, pooled.session(ttl=30, holder="pooled-" + name) as waiter:
        held = held_by_the_waiting_kind(holder, name, kind)
        got = {}

        def wait():
            try:
                got["lease"] = waiter.lock(name, wait=20, kind=kind, permits=permits)
            except Exception as error:
                got["error"] = error

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        try:
            time.sleep(0.5)  # the wait has begun
            assert short_statements_go_through(pgbouncer_pool_of_1), \
                "another client's statements were held up by the wait through the pool of 1"
            assert thread.is_alive() and got == {}, got
            assert line_kinds(db, name) == [("pooled-" + name, kind, 1)], "a place in line"
            assert short_statements_go_through(pgbouncer_pool_of_1)
            freed = time.monotonic()
            assert held[0].release()
            thread.join(5)
            assert "lease" in got, got
            lease = got["lease"]
            assert time.monotonic() - freed < 3
            assert lease.kind == kind and lease.held() and lease.place is not None
            assert ("pooled-" + name, lease.token, waiter.id) in live_permits(db, name)
            assert lease.release()
            assert lines_rows(db, name) == 0, "released: its place left too"
        finally:
            thread.join(25)


def test_permits_go_to_the_waits_in_the_order_they_came(client, db, name):
    """Three session waits for one of 2 permits (both held), begun in the
    order A, B, C: A polls every 2 s, B and C every 0.1 s.  One permit
    freed is A's, though B and C poll first; the next is B's."""
    slow = pg_fencing.Client(CONNINFO, poll=2.0)
    fast = pg_fencing.Client(CONNINFO, poll=0.1)
    got = {}
    with client.session(ttl=30) as holder, slow.session(ttl=30, holder="A") as a, \
            fast.session(ttl=30, holder="B") as b, fast.session(ttl=30, holder="C") as c:
        held = held_by_the_waiting_kind(holder, name, "permit")

        def wait(session):
            try:
                got[session.holder] = (session.lock(name, wait=20, kind="permit", permits=2),
                                       time.monotonic())
            except Exception as error:
                got[session.holder] = (error, time.monotonic())

        threads = []
        try:
            for session in (a, b, c):
                threads.append(threading.Thread(target=wait, args=(session,), daemon=True))
                threads[-1].start()
                await_place(db, session.id)
            assert line_kinds(db, name) == [("A", "permit", 1), ("B", "permit", 2), ("C", "permit", 3)]
            time.sleep(0.3)
            assert got == {}, got
            assert held[0].release()
            threads[0].join(5)
            assert list(got) == ["A"], f"the first permit freed went to {list(got)}"
            assert isinstance(got["A"][0], pg_fencing.SessionLease), got
            assert line_kinds(db, name) == [("B", "permit", 1), ("C", "permit", 2)]
            assert held[1].release()
            threads[1].join(5)
            assert sorted(got) == ["A", "B"], f"the second permit freed went to {sorted(got)}"
            assert isinstance(got["B"][0], pg_fencing.SessionLease), got
            time.sleep(0.3)
            assert "C" not in got and threads[2].is_alive()
            assert got["A"][0].release()
            threads[2].join(5)
            assert isinstance(got.get("C", (None,))[0], pg_fencing.SessionLease), got
            assert got["C"][1] > got["B"][1] > got["A"][1]
            assert got["B"][0].release() and got["C"][0].release()
            assert lines_rows(db, name) == 0
        finally:
            for thread in threads:
                thread.join(25)


def test_a_listening_client_hears_its_turn_instead_of_polling(client, db, name):
    """Client(listen=True): one connection LISTENs on fencing_line while a
    wait is in line, and the place polls when it hears its number -- here
    long before its timer (30 s) would have it poll."""
    listening = pg_fencing.Client(CONNINFO, listen=True, poll=30.0)
    with client.session(ttl=30) as holder, listening.session(ttl=10) as waiter, \
            listening.session(ttl=10) as other:
        held = holder.lock(name)
        got = {}

        def wait(session, key):
            got[key] = (session.lock(name, wait=20), time.monotonic())

        threads = [threading.Thread(target=wait, args=(s, k), daemon=True)
                   for s, k in ((waiter, "first"), (other, "second"))]
        threads[0].start()
        await_place(db, waiter.id)
        threads[1].start()
        await_place(db, other.id)
        assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_fencing line' "
                          "AND query = 'LISTEN fencing_line'").fetchone()[0] == 1, "one listener for both waits"
        released = time.monotonic()
        assert held.release()
        threads[0].join(5)
        first, at = got["first"]
        assert at - released < 1.0, f"heard after {at - released:.2f} s"
        assert "second" not in got
        released = time.monotonic()
        assert first.release()
        threads[1].join(5)
        second, at = got["second"]
        assert at - released < 1.0 and second.token > first.token
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_fencing line'").fetchone()[0]:
        time.sleep(0.05)
    assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_fencing line'"
                      ).fetchone()[0] == 0, "the listener's connection closes with the last wait"


def test_a_server_before_1_10_waits_with_call_fencing_await(db, name):
    """Against pg_fencing 1.9 (no line) a wait in a session and a campaign
    fall back to CALL fencing_await in the session, as before 1.10."""
    database = name + "_19"
    db.execute(f'CREATE DATABASE "{database}"')
    try:
        conninfo = make_conninfo(CONNINFO, dbname=database)
        with psycopg.connect(conninfo, autocommit=True) as old:
            old.execute("CREATE EXTENSION pg_fencing VERSION '1.9'")
            client = pg_fencing.Client(conninfo)
            with client.session(ttl=10) as holder, client.session(ttl=10) as waiter:
                held = holder.lock(name)
                with pytest.raises(pg_fencing.LockTimeout):
                    waiter.lock(name, wait=0.3)
                got = {}
                thread = threading.Thread(target=lambda: got.update(lease=waiter.lock(name, wait=10)))
                thread.start()
                time.sleep(0.5)
                assert held.release()
                thread.join(5)
                assert got["lease"].token > held.token and got["lease"].place is None
                assert got["lease"].release()
            election = client.election(name, holder="old", ttl=5)
            lease = election.campaign(payload='{"v": 19}', timeout=5)
            assert election.leader() == pg_fencing.Leader("old", lease.token, '{"v": 19}')
            with pytest.raises(pg_fencing.LockTimeout):
                client.election(name, holder="rival", ttl=5).campaign(timeout=0.3)
            assert election.resign()
            assert old.execute("SELECT count(*) FROM fencing_sessions WHERE live").fetchone()[0] == 0
    finally:
        db.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
