package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** Sessions against a live server: the sessions scenario of clients/README.md. */
class SessionTest {
    @Test
    void sessionLocksManyAndLosesThemTogether() throws Exception {
        String name = Live.name();
        List<String> reasons = new CopyOnWriteArrayList<>();
        try (Connection db = Live.db();
             FencingSession session = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(3))
                     .withHeartbeat(Duration.ofMillis(200)).withOnLost(reasons::add))) {
            Lease part = session.lock(name + "_p");
            List<Lease> both = session.lockAll(List.of(name + "_b", name + "_a"));
            assertEquals(List.of(name + "_b", name + "_a"), both.stream().map(Lease::lockName).toList());
            assertTrue(part.isHeld() && both.get(0).isHeld() && both.get(1).isHeld());
            assertEquals(String.valueOf(session.id()), Live.value(db,
                    "SELECT session_id FROM fencing_leases WHERE lock_name = ?", name + "_a"));
            try (FencingSession other = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(3)))) {
                assertTrue(other.tryLockAll(List.of(name + "_a", name + "_z"), 0, TimeUnit.SECONDS).isEmpty());
                assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_leases WHERE lock_name = ? AND live",
                        name + "_z"), "none or all");
                assertTrue(other.tryLock(name + "_b", 200, TimeUnit.MILLISECONDS).isEmpty(), "busy: waited, empty");
            }
            assertTrue(part.release());
            assertFalse(part.isHeld());
            assertTrue(both.get(0).isHeld());

            Live.value(db, "SELECT fencing_session_close(?)", session.id()); // an operator ends it
            assertTrue(session.awaitLost(Duration.ofSeconds(3)), "onLost was not called");
            TimeUnit.MILLISECONDS.sleep(500);
            assertEquals(1, reasons.size(), reasons.toString());
            assertFalse(both.get(0).isHeld() || both.get(1).isHeld());
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_leases WHERE lock_name IN (?, ?) AND live",
                    name + "_a", name + "_b"), "the close ended every lease in it");
            assertThrows(LeaseLostException.class, () -> both.get(0).executeUpdate(db, "SELECT 1"));
            assertThrows(LeaseLostException.class, () -> session.lock(name + "_c"));
        }
    }

    @Test
    void interruptingASessionsWaitCancelsItOnTheServer() throws Exception {
        String name = Live.name();
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(5)));
             FencingSession waiter = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(5))
                     .withHolder("waiter-" + name))) {
            Lease held = holder.lock(name);
            String application = "pg_fencing session waiter-" + name;
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            // 1.10: the wait is a place in the lock's line, not a statement that runs.
            Thread waiting = new Thread(() -> {
                try {
                    waiter.lock(name);
                    outcome.set(new AssertionError("granted"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiting.start();
            assertEquals(1, Live.awaitPlacesInLine(db, "waiter-" + name, 1), "the wait is on the server");
            assertEquals(0, Live.waitsOnTheServer(db, application), "no statement runs for the wait");
            waiting.interrupt();
            waiting.join(5000);
            assertFalse(waiting.isAlive(), "the interrupt ended the wait");
            assertInstanceOf(InterruptedException.class, outcome.get());
            // The session lives on: the place is left, not ended with the session.
            assertEquals(0, Live.placesInLine(db, "waiter-" + name), "the wait goes on on the server");
            assertTrue(waiter.isHeld());
            assertTrue(waiter.tryLock(name, 0, TimeUnit.SECONDS).isEmpty(), "still busy, and usable");
            assertTrue(held.release());
            assertTrue(waiter.tryLock(name, 2, TimeUnit.SECONDS).isPresent());
        }
    }

    @Test
    void sessionTakesPermitsAndSharedLeases() throws Exception {
        String semaphore = Live.name();
        String shared = Live.name();
        LeaseOptions ttl = LeaseOptions.ofTtl(Duration.ofSeconds(5));
        try (FencingSession first = CLIENT.openSession(ttl);
             FencingSession second = CLIENT.openSession(ttl);
             FencingSession writer = CLIENT.openSession(ttl)) {
            Lease one = first.acquirePermit(semaphore, 2);
            Lease two = first.tryAcquirePermit(semaphore, 2, 0, TimeUnit.SECONDS).orElseThrow();
            assertNotEquals(one.token(), two.token(), "each permit has its own token");
            assertEquals("a permit of semaphore \"" + semaphore + "\" in fencing session " + first.id(),
                    one.describe());
            assertTrue(second.tryAcquirePermit(semaphore, 2, 200, TimeUnit.MILLISECONDS).isEmpty(),
                    "both permits are the first session's");
            assertTrue(one.release());
            Lease third = second.tryAcquirePermit(semaphore, 2, 2, TimeUnit.SECONDS).orElseThrow();
            assertTrue(third.isHeld() && two.isHeld());

            Lease reader = first.lockShared(shared);
            Lease otherReader = second.tryLockShared(shared, 0, TimeUnit.SECONDS).orElseThrow();
            assertTrue(reader.isHeld() && otherReader.isHeld(), "shared leases beside each other");
            assertTrue(writer.tryLock(shared, 0, TimeUnit.SECONDS).isEmpty(), "no exclusive one");

            first.close(); // ends its shared lease and its permit with it
            assertFalse(reader.isHeld() || two.isHeld());
            assertTrue(writer.tryLock(shared, 0, TimeUnit.SECONDS).isEmpty(), "the second reader holds on");
            assertTrue(writer.tryAcquirePermit(semaphore, 2, 2, TimeUnit.SECONDS).isPresent(),
                    "the closed session's permit is free again");
            second.close();
            assertTrue(writer.tryLock(shared, 2, TimeUnit.SECONDS).isPresent(), "every reader is gone");

            IllegalArgumentException none = assertThrows(IllegalArgumentException.class,
                    () -> writer.acquirePermit(semaphore, 0));
            assertTrue(none.getMessage().contains("got 0") && none.getMessage().contains(semaphore),
                    none.getMessage());
        }
    }

    @Test
    void closingASessionEndsItsWaitOnAnotherThread() throws Exception {
        String name = Live.name();
        LeaseOptions ttl = LeaseOptions.ofTtl(Duration.ofSeconds(5));
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(ttl);
             // A ttl far beyond the bounds below: the session must not just run out meanwhile.
             FencingSession waiter = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(60))
                     .withHolder("closed-" + name))) {
            holder.lock(name);
            String application = "pg_fencing session closed-" + name;
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            Thread waiting = new Thread(() -> {
                try {
                    waiter.lock(name);
                    outcome.set(new AssertionError("granted"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiting.start();
            assertEquals(1, Live.awaitPlacesInLine(db, "closed-" + name, 1), "the wait is on the server");
            Thread closing = new Thread(() -> {
                try {
                    waiter.close();
                } catch (Exception e) {
                    outcome.compareAndSet(null, e);
                }
            });
            closing.start();
            closing.join(5000);
            boolean closedInTime = !closing.isAlive();
            holder.close(); // lets a close stuck behind the wait finish, to clean up
            closing.join(5000);
            waiting.join(5000);
            assertTrue(closedInTime, "close() waited for the session's wait on another thread");
            assertInstanceOf(LeaseLostException.class, outcome.get());
            assertEquals(FencingException.SESSION_ENDED, ((SQLException) outcome.get()).getSQLState());
            assertEquals(0, Live.waitsOnTheServer(db, application));
            assertEquals(0, Live.placesInLine(db, "closed-" + name));
            assertThrows(LeaseLostException.class, () -> waiter.lock(name), "closed: no more leases");
        }
    }

    @Test
    void anotherThreadsWaitInTheSessionHoldsUpNeitherAReleaseNorATimedAcquire() throws Exception {
        String name = Live.name();
        LeaseOptions ttl = LeaseOptions.ofTtl(Duration.ofSeconds(5));
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(ttl);
             FencingSession session = CLIENT.openSession(ttl.withHolder("busy-" + name))) {
            holder.lock(name + "_busy");
            Lease mine = session.lock(name + "_mine");
            Thread waiting = new Thread(() -> {
                try {
                    session.lock(name + "_busy");
                } catch (Exception e) {
                    // interrupted below, as wanted
                }
            });
            waiting.start();
            try {
                assertEquals(1, Live.awaitPlacesInLine(db, "busy-" + name, 1));
                AtomicReference<Object> released = new AtomicReference<>();
                AtomicReference<Object> tried = new AtomicReference<>();
                Thread other = new Thread(() -> {
                    try {
                        released.set(mine.release());
                        tried.set(session.tryLock(name + "_free", 300, TimeUnit.MILLISECONDS));
                    } catch (Exception e) {
                        tried.set(e);
                    }
                });
                other.start();
                other.join(5000);
                assertEquals(Boolean.TRUE, released.get(), "the release waited behind the wait");
                // 1.10: the wait is a place in line, polled by short statements: it holds the
                // work connection only for them, and a timed acquire of a free lock gets it.
                assertInstanceOf(java.util.Optional.class, tried.get(), String.valueOf(tried.get()));
                assertTrue(((java.util.Optional<?>) tried.get()).isPresent(),
                        "tryLock(300 ms) of a free lock waited behind another thread's wait in line");
                assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_leases WHERE lock_name = ? "
                        + "AND state = 'live'", name + "_mine"), "released on the server");
            } finally {
                waiting.interrupt();
                waiting.join(5000);
            }
        }
    }

    @Test
    void aBrokenWorkConnectionIsMadeAgainWhileTheHeartbeatKeepsTheSession() throws Exception {
        String name = Live.name();
        try (Connection db = Live.db();
             FencingSession session = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(5))
                     .withHolder("broken-" + name))) {
            Lease first = session.lock(name + "_1");
            // The work connection's backend: its last statement was the lock's join of the line
            // (1.10), not the session's open (the renewals go on the client's heartbeat).
            assertEquals(1, Live.count(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    + "WHERE application_name = ? AND query LIKE '%fencing_line_join%'",
                    "pg_fencing session broken-" + name));
            Live.eventually(Duration.ofSeconds(3), () -> {
                try {
                    return session.tryLock(name + "_2", 0, TimeUnit.SECONDS).isPresent();
                } catch (Exception e) {
                    return false; // the call that finds the connection broken
                }
            });
            assertTrue(session.isHeld() && first.isHeld());
            Lease third = session.tryLock(name + "_3", 0, TimeUnit.SECONDS).orElseThrow();
            assertEquals(String.valueOf(session.id()), Live.value(db,
                    "SELECT session_id FROM fencing_leases WHERE lock_name = ?", name + "_3"));
            assertTrue(third.release());
        }
    }

    /** Rows "state|snapshotless" of pg_stat_activity for connections named applicationName. */
    private static List<String> activity(Connection db, String applicationName) throws SQLException {
        List<String> rows = new java.util.ArrayList<>();
        try (java.sql.PreparedStatement statement = db.prepareStatement("SELECT state || '|' || "
                + "(backend_xmin IS NULL AND backend_xid IS NULL) FROM pg_stat_activity "
                + "WHERE application_name = ?")) {
            statement.setString(1, applicationName);
            try (java.sql.ResultSet result = statement.executeQuery()) {
                while (result.next()) {
                    rows.add(result.getString(1));
                }
            }
        }
        return rows;
    }

    @Test
    void lockAllWithAWaitHoldsNoSnapshotAndNoConnectionAndGetsBothOnceReleased() throws Exception {
        String name = Live.name();
        String first = name + "_a";
        String second = name + "_b";
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(30)));
             FencingSession waiter = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(30))
                     .withHolder("all-" + name))) {
            Lease heldFirst = holder.lock(first);
            Lease heldSecond = holder.lock(second);
            AtomicReference<Object> outcome = new AtomicReference<>();
            Thread waiting = new Thread(() -> {
                try {
                    outcome.set(waiter.tryLockAll(List.of(second, first), 10, TimeUnit.SECONDS));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiting.start();
            try {
                TimeUnit.MILLISECONDS.sleep(300); // the wait has begun
                List<String> states = new java.util.ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    states.addAll(activity(db, "pg_fencing session all-" + name));
                    TimeUnit.MILLISECONDS.sleep(100);
                }
                assertTrue(waiting.isAlive(), "it stopped waiting while both locks were held");
                // A statement running now (a poll, a renewal) has a snapshot while it runs.
                assertTrue(!states.isEmpty() && states.stream()
                                .allMatch(r -> r.startsWith("active|") || r.endsWith("|true")),
                        "a snapshot held while it waits: " + states);
                assertTrue(states.stream().noneMatch(r -> r.startsWith("idle in transaction")), states.toString());
                assertTrue(states.stream().filter(r -> r.startsWith("active|")).count() <= 2,
                        "between its polls its connections sit idle, holding no snapshot: " + states);
                assertEquals("1", Live.value(db, "SELECT count(*) FROM fencing_lines WHERE lock_name = ? "
                        + "AND session_id = ?", first, waiter.id()), "it waits for the first in byte order");

                assertTrue(heldFirst.release());
                Live.eventually(Duration.ofSeconds(5), () -> {
                    try {
                        return Live.count(db, "SELECT count(*) FROM fencing_lines WHERE lock_name = ? "
                                + "AND session_id = ?", second, waiter.id()) == 1;
                    } catch (SQLException e) {
                        return false;
                    }
                });
                assertEquals(String.valueOf(waiter.id()), Live.value(db, "SELECT session_id FROM fencing_leases "
                        + "WHERE lock_name = ? AND live", first), "the first is the session's while it waits");
                assertTrue(waiting.isAlive());
                assertTrue(heldSecond.release());
                waiting.join(5000);
                assertFalse(waiting.isAlive());
            } finally {
                waiting.interrupt();
                waiting.join(5000);
            }
            assertInstanceOf(Optional.class, outcome.get(), String.valueOf(outcome.get()));
            @SuppressWarnings("unchecked")
            List<Lease> leases = ((Optional<List<Lease>>) outcome.get()).orElseThrow();
            assertEquals(List.of(second, first), leases.stream().map(Lease::lockName).toList(),
                    "in the caller's order");
            for (Lease lease : leases) {
                assertEquals(String.valueOf(lease.token()), Live.value(db, "SELECT token::bigint FROM "
                        + "fencing_leases WHERE lock_name = ? AND live AND session_id = ?",
                        lease.lockName(), waiter.id()));
                assertTrue(lease.isHeld());
                assertTrue(lease.release());
            }
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line WHERE session_id = ?",
                    waiter.id()), "released: their places left too");
        }
    }

    @Test
    void lockAllThatTimesOutGivesBackWhatItTookAndLeavesNoPlace() throws Exception {
        String name = Live.name();
        String before = name + "_a";
        String free = name + "_b";
        String busy = name + "_c";
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(30)));
             FencingSession session = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(30)))) {
            Lease blocker = holder.lock(busy);
            Lease kept = session.tryLock(before, 0, TimeUnit.SECONDS).orElseThrow(); // no place
            List<String> seen = new CopyOnWriteArrayList<>();
            Thread watcher = new Thread(() -> {
                try (Connection watch = Live.db()) {
                    long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1400);
                    while (System.nanoTime() < end) {
                        seen.add(String.valueOf(Live.value(watch, "SELECT session_id FROM fencing_leases "
                                + "WHERE lock_name = ? AND live", free)));
                        TimeUnit.MILLISECONDS.sleep(50);
                    }
                } catch (Exception e) {
                    seen.add(e.toString());
                }
            });
            watcher.start();
            long started = System.nanoTime();
            assertTrue(session.tryLockAll(List.of(busy, free, before), 1500, TimeUnit.MILLISECONDS).isEmpty(),
                    "busy: not all could be had");
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
            watcher.join(5000);
            assertTrue(took >= 1300 && took < 4000, "took " + took + " ms");
            assertTrue(seen.contains(String.valueOf(session.id())),
                    "it took the free lock while it waited for the busy one: " + seen);
            assertEquals("released|null", Live.value(db, "SELECT state || '|' || coalesce(session_id::text, "
                    + "'null') FROM fencing_leases WHERE lock_name = ?", free), "the lock it took is given back");
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line WHERE session_id = ?", session.id()),
                    "no place of the session remains");
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_lines WHERE session_id = ?", session.id()));
            assertEquals(String.valueOf(kept.token()), Live.value(db, "SELECT token::bigint FROM fencing_leases "
                    + "WHERE lock_name = ? AND live AND session_id = ?", before, session.id()),
                    "the lock it held before is kept");
            assertTrue(kept.isHeld() && blocker.isHeld());
            assertTrue(holder.tryLock(free, 0, TimeUnit.SECONDS).isPresent(), "the freed lock is anyone's");
        }
    }
}
