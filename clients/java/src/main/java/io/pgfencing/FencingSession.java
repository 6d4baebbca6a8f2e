package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;
import java.util.stream.Stream;

/**
 * A session (fencing_session_open): one keepalive for many leases.
 *
 * <pre>{@code
 * try (FencingSession session = client.openSession(LeaseOptions.ofTtl(ttl).withOnLost(cb))) {
 *     Lease p3 = session.lock("partition-3");
 *     List<Lease> both = session.lockAll(List.of("acct-7", "acct-9"));   // every lock or none
 *     p3.executeUpdate(db, "UPDATE parts SET token = ?, v = ? WHERE id = 3", p3.token(), v);
 * }   // closing the session releases every lease in it
 * }</pre>
 *
 * <p>The client's heartbeat ({@link SharedHeartbeat}: one connection and one thread for all
 * the client's sessions, elections and leases) renews the session (fencing_session_renew), and
 * with it every lease in it, on the session's own clock (ttl, heartbeat period, safe deadline);
 * its loss is every lease's, reported once through {@link LeaseOptions#onLost()}. The session's
 * own connection is its work connection: the open, the acquires, the statements of the line,
 * the releases and the close go there (or, when another thread's statement holds it, on one of
 * their own). Every kind of lease: exclusive, shared, a semaphore's permit. Waits end on an
 * interrupt, on the server too, and at the close.
 *
 * <p>A wait for a lease of any kind ({@link #lock}, {@link #lockShared}, {@link #acquirePermit},
 * their try forms with a time) is a place in the lock's line (pg_fencing 1.10, {@link Line}):
 * joined, then polled, each a short statement in autocommit on the work connection, so that the
 * wait holds no transaction and -- through a transaction pooler -- no server connection between
 * its statements; arrival order is kept (exclusive places first, a semaphore's permits to its
 * places in arrival order). At its deadline, or on an interrupt, the place is left, which gives
 * back a grant made meanwhile. {@link #lockAll} and {@link #tryLockAll} with a wait wait in line
 * too, for one lock after the other in byte order of the names (the order
 * fencing_session_acquire_all takes them in, so that two sessions with overlapping sets cannot
 * deadlock), giving back every lease they took when one is not had in time; without a wait they
 * are one statement that never sleeps (fencing_session_acquire_all). The wait the line does not
 * hold is still one statement that waits, on the work connection, taking turns there (a timed
 * one counting the wait for its turn against its time): one more shared lease or permit of a
 * lock whose line already has the session's place, taken by a lease in the session or another
 * thread's wait (the line keeps one place per session and lock; CALL fencing_await). A statement of the
 * line, or a release, that finds the work connection busy (within a quarter of a second) uses a
 * connection of its own.
 */
public final class FencingSession implements AutoCloseable {
    private final FencingClient client;
    private final String holder;
    final Heartbeat beat;
    /** Used under workLock; made again when found closed. */
    private volatile Connection work;
    private final ReentrantLock workLock = new ReentrantLock();
    private final long id;
    private volatile boolean closed;
    private final Object closing = new Object();
    /** The wake-ups of the waits in line, which close() sets. */
    private final Set<Line.Watch> watches = ConcurrentHashMap.newKeySet();
    /** The locks whose line has this session's place for a shared lease or a permit, a wait's
     *  or a lease's: a join again would answer that place, not one more lease. */
    private final Set<String> sharedPlaces = ConcurrentHashMap.newKeySet();
    /** An election's lease, checked by every renewal (a revoke ends the lease, not the
     *  session): null for an application's session. */
    private volatile LineLease guarded;

    /** How long a statement of the line waits for the work connection before it takes a
     *  connection of its own. */
    private static final long BRIEF_NANOS = TimeUnit.MILLISECONDS.toNanos(250);

    FencingSession(FencingClient client, LeaseOptions options) throws SQLException {
        this(client, options, "the session ended, or was closed");
    }

    FencingSession(FencingClient client, LeaseOptions options, String refused) throws SQLException {
        if (options.payload() != null) {
            throw new IllegalArgumentException("a session has no payload; its leases may");
        }
        this.client = client;
        this.holder = options.holderOrDefault();
        this.beat = new Heartbeat("session", options, this::renewal, refused);
        Connection work = client.connect("pg_fencing session " + holder);
        long sent = System.nanoTime();
        try {
            this.id = Long.parseLong(Wire.value(work,
                    "SELECT fencing_session_open(?, ?::interval)", holder,
                    Wire.interval(options.ttl())));
        } catch (SQLException | RuntimeException e) {
            Wire.closeQuietly(work);
            throw e;
        }
        this.work = work;
        beat.begin(sent);
        beat.start(client.heartbeat());
    }

    /** The session's id on the server (fencing_sessions, fencing_leases.session_id). */
    public long id() {
        return id;
    }

    public String holder() {
        return holder;
    }

    /** Whether the session can still be trusted, judged on System.nanoTime(). */
    public boolean isHeld() {
        return !closed && beat.lostReason().isEmpty();
    }

    public Optional<String> lostReason() {
        return closed ? Optional.of("closed") : beat.lostReason();
    }

    /** Waits until the loss has been reported (onLost called); false on timeout. */
    public boolean awaitLost(Duration timeout) throws InterruptedException {
        return beat.awaitLost(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    private void check() throws LeaseLostException {
        if (!isHeld()) {
            throw new LeaseLostException("fencing session " + id + " is no longer held: "
                    + lostReason().orElse("unknown"));
        }
    }

    /** Takes {@code lockName} exclusively in the session, waiting until granted. */
    public Lease lock(String lockName) throws SQLException, InterruptedException {
        return tryAcquire(lockName, Kind.EXCLUSIVE, null, Wire.FOREVER).orElseThrow();
    }

    /** Waits up to {@code time} (0: one attempt); empty if the lock stayed busy. */
    public Optional<Lease> tryLock(String lockName, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return tryAcquire(lockName, Kind.EXCLUSIVE, null, Math.max(0, unit.toNanos(time)));
    }

    /** A shared lease of {@code lockName} in the session (beside other shared holders, no
     *  exclusive one), waiting until granted. */
    public Lease lockShared(String lockName) throws SQLException, InterruptedException {
        return tryAcquire(lockName, Kind.SHARED, null, Wire.FOREVER).orElseThrow();
    }

    /** A shared lease, waiting up to {@code time} (0: one attempt); empty if it stayed busy. */
    public Optional<Lease> tryLockShared(String lockName, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return tryAcquire(lockName, Kind.SHARED, null, Math.max(0, unit.toNanos(time)));
    }

    /** One permit of the semaphore {@code name} of {@code permits} permits, in the session,
     *  waiting until granted. Each call takes one more permit, with its own token. */
    public Lease acquirePermit(String name, int permits) throws SQLException, InterruptedException {
        return tryAcquire(name, Kind.PERMIT, permits, Wire.FOREVER).orElseThrow();
    }

    /** One permit, waiting up to {@code time} (0: one attempt); empty if every permit stayed
     *  taken. */
    public Optional<Lease> tryAcquirePermit(String name, int permits, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return tryAcquire(name, Kind.PERMIT, permits, Math.max(0, unit.toNanos(time)));
    }

    private Optional<Lease> tryAcquire(String lockName, Kind kind, Integer permits, long waitNanos)
            throws SQLException, InterruptedException {
        StandaloneLease.checkLock(lockName, kind, permits);
        if (waitNanos > 0 && (kind == Kind.EXCLUSIVE || sharedPlaces.add(lockName))) {
            LineLease grant = null;
            try {
                grant = waitInLine(lockName, kind, permits, waitNanos, null);
            } finally {
                if (grant == null && kind != Kind.EXCLUSIVE) {
                    sharedPlaces.remove(lockName);
                }
            }
            return grant == null ? Optional.empty()
                    : Optional.of(new SessionLease(lockName, kind, grant.token(), grant.place()));
        }
        // One attempt; or one more shared lease or permit of a lock whose line has the
        // session's place already (the line keeps one place per session and lock): one
        // statement on the work connection, in its turn.
        Wire.Grant grant = onWork(waitNanos, left -> Wire.waitInSlices(left, slice -> {
            long deadline = System.nanoTime() + slice + Wire.ANSWER_GRACE_NANOS;
            if (slice == 0) {
                return Wire.valueWithin(work, deadline, releaseAbandoned(lockName),
                        "SELECT fencing_session_acquire(?, ?, kind => ?, permits => ?::integer)",
                        id, lockName, kind.sqlName, permits);
            }
            // CALL fencing_await: no snapshot held while it sleeps.
            return Wire.valueWithin(work, deadline, releaseAbandoned(lockName),
                    "CALL fencing_await(?, session => ?, wait => ?::interval, kind => ?, "
                            + "permits => ?::integer)",
                    lockName, id, Wire.interval(slice), kind.sqlName, permits);
        }));
        return grant == null ? Optional.empty()
                : Optional.of(new SessionLease(lockName, kind, Long.parseLong(grant.value()), null));
    }

    /** A lease taken through the line: its token and its place. */
    record LineLease(String lockName, long token, long place) {
    }

    /**
     * Waits for a lease of {@code lockName} of {@code kind} ({@code permits}: the semaphore's, for
     * a permit) as a place in its line, {@code waitNanos} at most ({@link Wire#FOREVER}: as long
     * as the session lives): the lease once granted; null when the wait ran out, the place left
     * (a grant made meanwhile given back). Joined, then polled every poll period, and at once
     * when the client's listener hears the place's number or the session is closed; each
     * statement short and in autocommit. Whatever else ends it (an interrupt,
     * LeaseLostException, an error) leaves the place too, unless the session is closed (its
     * places went with it).
     */
    LineLease waitInLine(String lockName, Kind kind, Integer permits, long waitNanos, String payload)
            throws SQLException, InterruptedException {
        long start = System.nanoTime();
        long pollNanos = client.linePollNanos();
        Line.Listener listener = client.lineListener();
        long mark = listener == null ? 0 : listener.use();
        Line.Watch watch = new Line.Watch();
        watches.add(watch);
        Long place = null;
        Long followed = null;
        try {
            checkInLine();
            boolean forever = waitNanos == Wire.FOREVER;
            long sent = System.nanoTime();
            String[] joined = join(lockName, kind, permits, waitNanos, start, payload);
            long last = forever ? 0 : Line.lastPollNanos(start + waitNanos, sent, System.nanoTime());
            place = Long.parseLong(joined[0]);
            if (listener != null) {
                listener.follow(place, mark, watch);
                followed = place;
            }
            String token = joined[1];
            while (token == null) {
                long toLast = forever ? Long.MAX_VALUE : last - System.nanoTime();
                if (toLast <= 0) {
                    break; // the last poll (or the join) was just made: leave
                }
                watch.await(Math.min(pollNanos, toLast));
                // The last sleep ends just before the deadline (Line.lastPollNanos), and the place
                // is polled then too.
                checkInLine();
                String[] polled = lineRow(Line.POLL_PLACE, place);
                token = polled[1];
                if (token == null && "gone".equals(polled[0])) {
                    // The server ended the place: its session (the join says so: 55Z05, as
                    // LeaseLostException), its wait (at the deadline, which the loop sees), or a
                    // grant that ended before it was seen. Joined again, at the back.
                    if (waitNanos != Wire.FOREVER && System.nanoTime() - start >= waitNanos) {
                        break;
                    }
                    checkInLine();
                    if (listener != null) {
                        listener.unfollow(place, watch);
                        followed = null;
                    }
                    place = null;
                    sent = System.nanoTime();
                    joined = join(lockName, kind, permits, waitNanos, start, payload);
                    last = forever ? 0 : Line.lastPollNanos(start + waitNanos, sent, System.nanoTime());
                    place = Long.parseLong(joined[0]);
                    if (listener != null) {
                        listener.follow(place, mark, watch);
                        followed = place;
                    }
                    token = joined[1];
                }
            }
            if (token != null) {
                LineLease granted = new LineLease(lockName, Long.parseLong(token), place);
                place = null; // kept: the server keeps the place while the lease lives
                return granted;
            }
            // The deadline: leave, which gives back a lease granted to the place meanwhile (by a
            // poll whose answer was lost, say).
            long leaving = place;
            place = null;
            lineRow(Line.LEAVE, leaving);
            return null;
        } catch (SQLException e) {
            if (closed) {
                throw sessionEnded(e);
            }
            throw FencingException.map(e);
        } finally {
            watches.remove(watch);
            if (listener != null) {
                if (followed != null) {
                    listener.unfollow(followed, watch);
                }
                listener.done();
            }
            if (place != null && !closed) {
                leaveQuietly(place);
            }
        }
    }

    /** Joins the line; a join interrupted after the server answered leaves its place. */
    private String[] join(String lockName, Kind kind, Integer permits, long waitNanos, long start,
            String payload) throws SQLException, InterruptedException {
        String[][] answered = new String[1][];
        try {
            return lineRow(answered, Line.JOIN, id, lockName, lineWait(waitNanos, start), payload,
                    kind.sqlName, permits);
        } catch (InterruptedException e) {
            if (answered[0] != null && !closed) {
                leaveQuietly(Long.parseLong(answered[0][0]));
            }
            throw e;
        }
    }

    /** What is left of the wait, for the join: null (as long as the session lives) for ever. */
    private static String lineWait(long waitNanos, long start) {
        return waitNanos == Wire.FOREVER ? null
                : Wire.interval(Math.max(1, waitNanos - (System.nanoTime() - start)));
    }

    /** Before a statement of the line: the session known closed or lost ends the wait. */
    private void checkInLine() throws LeaseLostException {
        if (closed) {
            throw sessionEnded(null);
        }
        check();
    }

    private LeaseLostException sessionEnded(Throwable cause) {
        return new LeaseLostException("fencing session " + id + " was closed while a wait in it "
                + "was in line", FencingException.SESSION_ENDED, cause);
    }

    private void leaveQuietly(long place) {
        boolean interrupted = Thread.interrupted();
        try {
            lineRow(Line.LEAVE, place);
        } catch (SQLException | InterruptedException ignored) {
            // the place ends with its wait on the server, or with the session
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * One statement of the line, short, in autocommit, on the work connection (or one of its own
     * when another thread's wait holds it); once more on a new connection if the first broke
     * (join, poll and leave may be repeated: a join again gives the same place).
     */
    String[] lineRow(String sql, Object... params) throws SQLException, InterruptedException {
        return lineRow(null, sql, params);
    }

    private String[] lineRow(String[][] answered, String sql, Object... params)
            throws SQLException, InterruptedException {
        for (int attempt = 1; ; attempt++) {
            boolean onWork = workLock.tryLock(BRIEF_NANOS, TimeUnit.NANOSECONDS);
            Connection connection = null;
            try {
                if (onWork) {
                    reconnectWork();
                    connection = work;
                } else {
                    connection = client.connect("pg_fencing session " + holder);
                }
                return Wire.rowWithin(connection, System.nanoTime() + Wire.ANSWER_GRACE_NANOS,
                        answered, sql, params);
            } catch (SQLException e) {
                if (attempt >= 2 || e.getSQLState() != null && !e.getSQLState().startsWith("08")
                        || !Wire.isClosed(connection)) {
                    throw e;
                }
            } finally {
                if (onWork) {
                    workLock.unlock();
                } else {
                    Wire.closeQuietly(connection);
                }
            }
        }
    }

    /** An election's lease: every renewal also checks that it lives (null: no more). */
    void guard(LineLease lease) {
        guarded = lease;
    }

    /** fencing_session_acquire of a lock the session holds, with a new payload: its token, the
     *  same while the lease lives (LeaderElection.proclaim). */
    String reacquire(String lockName, String payload) throws SQLException, InterruptedException {
        checkInLine();
        try {
            return lineRow("SELECT fencing_session_acquire(?::bigint, ?, payload => ?::jsonb)",
                    id, lockName, payload)[0];
        } catch (SQLException e) {
            throw FencingException.map(e);
        }
    }

    /**
     * Every lock or none, exclusive leases in the order given, waiting until granted. Never
     * deadlocks with another session's lockAll. The wait is in line (pg_fencing 1.10), one lock
     * after the other in byte order of the names, each a place as {@link #lock} waits: no
     * snapshot and no server connection held while it waits. A lock taken stays taken -- visible
     * to others, and theirs to wait for -- while the next is waited for: all or none holds for
     * the answer, not for every instant. Whatever ends the wait without every lock (an
     * interrupt, the session's loss, an error) gives back every lease it took and leaves every
     * place; a lock the session held already is kept.
     */
    public List<Lease> lockAll(List<String> lockNames) throws SQLException, InterruptedException {
        return tryLockAll(lockNames, Wire.FOREVER).orElseThrow();
    }

    /** Every lock or none, waiting up to {@code time} in line as {@link #lockAll} does; 0: one
     *  statement that never sleeps (fencing_session_acquire_all). Empty if not all could be
     *  had, every lease the wait took given back. */
    public Optional<List<Lease>> tryLockAll(List<String> lockNames, long time, TimeUnit unit)
            throws SQLException, InterruptedException {
        return tryLockAll(lockNames, Math.max(0, unit.toNanos(time)));
    }

    private Optional<List<Lease>> tryLockAll(List<String> lockNames, long waitNanos)
            throws SQLException, InterruptedException {
        List<String> names = List.copyOf(lockNames);
        if (waitNanos > 0 && !names.isEmpty() && names.stream().noneMatch(String::isEmpty)) {
            return Optional.ofNullable(lockAllInLine(names, waitNanos));
        }
        // No wait, or names the server refuses (as it always has): one statement.
        Wire.Grant grant = onWork(waitNanos, left -> Wire.waitInSlices(left, slice ->
                Wire.valueWithin(work, System.nanoTime() + slice + Wire.ANSWER_GRACE_NANOS,
                        tokens -> releaseAll(names, tokens),
                        "SELECT fencing_session_acquire_all(?, ?::text[], ?::interval)::bigint[]",
                        id, work.createArrayOf("text", names.toArray()),
                        slice == 0 ? null : Wire.interval(slice))));
        if (grant == null) {
            return Optional.empty();
        }
        List<Long> tokens = parseArray(grant.value());
        List<Lease> leases = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            leases.add(new SessionLease(names.get(i), Kind.EXCLUSIVE, tokens.get(i), null));
        }
        return Optional.of(leases);
    }

    /** tryLockAll with a wait, in line: the leases in the order of {@code names}, or null when
     *  the wait ran out (what it took given back). */
    private List<Lease> lockAllInLine(List<String> names, long waitNanos)
            throws SQLException, InterruptedException {
        long start = System.nanoTime();
        List<String> order = acquireOrder(names);
        Map<String, Long> tokens = heldAlready(order);
        Map<String, Long> places = new HashMap<>();
        List<Long> taken = new ArrayList<>(); // the places of the leases this call took
        boolean all = false;
        try {
            for (String lockName : order) {
                if (tokens.containsKey(lockName)) {
                    continue; // held already: kept, and not given back
                }
                long left = waitNanos == Wire.FOREVER ? Wire.FOREVER
                        : Math.max(0, waitNanos - (System.nanoTime() - start));
                LineLease grant = waitInLine(lockName, Kind.EXCLUSIVE, null, left, null);
                if (grant == null) {
                    return null;
                }
                taken.add(grant.place());
                tokens.put(lockName, grant.token());
                places.put(lockName, grant.place());
            }
            all = true;
        } finally {
            if (!all && !closed) {
                for (int i = taken.size() - 1; i >= 0; i--) {
                    leaveQuietly(taken.get(i)); // gives back the lease the place took
                }
            }
        }
        List<Lease> leases = new ArrayList<>();
        for (String lockName : names) {
            leases.add(new SessionLease(lockName, Kind.EXCLUSIVE, tokens.get(lockName),
                    places.get(lockName)));
        }
        return leases;
    }

    /** The distinct names in byte order (UTF-8, as COLLATE "C"): the one order in which every
     *  lockAll takes its locks, fencing_session_acquire_all too, so that two with overlapping
     *  sets cannot deadlock. */
    static List<String> acquireOrder(List<String> names) {
        return names.stream().distinct()
                .sorted((a, b) -> Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8),
                        b.getBytes(StandardCharsets.UTF_8)))
                .toList();
    }

    /** Of {@code order}, the locks the session holds an exclusive lease of now, with their
     *  tokens: lockAll keeps them, rather than wait for them and give them back with what it
     *  took. One short statement. */
    private Map<String, Long> heldAlready(List<String> order) throws SQLException, InterruptedException {
        checkInLine();
        String[] row;
        try {
            row = lineRow("SELECT array_agg(l.token::bigint ORDER BY u.i) FROM unnest(ARRAY["
                    + String.join(", ", Collections.nCopies(order.size(), "?"))
                    + "]::text[]) WITH ORDINALITY u(n, i) LEFT JOIN fencing_leases l "
                    + "ON l.lock_name = u.n AND l.session_id = ?::bigint AND l.live",
                    Stream.concat(order.stream(), Stream.of(id)).toArray());
        } catch (SQLException e) {
            throw FencingException.map(e);
        }
        Map<String, Long> held = new HashMap<>();
        String text = row[0];
        String[] parts = text.substring(1, text.length() - 1).split(",");
        for (int i = 0; i < order.size(); i++) {
            if (!"NULL".equals(parts[i].strip())) {
                held.put(order.get(i), Long.parseLong(parts[i].strip()));
            }
        }
        return held;
    }

    /** '{41,42}' as numbers. */
    private static List<Long> parseArray(String text) {
        List<Long> values = new ArrayList<>();
        for (String part : text.substring(1, text.length() - 1).split(",")) {
            values.add(Long.parseLong(part.strip()));
        }
        return values;
    }

    private interface WorkStep<T> {
        /** @param leftNanos what is left of the wait once the work connection is had */
        T run(long leftNanos) throws SQLException, InterruptedException;
    }

    /**
     * Runs a step on the work connection, alone, once the session is known held; the server's
     * 55Z05 (session ended) as LeaseLostException. The acquires take turns there: waiting for
     * the turn counts against {@code waitNanos}, and null comes back if it was not had in time.
     */
    private <T> T onWork(long waitNanos, WorkStep<T> step) throws SQLException, InterruptedException {
        long start = System.nanoTime();
        if (waitNanos == Wire.FOREVER) {
            workLock.lockInterruptibly();
        } else if (!workLock.tryLock(waitNanos, TimeUnit.NANOSECONDS)) {
            return null;
        }
        try {
            check();
            reconnectWork();
            return step.run(waitNanos == Wire.FOREVER
                    ? waitNanos : Math.max(0, waitNanos - (System.nanoTime() - start)));
        } catch (SQLException e) {
            throw FencingException.map(e);
        } finally {
            workLock.unlock();
        }
    }

    /** Under workLock: a work connection that broke (the network, a terminated backend) or
     *  was aborted (a wait without answer) is made again, rather than fail every later call
     *  of a session the heartbeat still keeps. */
    private void reconnectWork() throws SQLException {
        if (Wire.isClosed(work)) {
            work = client.connect("pg_fencing session " + holder);
        }
    }

    private java.util.function.Consumer<String> releaseAbandoned(String lockName) {
        return token -> releaseQuietly(lockName, Long.parseLong(token));
    }

    private void releaseAll(List<String> names, String tokens) {
        List<Long> values = parseArray(tokens);
        for (int i = 0; i < names.size(); i++) {
            releaseQuietly(names.get(i), values.get(i));
        }
    }

    private void releaseQuietly(String lockName, long token) {
        try {
            Wire.value(work, "SELECT fencing_release(?, ?::fencing_token)", lockName, token);
        } catch (SQLException ignored) {
            // it ends with the session
        }
    }

    /** fencing_release of one lease (and the leave of its place, if it waited in line); the
     *  session lives on. On the work connection if it is free, else on one of its own: a
     *  release never queues behind another thread's wait. */
    boolean release(String lockName, long token, Long place) throws SQLException {
        String sql = place == null ? "SELECT fencing_release(?, ?::fencing_token)" : Line.RELEASE_AND_LEAVE;
        Object[] params = place == null ? new Object[] {lockName, token}
                : new Object[] {lockName, token, place};
        if (workLock.tryLock()) {
            try {
                if (closed) {
                    return false;
                }
                reconnectWork();
                return "t".equals(Wire.value(work, sql, params));
            } finally {
                workLock.unlock();
            }
        }
        if (closed) {
            return false;
        }
        try (Connection connection = client.connect("pg_fencing session " + holder)) {
            return "t".equals(Wire.value(connection, sql, params));
        }
    }

    /** What the heartbeat's renewal asks: the session, and for an election's session also
     *  that the lease in it lives (a revoke ends the lease only). */
    private Heartbeat.Target renewal() {
        LineLease lease = guarded;
        return lease == null ? Heartbeat.Target.session(id)
                : Heartbeat.Target.leader(id, lease.token(), lease.place());
    }

    /**
     * Stops the heartbeat and closes the session, releasing every lease in it. Idempotent. A
     * session lost already is closed all the same (the server says it has ended: nothing to
     * report). A wait in the session on another thread ends with LeaseLostException: the close
     * never queues behind the wait on the work connection (it goes on a connection of its own
     * when that one is busy), and the server ends a session's waits when it closes it.
     */
    @Override
    public void close() throws SQLException {
        beat.stop(); // first: no onLost during the close
        synchronized (closing) {
            if (closed) {
                return;
            }
            closed = true;
        }
        watches.forEach(Line.Watch::wake); // a wait in line on another thread sees it at once
        try {
            closeOnTheServer();
        } finally {
            closeWork();
        }
    }

    /**
     * fencing_session_close on the work connection when it is free, else on a connection of its
     * own: the close must end a wait in the session on another thread (a CALL fencing_await
     * holds the work connection while it waits), not queue behind it. It used to go on the
     * session's heartbeat connection for that reason; that connection is the client's now, and
     * a close there would queue behind a round of renewals, which may wait up to its earliest
     * deadline when the server is slow. A work connection found broken: once more on one of
     * its own.
     */
    private void closeOnTheServer() throws SQLException {
        if (workLock.tryLock()) {
            Connection on = null;
            try {
                reconnectWork();
                on = work;
                closeOn(on);
                return;
            } catch (SQLException e) {
                if (on == null || !Wire.isClosed(on)) {
                    throw e;
                }
            } finally {
                workLock.unlock();
            }
        }
        try (Connection own = client.connect("pg_fencing session " + holder)) {
            closeOn(own);
        }
    }

    private void closeOn(Connection connection) throws SQLException {
        try {
            Wire.value(connection, "SELECT fencing_session_close(?)", id);
        } catch (SQLException e) {
            if (!FencingException.SESSION_ENDED.equals(e.getSQLState())) {
                throw e;
            }
        }
    }

    /** Closes the work connection once a wait on it has ended (the server ends it at the
     *  close); one that does not end within the grace has its connection aborted. */
    private void closeWork() {
        boolean idle = false;
        try {
            idle = workLock.tryLock(Wire.ANSWER_GRACE_NANOS, TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (!idle) {
            Wire.abort(work);
            return;
        }
        try {
            Wire.closeQuietly(work);
        } finally {
            workLock.unlock();
        }
    }

    @Override
    public String toString() {
        return "FencingSession[" + id + ", holder " + holder + ", "
                + (isHeld() ? "held" : "not held") + "]";
    }

    /** A lease in the session: held while the session is, and until released. */
    private final class SessionLease implements Lease {
        private final String lockName;
        private final Kind kind;
        private final long token;
        /** Its place in the lock's line, if it waited there (kept while the lease lives). */
        private final Long place;
        private final AtomicBoolean released = new AtomicBoolean();

        SessionLease(String lockName, Kind kind, long token, Long place) {
            this.lockName = lockName;
            this.kind = kind;
            this.token = token;
            this.place = place;
        }

        @Override
        public String lockName() {
            return lockName;
        }

        @Override
        public long token() {
            return token;
        }

        @Override
        public boolean isHeld() {
            return !released.get() && FencingSession.this.isHeld();
        }

        @Override
        public Optional<String> lostReason() {
            return released.get() ? Optional.of("released") : FencingSession.this.lostReason();
        }

        @Override
        public boolean awaitLost(Duration timeout) throws InterruptedException {
            return FencingSession.this.awaitLost(timeout);
        }

        @Override
        public String describe() {
            return kind.describe(lockName) + " in fencing session " + id;
        }

        @Override
        public boolean release() throws SQLException {
            if (!released.compareAndSet(false, true)) {
                return false;
            }
            boolean answer = FencingSession.this.release(lockName, token, place);
            if (place != null && kind != Kind.EXCLUSIVE) {
                sharedPlaces.remove(lockName); // its place left: the next wait joins anew
            }
            return answer;
        }

        @Override
        public String toString() {
            return "Lease[" + describe() + ", token " + token + ", "
                    + (isHeld() ? "held" : "not held") + "]";
        }
    }
}
