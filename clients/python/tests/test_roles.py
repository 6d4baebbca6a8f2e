"""Unprivileged roles: the application's clients log in as a role that has
been granted the use of its locks, and another role -- a second
application, or an attacker holding its credentials -- logs in beside it.
The server refuses that role everything on the application's locks, and
answers it about the application's session as about one that does not
exist (1.9); the client must neither weaken that nor hand out anything that
helps.  Every attempt must fail with a clear error (or the answer for no
such session), and leave the application's lease, session and leadership
as they were."""

from __future__ import annotations

import secrets
import time
import types
import uuid

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

import pg_fencing
from conftest import CONNINFO
from pg_fencing.errors import SESSION_ENDED

FORGED = 10_000_000_000  # far above any token the test cluster hands out


@pytest.fixture(scope="module")
def deployment():
    """The operator's set-up, as the superuser: two LOGIN roles (app and
    mallory) with passwords of this run; three locks that exist (the
    superuser creates them, so they are its own) and only app may use, and
    one only mallory may use (hers); a per-row-protected table (rows) and
    one under the lock-wide fence of jobs (fenced).  Everything is dropped
    at the end."""
    prefix = "py_" + uuid.uuid4().hex[:10]
    names = types.SimpleNamespace(app=prefix + "_app", mallory=prefix + "_mallory",
                                  jobs=prefix + "/jobs", part=prefix + "/part",
                                  leader=prefix + "/leader", hers=prefix + "/hers",
                                  rows=prefix + "_rows", fenced=prefix + "_fenced")
    admin = psycopg.connect(CONNINFO, autocommit=True)
    roles = []
    try:
        conninfo = {}
        for role in (names.app, names.mallory):
            password = secrets.token_hex(16)
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)))
            roles.append(role)
            conninfo[role] = make_conninfo(CONNINFO, user=role, password=password)
        for lock in (names.jobs, names.part, names.leader):
            admin.execute("SELECT fencing_create_lock(%s)", (lock,))
            admin.execute("SELECT fencing_grant_lock(%s, quote_ident(%s)::regrole)", (lock, names.app))
        # A lock mallory may use: in the application's session only the
        # session stands between her and a lease of it.
        admin.execute("SELECT fencing_create_lock(%s)", (names.hers,))
        admin.execute("SELECT fencing_grant_lock(%s, quote_ident(%s)::regrole)", (names.hers, names.mallory))
        # Both roles may UPDATE both tables: only the guard stands between
        # mallory and their rows.
        for table, lock in ((names.rows, None), (names.fenced, names.jobs)):
            ident = sql.Identifier(table)
            admin.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, token fencing_token, v text)").format(ident))
            admin.execute(sql.SQL("INSERT INTO {} VALUES (1, NULL, 'initial')").format(ident))
            admin.execute("SELECT fencing_protect(%s, lock_name => %s)", (table, lock))
            admin.execute(sql.SQL("GRANT SELECT, UPDATE ON {} TO {}, {}").format(
                ident, sql.Identifier(names.app), sql.Identifier(names.mallory)))
        yield names, conninfo, admin
    finally:
        for table in (names.rows, names.fenced):
            admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        for role in roles:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
        admin.close()


def update(table: str) -> sql.Composed:
    return sql.SQL("UPDATE {} SET token = %s, v = %s WHERE id = 1").format(sql.Identifier(table))


def connect_as(conninfo: str, role: str) -> psycopg.Connection:
    conn = psycopg.connect(conninfo, autocommit=True)
    assert conn.execute("SELECT current_user::text").fetchone()[0] == role
    return conn


@pytest.fixture(scope="module")
def app(deployment):
    """The application, as its role: a lease (and a write under it), a
    session with a lock in it, and the leadership of an election."""
    names, conninfo, _ = deployment
    client = pg_fencing.Client(conninfo[names.app])
    db = connect_as(conninfo[names.app], names.app)
    lease = client.lock(names.jobs, ttl=10, holder="app").acquire()
    session = None
    election = client.election(names.leader, holder="app", ttl=10)
    try:
        for table in (names.rows, names.fenced):
            assert lease.execute(db, update(table), (lease.token, "app")) == 1
        session = client.session(ttl=10, holder="app")
        part = session.lock(names.part)
        leading = election.campaign(payload='{"addr": "app"}', timeout=5)
        yield types.SimpleNamespace(client=client, db=db, lease=lease, session=session, part=part,
                                    election=election, leading=leading)
    finally:
        election.resign()
        if session is not None:
            session.close()
        lease.release()
        db.close()


@pytest.fixture(scope="module")
def mallory(deployment):
    """The other role, with a client and a connection of its own."""
    names, conninfo, _ = deployment
    db = connect_as(conninfo[names.mallory], names.mallory)
    yield types.SimpleNamespace(client=pg_fencing.Client(conninfo[names.mallory]), db=db)
    db.close()


def refused(naming: str, attempt, *args, **kwargs) -> None:
    """attempt(...) must fail with the server's 42501 (the role may not use
    the lock), never a busy lock, a timeout or a success; the message names
    the lock it was refused."""
    with pytest.raises(errors.InsufficientPrivilege) as caught:
        attempt(*args, **kwargs)
    assert caught.value.sqlstate == "42501"
    assert naming in caught.value.diag.message_primary, caught.value.diag.message_primary


def assert_intact(names, app) -> None:
    """The application's lease, session and leadership as they were, on
    the client and on the server; its write and its proclamation go through."""
    assert app.lease.held() and app.session.held() and app.part.held() and app.election.is_leader()
    live = dict(((r[0], (r[1], r[2], r[3])) for r in app.db.execute(
        "SELECT lock_name, holder, token::bigint, session_id FROM fencing_leases "
        "WHERE lock_name = ANY(%s) AND state = 'live'", ([names.jobs, names.part, names.leader],))))
    assert live == {names.jobs: ("app", app.lease.token, None),
                    names.part: ("app", app.part.token, app.session.id),
                    # The leader's lease lives in its candidate's session of its own.
                    names.leader: ("app", app.leading.token, app.election.session.id)}, live
    for table in (names.rows, names.fenced):
        assert app.lease.execute(app.db, update(table), (app.lease.token, "app again")) == 1
        assert app.db.execute(sql.SQL("SELECT token::bigint, v FROM {} WHERE id = 1").format(
            sql.Identifier(table))).fetchone() == (app.lease.token, "app again")
    app.election.proclaim('{"addr": "app"}')
    assert app.election.leader() == pg_fencing.Leader("app", app.leading.token, '{"addr": "app"}')


def test_another_role_cannot_take_the_applications_lock(deployment, app, mallory):
    names = deployment[0]
    refused(names.jobs, mallory.client.lock(names.jobs, ttl=5).acquire)
    refused(names.jobs, mallory.client.lock(names.jobs, ttl=5, wait=2, holder="app").acquire)
    refused(names.jobs, mallory.client.shared(names.jobs, ttl=5, holder="app").acquire)
    with mallory.client.session(ttl=5, holder="app") as own:  # her own session is hers to open
        refused(names.part, own.lock, names.part)
        refused(names.part, own.lock, names.part, wait=1)
        refused(names.part, own.lock_all, [names.part])
    assert_intact(names, app)


def test_another_role_cannot_release_or_renew_the_applications_lease_by_its_token(deployment, app, mallory):
    names = deployment[0]
    refused(names.jobs, mallory.db.execute, "SELECT fencing_release(%s, %s::fencing_token)",
            (names.jobs, app.lease.token))
    refused(names.jobs, mallory.db.execute, "SELECT fencing_renew(%s, %s::fencing_token, '1 hour')",
            (names.jobs, app.lease.token))
    refused(names.jobs, mallory.db.execute, "SELECT fencing_revoke(%s, 'mallory')", (names.jobs,))
    assert_intact(names, app)


def no_such_session(session_id: int, attempt, *args, **kwargs) -> None:
    """attempt(...) must fail as an acquire in a session that does not exist
    fails (55Z05, naming the session), never with a token, NULL or 42501:
    to another role a session of the application's is no session at all."""
    with pytest.raises(psycopg.Error) as caught:
        attempt(*args, **kwargs)
    assert caught.value.sqlstate == SESSION_ENDED, caught.value
    assert caught.value.diag.message_primary == \
        f"fencing session {session_id} does not exist or has ended", caught.value.diag.message_primary


def session_state(admin, session_id: int):
    """(live, seconds until its end, leases in it) of a session, as the
    superuser sees it; None once it is gone."""
    return admin.execute(
        "SELECT live, extract(epoch FROM expires_at - clock_timestamp())::float8, leases "
        "FROM fencing_sessions WHERE session_id = %s", (session_id,)).fetchone()


def test_another_role_cannot_close_renew_or_acquire_in_the_applications_session(deployment, app, mallory):
    """1.9 (issue 42): the application's session id, in mallory's hands,
    answers exactly as a made-up one: a close closes nothing (0), a renewal
    renews nothing (false), an acquire in it -- even of a lock she may use --
    is refused with 55Z05.  So she cannot tell its id from one she made up,
    nor close, prolong or join it: afterwards the session is live, ends when
    the application's heartbeat says, and holds its lease and nothing else."""
    names, _, admin = deployment
    made_up = secrets.randbelow(2**62) + 2**61
    assert session_state(admin, made_up) is None, "a made-up session id that exists"
    live, _, leases = session_state(admin, app.session.id)
    assert live and leases == 1
    assert mallory.db.execute("SELECT count(*) FROM fencing_sessions WHERE session_id = %s",
                              (app.session.id,)).fetchone()[0] == 0, "she sees the application's session"
    for session_id in (app.session.id, made_up):
        assert mallory.db.execute("SELECT fencing_session_close(%s)", (session_id,)).fetchone()[0] == 0
        # A renewal that took would end the session within a millisecond, or
        # keep it an hour: checked at once, before the heartbeat (every
        # third of the ttl of 10 s) renews it again.
        for ttl in ("1 millisecond", "1 hour"):
            assert mallory.db.execute("SELECT fencing_session_renew(%s, %s::interval)",
                                      (session_id, ttl)).fetchone()[0] is False
            if session_id == app.session.id:
                live, left, _ = session_state(admin, session_id)
                assert live and 0.5 < left <= 10.5, (ttl, live, left)
        no_such_session(session_id, mallory.db.execute, "SELECT fencing_session_acquire(%s, %s)",
                        (session_id, names.hers))
        no_such_session(session_id, mallory.db.execute,  # the SQL path
                        "SELECT fencing_session_acquire(%s, %s, kind => 'shared')", (session_id, names.hers))
        no_such_session(session_id, mallory.db.execute, "SELECT fencing_session_acquire_all(%s, %s)",
                        (session_id, [names.hers]))
        no_such_session(session_id, mallory.db.execute, "SELECT fencing_session_acquire_all(%s, %s, '1 s')",
                        (session_id, [names.hers]))
        # Nor may she wait in the lock's line in it (1.10).
        no_such_session(session_id, mallory.db.execute, "SELECT * FROM fencing_line_join(%s, %s)",
                        (session_id, names.hers))
        # Refused at its first attempt, not after the wait.
        started = time.monotonic()
        no_such_session(session_id, mallory.db.execute,
                        "CALL fencing_await(%s, session => %s, wait => '30 s')", (names.hers, session_id))
        assert time.monotonic() - started < 10
    refused(names.part, mallory.db.execute, "SELECT fencing_release(%s, %s::fencing_token)",
            (names.part, app.part.token))
    live, left, leases = session_state(admin, app.session.id)
    assert live and 0.5 < left <= 10.5 and leases == 1, (live, left, leases)
    assert admin.execute("SELECT count(*) FROM fencing_leases WHERE lock_name = %s",
                         (names.hers,)).fetchone()[0] == 0, "a lease of her lock was granted"
    assert_intact(names, app)
    # The same calls in a session of her own do what they say: what she was
    # refused above is the application's session.
    with mallory.client.session(ttl=5) as own:
        assert mallory.db.execute("SELECT fencing_session_renew(%s, '5 s')", (own.id,)).fetchone()[0] is True
        assert mallory.db.execute("SELECT fencing_session_acquire(%s, %s)::bigint",
                                  (own.id, names.hers)).fetchone()[0] is not None
        assert mallory.db.execute("SELECT fencing_session_close(%s)", (own.id,)).fetchone()[0] == 1


def test_another_role_cannot_campaign_or_proclaim_over_the_election(deployment, app, mallory):
    names = deployment[0]
    rival = mallory.client.election(names.leader, holder="app", ttl=5)
    refused(names.leader, rival.campaign, payload='{"addr": "mallory"}', timeout=3)
    with pytest.raises(pg_fencing.LeaseLost, match="not the leader"):
        rival.proclaim('{"addr": "mallory"}')
    # A plain acquire as the holder app: refused by the server.
    refused(names.leader, mallory.db.execute,
            "SELECT fencing_acquire(%s, 'app', '10 s', payload => %s::jsonb)",
            (names.leader, '{"addr": "mallory"}'))
    # What proclaim() sends, in the leader's session: no such session, to her.
    no_such_session(app.election.session.id, mallory.db.execute,
                    "SELECT fencing_session_acquire(%s, %s, payload => %s::jsonb)",
                    (app.election.session.id, names.leader, '{"addr": "mallory"}'))
    assert rival.leader() is None, "the views show her no lock she may not use"
    assert_intact(names, app)


def test_another_role_cannot_write_under_the_lock_wide_fence_with_any_token(deployment, app, mallory):
    names = deployment[0]
    # She may not use the lock: the server answers 42501 before it looks at the token.
    for token in (app.lease.token + FORGED, app.lease.token - 1, app.lease.token):
        refused(names.jobs, pg_fencing.fenced_execute, mallory.db, update(names.fenced), (token, "mallory"))
    assert_intact(names, app)


def test_another_role_cannot_write_a_per_row_fenced_row_with_a_forged_or_lower_token(deployment, app, mallory):
    names = deployment[0]
    # A per-row fence names no lock, so there is no lock to refuse her: the
    # guard judges the token, and refuses a made-up one (55Z03: above every
    # grant) and a lower one (55Z01).
    with pytest.raises(pg_fencing.NeverGrantedTokenError) as caught:
        pg_fencing.fenced_execute(mallory.db, update(names.rows), (app.lease.token + FORGED, "mallory"))
    assert caught.value.cause.sqlstate == "55Z03" and names.rows in str(caught.value)
    with pytest.raises(pg_fencing.StaleTokenError) as caught:
        pg_fencing.fenced_execute(mallory.db, update(names.rows), (app.lease.token - 1, "mallory"))
    assert caught.value.cause.sqlstate == "55Z01" and names.rows in str(caught.value)
    assert_intact(names, app)
