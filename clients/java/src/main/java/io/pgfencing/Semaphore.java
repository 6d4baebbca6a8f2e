package io.pgfencing;

/**
 * A semaphore of N permits (fencing_acquire_permit): {@link #acquire()} gives a permit, a
 * {@link Lease} with a token of its own, released when closed.
 *
 * <pre>{@code
 * try (Lease permit = client.semaphore("api-quota", 3, options).acquire()) { ... permit.token() ... }
 * }</pre>
 */
public final class Semaphore extends Acquirer {
    Semaphore(FencingClient client, String name, int permits, LeaseOptions options) {
        super(client, name, Kind.PERMIT, permits, options);
    }
}
