"""One heartbeat per client object (issue 43): every session, plain lease
and campaign's session a client makes is renewed from one connection, in
one statement, and each keeps its own judgement (its ttl, its deadline,
its loss reported once, alone)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

import pg_fencing
from pg_fencing import aio
from pg_fencing._heartbeat import LeaseClock, default_heartbeat, plan, renewal_round
from pg_fencing._wire import NoAnswer, StatementFailed
from conftest import CONNINFO

SESSIONS = 20

# The connections of one test's objects, as the server sees them: those
# named for its sessions (holder NAME-s..), its plain lease (NAME-lease)
# and its campaign's session (NAME-leader), and the client's heartbeat's
# (their pids, states and whether one holds a snapshot).
CONNECTIONS = """
SELECT count(*) FILTER (WHERE application_name LIKE %(sessions)s),
       count(*) FILTER (WHERE application_name = %(lease)s),
       count(*) FILTER (WHERE application_name = %(leader)s),
       coalesce(array_agg(pid ORDER BY pid) FILTER (WHERE application_name = %(heartbeat)s), '{}'),
       coalesce(array_agg(state || CASE WHEN backend_xmin IS NULL AND backend_xid IS NULL THEN ''
                                        ELSE ' with a snapshot' END)
                FILTER (WHERE application_name = %(heartbeat)s), '{}')
FROM pg_stat_activity
"""


def connections(db, name: str, heartbeat: str) -> tuple:
    return tuple(db.execute(CONNECTIONS, {
        "sessions": f"pg_fencing session {name}-s%", "lease": f"pg_fencing lease {name}-lease"[:63],
        "leader": f"pg_fencing session {name}-leader"[:63], "heartbeat": heartbeat[:63]}).fetchone())


def heartbeat_pids(db, heartbeat: str) -> list:
    return [r[0] for r in db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                     (heartbeat[:63],))]


def until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def live_sessions(db, name: str) -> tuple:
    """(how many of the test's sessions are live on the server, the spread
    of their ends in seconds: renewed in one statement, they end together)."""
    return tuple(db.execute(
        "SELECT count(*), coalesce(extract(epoch FROM max(expires_at) - min(expires_at))::float8, 0) "
        "FROM fencing_sessions WHERE holder LIKE %s AND live", (f"{name}-%",)).fetchone())


def no_heartbeat_of_their_own(db, name: str, sessions: int, campaigns: int = 0) -> None:
    """The test's sessions, lease and campaign have one connection each
    (before issue 43 each session had two: its work connection and its
    heartbeat's)."""
    counted = connections(db, name, "")[:3]
    assert counted[0] == sessions, \
        f"{counted[0]} connections for {sessions} sessions: one each (its work connection), no heartbeat's"
    assert counted[2] == campaigns, f"{counted[2]} connections for {campaigns} campaigns' sessions"


def check_samples(samples: list) -> None:
    """What every sample of connections() must say, for SESSIONS sessions,
    one lease and one campaign."""
    for sessions, lease, leader, pids, states in samples:
        assert sessions == SESSIONS, \
            f"{sessions} connections for {SESSIONS} sessions: one each (its work connection), no heartbeat's"
        assert lease == 1, "the lease's own connection (acquire, release), no heartbeat's"
        assert leader == 1, "the campaign's session's work connection, no heartbeat's"
        assert len(pids) == 1, f"one heartbeat connection for the client, not {len(pids)}"
        # Between rounds: idle, no transaction, no snapshot.  A sample that
        # falls in a round sees it active, with its statement's snapshot.
        assert all(state in ("idle", "active", "active with a snapshot") for state in states), \
            f"the heartbeat holds no transaction or snapshot between its rounds: {states}"
    assert len({tuple(pids) for *_, pids, _ in samples}) == 1, "the same connection all along"


def test_one_connection_renews_every_session_lease_and_campaign_of_a_client(client, db, name):
    """20 sessions, a plain lease and a campaign (its session), each with a
    1 s ttl, from one client: for 3.5 ttls the server sees one heartbeat
    connection (and each session's work connection only), renewing them
    all together, and every one of them lives on."""
    lost = []
    sessions = []
    lease = election = None
    try:
        for i in range(SESSIONS):
            sessions.append(client.session(ttl=1.0, holder=f"{name}-s{i:02d}", on_lost=lost.append))
        lease = client.lock(name, ttl=1.0, holder=f"{name}-lease", on_lost=lost.append).acquire()
        election = client.election(name + "_leader", holder=f"{name}-leader", ttl=1.0, on_lost=lost.append)
        leading = election.campaign(timeout=5)
        no_heartbeat_of_their_own(db, name, SESSIONS, campaigns=1)
        heartbeat = client._heartbeat.application_name
        assert until(lambda: heartbeat_pids(db, heartbeat), 2), "the heartbeat connection opens for the first renewal"
        samples, spreads = [], []
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            samples.append(connections(db, name, heartbeat))
            live, spread = live_sessions(db, name)
            assert live == SESSIONS + 1, f"{live} of the {SESSIONS + 1} sessions live on the server"
            spreads.append(spread)
            time.sleep(0.2)
        check_samples(samples)
        assert lost == [], lost
        assert all(s.held() for s in sessions) and lease.held() and leading.held()
        assert db.execute("SELECT token::bigint FROM fencing_leases WHERE lock_name = %s AND live",
                          (name,)).fetchone()[0] == lease.token, "the server kept the lease"
        assert min(s._beat.renewals for s in [*sessions, election.session]) >= 6
        assert lease._beat.renewals >= 6
        # Renewed in one statement, the sessions end together (within the
        # statement's few milliseconds), whenever the server is asked.
        assert max(spreads[2:]) < 0.1, spreads
    finally:
        for session in sessions:
            session.close()
        if lease is not None:
            lease.release()
        if election is not None:
            election.resign()
    assert until(lambda: not heartbeat_pids(db, heartbeat), 2), \
        "the heartbeat connection closes once nothing is left to renew"


def test_a_loss_on_the_shared_heartbeat_is_reported_for_its_item_alone(client, db, name):
    """Five sessions and two leases on one client's heartbeat: the server
    closes one session, and one lease's renewal fails with an error of its
    own (a ttl the server refuses: the statement renewing them all fails,
    and is sent again in parts).  Each is reported lost once, with the
    message it has always had; the others live on, renewed on the same
    heartbeat connection."""
    reports: dict = {}

    def on_lost(key):
        return lambda reason: reports.setdefault(key, []).append(reason)

    sessions = [client.session(ttl=1.0, holder=f"{name}-s{i}", on_lost=on_lost(i)) for i in range(5)]
    leases = [client.lock(f"{name}_{i}", ttl=1.0, on_lost=on_lost(f"lease {i}")).acquire() for i in range(2)]
    try:
        no_heartbeat_of_their_own(db, name, 5)
        heartbeat = client._heartbeat.application_name
        assert until(lambda: heartbeat_pids(db, heartbeat), 2)
        pids = heartbeat_pids(db, heartbeat)
        assert db.execute("SELECT fencing_session_close(%s)", (sessions[2].id,)).fetchone()[0] == 0
        leases[1]._beat.renewal = dict(leases[1]._beat.renewal, ttl="-1 milliseconds")
        assert sessions[2].wait_lost(2) and leases[1].wait_lost(2)
        time.sleep(2.0)  # two ttls more
        assert sorted(reports, key=str) == [2, "lease 1"], reports
        assert reports[2] == ["renewal refused: the session ended, or was closed"], reports
        assert len(reports["lease 1"]) == 1 and reports["lease 1"][0].startswith("renewal failed: ") \
            and "lease ttl must be positive" in reports["lease 1"][0], reports
        assert not sessions[2].held() and not leases[1].held()
        assert all(s.held() for i, s in enumerate(sessions) if i != 2) and leases[0].held()
        assert live_sessions(db, name)[0] == 4
        assert heartbeat_pids(db, heartbeat) == pids, "renewed on the same connection all along"
    finally:
        for session in sessions:
            session.close()
        for lease in leases:
            lease.release()


def test_one_task_renews_every_session_lease_and_campaign_of_an_asyncio_client(db, name):
    """The asyncio twin: 20 sessions, a lease and a campaign of one
    aio.Client renewed for 3.5 ttls on one heartbeat connection; then the
    server closes one session, which alone is reported lost."""
    async def scenario():
        client = aio.Client(CONNINFO)
        lost: dict = {}

        def on_lost(key):
            return lambda reason: lost.setdefault(key, []).append(reason)

        sessions = []
        lease = election = None
        try:
            for i in range(SESSIONS):
                sessions.append(await client.session(ttl=1.0, holder=f"{name}-s{i:02d}", on_lost=on_lost(i)))
            lease = await client.lock(name, ttl=1.0, holder=f"{name}-lease", on_lost=on_lost("lease")).acquire()
            election = client.election(name + "_leader", holder=f"{name}-leader", ttl=1.0,
                                       on_lost=on_lost("leader"))
            leading = await election.campaign(timeout=5)
            no_heartbeat_of_their_own(db, name, SESSIONS, campaigns=1)
            heartbeat = client._heartbeat.application_name
            deadline = time.monotonic() + 2
            while not heartbeat_pids(db, heartbeat) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            samples, spreads = [], []
            end = time.monotonic() + 3.5
            while time.monotonic() < end:
                samples.append(connections(db, name, heartbeat))
                live, spread = live_sessions(db, name)
                assert live == SESSIONS + 1, f"{live} of the {SESSIONS + 1} sessions live on the server"
                spreads.append(spread)
                await asyncio.sleep(0.2)
            check_samples(samples)
            assert lost == {}, lost
            assert all(s.held() for s in sessions) and lease.held() and leading.held()
            assert min(s._beat.renewals for s in [*sessions, election.session]) >= 6
            assert max(spreads[2:]) < 0.1, spreads

            assert db.execute("SELECT fencing_session_close(%s)", (sessions[5].id,)).fetchone()[0] == 0
            assert await sessions[5].wait_lost(2)
            await asyncio.sleep(1.0)
            assert lost == {5: ["renewal refused: the session ended, or was closed"]}, lost
            assert all(s.held() for i, s in enumerate(sessions) if i != 5) and lease.held()
            assert live_sessions(db, name)[0] == SESSIONS
            assert len(heartbeat_pids(db, heartbeat)) == 1
        finally:
            for session in sessions:
                await session.close()
            if lease is not None:
                await lease.release()
            if election is not None:
                await election.resign()
        deadline = time.monotonic() + 2
        while heartbeat_pids(db, heartbeat) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not heartbeat_pids(db, heartbeat), "the heartbeat connection closes once nothing is left"

    asyncio.run(scenario())


# The scheduling and judgement the thread and the task share, without a server.

def clock(valid_from: float, reasons: list, ttl: float = 3.0) -> LeaseClock:
    """A session's clock (period ttl/3) last renewed at valid_from."""
    beat = LeaseClock("session", ttl, None, "the session ended, or was closed", reasons.append)
    beat.begin(valid_from)
    return beat


def test_a_round_takes_every_beat_due_within_half_its_period():
    now = time.monotonic()
    reasons: list = []
    due, soon, later = (clock(now - 1.0, reasons), clock(now - 0.6, reasons), clock(now - 0.2, reasons))
    assert plan([due, soon, later], now) == ([due, soon], None), "due now, and due within 0.5 s: one statement"
    batch, wake_at = plan([soon, later], now)
    assert batch == [] and wake_at == pytest.approx(now + 0.4), "none due: sleep until the first is"
    assert reasons == []


def drive(batch, answer) -> int:
    """Runs renewal_round(batch), answer(part) giving (rows, error, usable)
    for each statement; how many statements it sent."""
    rounds = renewal_round(batch)
    sent = 0
    step = next(rounds)
    while True:
        part, bound = step
        assert bound <= min(b.deadline for b in part), "bounded by the earliest deadline in it"
        sent += 1
        try:
            step = rounds.send((*answer(part), time.monotonic()))
        except StopIteration:
            return sent


def test_each_beat_is_judged_by_its_own_row():
    now = time.monotonic()
    reasons: list = []
    beats = [clock(now - 1.0, reasons) for _ in range(3)]
    assert drive(beats, lambda part: ([(0, True), (1, False), (2, True)], None, True)) == 1
    assert reasons == ["renewal refused: the session ended, or was closed"]
    assert beats[0].deadline > now + 2 and beats[2].deadline > now + 2 and beats[1].lost_reason


def test_an_error_of_one_beats_own_is_its_loss_alone_and_a_broken_connection_everyones():
    now = time.monotonic()
    reasons: list = []
    beats = [clock(now - 1.0, reasons) for _ in range(8)]
    poisoned = beats[5]

    def answer(part):
        if poisoned in part:
            return None, StatementFailed("22023", "ERROR:  lease ttl must be positive"), True
        return [(i, True) for i in range(len(part))], None, True

    sent = drive(beats, answer)
    assert reasons == ["renewal failed: ERROR:  lease ttl must be positive"], reasons
    assert all(b.renewals == 1 for b in beats if b is not poisoned) and poisoned.renewals == 0
    assert sent <= 1 + 2 * 3, f"sent again in halves: {sent} statements"

    reasons.clear()
    beats = [clock(now - 1.0, reasons) for _ in range(3)]
    broken = psycopg.OperationalError("server closed the connection unexpectedly")
    assert drive(beats, lambda part: (None, broken, False)) == 1
    assert reasons == ["renewal failed: server closed the connection unexpectedly"] * 3


def test_no_answer_loses_the_beats_whose_deadline_passed_and_leaves_the_others():
    now = time.monotonic()
    reasons: list = []
    late = clock(now - 2.8, reasons)  # its deadline (2.7 s after) has passed
    on_time = clock(now - 1.0, reasons)
    assert drive([late, on_time], lambda part: (None, NoAnswer("the renewals", 0.0), False)) == 1
    assert reasons == ["renewal got no answer before the session's safe deadline"]
    assert late.lost_reason and on_time.lost_reason is None and on_time.renewals == 0, \
        "not lost: it goes in the next round, on a new connection"


def test_what_is_made_without_a_client_shares_the_processs_heartbeat_for_its_conninfo():
    assert default_heartbeat("dbname=a") is default_heartbeat("dbname=a")
    assert default_heartbeat("dbname=a") is not default_heartbeat("dbname=b")
    assert default_heartbeat("dbname=a", aio.AsyncHeartbeat) is not default_heartbeat("dbname=a")
    lease = pg_fencing.Lease("dbname=a", "x")
    election = pg_fencing.Election("dbname=a", "x")
    assert lease._beat.heartbeat is election._heartbeat is default_heartbeat("dbname=a")
    assert pg_fencing.Client("dbname=a")._heartbeat is not default_heartbeat("dbname=a"), \
        "a client has a heartbeat of its own"
