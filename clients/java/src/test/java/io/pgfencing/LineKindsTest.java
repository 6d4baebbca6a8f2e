package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** A session's wait for a shared lease or a permit is a place in line too (issue 43). */
class LineKindsTest {
    private static final LeaseOptions TTL = LeaseOptions.ofTtl(Duration.ofSeconds(10));

    private interface Wait {
        Optional<Lease> run() throws Exception;
    }

    /** A thread that runs {@code wait}; its outcome (a Lease, "timed out" or what it threw). */
    private static Thread start(Wait wait, AtomicReference<Object> outcome) {
        Thread thread = new Thread(() -> {
            try {
                Optional<Lease> lease = wait.run();
                outcome.set(lease.isPresent() ? lease.get() : "timed out");
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        thread.setDaemon(true);
        thread.start();
        return thread;
    }

    private static Lease got(Thread thread, AtomicReference<Object> outcome, String who) throws InterruptedException {
        thread.join(10_000);
        assertTrue(outcome.get() instanceof Lease, who + ": " + outcome.get());
        return (Lease) outcome.get();
    }

    /**
     * Through a transaction-pooling PgBouncer with a pool of 2, a wait for a permit (both of a
     * semaphore's 2 held) and a wait for a shared lease (behind a live exclusive lease) leave the
     * pool to another client's short statements while they wait, and each takes its lease when
     * it is freed. (CALL fencing_await held a server connection each: the pool was theirs.)
     */
    @Test
    void waitsForAPermitAndASharedLeaseHoldNoServerConnection() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Bouncer.PGBOUNCER), "PgBouncer is not installed");
        String semaphore = Live.name();
        String shared = Live.name();
        ExecutorService probe = Executors.newSingleThreadExecutor(r -> {
            Thread thread = new Thread(r, "probe through the pool");
            thread.setDaemon(true);
            return thread;
        });
        try (Bouncer bouncer = new Bouncer(2, 100);
             Connection db = Live.db();
             FencingSession permitWaiter = bouncer.client().openSession(TTL.withHolder(semaphore + "-waiter"));
             FencingSession sharedWaiter = bouncer.client().openSession(TTL.withHolder(shared + "-reader"));
             FencingSession holder = CLIENT.openSession(TTL)) { // closed first: frees the waits
            Lease one = holder.tryAcquirePermit(semaphore, 2, 0, TimeUnit.SECONDS).orElseThrow();
            holder.tryAcquirePermit(semaphore, 2, 0, TimeUnit.SECONDS).orElseThrow();
            Lease writer = holder.lock(shared);

            AtomicReference<Object> permit = new AtomicReference<>();
            AtomicReference<Object> reader = new AtomicReference<>();
            Thread permitWait = start(() -> permitWaiter.tryAcquirePermit(semaphore, 2, 30, TimeUnit.SECONDS), permit);
            Thread sharedWait = start(() -> sharedWaiter.tryLockShared(shared, 30, TimeUnit.SECONDS), reader);
            // Both waits under way: each a place in line, or (before) a CALL that waits.
            Live.eventually(Duration.ofSeconds(5), () -> {
                try {
                    return Live.placesInLine(db, semaphore + "-waiter") + Live.placesInLine(db, shared + "-reader")
                            + Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                    + "AND query LIKE 'CALL fencing_await%'") == 2;
                } catch (SQLException e) {
                    return false;
                }
            });
            TimeUnit.MILLISECONDS.sleep(600); // a poll of each meanwhile

            // Another client's short statements through the same pool keep going (each on a
            // connection of its own: its start-up statements go through the pool too).
            for (int i = 0; i < 5; i++) {
                Future<String> answer = probe.submit(() -> {
                    try (Connection other = bouncer.client().connect("another client")) {
                        return Live.value(other, "SELECT 'answered'");
                    }
                });
                try {
                    assertEquals("answered", answer.get(5, TimeUnit.SECONDS));
                } catch (TimeoutException e) {
                    fail("another client waited 5 s for the pool of 2: the waits hold it");
                }
                TimeUnit.MILLISECONDS.sleep(100);
            }
            assertEquals(1, Live.placesInLine(db, semaphore + "-waiter"), "the permit's wait has no place in line: "
                    + permit.get());
            assertEquals(1, Live.placesInLine(db, shared + "-reader"), "the shared wait has no place in line");
            assertEquals(0, Live.count(db, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    + "AND query LIKE 'CALL fencing_await%'"), "a wait runs as a statement");
            assertNull(permit.get(), "the permit's wait ended while both permits were held");
            assertNull(reader.get(), "the shared wait ended while the exclusive lease lived");

            assertTrue(one.release());
            Lease permitLease = got(permitWait, permit, "the permit's wait");
            assertTrue(writer.release());
            Lease readerLease = got(sharedWait, reader, "the shared wait");
            assertEquals(1, Live.count(db, "SELECT count(*) FROM fencing_permits WHERE lock_name = ? "
                    + "AND holder = ? AND live", semaphore, semaphore + "-waiter"));
            assertEquals(1, Live.count(db, "SELECT count(*) FROM fencing_permits WHERE lock_name = ? "
                    + "AND holder = ? AND live", shared, shared + "-reader"), "the shared lease (a shared holder's slot)");
            assertTrue(permitLease.release());
            assertTrue(readerLease.release());
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line l JOIN fencing_lock k "
                    + "USING (lock_id) WHERE k.lock_name IN (?, ?) AND l.token IS NULL", semaphore, shared),
                    "places left in line");
        } finally {
            probe.shutdownNow();
        }
    }

    /**
     * Three session waits for one of 2 permits (both held), started in the order A, B, C: the
     * first permit freed is A's, though B and C poll 40 times as often; the next is B's. One more
     * permit in a session whose place holds one is a permit of its own.
     */
    @Test
    void freedPermitsGoToTheirWaitsInArrivalOrder() throws Exception {
        String semaphore = Live.name();
        FencingClient rare = CLIENT.withPoll(Duration.ofSeconds(2));
        FencingClient often = CLIENT.withPoll(Duration.ofMillis(50));
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(TTL);
             FencingSession a = rare.openSession(TTL.withHolder(semaphore + "-a"));
             FencingSession b = often.openSession(TTL.withHolder(semaphore + "-b"));
             FencingSession c = often.openSession(TTL.withHolder(semaphore + "-c"))) {
            Lease first = holder.tryAcquirePermit(semaphore, 2, 0, TimeUnit.SECONDS).orElseThrow();
            Lease second = holder.tryAcquirePermit(semaphore, 2, 0, TimeUnit.SECONDS).orElseThrow();
            AtomicReference<Object> gotA = new AtomicReference<>();
            AtomicReference<Object> gotB = new AtomicReference<>();
            AtomicReference<Object> gotC = new AtomicReference<>();
            Thread waitA = start(() -> a.tryAcquirePermit(semaphore, 2, 30, TimeUnit.SECONDS), gotA);
            assertEquals(1, Live.awaitPlacesInLine(db, semaphore + "-a", 1), "A's wait has no place in line");
            Thread waitB = start(() -> b.tryAcquirePermit(semaphore, 2, 30, TimeUnit.SECONDS), gotB);
            assertEquals(1, Live.awaitPlacesInLine(db, semaphore + "-b", 1), "B's wait has no place in line");
            Thread waitC = start(() -> c.tryAcquirePermit(semaphore, 2, 30, TimeUnit.SECONDS), gotC);
            assertEquals(1, Live.awaitPlacesInLine(db, semaphore + "-c", 1), "C's wait has no place in line");

            assertTrue(first.release());
            Lease leaseA = got(waitA, gotA, "A");
            assertNull(gotB.get(), "B took the first permit freed");
            assertNull(gotC.get(), "C took the first permit freed");
            assertTrue(second.release());
            Lease leaseB = got(waitB, gotB, "B");
            assertNull(gotC.get(), "C took the second permit freed, before B");
            assertEquals(semaphore + "-a," + semaphore + "-b", Live.value(db, "SELECT string_agg(holder, ',' "
                    + "ORDER BY holder) FROM fencing_permits WHERE lock_name = ? AND live", semaphore));

            assertTrue(leaseA.release());
            Lease leaseC = got(waitC, gotC, "C");
            // One more permit in B's session, whose place holds one: its own token, once C's is freed.
            AtomicReference<Object> gotMore = new AtomicReference<>();
            Thread more = start(() -> b.tryAcquirePermit(semaphore, 2, 20, TimeUnit.SECONDS), gotMore);
            TimeUnit.MILLISECONDS.sleep(300);
            assertNull(gotMore.get(), "one more permit while both are taken");
            assertTrue(leaseC.release());
            Lease another = got(more, gotMore, "B's second permit");
            assertNotEquals(leaseB.token(), another.token(), "each permit has its own token");
            assertTrue(leaseB.isHeld() && another.isHeld());
            assertEquals(2, Live.count(db, "SELECT count(*) FROM fencing_permits WHERE lock_name = ? "
                    + "AND holder = ? AND live", semaphore, semaphore + "-b"));
            assertTrue(another.release());
            assertTrue(leaseB.release());
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_permits WHERE lock_name = ? AND live",
                    semaphore));
        }
    }
}
