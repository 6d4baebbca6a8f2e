package io.pgfencing;

/**
 * Shared leases of a lock (fencing_acquire_shared): any number beside each other, none beside an
 * exclusive lease; an exclusive waiter waits for the shared holders.
 */
public final class SharedLock extends Acquirer {
    SharedLock(FencingClient client, String name, LeaseOptions options) {
        super(client, name, Kind.SHARED, null, options);
    }
}
