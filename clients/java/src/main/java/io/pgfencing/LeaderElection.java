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
 * <p>The leader is whoever holds the lock's live exclusive lease. A candidate campaigns in a
 * {@link FencingSession} of its own (1.8), renewed by the client's heartbeat (one connection
 * for all the client's sessions, elections and leases; a renewal every ttl/3 unless the options
 * say otherwise), which keeps it in the lock's line while it waits (1.10: a place the database
 * keeps, polled by short statements on the session's work connection, no server connection
 * held between them, arrival order kept) and keeps its lease once it leads; each renewal also
 * checks that the lease lives (a revoke ends the lease, not the session). A candidate that gives up (its
 * time ran out, an interrupt) leaves the line, giving back anything granted to it meanwhile,
 * and closes its session; a session lost while it waits is replaced by a new one, which joins
 * the line again at the back. {@link #resign()} releases the lease (the next place in line is
 * told) and closes the session. One thread campaigns at a time (another's campaign waits for
 * it, and then returns the same lease); any may resign.
 */
public final class LeaderElection {
    private static final System.Logger LOG = System.getLogger("io.pgfencing");

    private final FencingClient client;
    private final String name;
    private final LeaseOptions options;
    private final String holder;
    private final List<LeadershipListener> listeners = new CopyOnWriteArrayList<>();
    /** The lease of the current term (held or lost), null without one. */
    private volatile ElectionLease lease;
    /** The candidate's session while it campaigns or leads. */
    private volatile FencingSession session;
    private volatile AtomicBoolean termEnded = new AtomicBoolean(true);
    /** One campaign at a time: two at once would join the line with one holder twice and
     *  leave two heartbeats on one term. */
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

    /** Campaigns for up to {@code time}; empty if another led all along (the candidate has
     *  left the line then, and given back a grant made meanwhile). */
    public Optional<Lease> campaign(String payload, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return campaign(payload, Math.max(0, unit.toNanos(time)));
    }

    private Optional<Lease> campaign(String payload, long waitNanos)
            throws SQLException, InterruptedException {
        campaigning.lockInterruptibly();
        try {
            ElectionLease current = lease;
            if (current != null && current.isHeld()) {
                return Optional.of(current);
            }
            // A lost term (its listeners were told): its session, and with it its lease if the
            // server still counts it, is closed before the next term.
            closeSession();
            long start = System.nanoTime();
            int failures = 0;
            while (true) {
                long left = waitNanos == Wire.FOREVER ? Wire.FOREVER
                        : Math.max(0, waitNanos - (System.nanoTime() - start));
                Optional<Lease> led = newTerm(payload, left);
                if (led != null) {
                    return led;
                }
                // The session was lost while it waited: a new one, at the back of the line.
                if (waitNanos != Wire.FOREVER && System.nanoTime() - start >= waitNanos) {
                    return Optional.empty();
                }
                failures++;
                TimeUnit.MILLISECONDS.sleep(LeaderObserver.reconnectDelayMillis(failures));
            }
        } finally {
            campaigning.unlock();
        }
    }

    /** A session's onLost: the election's (listeners, then the options' onLost) once the
     *  candidate leads, nothing before (a session lost while waiting is the campaign's to
     *  mend, with a new session). */
    private final class Candidacy {
        private final AtomicBoolean term = new AtomicBoolean(false);
        private boolean leading;
        private String lost;

        void sessionLost(String reason) {
            boolean lead;
            synchronized (this) {
                lost = reason;
                lead = leading;
            }
            if (lead) {
                endTerm(term, reason);
                Consumer<String> userOnLost = options.onLost();
                if (userOnLost != null) {
                    userOnLost.accept(reason);
                }
            }
        }

        /** From now on a loss is the leader's; false if the session was lost already. */
        synchronized boolean lead() {
            if (lost != null) {
                return false;
            }
            leading = true;
            return true;
        }
    }

    /**
     * One term's campaign in a new session: the lease (present) once it leads, empty when the
     * wait ran out, null when the session was lost while it waited.
     */
    private Optional<Lease> newTerm(String payload, long waitNanos)
            throws SQLException, InterruptedException {
        Candidacy candidacy = new Candidacy();
        LeaseOptions sessionOptions = options.withHolder(holder).withPayload(null)
                .withOnLost(candidacy::sessionLost);
        FencingSession candidate = new FencingSession(client, sessionOptions,
                "the session ended, or its lease of \"" + name + "\" did (revoked, say)");
        session = candidate;
        FencingSession.LineLease granted;
        try {
            granted = candidate.waitInLine(name, Kind.EXCLUSIVE, null, waitNanos, payload);
        } catch (LeaseLostException lost) {
            closeSession();
            if (FencingException.SESSION_ENDED.equals(lost.getSQLState()) || !candidate.isHeld()) {
                return null;
            }
            throw lost;
        } catch (SQLException | InterruptedException | RuntimeException e) {
            closeSession();
            throw e;
        }
        if (granted == null) {
            closeSession();
            return Optional.empty();
        }
        candidate.guard(granted);
        if (!candidacy.lead()) {
            closeSession(); // lost between the grant and now: closing gives the grant back
            return null;
        }
        ElectionLease won = new ElectionLease(candidate, granted);
        lease = won;
        termEnded = candidacy.term;
        for (LeadershipListener listener : listeners) {
            try {
                listener.gained(won);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "a LeadershipListener of \"" + name + "\" failed", e);
            }
        }
        return Optional.of(won);
    }

    /** Closes what is left of the candidate's session (and with it its place and any lease in
     *  it); the session ends at its ttl if the close fails. */
    private void closeSession() {
        FencingSession current = session;
        session = null;
        if (current != null) {
            try {
                current.close();
            } catch (SQLException ignored) {
                // it ends at its ttl, the places and leases in it with it
            }
        }
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
        ElectionLease current = lease;
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
        ElectionLease current = lease;
        if (current == null || !current.isHeld()) {
            throw new LeaseLostException("not the leader of \"" + name + "\" (holder " + holder
                    + "): " + (current == null ? "no term; campaign() first"
                    : "its term (token " + current.token() + ") ended: "
                    + current.lostReason().orElse("unknown")));
        }
        String granted;
        try {
            granted = current.session.reacquire(name, payload);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new LeaseLostException("interrupted while proclaiming over \"" + name + "\"",
                    null, e);
        }
        if (granted != null && Long.parseLong(granted) != current.token()) {
            // Ours had ended: that was a new grant, not a proclamation.
            current.session.release(name, Long.parseLong(granted), null);
        }
        if (granted == null || Long.parseLong(granted) != current.token()) {
            throw new LeaseLostException("no longer the leader of \"" + name + "\" (token "
                    + current.token() + ")");
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

    /** Gives leadership up (fencing_release; the next place in line is told) and closes the
     *  candidate's session: whether the lease was still ours. */
    public synchronized boolean resign() throws SQLException {
        ElectionLease current = lease;
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

    /** The leader's lease, in its candidate's session of its own: release() gives it back
     *  (the next place in line is told) and closes the session. */
    private static final class ElectionLease implements Lease {
        final FencingSession session;
        private final FencingSession.LineLease grant;
        private final AtomicBoolean released = new AtomicBoolean();

        ElectionLease(FencingSession session, FencingSession.LineLease grant) {
            this.session = session;
            this.grant = grant;
        }

        @Override
        public String lockName() {
            return grant.lockName();
        }

        @Override
        public long token() {
            return grant.token();
        }

        @Override
        public boolean isHeld() {
            return !released.get() && session.isHeld();
        }

        @Override
        public Optional<String> lostReason() {
            return released.get() ? Optional.of("released") : session.lostReason();
        }

        @Override
        public boolean awaitLost(Duration timeout) throws InterruptedException {
            return session.awaitLost(timeout);
        }

        @Override
        public String describe() {
            return Kind.EXCLUSIVE.describe(grant.lockName());
        }

        @Override
        public boolean release() throws SQLException {
            if (!released.compareAndSet(false, true)) {
                return false;
            }
            session.guard(null);
            try {
                return session.isHeld()
                        && session.release(grant.lockName(), grant.token(), grant.place());
            } finally {
                session.close();
            }
        }

        @Override
        public String toString() {
            return "Lease[" + describe() + " in fencing session " + session.id() + ", token "
                    + grant.token() + ", " + (isHeld() ? "held" : "not held") + "]";
        }
    }
}
