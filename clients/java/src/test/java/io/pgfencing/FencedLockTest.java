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
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Leases of their own against a live server: the lease-loss, paused-holder and wait-cancel
 *  scenarios of clients/README.md, and the API. */
class FencedLockTest {
    private static final LeaseOptions FIVE_SECONDS = LeaseOptions.ofTtl(Duration.ofSeconds(5));

    private Connection db;
    private String name;

    @BeforeEach
    void setUp() throws SQLException {
        db = Live.db();
        name = Live.name();
    }

    @AfterEach
    void tearDown() throws SQLException {
        db.close();
    }

    @Test
    void lockGivesATokenAndReleasesOnUnlock() throws Exception {
        FencedLock lock = CLIENT.lock(name, FIVE_SECONDS);
        long token = lock.lockAndGetToken();
        assertTrue(lock.isHeld());
        assertEquals(token, lock.token());
        assertEquals(token, CLIENT.leader(name).orElseThrow().token());
        assertThrows(IllegalStateException.class, lock::lockAndGetToken, "not reentrant");

        FencedLock other = CLIENT.lock(name, FIVE_SECONDS);
        assertFalse(other.tryLock(), "one attempt, the lock is busy");
        long started = System.nanoTime();
        assertEquals(OptionalLong.empty(), other.tryLockAndGetToken(300, TimeUnit.MILLISECONDS));
        assertTrue(System.nanoTime() - started >= TimeUnit.MILLISECONDS.toNanos(250), "it waited");
        assertThrows(IllegalMonitorStateException.class, other::unlock);
        assertThrows(UnsupportedOperationException.class, lock::newCondition);

        Lease lease = lock.lease().orElseThrow();
        lock.unlock();
        assertFalse(lock.isHeld());
        assertFalse(lease.isHeld());
        assertEquals("released", lease.lostReason().orElseThrow());
        assertEquals("released", Live.value(db, "SELECT state FROM fencing_leases WHERE lock_name = ?", name));
        assertThrows(IllegalMonitorStateException.class, lock::unlock);

        assertTrue(other.tryLock(5, TimeUnit.SECONDS));
        long otherToken = other.token();
        assertTrue(otherToken > token, "a new grant, a higher token");
        other.close();
        assertThrows(IllegalStateException.class, other::token, "closed: no lease");
        try (FencedLock again = CLIENT.lock(name, FIVE_SECONDS)) {
            again.lock();
            assertTrue(again.token() > otherToken);
        }
        assertFalse(CLIENT.leader(name).isPresent(), "close() released it");
    }

    @Test
    void fencedWritesMapTheGuardsRefusals() throws Exception {
        Live.protectedTable(db, name, name);
        long firstToken;
        try (FencedLock first = CLIENT.lock(name, FIVE_SECONDS)) {
            firstToken = first.lockAndGetToken();
            assertEquals(1, first.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'first' WHERE id = 1", firstToken));
            MissingTokenException missing = assertThrows(MissingTokenException.class, () ->
                    first.executeUpdate(db, "UPDATE " + name + " SET v = 'no token' WHERE id = 1"));
            assertEquals("55Z02", missing.getSQLState());
            assertInstanceOf(FencingException.class, missing);
            assertInstanceOf(SQLException.class, missing.getCause(), "the driver's error is kept");
            first.unlock();
            assertThrows(LeaseLostException.class, () -> first.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'after release' WHERE id = 1", firstToken));
        }
        try (Lease second = CLIENT.semaphore(name + "_unused", 1, FIVE_SECONDS).acquire();
             FencedLock successor = CLIENT.lock(name, FIVE_SECONDS)) {
            long token = successor.lockAndGetToken();
            successor.executeUpdate(db, "UPDATE " + name + " SET token = ?, v = 'second' WHERE id = 1", token);
            StaleTokenException stale = assertThrows(StaleTokenException.class, () -> Fenced.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'stale' WHERE id = 1", firstToken));
            assertEquals("55Z01", stale.getSQLState());
            assertTrue(stale.getMessage().contains(name) || stale.getMessage().contains("token"),
                    "the server's message: " + stale.getMessage());
            assertEquals("second", Live.value(db, "SELECT v FROM " + name));

            // Inside the caller's transaction a refusal rolls back to a savepoint only.
            db.setAutoCommit(false);
            assertThrows(StaleTokenException.class, () -> Fenced.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'stale' WHERE id = 1", firstToken));
            assertEquals(1, Fenced.executeUpdate(db,
                    "UPDATE " + name + " SET token = ?, v = 'in a transaction' WHERE id = 1", token));
            db.commit();
            db.setAutoCommit(true);
            assertEquals("in a transaction", Live.value(db, "SELECT v FROM " + name));
            assertTrue(second.isHeld());
        }
    }

    @Test
    void leaseLossIsReportedOnce() throws Exception {
        try (Statement statement = db.createStatement()) {
            statement.execute("CREATE TABLE " + name + " (v text)");
        }
        List<String> reasons = new CopyOnWriteArrayList<>();
        try (FencedLock lock = CLIENT.lock(name, LeaseOptions.ofTtl(Duration.ofSeconds(3))
                .withHeartbeat(Duration.ofMillis(200)).withOnLost(reasons::add))) {
            lock.lockAndGetToken();
            Live.value(db, "SELECT fencing_revoke(?, 'test')", name);
            assertTrue(lock.awaitLost(Duration.ofSeconds(3)), "onLost was not called");
            TimeUnit.MILLISECONDS.sleep(600); // renewals would have come in this time
            assertEquals(1, reasons.size(), reasons.toString());
            assertTrue(reasons.get(0).contains("refused"), reasons.get(0));
            assertFalse(lock.isHeld());
            assertThrows(LeaseLostException.class, lock::check);
            LeaseLostException lost = assertThrows(LeaseLostException.class, () ->
                    lock.executeUpdate(db, "INSERT INTO " + name + " VALUES ('sent')"));
            assertTrue(lost.getMessage().contains("refused"), lost.getMessage());
            assertEquals("0", Live.value(db, "SELECT count(*) FROM " + name), "nothing was sent");
        }
    }

    @Test
    void aRenewalWithoutAnswerIsReportedLostByTheSafeDeadline() throws Exception {
        List<String> reasons = new CopyOnWriteArrayList<>();
        try (FencedLock lock = CLIENT.lock(name, LeaseOptions.ofTtl(Duration.ofSeconds(2))
                     .withHeartbeat(Duration.ofMillis(200)).withOnLost(reasons::add));
             Connection blocker = Live.db()) {
            lock.lockAndGetToken();
            // The lease's row locked by another transaction: the next renewal waits behind it.
            blocker.setAutoCommit(false);
            Live.value(blocker, "SELECT 1 FROM fencing_lease WHERE lock_name = ? FOR UPDATE", name);
            long locked = System.nanoTime();
            assertTrue(lock.awaitLost(Duration.ofSeconds(5)), "onLost was not called");
            assertTrue(System.nanoTime() - locked < TimeUnit.SECONDS.toNanos(4), "by the deadline, not later");
            assertEquals(1, reasons.size(), reasons.toString());
            assertTrue(reasons.get(0).contains("no answer"), reasons.get(0));
            assertFalse(lock.isHeld());
            blocker.rollback();
        }
    }

    @Test
    void aPausedProcessWakesUpToHeldFalse() throws Exception {
        try (FencedLock lock = CLIENT.lock(name, LeaseOptions.ofTtl(Duration.ofSeconds(1)))) {
            lock.lockAndGetToken();
            // As if the heartbeat thread had been frozen with the process.
            ((StandaloneLease) lock.lease().orElseThrow()).beat.stop();
            assertTrue(lock.isHeld());
            TimeUnit.MILLISECONDS.sleep(1000);
            assertFalse(lock.isHeld(), "judged on System.nanoTime(), not on the thread");
        }
    }

    @Test
    void pauseScenarioTheStaleWriteBounces() throws Exception {
        Live.protectedTable(db, name, name);
        try (Live.Child holder = new Live.Child(PauseHolder.class, name, name)) {
            String[] ready = holder.readLine(Duration.ofSeconds(15)).split(" ");
            assertEquals("ready", ready[0]);
            holder.signal("STOP"); // between its check and its write
            try (FencedLock successor = CLIENT.lock(name, FIVE_SECONDS)) {
                OptionalLong token = successor.tryLockAndGetToken(10, TimeUnit.SECONDS); // A's runs out
                assertTrue(token.isPresent());
                assertTrue(token.getAsLong() > Long.parseLong(ready[1]));
                successor.executeUpdate(db, "UPDATE " + name + " SET token = ?, v = 'B' WHERE id = 1",
                        token.getAsLong());
                holder.signal("CONT");
                holder.writeLine("go");
                assertEquals("rejected 55Z01", holder.readLine(Duration.ofSeconds(10)));
                assertEquals("B", Live.value(db, "SELECT v FROM " + name));
            }
        }
    }

    @Test
    void threadsSharingOneFencedLockWaitForEachOtherAsTheLockInterfaceSays() throws Exception {
        FencedLock lock = CLIENT.lock(name, FIVE_SECONDS.withHolder("shared-" + name));
        long first = lock.lockAndGetToken();
        AtomicReference<Object> outcome = new AtomicReference<>();
        Thread tryer = new Thread(() -> {
            try {
                outcome.set(lock.tryLock(300, TimeUnit.MILLISECONDS));
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        tryer.start();
        tryer.join(5000);
        assertEquals(Boolean.FALSE, outcome.get(), "another thread's tryLock(300 ms) while locked");

        AtomicReference<Object> second = new AtomicReference<>();
        Thread locker = new Thread(() -> {
            try {
                lock.lock();
                second.set(lock.token());
                lock.unlock();
            } catch (Throwable e) {
                second.set(e);
            }
        });
        locker.start();
        TimeUnit.MILLISECONDS.sleep(300);
        assertEquals(null, second.get(), "lock() on another thread waits for the unlock");
        lock.unlock();
        locker.join(5000);
        assertInstanceOf(Long.class, second.get(), String.valueOf(second.get()));
        assertTrue((Long) second.get() > first, "the waiting thread got the lock, a new token");

        // A thread waiting on the server (another holder has the lock) does not make a second
        // thread's timed tryLock wait past its time.
        try (FencedLock other = CLIENT.lock(name, FIVE_SECONDS)) {
            other.lock();
            Thread waiter = new Thread(() -> {
                try {
                    lock.lockInterruptibly();
                } catch (Throwable e) {
                    // interrupted below, as wanted
                }
            });
            waiter.start();
            assertEquals(1, Live.awaitWaitsOnTheServer(db, "pg_fencing lease shared-" + name, 1));
            outcome.set(null);
            Thread timed = new Thread(() -> {
                try {
                    outcome.set(lock.tryLock(300, TimeUnit.MILLISECONDS));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            timed.start();
            timed.join(5000);
            assertEquals(Boolean.FALSE, outcome.get(), "tryLock(300 ms) behind another thread's wait");
            waiter.interrupt();
            waiter.join(5000);
            assertFalse(waiter.isAlive());
        }
    }

    @Test
    void aGrantThatRacesAnInterruptIsGivenBack() throws Exception {
        // Interrupted before it starts, the caller stops waiting for the answer at once, while the
        // acquire goes on on the server: cancelled there, or granted and then released.
        Semaphore semaphore = CLIENT.semaphore(name, 1, FIVE_SECONDS);
        try {
            Thread.currentThread().interrupt();
            assertThrows(InterruptedException.class, semaphore::tryAcquire);
        } finally {
            Thread.interrupted();
        }
        try (Lease permit = semaphore.tryAcquire().orElseThrow(
                () -> new AssertionError("the permit of an interrupted acquire was kept"))) {
            assertTrue(permit.isHeld());
        }
    }

    @Test
    void theUninterruptibleLockMethodsWorkOnAnInterruptedThread() throws Exception {
        // Lock.tryLock() and lock() are not interruptible: a thread whose interrupt status is set
        // (one shutting down, say) takes a free lock all the same, and keeps its status.
        try (FencedLock lock = CLIENT.lock(name, FIVE_SECONDS)) {
            Thread.currentThread().interrupt();
            boolean locked = lock.tryLock();
            assertTrue(Thread.interrupted(), "tryLock() kept the interrupt status");
            assertTrue(locked, "tryLock() on an interrupted thread refused a free lock");
            assertEquals(lock.token(), CLIENT.leader(name).orElseThrow().token());
            lock.unlock();

            Thread.currentThread().interrupt();
            lock.lock();
            assertTrue(Thread.interrupted(), "lock() kept the interrupt status");
            assertEquals(lock.token(), CLIENT.leader(name).orElseThrow().token());
            lock.unlock();
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_leases WHERE lock_name = ? "
                    + "AND state = 'live'", name), "no grant left behind by an interrupted attempt");
        } finally {
            Thread.interrupted();
        }
    }

    @Test
    void interruptingAWaitEndsItOnTheServer() throws Exception {
        try (FencedLock holder = CLIENT.lock(name, LeaseOptions.ofTtl(Duration.ofSeconds(10)))) {
            long token = holder.lockAndGetToken();
            FencedLock waiter = CLIENT.lock(name, FIVE_SECONDS.withHolder("waiter-" + name));
            String application = "pg_fencing lease waiter-" + name;
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            Thread waiting = new Thread(() -> {
                try {
                    waiter.lockInterruptibly();
                    outcome.set(new AssertionError("granted"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiting.start();
            assertEquals(1, Live.awaitWaitsOnTheServer(db, application, 1), "the wait is on the server");
            // Its first attempt runs in a transaction; between attempts it sleeps holding none.
            String noSnapshot = "SELECT backend_xmin IS NULL AND backend_xid IS NULL "
                    + "FROM pg_stat_activity WHERE application_name = ?";
            Live.eventually(Duration.ofSeconds(3), () -> {
                try {
                    return "t".equals(Live.value(db, noSnapshot, application));
                } catch (SQLException e) {
                    return false;
                }
            });
            assertEquals("t", Live.value(db, noSnapshot, application),
                    "it waits holding no snapshot and no transaction id");
            waiting.interrupt();
            waiting.join(5000);
            assertFalse(waiting.isAlive(), "the interrupt ended the wait");
            assertInstanceOf(InterruptedException.class, outcome.get());
            assertEquals(0, Live.awaitWaitsOnTheServer(db, application, 0),
                    "the wait does not go on on the server");
            assertFalse(waiter.isHeld());
            assertEquals(token, CLIENT.leader(name).orElseThrow().token());
        }
    }

    @Test
    void semaphoreAndSharedLeases() throws Exception {
        Semaphore semaphore = CLIENT.semaphore(name, 2, FIVE_SECONDS);
        try (Lease p1 = semaphore.acquire(); Lease p2 = semaphore.acquire()) {
            assertNotEquals(p1.token(), p2.token());
            assertTrue(p1.isHeld() && p2.isHeld());
            assertTrue(semaphore.tryAcquire().isEmpty(), "every permit is taken");
            assertTrue(semaphore.tryAcquire(200, TimeUnit.MILLISECONDS).isEmpty());
            assertTrue(p1.release());
            assertFalse(p1.isHeld());
            try (Lease p3 = semaphore.tryAcquire(2, TimeUnit.SECONDS).orElseThrow()) {
                assertTrue(p3.isHeld());
            }
        }
        String shared = name + "_rw";
        SharedLock readers = CLIENT.shared(shared, FIVE_SECONDS);
        try (Lease r1 = readers.acquire(); Lease r2 = readers.acquire()) {
            assertTrue(r1.isHeld() && r2.isHeld());
            assertFalse(CLIENT.lock(shared, FIVE_SECONDS).tryLock(), "no writer beside readers");
        }
        try (FencedLock writer = CLIENT.lock(shared, FIVE_SECONDS)) {
            assertTrue(writer.tryLock());
        }
        assertThrows(IllegalArgumentException.class, () ->
                CLIENT.shared(shared, FIVE_SECONDS.withPayload("{}")));
    }
}
