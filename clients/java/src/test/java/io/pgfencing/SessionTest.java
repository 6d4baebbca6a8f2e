package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.time.Duration;
import java.util.List;
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
            Thread waiting = new Thread(() -> {
                try {
                    waiter.lock(name);
                    outcome.set(new AssertionError("granted"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiting.start();
            assertEquals(1, Live.awaitWaitsOnTheServer(db, application, 1), "the wait is on the server");
            waiting.interrupt();
            waiting.join(5000);
            assertFalse(waiting.isAlive(), "the interrupt ended the wait");
            assertInstanceOf(InterruptedException.class, outcome.get());
            // The session's connection stays open: only a cancel ends the wait on the server.
            assertEquals(0, Live.awaitWaitsOnTheServer(db, application, 0),
                    "the wait does not go on on the server");
            assertTrue(waiter.isHeld());
            assertTrue(waiter.tryLock(name, 0, TimeUnit.SECONDS).isEmpty(), "still busy, and usable");
            assertTrue(held.release());
            assertTrue(waiter.tryLock(name, 2, TimeUnit.SECONDS).isPresent());
        }
    }
}
