package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static io.pgfencing.Live.clientAs;
import static io.pgfencing.Live.execute;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * One heartbeat per client object (issue 43): every session, election and lease of its own that
 * one FencingClient makes is renewed on ONE connection, each item on its own clock, and one
 * item's loss is its own. The client runs as a role of the test's own, so that pg_stat_activity
 * shows every connection it makes, and nothing else's.
 */
class HeartbeatTest {
    private static final String SUFFIX = UUID.randomUUID().toString().replace("-", "").substring(0, 10);
    private static final String ROLE = "java_beat_" + SUFFIX;
    private static final String LEASE_LOCK = "java_beat_lease_" + SUFFIX;
    private static final String SESSION_LOCK = "java_beat_session_" + SUFFIX;
    private static final String ELECTION_LOCK = "java_beat_election_" + SUFFIX;
    private static final List<String> LOCKS = List.of(LEASE_LOCK, SESSION_LOCK, ELECTION_LOCK);
    private static final LeaseOptions TTL = LeaseOptions.ofTtl(Duration.ofMillis(1500));

    private static String password;

    @BeforeAll
    static void createRoleAndLocks() throws SQLException {
        password = UUID.randomUUID().toString();
        try (Connection db = Live.db()) {
            execute(db, Live.value(db, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', ?::text, ?::text)",
                    ROLE, password));
            for (String lock : LOCKS) {
                Live.value(db, "SELECT fencing_create_lock(?)", lock);
                Live.value(db, "SELECT fencing_grant_lock(?, ?::regrole)", lock, ROLE);
            }
        }
    }

    @AfterAll
    static void dropThem() throws SQLException {
        try (Connection db = Live.db()) {
            for (String lock : LOCKS) {
                Live.value(db, "SELECT fencing_revoke_lock(?, ?::regrole)", lock, ROLE);
            }
            execute(db, Live.value(db, "SELECT format('DROP OWNED BY %1$I; DROP ROLE %1$I', ?::text)", ROLE));
        }
    }

    /** A client object of its own, as the test's role: its own heartbeat. */
    private static FencingClient client() {
        return Live.clientAs(ROLE, password);
    }


    /** The role's connections: how many, and how many of them sent a renewal last. */
    private record Connections(int all, int renewing, String renewingNames) {
        static Connections now(Connection db) throws SQLException {
            String[] row = Wire.row(db, "SELECT count(*), count(*) FILTER (WHERE renews), "
                    + "coalesce(string_agg(application_name, ',') FILTER (WHERE renews), '') "
                    + "FROM (SELECT application_name, query LIKE '%fencing_session_renew(%' "
                    + "OR query LIKE '%fencing_renew(%' AS renews FROM pg_stat_activity WHERE usename = ?) a",
                    ROLE);
            return new Connections(Integer.parseInt(row[0]), Integer.parseInt(row[1]), row[2]);
        }
    }

    /** The samples, short: "all/renewing" each, and the names of the last renewing ones. */
    private static String summary(List<Connections> seen) {
        return seen.stream().map(c -> c.all() + "/" + c.renewing()).toList() + ", renewing last: "
                + (seen.isEmpty() ? "" : seen.get(seen.size() - 1).renewingNames());
    }

    /** Samples the role's connections every 100 ms for {@code duration}. */
    private static List<Connections> watch(Connection db, Duration duration) throws Exception {
        List<Connections> seen = new ArrayList<>();
        long end = System.nanoTime() + duration.toNanos();
        while (System.nanoTime() < end) {
            seen.add(Connections.now(db));
            TimeUnit.MILLISECONDS.sleep(100);
        }
        return seen;
    }

    private static void awaitNoConnection(Connection db) throws InterruptedException, SQLException {
        Live.eventually(Duration.ofSeconds(5), () -> {
            try {
                return Connections.now(db).all() == 0;
            } catch (SQLException e) {
                return false;
            }
        });
        assertEquals(0, Connections.now(db).all(), "connections left when nothing of the client lives");
    }

    @Test
    void oneHeartbeatConnectionRenewsTwentySessionsALeaseAndAnElection() throws Exception {
        FencingClient client = client();
        List<String> lost = new CopyOnWriteArrayList<>();
        Consumer<String> onLost = lost::add;
        List<FencingSession> sessions = new ArrayList<>();
        try (Connection db = Live.db()) {
            try {
                for (int i = 0; i < 20; i++) {
                    sessions.add(client.openSession(TTL.withHolder(ROLE + "-s" + i).withOnLost(onLost)));
                }
                Lease inSession = sessions.get(0).lock(SESSION_LOCK);
                // A lease of its own with another ttl (and so another period) on the same heartbeat.
                FencedLock lock = client.lock(LEASE_LOCK, LeaseOptions.ofTtl(Duration.ofSeconds(3))
                        .withHolder(ROLE + "-lease").withOnLost(onLost));
                long token = lock.lockAndGetToken();
                LeaderElection election = client.election(ELECTION_LOCK, TTL.withHolder(ROLE + "-leader")
                        .withOnLost(onLost));
                Lease leader = election.campaign(null, 5, TimeUnit.SECONDS).orElseThrow();
                try {
                    // Three ttls of the sessions: each renewed about 8 times meanwhile.
                    List<Connections> seen = watch(db, Duration.ofMillis(4500));
                    // One work connection per session (the election campaigns in one of its
                    // own), the lease's own, and ONE heartbeat connection: 23. Each session with a
                    // heartbeat connection of its own made 43, 22 of them renewing.
                    List<Connections> afterTheFirstRound = seen.subList(10, seen.size());
                    assertTrue(afterTheFirstRound.stream().allMatch(c -> c.all() == 23), summary(seen));
                    assertTrue(seen.stream().allMatch(c -> c.renewing() <= 1),
                            "more than one connection renews: " + summary(seen));
                    assertTrue(afterTheFirstRound.stream().allMatch(c -> c.renewing() == 1
                            && c.renewingNames().startsWith("pg_fencing heartbeat ")), summary(seen));
                    assertEquals(List.of(), lost);
                    // Renewed on the server: live three ttls after they were opened.
                    assertEquals(21, Live.count(db, "SELECT count(*) FROM fencing_sessions WHERE holder LIKE ? "
                            + "AND live", ROLE + "-%"), "sessions the heartbeat let end");
                    assertTrue(sessions.stream().allMatch(FencingSession::isHeld));
                    assertTrue(inSession.isHeld() && lock.isHeld() && leader.isHeld() && election.isLeader());
                    assertEquals(token, CLIENT.leader(LEASE_LOCK).orElseThrow().token());
                    assertEquals(leader.token(), CLIENT.leader(ELECTION_LOCK).orElseThrow().token());
                    assertEquals(String.valueOf(sessions.get(0).id()), Live.value(db,
                            "SELECT session_id FROM fencing_leases WHERE lock_name = ? AND live", SESSION_LOCK));
                } finally {
                    election.resign();
                    lock.unlock();
                }
            } finally {
                for (FencingSession session : sessions) {
                    session.close();
                }
            }
            awaitNoConnection(db); // the heartbeat's too, once nothing is left to renew
            assertEquals(List.of(), lost, "a loss reported after a close, a release or a resignation");
        }
    }

    @Test
    void oneItemsLossIsReportedForItAloneTheOthersLiveOn() throws Exception {
        FencingClient client = client();
        Map<String, List<String>> lost = new ConcurrentHashMap<>();
        List<FencingSession> sessions = new ArrayList<>();
        try (Connection db = Live.db(); Connection blocker = Live.db()) {
            try {
                for (int i = 0; i < 6; i++) {
                    String holder = ROLE + "-s" + i;
                    lost.put(holder, new CopyOnWriteArrayList<>());
                    sessions.add(client.openSession(TTL.withHolder(holder).withOnLost(lost.get(holder)::add)));
                }
                lost.put("lease", new CopyOnWriteArrayList<>());
                FencedLock lock = client.lock(LEASE_LOCK, TTL.withOnLost(lost.get("lease")::add));
                lock.lockAndGetToken();
                try {
                    TimeUnit.MILLISECONDS.sleep(700); // one round at least
                    // An operator closes one session and revokes the lease; another session's row
                    // is locked by a transaction that does not end, so that its renewals wait.
                    FencingSession closed = sessions.get(1);
                    FencingSession stuck = sessions.get(4);
                    Live.value(db, "SELECT fencing_session_close(?)", closed.id());
                    Live.value(db, "SELECT fencing_revoke(?, 'test')", LEASE_LOCK);
                    blocker.setAutoCommit(false);
                    Live.value(blocker, "SELECT 1 FROM fencing_session WHERE session_id = ? FOR UPDATE", stuck.id());
                    long locked = System.nanoTime();

                    assertTrue(closed.awaitLost(Duration.ofSeconds(3)), "the closed session's loss was not reported");
                    assertTrue(lock.awaitLost(Duration.ofSeconds(3)), "the revoked lease's loss was not reported");
                    assertTrue(stuck.awaitLost(Duration.ofSeconds(3)), "the stuck session's loss was not reported");
                    assertTrue(System.nanoTime() - locked < TimeUnit.MILLISECONDS.toNanos(2000),
                            "the stuck session's loss was reported after its deadline");
                    // Two more ttls: the others live on, on the one heartbeat connection.
                    List<Connections> seen = watch(db, Duration.ofSeconds(3));
                    blocker.rollback();

                    assertEquals(List.of("renewal refused: the session ended, or was closed"),
                            lost.get(ROLE + "-s1"));
                    assertEquals(List.of("renewal refused: the lease expired, was released, revoked or taken over"),
                            lost.get("lease"));
                    assertEquals(List.of("renewal got no answer before the session's safe deadline"),
                            lost.get(ROLE + "-s4"));
                    for (int i : new int[] {0, 2, 3, 5}) {
                        assertEquals(List.of(), lost.get(ROLE + "-s" + i), "session " + i + " lost");
                        assertTrue(sessions.get(i).isHeld(), "session " + i);
                    }
                    assertFalse(closed.isHeld() || stuck.isHeld() || lock.isHeld());
                    assertEquals(4, Live.count(db, "SELECT count(*) FROM fencing_sessions WHERE holder LIKE ? "
                            + "AND live", ROLE + "-%"), "the others were not renewed");
                    assertTrue(seen.stream().allMatch(c -> c.renewing() <= 1
                            && (c.renewing() == 0 || c.renewingNames().startsWith("pg_fencing heartbeat "))),
                            "more than one connection renews: " + summary(seen));
                } finally {
                    blocker.rollback();
                    lock.unlock();
                }
            } finally {
                for (FencingSession session : sessions) {
                    session.close();
                }
            }
            awaitNoConnection(db);
        }
    }
}
