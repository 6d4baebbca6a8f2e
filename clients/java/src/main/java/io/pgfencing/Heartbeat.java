package io.pgfencing;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * The keepalive of one lease or session, and the judgement of whether it is still held. The
 * renewals themselves are sent by the client's {@link SharedHeartbeat}, one statement for every
 * item due, on one connection; this class keeps the item's own clock: its ttl, its period, its
 * safe deadline, and its loss.
 *
 * <p>Held is judged on System.nanoTime(), conservatively: it is lost once the send time of the
 * last successful acquire, open or renewal, plus ttl, minus a safety margin, has passed --
 * whether or not the heartbeat thread ran meanwhile (the whole process may have been paused:
 * SIGSTOP, a long GC). The server starts the ttl when it runs the request, after the client
 * sent it, so this deadline is never later than the server's end (clock rates aside). onLost is
 * called once, when a renewal is refused, fails, or can no longer land in time; never after
 * stop(). It runs on a thread of its own, not on the shared heartbeat's: a callback that blocks
 * (a listener that campaigns again, say) holds up no other item's renewals.
 */
final class Heartbeat {
    /**
     * What one renewal of an item asks the server: a session (fencing_session_renew), a lease
     * of its own (fencing_renew), or an election's session, whose renewal also checks that the
     * lease in it lives (a revoke ends the lease, not the session).
     */
    record Target(String kind, Long session, String lockName, Long token, Long place) {
        static Target session(long id) {
            return new Target("session", id, null, null, null);
        }

        static Target lease(String lockName, long token) {
            return new Target("lease", null, lockName, token, null);
        }

        static Target leader(long session, long token, long place) {
            return new Target("leader", session, null, token, place);
        }
    }

    private static final System.Logger LOG = System.getLogger("io.pgfencing");

    /** Where onLost runs: a thread of its own for each loss being reported (reused after). */
    private static final ExecutorService CALLBACKS = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "pg_fencing onLost");
        thread.setDaemon(true);
        return thread;
    });

    final long ttl;
    final long margin;
    final long period;
    /** "lease" or "session", for messages. */
    final String what;
    /** What a refused renewal means, for the reason. */
    final String refused;
    /** The ttl each renewal asks for, as the SQL's interval text. */
    final String ttlText;
    private final Consumer<String> onLost;
    private final Supplier<Target> target;

    private final Object lock = new Object();
    private long validFrom;
    private boolean stopped;
    private String lostReason;
    /** An onLost being reported (queued or running), and the thread running it. */
    private boolean reporting;
    private Thread reporter;
    private final CountDownLatch lostReported = new CountDownLatch(1);
    private SharedHeartbeat renewer;

    // Read and written by the shared heartbeat's thread only.
    /** Not renewed before this (System.nanoTime): a renewal that met a lock is tried again later. */
    long notBefore;
    /** Its last renewal waited for a lock beyond the lock timeout (a row locked by another
     *  transaction): its loss at the deadline is a renewal that got no answer. */
    boolean blocked;

    /**
     * @param what    "lease" or "session", for messages
     * @param target  what a renewal asks the server, read at each renewal
     * @param refused what a refused renewal means, for the reason
     */
    Heartbeat(String what, LeaseOptions options, Supplier<Target> target, String refused) {
        this.what = what;
        this.ttl = options.ttl().toNanos();
        this.margin = safetyMargin(ttl);
        this.period = period(options);
        this.refused = refused;
        this.ttlText = Wire.interval(options.ttl());
        this.onLost = options.onLost();
        this.target = target;
    }

    /** The time between renewals (ns); IllegalArgumentException unless it fits in the ttl. */
    static long period(LeaseOptions options) {
        long ttl = options.ttl().toNanos();
        long period = options.heartbeat() != null ? options.heartbeat().toNanos() : ttl / 3;
        long usable = ttl - safetyMargin(ttl);
        if (period <= 0 || period >= usable) {
            throw new IllegalArgumentException(String.format(
                    "heartbeat must be positive and shorter than ttl minus the safety margin "
                            + "(%d ms of ttl %s), got %s", TimeUnit.NANOSECONDS.toMillis(usable),
                    options.ttl(), options.heartbeat() != null ? options.heartbeat()
                            : "ttl/3 = " + Duration.ofNanos(period)));
        }
        return period;
    }

    /** How long before the computed end the client stops trusting a lease: ttl/10, 50 ms to ttl/2. */
    static long safetyMargin(long ttl) {
        return Math.min(Math.max(ttl / 10, TimeUnit.MILLISECONDS.toNanos(50)), ttl / 2);
    }

    /** The grant (or open) was sent at {@code sent}. */
    void begin(long sent) {
        synchronized (lock) {
            validFrom = sent;
        }
    }

    void renewed(long sent) {
        synchronized (lock) {
            validFrom = Math.max(validFrom, sent);
        }
    }

    /** System.nanoTime() after which it no longer counts as held. */
    long deadline() {
        synchronized (lock) {
            return validFrom + ttl - margin;
        }
    }

    /** System.nanoTime() at which the next renewal is due. */
    long due() {
        synchronized (lock) {
            return validFrom + period;
        }
    }

    /** What the next renewal asks the server. */
    Target target() {
        return target.get();
    }

    /** Why it is not held, or empty while it is. */
    Optional<String> lostReason() {
        long now = System.nanoTime();
        synchronized (lock) {
            if (lostReason != null) {
                return Optional.of(lostReason);
            }
            if (now - (validFrom + ttl - margin) >= 0) {
                // The heartbeat has not run since the deadline passed (the process was paused,
                // say); it reports the same when it does.
                return Optional.of("not renewed within ttl minus the safety margin");
            }
            return Optional.empty();
        }
    }

    boolean awaitLost(long timeout, TimeUnit unit) throws InterruptedException {
        return lostReported.await(timeout, unit);
    }

    /** Renewed from now on by {@code heartbeat} (the client's), from begin()'s send time. */
    void start(SharedHeartbeat heartbeat) {
        synchronized (lock) {
            if (stopped) {
                return;
            }
            renewer = heartbeat;
            notBefore = validFrom;
        }
        heartbeat.add(this);
    }

    /**
     * No renewal from now on (one under way may still land; its answer is ignored), and no
     * onLost: one being reported finishes before this returns, unless this is its thread. False
     * if stopped already.
     */
    boolean stop() {
        SharedHeartbeat from;
        synchronized (lock) {
            if (stopped) {
                return false;
            }
            stopped = true;
            from = renewer;
        }
        if (from != null) {
            from.remove(this);
        }
        boolean interrupted = false;
        synchronized (lock) {
            while (reporting && reporter != Thread.currentThread()) {
                try {
                    lock.wait();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        return true;
    }

    /** Records the loss and calls onLost (on a thread of its own), once, unless stopped. */
    void markLost(String reason) {
        synchronized (lock) {
            if (stopped || lostReason != null) {
                return;
            }
            lostReason = reason;
            reporting = true;
        }
        CALLBACKS.execute(() -> report(reason));
    }

    private void report(String reason) {
        synchronized (lock) {
            reporter = Thread.currentThread();
        }
        try {
            if (onLost != null) {
                onLost.accept(reason);
            }
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "the onLost callback of a pg_fencing " + what + " failed", e);
        } finally {
            lostReported.countDown();
            synchronized (lock) {
                reporting = false;
                reporter = null;
                lock.notifyAll();
            }
        }
    }
}
