package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * An exclusive lock whose grants carry fencing tokens the database enforces.
 *
 * <pre>{@code
 * try (FencedLock lock = client.lock("nightly-report", LeaseOptions.ofTtl(Duration.ofSeconds(10)))) {
 *     long token = lock.lockAndGetToken();
 *     lock.executeUpdate(db, "UPDATE reports SET token = ?, body = ? WHERE id = 7", token, body);
 * }
 * }</pre>
 *
 * <p>Each lock holds one lease at a time, with its own connection (its acquire, wait and
 * release), renewed by the client's heartbeat (one connection for all the client's renewals); after
 * {@link #unlock()} it can be locked again, with a new token. Shared by threads it is a mutex
 * among them too: a thread locking it while another has its lease waits (in arrival order)
 * until that one is unlocked, and only then asks the server. It is not reentrant: the thread
 * that locked it locking it again before unlock() -- its lease held or lost -- gets
 * IllegalStateException (unlock() it first, in a finally block as with any Lock). Any thread
 * may unlock it: the lease belongs to this object, not to a thread.
 *
 * <p>The {@link Lock} methods: {@link #lock()} waits until granted and is not interruptible
 * (an interrupt cancels the wait on the server, which then starts again, and is kept for the
 * caller); {@link #lockInterruptibly()} and {@link #tryLock(long, TimeUnit)} end the wait on
 * an interrupt, on the server too; {@link #tryLock()} makes one attempt without waiting, and
 * like lock() takes a free lock on a thread whose interrupt status is set, keeping the status;
 * {@link #unlock()} releases the lease, IllegalMonitorStateException if there is none, and
 * returns quietly if it had been lost already (onLost said so); {@link #newCondition()} is
 * unsupported. A database error comes out of them as an {@link UncheckedSQLException}; the
 * token methods throw SQLException itself.
 */
public final class FencedLock implements Lock, AutoCloseable {
    private final FencingClient client;
    private final String name;
    private final LeaseOptions options;
    /** The lease from the last lock until its unlock (held or lost); null otherwise. */
    private final AtomicReference<StandaloneLease> lease = new AtomicReference<>();
    /** The threads of this process take turns here before they ask the server, so that one
     *  waits for another's unlock, within its own timeout and interruptibly. A permit is
     *  taken from a lock until its unlock. */
    private final java.util.concurrent.Semaphore turn = new java.util.concurrent.Semaphore(1, true);
    /** The thread that locked it last: locking again from it is a reentrant call. */
    private volatile Thread lockedBy;

    FencedLock(FencingClient client, String name, LeaseOptions options) {
        this.client = client;
        this.name = name;
        this.options = options;
        StandaloneLease.checkArguments(name, Kind.EXCLUSIVE, null, options);
    }

    public String name() {
        return name;
    }

    /** Waits until granted (interruptible; the wait ends on the server too): the token. */
    public long lockAndGetToken() throws SQLException, InterruptedException {
        return acquire(StandaloneLease.FOREVER).getAsLong();
    }

    /** Waits up to {@code time} (0: one attempt): the token, or empty if the lock stayed busy. */
    public OptionalLong tryLockAndGetToken(long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return acquire(Math.max(0, unit.toNanos(time)));
    }

    private OptionalLong acquire(long waitNanos) throws SQLException, InterruptedException {
        StandaloneLease mine = lease.get();
        if (mine != null && lockedBy == Thread.currentThread()) {
            throw new IllegalStateException("lock \"" + name + "\" is locked by this thread already "
                    + "(token " + mine.token() + ", " + mine.lostReason().map(r -> "lost: " + r)
                    .orElse("held") + "); a FencedLock is not reentrant: unlock() it first");
        }
        long start = System.nanoTime();
        if (waitNanos == StandaloneLease.FOREVER) {
            turn.acquire();
        } else if (!turn.tryAcquire(waitNanos, TimeUnit.NANOSECONDS)) {
            return OptionalLong.empty();
        }
        boolean locked = false;
        try {
            long left = waitNanos == StandaloneLease.FOREVER
                    ? waitNanos : Math.max(0, waitNanos - (System.nanoTime() - start));
            StandaloneLease attempt = new StandaloneLease(client, name, Kind.EXCLUSIVE, null, options);
            if (!attempt.acquire(left)) {
                return OptionalLong.empty();
            }
            lockedBy = Thread.currentThread();
            lease.set(attempt);
            locked = true;
            return OptionalLong.of(attempt.token());
        } finally {
            if (!locked) {
                turn.release();
            }
        }
    }

    /** Ends the current lease, if any, and gives the turn to the next thread: false if there
     *  was none (never locked, or unlocked already). */
    private boolean end() throws SQLException {
        StandaloneLease current = lease.getAndSet(null);
        if (current == null) {
            return false;
        }
        try {
            current.release();
        } finally {
            turn.release();
        }
        return true;
    }

    /** The current lease, if locked and not unlocked since (held or lost). */
    public Optional<Lease> lease() {
        return Optional.ofNullable(lease.get());
    }

    private Lease current() {
        return lease().orElseThrow(() -> new IllegalStateException(
                "lock \"" + name + "\" is not locked by this FencedLock"));
    }

    /** The current lease's token; IllegalStateException when not locked. */
    public long token() {
        return current().token();
    }

    /** Whether this object holds the lock and can still trust it (see {@link Lease#isHeld()}). */
    public boolean isHeld() {
        return lease().map(Lease::isHeld).orElse(false);
    }

    /** The current lease's token, or LeaseLostException once it is lost. */
    public long check() throws LeaseLostException {
        return current().check();
    }

    /** A fenced write through the current lease: see {@link Lease#executeUpdate}. */
    public int executeUpdate(Connection connection, String sql, Object... params)
            throws SQLException {
        Lease current = lease().orElseThrow(() -> new LeaseLostException(
                "lock \"" + name + "\" is not locked by this FencedLock"));
        return current.executeUpdate(connection, sql, params);
    }

    /** Waits until the current lease's loss has been reported; false on timeout. */
    public boolean awaitLost(Duration timeout) throws InterruptedException {
        return current().awaitLost(timeout);
    }

    @Override
    public void lock() {
        uninterruptibly(() -> lockAndGetToken());
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        try {
            lockAndGetToken();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        }
    }

    @Override
    public boolean tryLock() {
        return uninterruptibly(() -> tryLockAndGetToken(0, TimeUnit.NANOSECONDS)).isPresent();
    }

    private interface Attempt<T> {
        T run() throws SQLException, InterruptedException;
    }

    /**
     * For the Lock methods that are not interruptible: an interrupt that comes before or during
     * the attempt (a grant racing it is released) makes it start again, and is kept for the
     * caller. The interrupt status is cleared first, so that a thread interrupted already (one
     * shutting down, say) can still lock, as with any Lock.
     */
    private static <T> T uninterruptibly(Attempt<T> attempt) {
        boolean interrupted = Thread.interrupted();
        try {
            while (true) {
                try {
                    return attempt.run();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        try {
            return tryLockAndGetToken(time, unit).isPresent();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        }
    }

    @Override
    public void unlock() {
        boolean ended;
        try {
            ended = end();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        }
        if (!ended) {
            throw new IllegalMonitorStateException("lock \"" + name
                    + "\" is not locked by this FencedLock");
        }
    }

    /** Unsupported: a condition would need a wait queue the database does not keep. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("a FencedLock has no conditions");
    }

    /** Releases the lease if there is one; does nothing otherwise. */
    @Override
    public void close() throws SQLException {
        end();
    }

    @Override
    public String toString() {
        StandaloneLease current = lease.get();
        return "FencedLock[" + name + (current == null ? ", not locked" : ", " + current) + "]";
    }
}
