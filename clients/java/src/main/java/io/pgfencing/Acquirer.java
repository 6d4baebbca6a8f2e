package io.pgfencing;

import java.sql.SQLException;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/** What Semaphore and SharedLock share: leases of one kind of one lock, one per acquire. */
abstract class Acquirer {
    private final FencingClient client;
    private final String name;
    private final Kind kind;
    private final Integer permits;
    private final LeaseOptions options;

    Acquirer(FencingClient client, String name, Kind kind, Integer permits, LeaseOptions options) {
        this.client = client;
        this.name = name;
        this.kind = kind;
        this.permits = permits;
        this.options = options;
        StandaloneLease.checkArguments(name, kind, permits, options);
    }

    /** Waits until granted (interruptible; the wait ends on the server too). */
    public Lease acquire() throws SQLException, InterruptedException {
        return tryAcquire(StandaloneLease.FOREVER).orElseThrow();
    }

    /** One attempt, without waiting. */
    public Optional<Lease> tryAcquire() throws SQLException, InterruptedException {
        return tryAcquire(0);
    }

    /** Waits up to {@code time}; empty if it stayed busy. */
    public Optional<Lease> tryAcquire(long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return tryAcquire(Math.max(0, unit.toNanos(time)));
    }

    private Optional<Lease> tryAcquire(long waitNanos) throws SQLException, InterruptedException {
        StandaloneLease lease = new StandaloneLease(client, name, kind, permits, options);
        return lease.acquire(waitNanos) ? Optional.of(lease) : Optional.empty();
    }
}
