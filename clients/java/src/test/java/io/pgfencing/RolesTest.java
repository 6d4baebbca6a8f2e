package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static io.pgfencing.Live.clientAs;
import static io.pgfencing.Live.execute;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.postgresql.util.PSQLException;

/**
 * The client as a deployment runs it: as an unprivileged application role, with a lock the
 * superuser created and granted to it, writing a table protected by a per-row fence. A second,
 * hostile role -- allowed to log in and to UPDATE the table, not to use the lock -- attacks the
 * application's lease, session and election with its own FencingClient and with plain SQL. Every
 * attack fails with 42501 or the guard's refusal -- on the application's session, with the
 * answer for a session that does not exist (1.9) -- and the application's lease stays held and
 * its writes go on.
 */
class RolesTest {
    private static final LeaseOptions TTL = LeaseOptions.ofTtl(Duration.ofSeconds(5));
    private static final String PERMISSION_DENIED = "42501";

    private static final String SUFFIX = UUID.randomUUID().toString().replace("-", "").substring(0, 10);
    private static final String APP = "java_app_" + SUFFIX;
    private static final String HOSTILE = "java_hostile_" + SUFFIX;
    private static final String LOCK = "java_roles_lock_" + SUFFIX;
    private static final String SESSION_LOCK = "java_roles_session_" + SUFFIX;
    private static final String ELECTION_LOCK = "java_roles_election_" + SUFFIX;
    /** A lock the hostile role may use: in the app's session, only the session stands in its way. */
    private static final String HERS = "java_roles_hers_" + SUFFIX;
    private static final String TABLE = "java_roles_table_" + SUFFIX;
    private static final String WRITE = "UPDATE " + TABLE + " SET token = ?, v = ? WHERE id = 1";

    private static FencingClient app;
    private static FencingClient hostile;

    @BeforeAll
    static void createRolesLocksAndTable() throws SQLException {
        String password = UUID.randomUUID().toString();
        try (Connection db = Live.db()) {
            for (String role : List.of(APP, HOSTILE)) {
                // DDL takes no bind parameters: the server quotes the name and the password.
                execute(db, Live.value(db, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', ?::text, ?::text)",
                        role, password));
            }
            for (String lock : List.of(LOCK, SESSION_LOCK, ELECTION_LOCK)) {
                Live.value(db, "SELECT fencing_create_lock(?)", lock);
                Live.value(db, "SELECT fencing_grant_lock(?, ?::regrole)", lock, APP);
            }
            Live.value(db, "SELECT fencing_create_lock(?)", HERS);
            Live.value(db, "SELECT fencing_grant_lock(?, ?::regrole)", HERS, HOSTILE);
            execute(db, "CREATE TABLE " + TABLE + " (id int PRIMARY KEY, token fencing_token, v text)");
            execute(db, "INSERT INTO " + TABLE + " VALUES (1, NULL, 'initial')");
            Live.value(db, "SELECT fencing_protect(?::regclass)", TABLE); // per-row fence
            // The hostile role may write the table: only the fence stands in its way.
            execute(db, "GRANT SELECT, UPDATE ON " + TABLE + " TO " + APP + ", " + HOSTILE);
        }
        app = clientAs(APP, password);
        hostile = clientAs(HOSTILE, password);
    }

    @AfterAll
    static void dropThem() throws SQLException {
        try (Connection db = Live.db()) {
            execute(db, "DROP TABLE IF EXISTS " + TABLE);
            for (String lock : List.of(LOCK, SESSION_LOCK, ELECTION_LOCK)) {
                Live.value(db, "SELECT fencing_revoke_lock(?, ?::regrole)", lock, APP);
            }
            Live.value(db, "SELECT fencing_revoke_lock(?, ?::regrole)", HERS, HOSTILE);
            for (String role : List.of(APP, HOSTILE)) {
                execute(db, Live.value(db, "SELECT format('DROP OWNED BY %1$I; DROP ROLE %1$I', ?::text)", role));
            }
        }
    }


    /** The attack fails with 42501, and the error names {@code subject} (a lock). */
    private static void refused(String attack, Object subject, Executable attempt) {
        Throwable thrown = assertThrows(Throwable.class, attempt, attack + " was not refused");
        SQLException error = thrown instanceof UncheckedSQLException
                ? ((UncheckedSQLException) thrown).getCause()
                : assertInstanceOf(SQLException.class, thrown, attack);
        assertEquals(PERMISSION_DENIED, error.getSQLState(), attack + ": " + error.getMessage());
        assertTrue(error.getMessage().contains(String.valueOf(subject)),
                attack + ": the error does not name " + subject + ": " + error.getMessage());
    }

    /**
     * The attack fails as it would in a session that does not exist: 55Z05 naming the session id,
     * never a token, NULL or 42501 -- to another role, the app's session is no session at all.
     */
    private static void noSuchSession(String attack, long id, Executable attempt) {
        Throwable thrown = assertThrows(Throwable.class, attempt, attack + " was not refused");
        SQLException error = assertInstanceOf(SQLException.class, thrown, attack);
        assertEquals(FencingException.SESSION_ENDED, error.getSQLState(), attack + ": " + error.getMessage());
        String message = error instanceof PSQLException && ((PSQLException) error).getServerErrorMessage() != null
                ? ((PSQLException) error).getServerErrorMessage().getMessage()
                : error.getMessage();
        assertEquals("fencing session " + id + " does not exist or has ended", message, attack);
    }

    /** The first value, as text, of a plain statement of the hostile role's. */
    private static String hostileValue(String sql, Object... params) throws SQLException {
        try (Connection db = hostile.connect("pg_fencing tests hostile")) {
            return Live.value(db, sql, params);
        }
    }

    /** A session as the superuser sees it in fencing_sessions. */
    private record SessionState(boolean live, double secondsLeft, long leases) {
    }

    /** The session's state, null once it is gone. */
    private static SessionState sessionState(long id) throws SQLException {
        try (Connection db = Live.db();
             PreparedStatement statement = db.prepareStatement("SELECT live, extract(epoch FROM "
                     + "expires_at - clock_timestamp())::float8, leases FROM fencing_sessions WHERE session_id = ?")) {
            statement.setLong(1, id);
            try (ResultSet rows = statement.executeQuery()) {
                return rows.next() ? new SessionState(rows.getBoolean(1), rows.getDouble(2), rows.getLong(3)) : null;
            }
        }
    }

    /** Live, and ending when the app's heartbeat (a third of the ttl of 5 s) says: not ended, not prolonged. */
    private static void assertRenewedByTheAppOnly(String after, SessionState state) {
        assertTrue(state != null && state.live() && state.secondsLeft() > 0.5 && state.secondsLeft() <= 5.5,
                "the app's session after " + after + ": " + state);
    }

    /** A plain statement of the hostile role's. */
    private static Executable asHostile(String sql, Object... params) {
        return () -> {
            try (Connection db = hostile.connect("pg_fencing tests hostile")) {
                Live.value(db, sql, params);
            }
        };
    }

    private static String row() throws SQLException {
        try (Connection db = Live.db()) {
            return Live.value(db, "SELECT token::text || ' ' || v FROM " + TABLE + " WHERE id = 1");
        }
    }

    @Test
    void aHostileRoleCannotTakeEndOrOutwriteTheAppsLock() throws Exception {
        try (FencedLock lock = app.lock(LOCK, TTL);
             Connection appDb = app.connect("pg_fencing tests app");
             Connection hostileDb = hostile.connect("pg_fencing tests hostile")) {
            long token = lock.lockAndGetToken();
            assertEquals(1, lock.executeUpdate(appDb, WRITE, token, "app 1"));

            FencedLock theirs = hostile.lock(LOCK, TTL);
            refused("tryLock() by the hostile role", LOCK, theirs::tryLock);
            refused("a wait (CALL fencing_await) by the hostile role", LOCK,
                    () -> theirs.tryLockAndGetToken(1, TimeUnit.SECONDS));
            refused("a semaphore permit of the app's lock", LOCK,
                    () -> hostile.semaphore(LOCK, 5, TTL).tryAcquire());
            refused("releasing the app's lease by its token", LOCK,
                    asHostile("SELECT fencing_release(?, ?::fencing_token)", LOCK, token));
            refused("renewing the app's lease by its token", LOCK,
                    asHostile("SELECT fencing_renew(?, ?::fencing_token, '1 hour'::interval)", LOCK, token));
            assertTrue(hostile.leader(LOCK).isEmpty(), "the hostile role reads the lock's holder");

            NeverGrantedTokenException forged = assertThrows(NeverGrantedTokenException.class,
                    () -> Fenced.executeUpdate(hostileDb, WRITE, token + 1_000_000_000_000L, "forged"),
                    "a write with a forged higher token");
            assertEquals(FencingException.NEVER_GRANTED_TOKEN, forged.getSQLState());
            assertTrue(forged.getMessage().contains(String.valueOf(token + 1_000_000_000_000L)),
                    forged.getMessage());
            assertThrows(StaleTokenException.class,
                    () -> Fenced.executeUpdate(hostileDb, WRITE, token - 1, "stale"), "a lower token");

            assertTrue(lock.isHeld());
            assertEquals(token, app.leader(LOCK).orElseThrow().token(), "still the app's lease");
            assertEquals(1, lock.executeUpdate(appDb, WRITE, token, "app 2"));
            assertEquals(token + " app 2", row());
        }
    }

    @Test
    void aHostileRoleCannotCloseRenewOrJoinTheAppsSession() throws Exception {
        try (FencingSession session = app.openSession(TTL);
             FencingSession theirs = hostile.openSession(TTL);
             Connection appDb = app.connect("pg_fencing tests app")) {
            Lease lease = session.lock(SESSION_LOCK);
            refused("taking the app's lock in a session of its own", SESSION_LOCK,
                    () -> theirs.tryLock(SESSION_LOCK, 0, TimeUnit.SECONDS));
            refused("waiting for it in a session of its own", SESSION_LOCK,
                    () -> theirs.tryLockShared(SESSION_LOCK, 1, TimeUnit.SECONDS));
            // 1.9 (issue 42): the app's session answers the hostile role exactly as an id it made
            // up: a close closes nothing (0), a renewal renews nothing (false), an acquire in it --
            // even of a lock it may use -- is refused with 55Z05. It can neither tell the one from
            // the other nor close, prolong or join the session.
            SessionState before = sessionState(session.id());
            assertTrue(before != null && before.live() && before.leases() == 1, "before: " + before);
            long madeUp = (new java.security.SecureRandom().nextLong() >>> 3) + (1L << 61);
            assertNull(sessionState(madeUp), "a made-up session id that exists");
            assertEquals("0", hostileValue("SELECT count(*) FROM fencing_sessions WHERE session_id = ?", session.id()),
                    "the hostile role sees the app's session");
            for (long id : new long[] {session.id(), madeUp}) {
                String which = id == madeUp ? "a made-up session" : "the app's session";
                assertEquals("0", hostileValue("SELECT fencing_session_close(?::bigint)", id), "closing " + which);
                // A renewal that took would end the session within a millisecond, or keep it an
                // hour: looked at at once, before the app's heartbeat renews it again.
                for (String ttl : List.of("1 millisecond", "1 hour")) {
                    assertEquals("false", hostileValue("SELECT fencing_session_renew(?::bigint, ?::interval)::text", id, ttl),
                            "renewing " + which + " for " + ttl);
                    if (id == session.id()) {
                        assertRenewedByTheAppOnly("a renewal for " + ttl + " by the hostile role", sessionState(id));
                    }
                }
                noSuchSession("acquiring in " + which, id,
                        asHostile("SELECT fencing_session_acquire(?::bigint, ?)", id, HERS));
                noSuchSession("acquiring shared in " + which, id,
                        asHostile("SELECT fencing_session_acquire(?::bigint, ?, kind => 'shared')", id, HERS));
                noSuchSession("acquiring all in " + which, id,
                        asHostile("SELECT fencing_session_acquire_all(?::bigint, ARRAY[?])", id, HERS));
                noSuchSession("acquiring all in " + which + ", waiting", id,
                        asHostile("SELECT fencing_session_acquire_all(?::bigint, ARRAY[?], '1 s')", id, HERS));
                // Refused at its first attempt, not after the wait.
                long started = System.nanoTime();
                noSuchSession("waiting (CALL fencing_await) in " + which, id,
                        asHostile("CALL fencing_await(?, session => ?::bigint, wait => '30 s')", HERS, id));
                assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(10), "the refused wait waited");
            }
            refused("releasing the app's session lease by its token", SESSION_LOCK,
                    asHostile("SELECT fencing_release(?, ?::fencing_token)", SESSION_LOCK, lease.token()));

            assertTrue(session.isHeld() && lease.isHeld());
            assertRenewedByTheAppOnly("the attacks", sessionState(session.id()));
            assertEquals(1, sessionState(session.id()).leases(), "the leases in the app's session");
            assertEquals(lease.token(), app.leader(SESSION_LOCK).orElseThrow().token());
            try (Connection db = Live.db()) {
                assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_leases WHERE lock_name = ?", HERS),
                        "a lease of the hostile role's lock was granted");
            }
            // The same calls in a session of its own do what they say: what was refused is the
            // app's session.
            try (FencingSession own = hostile.openSession(TTL)) {
                assertEquals("true", hostileValue("SELECT fencing_session_renew(?::bigint, '5 s')::text", own.id()));
                assertTrue(hostileValue("SELECT fencing_session_acquire(?::bigint, ?)::text", own.id(), HERS) != null,
                        "acquiring its own lock in its own session");
                assertEquals("1", hostileValue("SELECT fencing_session_close(?::bigint)", own.id()));
            }
            assertEquals(1, lease.executeUpdate(appDb, WRITE, lease.token(), "session"));
            assertEquals(lease.token() + " session", row());
        }
    }

    @Test
    void aHostileRoleCannotCampaignOrProclaimOverTheAppsElection() throws Exception {
        String holder = "app-" + SUFFIX;
        LeaderElection election = app.election(ELECTION_LOCK, TTL.withHolder(holder));
        try (Connection appDb = app.connect("pg_fencing tests app")) {
            Lease lease = election.campaign("{\"addr\": \"app\"}");
            // The same holder label: a label is no credential, the role is.
            LeaderElection theirs = hostile.election(ELECTION_LOCK, TTL.withHolder(holder));
            refused("campaigning", ELECTION_LOCK,
                    () -> theirs.campaign("{\"addr\": \"hostile\"}", 1, TimeUnit.SECONDS));
            LeaseLostException notLeader = assertThrows(LeaseLostException.class,
                    () -> theirs.proclaim("{\"addr\": \"hostile\"}"), "the client proclaims only for a leader");
            assertTrue(notLeader.getMessage().contains("campaign() first"), notLeader.getMessage());
            refused("proclaiming as the app's holder in plain SQL", ELECTION_LOCK,
                    asHostile("SELECT fencing_acquire(?, ?, '10 s'::interval, payload => ?::jsonb)",
                            ELECTION_LOCK, holder, "{\"addr\": \"hostile\"}"));
            assertTrue(theirs.leader().isEmpty(), "the hostile role reads the leader");

            assertTrue(election.isLeader());
            Leader leader = election.leader().orElseThrow();
            assertEquals(List.of(holder, lease.token(), "{\"addr\": \"app\"}"),
                    List.of(leader.holder(), leader.token(), leader.payload()));
            election.proclaim("{\"addr\": \"app 2\"}");
            assertEquals("{\"addr\": \"app 2\"}", election.leader().orElseThrow().payload());
            assertEquals(1, lease.executeUpdate(appDb, WRITE, lease.token(), "leader"));
            assertEquals(lease.token() + " leader", row());
        } finally {
            election.resign();
        }
    }
}
