package io.pgfencing;

import java.lang.System.Logger.Level;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The keepalive of a lease or a session, and the judgement of whether it is still held.
 *
 * <p>Held is judged on System.nanoTime(), conservatively: it is lost once the send time of the
 * last successful acquire, open or renewal, plus ttl, minus a safety margin, has passed --
 * whether or not the heartbeat thread ran meanwhile (the whole process may have been paused:
 * SIGSTOP, a long GC). The server starts the ttl when it runs the request, after the client
 * sent it, so this deadline is never later than the server's end (clock rates aside). onLost is
 * called once, from the heartbeat thread, when a renewal is refused, fails, or can no longer
 * land in time; never after stop().
 */
final class Heartbeat {
    /** One renewal, waited for until deadline (nanoTime): whether the server took it. */
    interface Renewal {
        boolean renew(long deadline) throws SQLException, InterruptedException;
    }

    private static final System.Logger LOG = System.getLogger("io.pgfencing");

    final long ttl;
    final long margin;
    final long period;
    private final String what;
    private final String refused;
    private final Consumer<String> onLost;
    private final Renewal renewal;
    private final Runnable drop;

    private final Object lock = new Object();
    private long validFrom;
    private boolean stopped;
    private String lostReason;
    private final CountDownLatch lostReported = new CountDownLatch(1);
    private Thread thread;

    /**
     * @param what    "lease" or "session", for messages
     * @param refused what a refused renewal means, for the reason
     * @param drop    gives the renewal's connection up after a renewal without answer
     */
    Heartbeat(String what, LeaseOptions options, Renewal renewal, Runnable drop, String refused) {
        this.what = what;
        this.ttl = options.ttl().toNanos();
        this.margin = safetyMargin(ttl);
        this.period = period(options);
        this.refused = refused;
        this.onLost = options.onLost();
        this.renewal = renewal;
        this.drop = drop;
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

    private long due() {
        synchronized (lock) {
            return validFrom + period;
        }
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

    void start(String name) {
        thread = new Thread(this::run, name);
        thread.setDaemon(true);
        thread.start();
    }

    /**
     * Stops the thread (waiting for a renewal under way, which its deadline bounds); no onLost
     * from then on. False if stopped already.
     */
    boolean stop() {
        synchronized (lock) {
            if (stopped) {
                return false;
            }
            stopped = true;
            lock.notifyAll();
        }
        if (thread != null && thread != Thread.currentThread()) {
            boolean interrupted = false;
            while (thread.isAlive()) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        return true;
    }

    /** Records the loss and calls onLost, once, unless stopped. */
    void markLost(String reason) {
        synchronized (lock) {
            if (stopped || lostReason != null) {
                return;
            }
            lostReason = reason;
        }
        try {
            if (onLost != null) {
                onLost.accept(reason);
            }
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "the onLost callback of a pg_fencing " + what + " failed", e);
        } finally {
            lostReported.countDown();
        }
    }

    private void run() {
        try {
            while (true) {
                long now = System.nanoTime();
                if (now - deadline() >= 0) {
                    markLost("not renewed before the " + what + "'s safe deadline; "
                            + "was the process paused?");
                    return;
                }
                long due = due();
                if (now - due < 0) {
                    long sleep = Math.min(due, deadline()) - now;
                    synchronized (lock) {
                        if (stopped) {
                            return;
                        }
                        TimeUnit.NANOSECONDS.timedWait(lock, sleep);
                        if (stopped) {
                            return;
                        }
                    }
                    continue;
                }
                long sent = System.nanoTime();
                boolean renewedInTime;
                try {
                    renewedInTime = renewal.renew(deadline());
                } catch (java.sql.SQLTimeoutException noAnswer) {
                    drop.run();
                    markLost("renewal got no answer before the " + what + "'s safe deadline");
                    return;
                } catch (SQLException failed) {
                    drop.run();
                    markLost("renewal failed: " + failed.getMessage().strip());
                    return;
                }
                if (!renewedInTime) {
                    markLost("renewal refused: " + refused);
                    return;
                }
                renewed(sent);
            }
        } catch (InterruptedException | RuntimeException e) {
            markLost("heartbeat failed: " + e); // nothing leaves the thread silently
        }
    }
}
