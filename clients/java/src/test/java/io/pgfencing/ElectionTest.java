package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Elections against a live server: the election hand-over, forged-notification and reconnect
 *  scenarios of clients/README.md. */
class ElectionTest {
    private static final LeaseOptions FIVE_SECONDS = LeaseOptions.ofTtl(Duration.ofSeconds(5));

    /** The candidate that next says "leader TOKEN", and the token. */
    private record Led(Live.Child candidate, long token) {
    }

    private static Led nextLeader(List<Live.Child> candidates, Duration timeout) throws InterruptedException {
        long end = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < end) {
            for (Live.Child candidate : candidates) {
                String line = candidate.pollLine();
                if (line != null && line.startsWith("leader ")) {
                    return new Led(candidate, Long.parseLong(line.substring("leader ".length())));
                }
            }
            TimeUnit.MILLISECONDS.sleep(20);
        }
        throw new AssertionError("no leader within " + timeout);
    }

    @Test
    void electionWithThreeCandidatesAndAKilledLeader() throws Exception {
        String name = Live.name();
        List<Live.Child> candidates = new ArrayList<>();
        try (Connection db = Live.db()) {
            Live.protectedTable(db, name, name);
            for (int i = 0; i < 3; i++) {
                candidates.add(new Live.Child(Candidate.class, name, name, "c" + i));
            }
            Led first = nextLeader(candidates, Duration.ofSeconds(20));
            assertEquals(first.token(), CLIENT.election(name, FIVE_SECONDS).leader().orElseThrow().token());
            first.candidate().kill(); // SIGKILL: its lease is left to run out
            Led second = nextLeader(candidates, Duration.ofSeconds(10));
            assertNotSame(first.candidate(), second.candidate());
            assertTrue(second.token() > first.token());
            Live.eventually(Duration.ofSeconds(3), () -> {
                try {
                    return String.valueOf(second.token()).equals(Live.value(db, "SELECT token::text FROM " + name));
                } catch (java.sql.SQLException e) {
                    return false;
                }
            });
            assertEquals(String.valueOf(second.token()), Live.value(db, "SELECT token::text FROM " + name),
                    "the new leader's writes land");
            assertThrows(StaleTokenException.class, () -> Fenced.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'ghost' WHERE id = 1", first.token()));
        } finally {
            for (Live.Child candidate : candidates) {
                candidate.close();
            }
        }
    }

    @Test
    void observeFollowsTheLeaderAndIgnoresAForgedNotification() throws Exception {
        String name = Live.name();
        try (Connection db = Live.db()) {
            Live.value(db, "SELECT fencing_create_lock(?)", name);
            Live.value(db, "SELECT fencing_set_announce(?, true)", name);
            LeaderElection election = CLIENT.election(name, FIVE_SECONDS.withHolder("observed"));
            List<String> terms = new CopyOnWriteArrayList<>();
            election.addListener(new LeadershipListener() {
                @Override
                public void gained(Lease lease) {
                    terms.add("gained " + lease.token());
                }

                @Override
                public void lost(String reason) {
                    terms.add("lost " + reason);
                }
            });
            Lease lease = election.campaign("{\"addr\": \"10.0.0.1:1\"}");
            assertTrue(election.isLeader());
            assertEquals(List.of("gained " + lease.token()), terms);

            List<Optional<Leader>> seen = new CopyOnWriteArrayList<>();
            try (LeaderObserver observer = CLIENT.election(name, FIVE_SECONDS)
                    .observe(Duration.ofSeconds(60), seen::add)) {
                Live.eventually(Duration.ofSeconds(5), () -> !seen.isEmpty());
                Leader first = seen.get(0).orElseThrow();
                assertEquals("observed", first.holder());
                assertEquals(lease.token(), first.token());
                assertTrue(first.payload().contains("10.0.0.1:1"), first.payload());

                String forged = "{\"lock_name\": \"" + name + "\", \"event\": \"granted\", "
                        + "\"holder\": \"mallory\", \"token\": 1}";
                Live.value(db, "SELECT pg_notify('fencing_events', ?)", forged);
                TimeUnit.MILLISECONDS.sleep(500);
                assertEquals(1, seen.size(), "a forged notification changed what it reports: " + seen);

                election.proclaim("{\"addr\": \"10.0.0.1:2\"}");
                assertTrue(CLIENT.leader(name).orElseThrow().payload().contains("10.0.0.1:2"));
                TimeUnit.MILLISECONDS.sleep(300);
                assertEquals(1, seen.size(), "a proclamation keeps the same leader and token");

                assertTrue(election.resign());
                assertFalse(election.isLeader());
                assertEquals("lost resigned", terms.get(1));
                assertThrows(LeaseLostException.class, () -> election.proclaim("{}"));
                LeaderElection successor = CLIENT.election(name, FIVE_SECONDS.withHolder("next"));
                Lease next = successor.campaign(null);
                Live.eventually(Duration.ofSeconds(5), () -> seen.get(seen.size() - 1)
                        .map(l -> l.holder().equals("next")).orElse(false));
                Leader last = seen.get(seen.size() - 1).orElseThrow();
                assertEquals("next", last.holder());
                assertEquals(next.token(), last.token());
                assertTrue(seen.stream().flatMap(Optional::stream).noneMatch(l -> l.holder().equals("mallory")));
                successor.resign();
            }
            assertEquals(2, terms.size(), "one gained, one lost: " + terms);
        }
    }

    @Test
    void aLeaderWhoseLeaseIsRevokedHearsItOnce() throws Exception {
        String name = Live.name();
        List<String> heard = new CopyOnWriteArrayList<>();
        LeaderElection election = CLIENT.election(name, LeaseOptions.ofTtl(Duration.ofSeconds(2))
                .withHeartbeat(Duration.ofMillis(200)).withOnLost(reason -> heard.add("onLost")));
        election.addListener(new LeadershipListener() {
            @Override
            public void lost(String reason) {
                heard.add("lost: " + reason);
            }
        });
        Lease lease = election.campaign(null);
        try (Connection db = Live.db()) {
            Live.value(db, "SELECT fencing_revoke(?, 'test')", name);
        }
        assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
        assertFalse(election.isLeader());
        assertFalse(election.resign(), "it was not ours any more");
        assertEquals(2, heard.size(), heard.toString());
        assertTrue(heard.get(0).startsWith("lost: renewal refused"), heard.toString());
        assertEquals("onLost", heard.get(1));
    }

    @Test
    void campaigningAgainAfterALostTermGivesThatTermsConnectionBack() throws Exception {
        String name = Live.name();
        LeaderElection election = CLIENT.election(name, LeaseOptions.ofTtl(Duration.ofSeconds(2))
                .withHeartbeat(Duration.ofMillis(200)).withHolder("term-" + name));
        String application = "pg_fencing session term-" + name;
        try (Connection db = Live.db()) {
            Lease first = election.campaign(null);
            Live.value(db, "SELECT fencing_revoke(?, 'test')", name);
            assertTrue(first.awaitLost(Duration.ofSeconds(3)));
            Lease second = election.campaign(null, 5, TimeUnit.SECONDS).orElseThrow();
            assertTrue(second.token() > first.token());
            // The new term's session: its work connection (its renewals go on the client's
            // heartbeat connection).
            assertEquals(1, Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                    application), "the lost term's connections are still open");
        } finally {
            election.resign();
        }
    }

    @Test
    void twoThreadsCampaigningAtOnceShareOneTerm() throws Exception {
        String name = Live.name();
        LeaderElection election = CLIENT.election(name, FIVE_SECONDS.withHolder("twice-" + name));
        List<Lease> leases = new CopyOnWriteArrayList<>();
        java.util.concurrent.CountDownLatch start = new java.util.concurrent.CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Thread thread = new Thread(() -> {
                try {
                    start.await();
                    leases.add(election.campaign(null, 5, TimeUnit.SECONDS).orElseThrow());
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            thread.start();
            threads.add(thread);
        }
        start.countDown();
        for (Thread thread : threads) {
            thread.join(10_000);
        }
        try (Connection db = Live.db()) {
            assertEquals(2, leases.size(), leases.toString());
            assertSame(leases.get(0), leases.get(1), "two terms at once: " + leases);
            assertEquals(1, Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                    "pg_fencing session twice-" + name), "one session (one work connection; the client's heartbeat)");
        } finally {
            election.resign();
            for (Lease lease : leases) {
                lease.release();
            }
        }
    }

    @Test
    void observeReconnectsAfterItsConnectionIsTerminated() throws Exception {
        String name = Live.name();
        List<Optional<Leader>> seen = new CopyOnWriteArrayList<>();
        try (Connection db = Live.db();
             LeaderObserver observer = CLIENT.election(name, FIVE_SECONDS).observe(Duration.ofSeconds(60), seen::add)) {
            Live.eventually(Duration.ofSeconds(5), () -> !seen.isEmpty());
            assertEquals(List.of(Optional.empty()), seen);
            // Taken while the observer sleeps (not announced: no notification, and the next
            // periodic read is a minute away) ...
            try (FencedLock lock = CLIENT.lock(name, LeaseOptions.ofTtl(Duration.ofSeconds(10)).withHolder("after"))) {
                long token = lock.lockAndGetToken();
                TimeUnit.MILLISECONDS.sleep(300);
                assertEquals(1, seen.size(), "nothing told it yet");
                // ... then its connection is cut: it reconnects and reads again.
                assertEquals(1, Live.count(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        + "WHERE application_name = ?", LeaderObserver.APPLICATION_NAME));
                Live.eventually(Duration.ofSeconds(10), () -> seen.size() > 1);
                assertEquals(2, seen.size(), "no change reported after the reconnect: " + seen);
                assertEquals("after", seen.get(1).orElseThrow().holder());
                assertEquals(token, seen.get(1).orElseThrow().token());
                assertTrue(observer.isRunning(), "a terminated connection (57P01) is mended, not fatal");
                assertTrue(observer.error().isEmpty(), () -> "stopped by " + observer.error());
            }
        }
    }

    @Test
    void observeStopsAndReportsAnErrorNoReconnectCanMend() throws Exception {
        String role = Live.name();
        String password = UUID.randomUUID().toString();
        try (Connection db = Live.db()) {
            execute(db, Live.value(db, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', ?::text, ?::text)",
                    role, password));
            try {
                Properties wrongPassword = new Properties();
                wrongPassword.setProperty("user", role);
                wrongPassword.setProperty("password", "not-" + password);
                FencingClient client = new FencingClient(CLIENT.url(), wrongPassword);
                List<Optional<Leader>> seen = new CopyOnWriteArrayList<>();
                BlockingQueue<SQLException> errors = new LinkedBlockingQueue<>();
                try (LeaderObserver observer = client.election(Live.name(), FIVE_SECONDS)
                        .observe(Duration.ofSeconds(60), seen::add, errors::add)) {
                    SQLException error = errors.poll(5, TimeUnit.SECONDS);
                    assertNotNull(error, "a wrong password was not reported: retried in silence?");
                    assertEquals("28P01", error.getSQLState(), error.getMessage());
                    assertTrue(error.getMessage().contains(role), error.getMessage());
                    Live.eventually(Duration.ofSeconds(5), () -> !observer.isRunning());
                    assertFalse(observer.isRunning(), "the observer goes on after 28P01");
                    assertSame(error, observer.error().orElseThrow());
                    TimeUnit.MILLISECONDS.sleep(200);
                    assertTrue(errors.isEmpty(), "reported more than once: " + errors);
                    assertTrue(seen.isEmpty(), "a leader reported without a connection: " + seen);
                }
            } finally {
                execute(db, Live.value(db, "SELECT format('DROP ROLE %I', ?::text)", role));
            }
        }
    }

    private static void execute(Connection db, String sql) throws SQLException {
        try (Statement statement = db.createStatement()) {
            statement.execute(sql);
        }
    }
}
