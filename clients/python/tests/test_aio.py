"""pg_fencing.aio, the asyncio twin, against a live server."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from pg_fencing import aio
from conftest import (CONNINFO, line_kinds, places_of, protected_table, short_statements_go_through,
                      waits_on_the_server)


def run(coroutine):
    return asyncio.run(coroutine)


def test_lock_write_and_loss_reported_once(db, name):
    protected_table(db, name, name)

    async def scenario():
        client = aio.Client(CONNINFO)
        adb = await psycopg.AsyncConnection.connect(CONNINFO, autocommit=True)
        reasons = []
        async with client.lock(name, ttl=3, heartbeat=0.2, on_lost=reasons.append) as lease:
            assert lease.held() and (await client.leader(name)).token == lease.token
            assert await lease.execute(adb, f"UPDATE {name} SET token = %s, v = 'aio' WHERE id = 1",
                                       (lease.token,)) == 1
            with pytest.raises(aio.LockTimeout):
                await client.lock(name, wait=0.2).acquire()
            db.execute("SELECT fencing_revoke(%s, 'test')", (name,))
            assert await lease.wait_lost(3)
            await asyncio.sleep(0.6)
            assert len(reasons) == 1 and "refused" in reasons[0], reasons
            with pytest.raises(aio.LeaseLost):
                await lease.execute(adb, f"UPDATE {name} SET token = %s WHERE id = 1", (lease.token,))
            with pytest.raises(aio.StaleTokenError):
                await aio.fenced_execute(adb, f"UPDATE {name} SET token = %s WHERE id = 1",
                                         (lease.token,))
        await adb.close()

    run(scenario())


def test_cancelling_a_wait_ends_it_on_the_server(db, name):
    async def scenario():
        client = aio.Client(CONNINFO)
        async with client.lock(name, ttl=10) as holder:
            waiter = asyncio.create_task(client.lock(name, ttl=5, wait=60).acquire())
            await asyncio.sleep(0.5)

            def waiting() -> int:
                return db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%%' "
                    "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0]

            assert waiting() == 1, "the wait is on the server"
            assert db.execute(
                "SELECT backend_xmin IS NULL AND backend_xid IS NULL FROM pg_stat_activity "
                "WHERE query LIKE 'CALL fencing_await%%' AND state = 'active'").fetchone()[0], \
                "it waits holding no snapshot and no transaction id"
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            deadline = time.monotonic() + 5
            while waiting() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert waiting() == 0, "the cancelled wait does not go on on the server"
            assert (await client.leader(name)).token == holder.token

    run(scenario())


async def until_on_the_server(db, session) -> bool:
    """The session's wait, of any kind, is a place in line (1.10), polled
    without blocking the event loop for 5 s at most."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if places_of(db, session.id):
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_closing_a_session_ends_its_wait_in_another_task(db, name, kind):
    async def scenario():
        client = aio.Client(CONNINFO)
        async with await client.session(ttl=5) as holder:
            await holder.lock(name)
            # A ttl far beyond the bounds below: the session must not just run out meanwhile.
            waiter = await client.session(ttl=60, holder="closed-" + name)
            application = "pg_fencing session closed-" + name
            waiting = asyncio.create_task(waiter.lock(name, wait=20, kind=kind))
            assert await until_on_the_server(db, waiter), "the wait is on the server"
            closing = asyncio.create_task(waiter.close())
            done, _ = await asyncio.wait({closing}, timeout=5)
            closed_in_time = closing in done
            done, _ = await asyncio.wait({waiting}, timeout=5)
            ended_in_time = waiting in done
        # holder's close let a close stuck behind the wait finish (the waiter got the lock)
        await asyncio.wait({closing, waiting}, timeout=5)
        assert closed_in_time, "close() waited for the session's wait in another task"
        assert ended_in_time, "the wait went on after the close"
        assert isinstance(waiting.exception(), aio.LeaseLost), waiting
        assert closing.result() == 0, "the session held no lease"
        assert waits_on_the_server(db, application) == 0
        assert places_of(db, waiter.id) == []
        with pytest.raises(aio.LeaseLost):
            await waiter.lock(name)

    run(scenario())


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_another_tasks_wait_in_the_session_holds_up_no_release_and_no_lock(db, name, kind):
    async def scenario():
        client = aio.Client(CONNINFO)
        # The holder's session is closed first, so that without the fix the wait ends (granted).
        async with await client.session(ttl=5, holder="busy-" + name) as session, \
                await client.session(ttl=5) as holder:
            await holder.lock(name + "_busy")
            mine = await session.lock(name + "_mine")
            waiting = asyncio.create_task(session.lock(name + "_busy", wait=20, kind=kind))
            assert await until_on_the_server(db, session)
            released = asyncio.create_task(mine.release())
            done, _ = await asyncio.wait({released}, timeout=5)
            assert released in done and released.result() is True, "the release waited behind the wait"
            at_once = asyncio.create_task(session.lock(name + "_free"))
            done, _ = await asyncio.wait({at_once}, timeout=5)
            assert at_once in done and isinstance(at_once.result(), aio.SessionLease), \
                "a lock without a wait queued behind the wait"
            timed = asyncio.create_task(session.lock(name + "_other", wait=0.3, kind=kind))
            done, _ = await asyncio.wait({timed}, timeout=5)
            assert timed in done
            # A wait in line holds the work connection only for its polls.
            assert isinstance(timed.result(), aio.SessionLease), timed
            states = dict(db.execute("SELECT lock_name, state FROM fencing_leases WHERE lock_name = ANY(%s)",
                                     ([name + "_mine", name + "_free"],)).fetchall())
            assert states == {name + "_mine": "released", name + "_free": "live"}, states
            assert not waiting.done(), "the wait goes on"
        await asyncio.wait({waiting, released, at_once, timed}, timeout=5)
        assert waiting.done()
        waiting.exception()  # retrieved: the close ended it

    run(scenario())


def test_session_and_election(db, name):
    async def scenario():
        client = aio.Client(CONNINFO)
        async with await client.session(ttl=3) as session:
            a, b = await session.lock_all([name + "_a", name + "_b"])
            assert a.held() and b.held() and a.token != b.token
            other = await client.session(ttl=3)
            with pytest.raises(aio.LockTimeout):
                await other.lock(name + "_b")
            assert await other.close() == 0
            assert await a.release()
            assert not a.held() and b.held()
        assert not b.held()

        election = client.election(name, holder="first", ttl=3)
        lease = await election.campaign(payload='{"n": 1}')
        seen = []

        async def follow():
            async for leader in client.election(name).observe(reread=60, timeout=6):
                seen.append(leader)
                if leader is not None and leader.holder == "second":
                    return

        follower = asyncio.create_task(follow())
        # A rival's campaign runs out; its message gives the wait to the millisecond.
        with pytest.raises(aio.LockTimeout, match=r"is held by another holder \(waited 0\.3 s\)$"):
            await client.election(name, holder="rival", ttl=3).campaign(timeout=0.3)
        await asyncio.sleep(0.5)
        db.execute("SELECT pg_notify('fencing_events', %s)",
                   ('{"lock_name": "%s", "holder": "mallory", "token": 1}' % name,))
        await asyncio.sleep(0.3)
        assert [s.holder for s in seen] == ["first"], seen
        await election.resign()
        second = client.election(name, holder="second", ttl=3)
        next_lease = await second.campaign()
        await asyncio.wait_for(follower, 8)
        assert seen[-1].holder == "second" and seen[-1].token == next_lease.token > lease.token
        assert all(s is None or s.holder != "mallory" for s in seen)
        await second.resign()

    run(scenario())


def test_observe_reconnects_after_its_connection_is_terminated(db, name):
    async def scenario():
        client = aio.Client(CONNINFO)
        observer = client.election(name).observe(reread=60, timeout=15)
        try:
            assert await asyncio.wait_for(observer.__anext__(), 5) is None
            # Taken while the observer sleeps (not announced, and the next
            # periodic read is a minute away) ...
            async with client.lock(name, ttl=10, holder="after") as lease:
                # ... then its connection is cut (57P01): it reconnects and reads again.
                assert db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE application_name = 'pg_fencing observe'").fetchone()[0] == 1
                leader = await asyncio.wait_for(observer.__anext__(), 10)
                assert leader is not None and leader.holder == "after" and leader.token == lease.token
        finally:
            await observer.aclose()

    run(scenario())


def test_observe_raises_a_refused_login_instead_of_retrying_it(wrong_password, name):
    # A reconnect mends no wrong password (28P01): it is raised at once,
    # where before it was retried in silence until the timeout.
    conninfo, role = wrong_password

    async def scenario():
        observer = aio.Client(conninfo).election(name).observe(reread=60, timeout=5)
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match=f'password authentication failed for user "{role}"'):
            await observer.__anext__()
        assert time.monotonic() - started < 3, "the refusal was retried before it was raised"

    run(scenario())


def test_the_packages_connections_prepare_no_named_statements(name):
    # As in test_client.py: the renewing task runs one query every ttl/3.
    async def scenario():
        conn = await aio._connect(CONNINFO, "pg_fencing test")
        try:
            for _ in range(8):
                await aio._read_leader(conn, name)
            assert (await aio._row(conn, "SELECT count(*) FROM pg_prepared_statements"))[0] == 0
        finally:
            await conn.close()

    run(scenario())


async def until_place(db, session, timeout: float = 5) -> int:
    """The session's one place in line, polled without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while not places_of(db, session.id) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    places = places_of(db, session.id)
    assert len(places) == 1, f"session {session.id} has no place in line: {places}"
    return places[0][0]


def test_cancelling_a_wait_in_line_leaves_it_and_gives_back_a_grant(db, name):
    async def scenario():
        client = aio.Client(CONNINFO, poll=10.0)  # no poll of its own while the test works
        async with await client.session(ttl=30) as holder, \
                await client.session(ttl=30, holder="cancelled-" + name) as waiter:
            held = await holder.lock(name)
            waiting = asyncio.create_task(waiter.lock(name, wait=60))
            place = await until_place(db, waiter)
            assert await held.release()
            # Granted behind its back (the test's poll, as a superuser may,
            # standing for one of its own whose answer was lost) ...
            state, token = db.execute("SELECT state, token::bigint FROM fencing_line_poll(ARRAY[%s]::bigint[])",
                                      (place,)).fetchone()
            assert state == "granted"
            waiting.cancel()  # ... then cancelled: it leaves, and gives the grant back
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert db.execute("SELECT state FROM fencing_leases WHERE token = %s::fencing_token",
                              (token,)).fetchone()[0] == "released"
            assert places_of(db, waiter.id) == [] and waiter.held(), "the session goes on"
            assert (await waiter.lock(name)).token > token, "the lock is free"

    run(scenario())


def test_a_candidate_that_comes_back_with_short_waits_takes_its_turn(db, name):
    """The asyncio twin of test_line.py's: a candidate looping on 0.2 s
    waits with a poll every 1 s polls each place at its deadline too, so
    it takes the lock within a few attempts of the holder's release, and a
    third party's plain acquire meanwhile gets nothing."""
    async def scenario():
        client = aio.Client(CONNINFO)
        looping = aio.Client(CONNINFO, poll=1.0)
        attempts: list = []
        got: dict = {}

        async def loop(candidate):
            while True:
                attempts.append(time.monotonic())
                try:
                    got["lease"] = await candidate.lock(name, wait=0.2)
                    got["attempt"] = len(attempts)
                    return
                except aio.LockTimeout:
                    pass
                await asyncio.sleep(0.1)  # its other work

        async with await client.session(ttl=30) as holder, \
                await looping.session(ttl=30, holder="looping-" + name) as candidate:
            held = await holder.lock(name)
            task = asyncio.create_task(loop(candidate))
            try:
                released_in = None
                deadline = time.monotonic() + 10
                while released_in is None and time.monotonic() < deadline and not task.done():
                    seen = len(attempts)
                    if seen >= 3 and time.monotonic() - attempts[seen - 1] < 0.05:
                        await asyncio.sleep(max(0.0, attempts[seen - 1] + 0.05 - time.monotonic()))
                        if len(attempts) == seen and places_of(db, candidate.id):
                            assert await held.release()
                            released_in = seen
                            continue
                    await asyncio.sleep(0.002)
                assert released_in is not None, f"no attempt to release during: {got}"
                third = 0
                while not task.done() and time.monotonic() < deadline:
                    assert db.execute("SELECT fencing_acquire(%s, 'third', '10 s')", (name,)).fetchone()[0] is None, \
                        f"a third party's plain acquire took the lock after attempt {len(attempts)} of the candidate"
                    third += 1
                    await asyncio.sleep(0.01)
                await task
                assert got["attempt"] <= released_in + 2, f"taken at attempt {got['attempt']}, released in {released_in}"
                assert third > 0
                assert await got["lease"].release()
                assert places_of(db, candidate.id) == []
            finally:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass

    run(scenario())


def test_a_listening_client_hears_its_turn_instead_of_polling(db, name):
    async def scenario():
        client = aio.Client(CONNINFO, listen=True, poll=30.0)
        async with await client.session(ttl=30) as holder, await client.session(ttl=10) as waiter:
            held = await holder.lock(name)
            waiting = asyncio.create_task(waiter.lock(name, wait=20))
            await until_place(db, waiter)
            released = time.monotonic()
            assert await held.release()
            lease = await asyncio.wait_for(waiting, 5)
            assert time.monotonic() - released < 1.0, "heard, not polled after 30 s"
            assert lease.token > held.token

    run(scenario())


def test_candidates_wait_in_line_through_a_transaction_pooler(db, name, pgbouncer):
    """The asyncio twin of test_line.py's fleet, smaller: a leader and ten
    candidates (tasks) through PgBouncer's five server connections; the
    leader keeps its lease, the first in line succeeds it, and the others,
    cancelled, leave the line."""
    async def scenario():
        client = aio.Client(pgbouncer)
        lost = []
        leader = client.election(name, holder="leader", ttl=2, on_lost=lost.append)
        lease = await leader.campaign(timeout=5)
        candidates = [client.election(name, holder=f"candidate-{i}", ttl=2) for i in range(10)]
        campaigns = [asyncio.create_task(c.campaign()) for c in candidates]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and db.execute(
                "SELECT count(*) FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
                "WHERE k.lock_name = %s AND l.token IS NULL", (name,)).fetchone()[0] < 10:
            await asyncio.sleep(0.05)
        assert lost == [] and lease.held(), lost
        first = db.execute("SELECT s.holder FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
                           "JOIN fencing_sessions s USING (session_id) WHERE k.lock_name = %s "
                           "AND l.token IS NULL ORDER BY l.place LIMIT 1", (name,)).fetchone()[0]
        await asyncio.sleep(4)  # six ttls
        assert lost == [] and lease.held() and not any(t.done() for t in campaigns)
        assert leader.session._beat.renewals >= 4
        resigned = time.monotonic()
        assert await leader.resign()
        done, _ = await asyncio.wait(campaigns, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, done
        winner = candidates[campaigns.index(done.pop())]
        assert winner.holder == first and time.monotonic() - resigned < 2.0
        for task in campaigns:
            if not task.done():
                task.cancel()
        await asyncio.wait(campaigns, timeout=10)
        assert all(t.cancelled() for c, t in zip(candidates, campaigns) if c is not winner)
        assert [r[0] for r in db.execute(
            "SELECT s.holder FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
            "JOIN fencing_sessions s USING (session_id) WHERE k.lock_name = %s", (name,))] == [first]
        assert await winner.resign()
        assert db.execute("SELECT count(*) FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
                          "WHERE k.lock_name = %s", (name,)).fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM fencing_sessions WHERE holder = ANY(%s) AND live",
                          ([c.holder for c in candidates],)).fetchone()[0] == 0

    run(scenario())


async def held_by_the_waiting_kind(holder, name: str, kind: str) -> list:
    """As test_line.py's: both permits of a semaphore of 2, or a live
    exclusive lease (for a shared lease)."""
    if kind == "permit":
        return [await holder.lock(name, kind="permit", permits=2) for _ in range(2)]
    return [await holder.lock(name)]


@pytest.mark.parametrize("kind", ["permit", "shared"])
def test_a_sessions_wait_for_a_permit_or_a_shared_lease_holds_no_server_connection(
        db, name, pgbouncer_pool_of_1, kind):
    """The asyncio twin of test_line.py's: through a PgBouncer with one
    server connection (transaction pooling), a task's wait in a session for
    a permit or a shared lease is a place in line, another client's
    statements go on through the pool meanwhile, and it takes its lease
    when one is freed."""
    async def scenario():
        client = aio.Client(CONNINFO)
        pooled = aio.Client(pgbouncer_pool_of_1, poll=0.2)
        permits = 2 if kind == "permit" else None
        async with await client.session(ttl=30) as holder, \
                await pooled.session(ttl=30, holder="pooled-" + name) as waiter:
            held = await held_by_the_waiting_kind(holder, name, kind)
            waiting = asyncio.create_task(waiter.lock(name, wait=20, kind=kind, permits=permits))
            try:
                await asyncio.sleep(0.5)  # the wait has begun
                assert await asyncio.to_thread(short_statements_go_through, pgbouncer_pool_of_1), \
                    "another client's statements were held up by the wait through the pool of 1"
                assert not waiting.done(), waiting
                assert line_kinds(db, name) == [("pooled-" + name, kind, 1)], "a place in line"
                freed = time.monotonic()
                assert await held[0].release()
                lease = await asyncio.wait_for(waiting, 5)
                assert time.monotonic() - freed < 3
                assert lease.kind == kind and lease.held() and lease.place is not None
                assert db.execute("SELECT holder, session_id FROM fencing_permits WHERE token = %s::fencing_token "
                                  "AND live", (lease.token,)).fetchone() == ("pooled-" + name, waiter.id)
                assert await lease.release()
                assert places_of(db, waiter.id) == [], "released: its place left too"
            finally:
                if not waiting.done():
                    waiting.cancel()
                await asyncio.wait({waiting}, timeout=10)

    run(scenario())


def test_permits_go_to_the_waits_in_the_order_they_came(db, name):
    """The asyncio twin of test_line.py's: tasks waiting in sessions A, B, C
    (A polling every 2 s, B and C every 0.1 s) for one of 2 permits, both
    held; one freed is A's, the next B's."""
    async def scenario():
        client = aio.Client(CONNINFO)
        slow = aio.Client(CONNINFO, poll=2.0)
        fast = aio.Client(CONNINFO, poll=0.1)
        async with await client.session(ttl=30) as holder, \
                await slow.session(ttl=30, holder="A") as a, \
                await fast.session(ttl=30, holder="B") as b, \
                await fast.session(ttl=30, holder="C") as c:
            held = await held_by_the_waiting_kind(holder, name, "permit")
            waits = {}
            try:
                for session in (a, b, c):
                    waits[session.holder] = asyncio.create_task(
                        session.lock(name, wait=20, kind="permit", permits=2))
                    await until_place(db, session)
                assert line_kinds(db, name) == [("A", "permit", 1), ("B", "permit", 2), ("C", "permit", 3)]
                await asyncio.sleep(0.3)
                assert not any(t.done() for t in waits.values())
                assert await held[0].release()
                done, _ = await asyncio.wait(waits.values(), timeout=5, return_when=asyncio.FIRST_COMPLETED)
                assert done == {waits["A"]}, f"the first permit freed went to {done}"
                first = waits["A"].result()
                assert line_kinds(db, name) == [("B", "permit", 1), ("C", "permit", 2)]
                assert await held[1].release()
                second = await asyncio.wait_for(asyncio.shield(waits["B"]), 5)
                await asyncio.sleep(0.3)
                assert not waits["C"].done()
                assert await first.release()
                third = await asyncio.wait_for(asyncio.shield(waits["C"]), 5)
                assert first.token < second.token < third.token
                assert await second.release() and await third.release()
                assert line_kinds(db, name) == []
            finally:
                for task in waits.values():
                    if not task.done():
                        task.cancel()
                await asyncio.wait(waits.values(), timeout=10)

    run(scenario())


def test_lock_all_with_a_wait_holds_no_server_connection_and_gives_back_on_timeout(
        db, name, pgbouncer_pool_of_1):
    """Through a PgBouncer with one server connection (transaction
    pooling), a task's lock_all with a wait for two busy locks waits in
    line: another client's statements go through the pool meanwhile, and
    once both are released it has both, tokens in the caller's order.  A
    second lock_all whose wait runs out with one lock still busy gives
    back the one it took and leaves no place."""
    first, second = name + "_a", name + "_b"

    async def scenario():
        client = aio.Client(CONNINFO)
        pooled = aio.Client(pgbouncer_pool_of_1, poll=0.2)
        async with await client.session(ttl=30) as holder, \
                await pooled.session(ttl=30, holder="pooled-" + name) as waiter:
            held = [await holder.lock(first), await holder.lock(second)]
            waiting = asyncio.create_task(waiter.lock_all([second, first], wait=20))
            try:
                await asyncio.sleep(0.5)  # the wait has begun
                assert await asyncio.to_thread(short_statements_go_through, pgbouncer_pool_of_1), \
                    "another client's statements were held up by the wait through the pool of 1"
                assert not waiting.done(), waiting
                assert line_kinds(db, first) == [("pooled-" + name, "exclusive", 1)], "a place in line"
                assert await held[0].release()
                await asyncio.sleep(0.6)
                assert line_kinds(db, second) == [("pooled-" + name, "exclusive", 1)], \
                    "the first taken, it waits for the second"
                assert not waiting.done(), waiting
                assert await held[1].release()
                leases = await asyncio.wait_for(waiting, 5)
            finally:
                if not waiting.done():
                    waiting.cancel()
                await asyncio.wait({waiting}, timeout=10)
            assert [lease.lock_name for lease in leases] == [second, first]
            tokens = dict(db.execute("SELECT lock_name, token::bigint FROM fencing_leases "
                                     "WHERE lock_name = ANY(%s) AND live AND session_id = %s",
                                     ([first, second], waiter.id)).fetchall())
            assert [lease.token for lease in leases] == [tokens[second], tokens[first]]
            for lease in leases:
                assert await lease.release()

            # All or none: the second lock stays busy past the wait.
            blocker = await holder.lock(second)
            with pytest.raises(aio.LockTimeout):
                await waiter.lock_all([second, first], wait=1)
            row = db.execute("SELECT state, session_id FROM fencing_leases WHERE lock_name = %s",
                             (first,)).fetchone()
            assert row == ("released", None), f"the lock it took is given back: {row}"
            assert places_of(db, waiter.id) == [], "no place of the session remains"
            assert blocker.held()

    run(scenario())
