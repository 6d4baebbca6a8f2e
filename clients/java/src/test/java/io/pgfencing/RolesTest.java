package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The client as a deployment runs it: as an unprivileged application role, with a lock the
 * superuser created and granted to it, writing a table protected by a per-row fence. A second,
 * hostile role -- allowed to log in and to UPDATE the table, not to use the lock -- attacks the
 * application's lease, session and election with its own FencingClient and with plain SQL. Every
 * attack fails with 42501 or the guard's refusal, and the application's lease stays held and
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
            for (String role : List.of(APP, HOSTILE)) {
                execute(db, Live.value(db, "SELECT format('DROP OWNED BY %1$I; DROP ROLE %1$I', ?::text)", role));
            }
        }
    }

    private static FencingClient clientAs(String role, String password) {
        Properties properties = new Properties();
        properties.setProperty("user", role);
        properties.setProperty("password", password);
        return new FencingClient(CLIENT.url(), properties);
    }

    private static void execute(Connection db, String sql) throws SQLException {
        try (Statement statement = db.createStatement()) {
            statement.execute(sql);
        }
    }

    /** The attack fails with 42501, and the error names {@code subject} (a lock, a session). */
    private static void refused(String attack, Object subject, Executable attempt) {
        Throwable thrown = assertThrows(Throwable.class, attempt, attack + " was not refused");
        SQLException error = thrown instanceof UncheckedSQLException
                ? ((UncheckedSQLException) thrown).getCause()
                : assertInstanceOf(SQLException.class, thrown, attack);
        assertEquals(PERMISSION_DENIED, error.getSQLState(), attack + ": " + error.getMessage());
        assertTrue(error.getMessage().contains(String.valueOf(subject)),
                attack + ": the error does not name " + subject + ": " + error.getMessage());
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
            refused("closing the app's session", session.id(),
                    asHostile("SELECT fencing_session_close(?::bigint)", session.id()));
            refused("renewing the app's session", session.id(),
                    asHostile("SELECT fencing_session_renew(?::bigint, '1 hour'::interval)", session.id()));
            refused("acquiring in the app's session", session.id(),
                    asHostile("SELECT fencing_session_acquire(?::bigint, ?)", session.id(), SESSION_LOCK + "_x"));
            refused("releasing the app's session lease by its token", SESSION_LOCK,
                    asHostile("SELECT fencing_release(?, ?::fencing_token)", SESSION_LOCK, lease.token()));

            assertTrue(session.isHeld() && lease.isHeld());
            assertEquals(lease.token(), app.leader(SESSION_LOCK).orElseThrow().token());
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
