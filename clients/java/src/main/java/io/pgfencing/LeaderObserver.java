package io.pgfencing;

import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.postgresql.PGConnection;

/**
 * Follows a lock's leader from a daemon thread, reporting each change of (holder, token).
 *
 * <p>What it reports is always read from the view fencing_leases, never taken from a
 * notification: notifications (LISTEN fencing_events) only make it read sooner. A forged one
 * (any role may NOTIFY on any channel), a lost one, or one for a lock whose owner did not turn
 * announcements on changes nothing: it also reads when the live lease is due to end by the
 * server's clock, and every {@code reread}. A broken connection is made again (at once, then
 * after 0.1 s, doubling up to 5 s), LISTENing before it reads, so that no change slips between.
 */
public final class LeaderObserver implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.pgfencing");
    static final String CHANNEL = "fencing_events";
    static final String APPLICATION_NAME = "pg_fencing observe";

    private final FencingClient client;
    private final String lockName;
    private final long rereadMillis;
    private final Consumer<Optional<Leader>> onChange;
    private final Thread thread;
    private volatile boolean closed;
    private volatile Connection connection;

    LeaderObserver(FencingClient client, String lockName, Duration reread,
                   Consumer<Optional<Leader>> onChange) {
        this.client = client;
        this.lockName = lockName;
        this.rereadMillis = Math.max(1, reread.toMillis());
        this.onChange = onChange;
        this.thread = new Thread(this::run, "pg_fencing observe " + lockName);
        thread.setDaemon(true);
        thread.start();
    }

    private void run() {
        try {
            follow();
        } finally {
            drop(); // a connection made while close() ran would be left open otherwise
        }
    }

    private void follow() {
        Optional<Leader> last = null; // nothing reported yet
        int failures = 0;
        while (!closed) {
            Leader.Reading reading;
            try {
                if (connection == null) {
                    connection = client.connect(APPLICATION_NAME);
                    try (Statement listen = connection.createStatement()) {
                        listen.execute("LISTEN " + CHANNEL); // first: nothing slips before the read
                    }
                }
                reading = Leader.read(connection, lockName);
            } catch (SQLException e) {
                drop();
                failures++;
                if (!sleep(reconnectDelayMillis(failures))) {
                    return;
                }
                continue;
            }
            failures = 0;
            if (last == null || Leader.changed(last, reading.leader())) {
                last = reading.leader();
                report(last);
            }
            long wake = rereadMillis;
            if (reading.millisLeft().isPresent()) {
                wake = Math.min(wake, Math.max(0, reading.millisLeft().getAsLong()) + 10);
            }
            try {
                // A hint only: what counts is the re-read.
                connection.unwrap(PGConnection.class).getNotifications((int) Math.max(1, wake));
            } catch (SQLException e) {
                drop();
            }
        }
    }

    private void report(Optional<Leader> leader) {
        try {
            onChange.accept(leader);
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "the observer of \"" + lockName + "\" failed", e);
        }
    }

    /** After the first failure at once, then 0.1 s, doubling up to 5 s. */
    static long reconnectDelayMillis(int failures) {
        return failures <= 1 ? 0 : Math.min(5000, 100L << Math.min(failures - 2, 6));
    }

    private boolean sleep(long millis) {
        try {
            TimeUnit.MILLISECONDS.sleep(millis);
            return !closed;
        } catch (InterruptedException e) {
            return false;
        }
    }

    private void drop() {
        Connection broken = connection;
        connection = null;
        if (broken != null) {
            Wire.abort(broken);
        }
    }

    /** Stops the thread (its connection is aborted, ending any wait) and waits for it. */
    @Override
    public void close() {
        closed = true;
        Connection current = connection;
        if (current != null) {
            Wire.abort(current);
        }
        thread.interrupt();
        try {
            thread.join(TimeUnit.SECONDS.toMillis(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
