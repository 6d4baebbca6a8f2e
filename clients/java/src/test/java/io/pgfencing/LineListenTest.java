package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** A client that may LISTEN (a direct connection) learns of its turn in line at once. */
class LineListenTest {
    @Test
    void aListeningWaitHearsItsTurnBeforeItsNextPoll() throws Exception {
        String lock = Live.name();
        FencingClient listening = CLIENT.withListen(true).withPoll(Duration.ofSeconds(30));
        assertTrue(listening.isListening());
        LeaseOptions ttl = LeaseOptions.ofTtl(Duration.ofSeconds(10));
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(ttl);
             FencingSession waiter = listening.openSession(ttl.withHolder(lock + "-heard"))) {
            Lease held = holder.lock(lock);
            AtomicReference<Object> got = new AtomicReference<>();
            Thread waiting = new Thread(() -> {
                try {
                    Optional<Lease> lease = waiter.tryLock(lock, 60, TimeUnit.SECONDS);
                    got.set(lease.isPresent() ? lease.get() : "timed out");
                } catch (Throwable e) {
                    got.set(e);
                }
            });
            waiting.setDaemon(true);
            waiting.start();
            assertEquals(1, Live.awaitPlacesInLine(db, lock + "-heard", 1));
            assertEquals(1, Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                    Line.Listener.APPLICATION_NAME), "one connection LISTENs for the waits");
            long released = System.nanoTime();
            assertTrue(held.release());
            waiting.join(10_000);
            assertTrue(got.get() instanceof Lease, String.valueOf(got.get()));
            assertTrue(System.nanoTime() - released < TimeUnit.SECONDS.toNanos(5),
                    "the wait learnt its turn from its next poll (30 s), not from the notification");
            assertEquals(lock + "-heard", CLIENT.leader(lock).orElseThrow().holder());
            assertTrue(((Lease) got.get()).release());
            // Nobody waits: the listener's connection is closed.
            Live.eventually(Duration.ofSeconds(5), () -> {
                try {
                    return Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                            Line.Listener.APPLICATION_NAME) == 0;
                } catch (java.sql.SQLException e) {
                    return false;
                }
            });
            assertEquals(0, Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                    Line.Listener.APPLICATION_NAME), "the listener stays connected with nobody waiting");
        }
    }
}
