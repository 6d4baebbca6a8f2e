package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A lease of its own: its connection, for the acquire (and its wait) and the release, and its
 * renewals (fencing_renew) by the client's heartbeat ({@link SharedHeartbeat}, one connection for
 * everything the client renews), on the lease's own clock. Every connection of the client is of
 * the role that acquired, as renewals and releases require.
 *
 * <p>A wait is {@code CALL fencing_await}, which commits each attempt before it sleeps: a
 * follower waiting for hours holds no snapshot and no transaction id. It goes in slices of at
 * most {@link Wire#SLICE_NANOS}, each waited for only its length plus a grace, so that a connection
 * that died mid-wait is noticed; an interrupted wait is cancelled on the server.
 */
final class StandaloneLease implements Lease {
    /** A wait without end. */
    static final long FOREVER = Wire.FOREVER;

    private final FencingClient client;
    private final String lockName;
    private final Kind kind;
    private final Integer permits;
    private final String holder;
    private final LeaseOptions options;
    final Heartbeat beat;

    private volatile Connection connection;
    private volatile Long token;
    private final AtomicBoolean released = new AtomicBoolean();

    StandaloneLease(FencingClient client, String lockName, Kind kind, Integer permits,
                    LeaseOptions options) {
        checkArguments(lockName, kind, permits, options);
        this.client = client;
        this.lockName = lockName;
        this.kind = kind;
        this.permits = permits;
        this.holder = options.holderOrDefault();
        this.options = options;
        this.beat = new Heartbeat("lease", options, () -> Heartbeat.Target.lease(lockName, token),
                "the lease expired, was released, revoked or taken over");
    }

    /** IllegalArgumentException for arguments no lease takes, before anything is sent. */
    static void checkArguments(String lockName, Kind kind, Integer permits, LeaseOptions options) {
        checkLock(lockName, kind, permits);
        if (options.payload() != null && kind != Kind.EXCLUSIVE) {
            throw new IllegalArgumentException("a payload needs an exclusive lease, not "
                    + kind.describe(lockName));
        }
        Heartbeat.period(options);
    }

    /** IllegalArgumentException for a lock name, or a number of permits, no lock takes. */
    static void checkLock(String lockName, Kind kind, Integer permits) {
        if (lockName == null || lockName.isEmpty()) {
            throw new IllegalArgumentException("a lock name must be a non-empty text, got "
                    + (lockName == null ? "null" : "''"));
        }
        if ((kind == Kind.PERMIT) != (permits != null)) {
            throw new IllegalArgumentException("permits is for a semaphore's permit, and needed "
                    + "there; got permits " + permits + " for " + kind.describe(lockName));
        }
        if (permits != null && permits < 1) {
            throw new IllegalArgumentException("permits must be at least 1, got " + permits
                    + " for semaphore \"" + lockName + "\"");
        }
    }

    /**
     * Takes the lock, waiting up to {@code waitNanos} (0: one attempt, without waiting;
     * {@link #FOREVER}): whether it was granted.
     */
    boolean acquire(long waitNanos) throws SQLException, InterruptedException {
        if (token != null) {
            throw new IllegalStateException("this lease was acquired already; make a new one");
        }
        connection = client.connect("pg_fencing lease " + holder);
        try {
            Wire.Grant grant = Wire.waitInSlices(waitNanos, this::attempt);
            if (grant == null) {
                Wire.closeQuietly(connection);
                return false;
            }
            begin(Long.parseLong(grant.value()), grant.sent());
            return true;
        } catch (SQLException | InterruptedException | RuntimeException e) {
            Wire.closeQuietly(connection);
            throw e;
        }
    }

    /** One attempt, waiting {@code slice} nanoseconds (0: the function form, at once). */
    private String attempt(long slice) throws SQLException, InterruptedException {
        String ttl = Wire.interval(options.ttl());
        long deadline = System.nanoTime() + slice + Wire.ANSWER_GRACE_NANOS;
        if (slice > 0) {
            // Alone, outside a transaction block: the procedure commits its attempts. Its one
            // row is the token, NULL when the wait ran out.
            return Wire.valueWithin(connection, deadline, this::releaseAbandoned,
                    "CALL fencing_await(?, ?, ?::interval, ?::interval, kind => ?, "
                            + "permits => ?::integer, payload => ?::jsonb)",
                    lockName, holder, ttl, Wire.interval(slice), kind.sqlName, permits,
                    options.payload());
        }
        // The connection is at READ COMMITTED (FencingClient.connect): at a stricter level an
        // acquire that meets a just-changed row fails with 40001.
        switch (kind) {
            case SHARED:
                return Wire.valueWithin(connection, deadline, this::releaseAbandoned,
                        "SELECT fencing_acquire_shared(?, ?, ?::interval)", lockName, holder, ttl);
            case PERMIT:
                return Wire.valueWithin(connection, deadline, this::releaseAbandoned,
                        "SELECT fencing_acquire_permit(?, ?, ?::integer, ?::interval)",
                        lockName, holder, permits, ttl);
            default:
                return Wire.valueWithin(connection, deadline, this::releaseAbandoned,
                        "SELECT fencing_acquire(?, ?, ?::interval, payload => ?::jsonb)",
                        lockName, holder, ttl, options.payload());
        }
    }

    private void begin(long granted, long sent) throws SQLException, InterruptedException {
        token = granted;
        beat.begin(sent);
        // A wait can outlast much of the ttl: the server started the lease when it granted
        // it. One renewal right away, part of the acquire (on its connection), gives a send
        // time close to the grant.
        if (System.nanoTime() - sent > beat.margin) {
            long renewSent = System.nanoTime();
            boolean renewed;
            try {
                renewed = renew(renewSent + beat.ttl);
            } catch (SQLException | InterruptedException | RuntimeException e) {
                releaseQuietly();
                throw e;
            }
            if (!renewed) {
                releaseQuietly();
                throw new LeaseLostException(describe() + " was granted (token " + granted
                        + ") but ended before it could be renewed; ttl too short?");
            }
            beat.renewed(renewSent);
        }
        beat.start(client.heartbeat());
    }

    /** A grant that came although the caller was interrupted: nobody will use it. */
    private void releaseAbandoned(String granted) {
        try {
            Wire.value(connection, "SELECT fencing_release(?, ?::fencing_token)", lockName,
                    Long.parseLong(granted));
        } catch (SQLException ignored) {
            // it ends after its ttl
        }
    }

    /** A renewal on the lease's own connection (the heartbeat's go on the client's). */
    private boolean renew(long deadline) throws SQLException, InterruptedException {
        return "t".equals(Wire.valueWithin(connection, deadline, null,
                "SELECT fencing_renew(?, ?::fencing_token, ?::interval)",
                lockName, token, Wire.interval(options.ttl())));
    }

    @Override
    public boolean release() throws SQLException {
        if (token == null || !released.compareAndSet(false, true)) {
            return false;
        }
        beat.stop();
        try {
            if (Wire.isClosed(connection)) {
                // The connection broke (the network, a terminated backend): release on a new
                // one rather than leave the lock to run out.
                connection = client.connect("pg_fencing lease " + holder);
            }
            return "t".equals(Wire.value(connection, "SELECT fencing_release(?, ?::fencing_token)",
                    lockName, token));
        } finally {
            Wire.closeQuietly(connection);
        }
    }

    private void releaseQuietly() {
        try {
            release();
        } catch (SQLException ignored) {
            // it ends after its ttl
        }
    }

    @Override
    public String lockName() {
        return lockName;
    }

    @Override
    public long token() {
        Long value = token;
        if (value == null) {
            throw new IllegalStateException(describe() + " has not been acquired");
        }
        return value;
    }

    @Override
    public boolean isHeld() {
        return token != null && !released.get() && beat.lostReason().isEmpty();
    }

    @Override
    public Optional<String> lostReason() {
        if (released.get()) {
            return Optional.of("released");
        }
        return token == null ? Optional.of("never acquired") : beat.lostReason();
    }

    @Override
    public boolean awaitLost(Duration timeout) throws InterruptedException {
        return beat.awaitLost(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    @Override
    public String describe() {
        return kind.describe(lockName);
    }

    @Override
    public String toString() {
        return "Lease[" + describe() + ", holder " + holder + ", token " + token + ", "
                + (isHeld() ? "held" : "not held") + "]";
    }
}
