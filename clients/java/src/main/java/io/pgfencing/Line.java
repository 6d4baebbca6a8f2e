package io.pgfencing;

import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * The line (pg_fencing 1.10): a wait in a session -- for an exclusive lease, a shared lease or a
 * permit -- as a place the database keeps, one row of fencing_line, instead of a statement that
 * runs -- holding a server connection -- for the whole wait (CALL fencing_await).
 *
 * <pre>
 *   join    SELECT place, token FROM fencing_line_join(session, lock, wait, payload, kind, permits)
 *   poll    SELECT state, token FROM fencing_line_poll(ARRAY[place])
 *   leave   SELECT fencing_line_leave(place)
 * </pre>
 *
 * <p>Each is one short statement in autocommit: between them a candidate holds no transaction, no
 * snapshot and, through a transaction-pooling PgBouncer, no server connection. The place whose
 * turn it is (exclusive places first; a semaphore's free permits to its places in arrival order)
 * takes the lease itself when it joins or polls. A place is polled every {@link #POLL} (without
 * LISTEN) and, when the client listens ({@link FencingClient#withListen(boolean)}), at once when
 * the {@link Listener} hears its number on the channel fencing_line. LISTEN is optional: through
 * a transaction pooler it cannot be relied on, and the timer alone is enough.
 */
final class Line {
    static final String CHANNEL = "fencing_line";
    /** Between two polls of a waiting place, without LISTEN. */
    static final Duration POLL = Duration.ofMillis(500);
    /** With LISTEN: a notification wakes the place sooner. */
    static final Duration POLL_LISTENING = Duration.ofSeconds(2);
    /** How long a wait lets the listener take to LISTEN before it joins (it polls on the timer
     *  alone if it has not by then). */
    static final long LISTEN_STARTUP_NANOS = TimeUnit.SECONDS.toNanos(2);
    /**
     * A wait with a deadline polls its place once more just before it, then leaves: a wait
     * shorter than the poll period, or a candidate that comes back with such waits, takes its
     * turn when its place is first (a place that is never polled holds the line up, and leaves
     * the lock free when it leaves). That last poll is made this long before the deadline -- or
     * the join's round trip before it, if longer: the server ends the place at joined_at + wait,
     * which is the client's deadline give or take a round trip, and a poll that reaches it after
     * that finds the place gone.
     */
    static final long LAST_POLL_AHEAD_NANOS = TimeUnit.MILLISECONDS.toNanos(20);

    static final String JOIN = "SELECT place, token::bigint FROM fencing_line_join(?::bigint, ?, "
            + "?::interval, ?::jsonb, ?, ?::integer)";
    static final String POLL_PLACE = "SELECT state, token::bigint FROM fencing_line_poll(ARRAY[?::bigint])";
    static final String LEAVE = "SELECT fencing_line_leave(?::bigint)";
    /** A lease taken through the line: released, then its place (kept by the server while the
     *  lease lives) left; the select list is evaluated in order, so the first value is the
     *  release's own answer. */
    static final String RELEASE_AND_LEAVE = "SELECT fencing_release(?, ?::fencing_token), "
            + "fencing_line_leave(?::bigint)";

    private Line() {
    }

    /** The period between two polls of a waiting place (ns). */
    static long pollNanos(Duration poll, boolean listening) {
        if (poll == null) {
            return (listening ? POLL_LISTENING : POLL).toNanos();
        }
        if (poll.isNegative() || poll.isZero()) {
            throw new IllegalArgumentException("poll must be positive, got " + poll);
        }
        return poll.toNanos();
    }

    /** When (System.nanoTime()) a wait that ends at {@code end} makes its last poll, its place
     *  joined by a statement sent at {@code sent} and answered at {@code answered}. */
    static long lastPollNanos(long end, long sent, long answered) {
        return end - Math.max(LAST_POLL_AHEAD_NANOS, answered - sent);
    }

    /** One wait's wake-up: set when its place is heard, or when its session is closed. */
    static final class Watch {
        private boolean woken;

        synchronized void wake() {
            woken = true;
            notifyAll();
        }

        /** Sleeps until woken or {@code nanos} passed; whether it was woken. */
        synchronized boolean await(long nanos) throws InterruptedException {
            long end = System.nanoTime() + nanos;
            while (!woken) {
                long left = end - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                TimeUnit.NANOSECONDS.timedWait(this, left);
            }
            woken = false;
            return true;
        }
    }

    /**
     * One connection LISTENing on fencing_line for every wait of a client, in a daemon thread of
     * its own, open while some wait uses it. It wakes a wait whose place number it hears, and
     * remembers the numbers heard lately, so that one heard between a join and the follow() of
     * the place it returned is not missed. A broken connection is made again (the waits poll on
     * their timer meanwhile, and once more after it, in case their number went by); an error no
     * reconnect mends ends it, logged (the waits go on polling).
     */
    static final class Listener {
        private static final System.Logger LOG = System.getLogger("io.pgfencing");
        static final String APPLICATION_NAME = "pg_fencing line";
        private static final int REMEMBERED = 4096;

        private final FencingClient client;
        private final Object lock = new Object();
        private final Map<Long, Set<Watch>> watches = new HashMap<>();
        private final ArrayDeque<long[]> heard = new ArrayDeque<>(); // {seq, place}
        private long seq;
        private int users;
        private Thread thread;
        private CountDownLatch listening = new CountDownLatch(1);
        private volatile boolean isListening;

        Listener(FencingClient client) {
            this.client = client;
        }

        /** A wait starts using the listener: it runs (LISTEN in effect, or the startup time
         *  passed) when this returns. Returns the mark for {@link #follow}. */
        long use() throws InterruptedException {
            CountDownLatch started;
            long mark;
            synchronized (lock) {
                users++;
                if (thread == null) {
                    listening = new CountDownLatch(1);
                    thread = new Thread(this::run, "pg_fencing line listener");
                    thread.setDaemon(true);
                    thread.start();
                }
                started = listening;
            }
            try {
                started.await(LISTEN_STARTUP_NANOS, TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                done();
                throw e;
            }
            synchronized (lock) {
                mark = seq;
            }
            return mark;
        }

        /** The wait no longer uses it. */
        void done() {
            synchronized (lock) {
                users--;
            }
        }

        boolean isListening() {
            return isListening;
        }

        /** Wakes {@code watch} whenever {@code place} is heard (now too, if it was heard after
         *  {@code since}). */
        void follow(long place, long since, Watch watch) {
            boolean missed = false;
            synchronized (lock) {
                watches.computeIfAbsent(place, p -> new HashSet<>()).add(watch);
                for (long[] entry : heard) {
                    if (entry[0] > since && entry[1] == place) {
                        missed = true;
                    }
                }
            }
            if (missed) {
                watch.wake();
            }
        }

        void unfollow(long place, Watch watch) {
            synchronized (lock) {
                Set<Watch> set = watches.get(place);
                if (set != null) {
                    set.remove(watch);
                    if (set.isEmpty()) {
                        watches.remove(place);
                    }
                }
            }
        }

        private void heard(String payload) {
            long place;
            try {
                place = Long.parseLong(payload.strip());
            } catch (NumberFormatException e) {
                return; // not a place number: anyone may NOTIFY on any channel
            }
            List<Watch> woken;
            synchronized (lock) {
                seq++;
                heard.addLast(new long[] {seq, place});
                if (heard.size() > REMEMBERED) {
                    heard.removeFirst();
                }
                woken = new ArrayList<>(watches.getOrDefault(place, Set.of()));
            }
            woken.forEach(Watch::wake);
        }

        private void wakeAll() {
            List<Watch> woken = new ArrayList<>();
            synchronized (lock) {
                watches.values().forEach(woken::addAll);
            }
            woken.forEach(Watch::wake);
        }

        /** Whether the thread should end (nobody uses it); if so, it is ended under the lock. */
        private boolean quitIfUnused() {
            synchronized (lock) {
                if (users > 0) {
                    return false;
                }
                quit();
                return true;
            }
        }

        /** Under lock, or from the thread: the next use starts another. */
        private void quit() {
            synchronized (lock) {
                thread = null;
                isListening = false;
                listening.countDown();
            }
        }

        private void run() {
            Connection connection = null;
            int failures = 0;
            try {
                while (!quitIfUnused()) {
                    if (connection == null) {
                        try {
                            connection = client.connect(APPLICATION_NAME);
                            try (Statement statement = connection.createStatement()) {
                                statement.execute("LISTEN " + CHANNEL);
                            }
                        } catch (SQLException e) {
                            Wire.closeQuietly(connection);
                            connection = null;
                            if (!LeaderObserver.mayMend(e)) {
                                LOG.log(Level.WARNING, "pg_fencing's line listener stops (waits "
                                        + "in line poll on their timer): " + e.getMessage());
                                quit();
                                return;
                            }
                            failures++;
                            TimeUnit.MILLISECONDS.sleep(Math.max(100,
                                    LeaderObserver.reconnectDelayMillis(failures)));
                            continue;
                        }
                        failures = 0;
                        isListening = true;
                        synchronized (lock) {
                            listening.countDown();
                        }
                        wakeAll();
                    }
                    try {
                        PGNotification[] notifications = connection.unwrap(PGConnection.class)
                                .getNotifications(200);
                        if (notifications != null) {
                            for (PGNotification notification : notifications) {
                                if (CHANNEL.equals(notification.getName())) {
                                    heard(notification.getParameter());
                                }
                            }
                        }
                    } catch (SQLException e) {
                        Wire.closeQuietly(connection);
                        connection = null;
                        isListening = false;
                    }
                }
            } catch (InterruptedException | RuntimeException e) {
                LOG.log(Level.WARNING, "pg_fencing's line listener failed", e);
                quit();
            } finally {
                Wire.closeQuietly(connection);
            }
        }
    }
}
