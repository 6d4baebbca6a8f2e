package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.TimeUnit;
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
 * <p>Each lock holds one lease at a time, with its own connection and heartbeat; after
 * {@link #unlock()} it can be locked again, with a new token. It is not reentrant: locking it
 * while it has a lease, held or lost, throws IllegalStateException (unlock() it first, in a
 * finally block as with any Lock). Any thread may unlock it: the lease
 * belongs to this object, not to a thread.
 *
 * <p>The {@link Lock} methods: {@link #lock()} waits until granted and is not interruptible
 * (an interrupt cancels the wait on the server, which then starts again, and is kept for the
 * caller); {@link #lockInterruptibly()} and {@link #tryLock(long, TimeUnit)} end the wait on
 * an interrupt, on the server too; {@link #tryLock()} makes one attempt without waiting;
 * {@link #unlock()} releases the lease, IllegalMonitorStateException if there is none, and
 * returns quietly if it had been lost already (onLost said so); {@link #newCondition()} is
 * unsupported. A database error comes out of them as an {@link UncheckedSQLException}; the
 * token methods throw SQLException itself.
 */
public final class FencedLock implements Lock, AutoCloseable {
    private final FencingClient client;
    private final String name;
    private final LeaseOptions options;
    private volatile StandaloneLease lease;

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

    private synchronized OptionalLong acquire(long waitNanos)
            throws SQLException, InterruptedException {
        if (lease != null && !lease.wasReleased()) {
            throw new IllegalStateException("lock \"" + name + "\" is locked by this FencedLock "
                    + "already (token " + lease.token() + ", " + lease.lostReason().map(r -> "lost: " + r)
                    .orElse("held") + "); it is not reentrant: unlock() it first");
        }
        StandaloneLease attempt = new StandaloneLease(client, name, Kind.EXCLUSIVE, null, options);
        if (!attempt.acquire(waitNanos)) {
            return OptionalLong.empty();
        }
        lease = attempt;
        return OptionalLong.of(attempt.token());
    }

    /** The current lease, if locked and not unlocked since (held or lost). */
    public Optional<Lease> lease() {
        StandaloneLease current = lease;
        return current == null || current.wasReleased()
                ? Optional.empty() : Optional.of(current);
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
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    lockAndGetToken();
                    return;
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
    public void lockInterruptibly() throws InterruptedException {
        try {
            lockAndGetToken();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        }
    }

    @Override
    public boolean tryLock() {
        try {
            return tryLockAndGetToken(0, TimeUnit.NANOSECONDS).isPresent();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
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
        StandaloneLease current = lease;
        if (current == null || current.wasReleased()) {
            throw new IllegalMonitorStateException("lock \"" + name
                    + "\" is not locked by this FencedLock");
        }
        try {
            current.release();
        } catch (SQLException e) {
            throw new UncheckedSQLException(e);
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
        StandaloneLease current = lease;
        if (current != null) {
            current.release();
        }
    }

    @Override
    public String toString() {
        StandaloneLease current = lease;
        return "FencedLock[" + name + (current == null ? ", never locked" : ", " + current) + "]";
    }
}
