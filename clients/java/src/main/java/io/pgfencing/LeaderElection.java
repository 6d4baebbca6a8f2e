package io.pgfencing;

import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;

/**
 * Leader election on one lock: campaign, proclaim, leader, observe, resign.
 *
 * <pre>{@code
 * LeaderElection election = client.election("scheduler", LeaseOptions.ofTtl(ttl).withHolder("node-2"));
 * Lease lease = election.campaign("{\"addr\": \"10.0.0.2:7000\"}");   // blocks until leader
 * ... lease.executeUpdate(db, sql, lease.token(), ...) ...
 * election.resign();
 * }</pre>
 *
 * <p>The leader is whoever holds the lock's live exclusive lease. Campaigning is a loop of
 * {@code CALL fencing_await}, which holds no snapshot while it waits. One thread campaigns at a
 * time (another's campaign waits for it, and then returns the same lease); any may resign.
 */
public final class LeaderElection {
    private static final System.Logger LOG = System.getLogger("io.pgfencing");

    private final FencingClient client;
    private final String name;
    private final LeaseOptions options;
    private final String holder;
    private final List<LeadershipListener> listeners = new CopyOnWriteArrayList<>();
    private volatile StandaloneLease lease;
    private volatile AtomicBoolean termEnded = new AtomicBoolean(true);
    /** One campaign at a time: two at once would both be granted, the same holder's second
     *  acquire taking the first's lease again, and leave two heartbeats on one term. */
    private final ReentrantLock campaigning = new ReentrantLock();

    LeaderElection(FencingClient client, String name, LeaseOptions options) {
        this.client = client;
        this.name = name;
        this.options = options;
        this.holder = options.holderOrDefault();
        StandaloneLease.checkArguments(name, Kind.EXCLUSIVE, null, options);
    }

    public String name() {
        return name;
    }

    public String holder() {
        return holder;
    }

    public void addListener(LeadershipListener listener) {
        listeners.add(listener);
    }

    public void removeListener(LeadershipListener listener) {
        listeners.remove(listener);
    }

    /** Blocks until this candidate leads (interruptible), publishing {@code payload} (JSON text,
     *  may be null) with its lease, and returns the lease. */
    public Lease campaign(String payload) throws SQLException, InterruptedException {
        return campaign(payload, Wire.FOREVER).orElseThrow();
    }

    /** Campaigns for up to {@code time}; empty if another led all along. */
    public Optional<Lease> campaign(String payload, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return campaign(payload, Math.max(0, unit.toNanos(time)));
    }

    private Optional<Lease> campaign(String payload, long waitNanos)
            throws SQLException, InterruptedException {
        campaigning.lockInterruptibly();
        try {
            StandaloneLease current = lease;
            if (current != null && current.isHeld()) {
                return Optional.of(current);
            }
            if (current != null) {
                // A lost term (its listeners were told): its connection, and its lease if the
                // server still counts it, are given back before the next term.
                releaseQuietly(current);
            }
            return newTerm(payload, waitNanos);
        } finally {
            campaigning.unlock();
        }
    }

    private static void releaseQuietly(StandaloneLease lost) {
        try {
            lost.release();
        } catch (SQLException ignored) {
            // it ends after its ttl; its connection is closed all the same
        }
    }

    private Optional<Lease> newTerm(String payload, long waitNanos)
            throws SQLException, InterruptedException {
        AtomicBoolean term = new AtomicBoolean(false);
        Consumer<String> userOnLost = options.onLost();
        LeaseOptions termOptions = options.withHolder(holder).withPayload(payload)
                .withOnLost(reason -> {
                    endTerm(term, reason);
                    if (userOnLost != null) {
                        userOnLost.accept(reason);
                    }
                });
        StandaloneLease candidate = new StandaloneLease(client, name, Kind.EXCLUSIVE, null,
                termOptions);
        if (!candidate.acquire(waitNanos)) {
            return Optional.empty();
        }
        lease = candidate;
        termEnded = term;
        for (LeadershipListener listener : listeners) {
            try {
                listener.gained(candidate);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "a LeadershipListener of \"" + name + "\" failed", e);
            }
        }
        return Optional.of(candidate);
    }

    /** Tells the listeners, once per term. */
    private void endTerm(AtomicBoolean term, String reason) {
        if (!term.compareAndSet(false, true)) {
            return;
        }
        for (LeadershipListener listener : listeners) {
            try {
                listener.lost(reason);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "a LeadershipListener of \"" + name + "\" failed", e);
            }
        }
    }

    /** Whether this candidate leads and can still trust it. */
    public boolean isLeader() {
        StandaloneLease current = lease;
        return current != null && current.isHeld();
    }

    /** The lease of the current term, if this candidate has one (held or lost). */
    public Optional<Lease> lease() {
        return Optional.ofNullable(lease);
    }

    /**
     * Publishes a new payload as the live leader: the acquire by the live holder replaces it,
     * keeping the token. LeaseLostException unless this candidate leads.
     */
    public void proclaim(String payload) throws SQLException {
        StandaloneLease current = lease;
        if (current == null || !current.isHeld()) {
            throw new LeaseLostException("not the leader of \"" + name + "\" (holder " + holder
                    + "): " + (current == null ? "no term; campaign() first"
                    : "its term (token " + current.token() + ") ended: "
                    + current.lostReason().orElse("unknown")));
        }
        try (Connection connection = client.connect("pg_fencing election " + holder)) {
            String granted = Wire.value(connection,
                    "SELECT fencing_acquire(?, ?, ?::interval, payload => ?::jsonb)",
                    name, holder, Wire.interval(options.ttl()), payload);
            if (granted != null && Long.parseLong(granted) != current.token()) {
                // Ours had ended: that was a new grant, not a proclamation.
                Wire.value(connection, "SELECT fencing_release(?, ?::fencing_token)", name,
                        Long.parseLong(granted));
            }
            if (granted == null || Long.parseLong(granted) != current.token()) {
                throw new LeaseLostException("no longer the leader of \"" + name + "\" (token "
                        + current.token() + ")");
            }
        }
    }

    /** The live leader as the database sees it now. */
    public Optional<Leader> leader() throws SQLException {
        return client.leader(name);
    }

    /**
     * Follows the leader from a thread of its own: {@code onChange} gets the leader now, then
     * each change of (holder, token). Close the observer to stop it. A broken connection is
     * made again; an error no reconnect can mend (a wrong password, the extension or a
     * privilege missing) stops the observer, its connection closed, and goes to
     * {@code onError} (called once, from the observer's thread) and {@link LeaderObserver#error()}.
     *
     * @param reread how often it reads even without a notification
     */
    public LeaderObserver observe(Duration reread, Consumer<Optional<Leader>> onChange,
                                  Consumer<? super SQLException> onError) {
        return new LeaderObserver(client, name, reread, onChange, onError);
    }

    /** {@link #observe(Duration, Consumer, Consumer)} whose stopping error is only logged and
     *  kept in {@link LeaderObserver#error()}. */
    public LeaderObserver observe(Duration reread, Consumer<Optional<Leader>> onChange) {
        return observe(reread, onChange, error -> { });
    }

    public LeaderObserver observe(Consumer<Optional<Leader>> onChange) {
        return observe(Duration.ofSeconds(5), onChange);
    }

    /** Gives leadership up (fencing_release): whether it was still ours. */
    public synchronized boolean resign() throws SQLException {
        StandaloneLease current = lease;
        if (current == null) {
            return false;
        }
        lease = null;
        try {
            return current.release();
        } finally {
            endTerm(termEnded, "resigned");
        }
    }
}
