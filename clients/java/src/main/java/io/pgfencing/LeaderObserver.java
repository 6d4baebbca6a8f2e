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
 *
 * <p>An error no reconnect can mend (a wrong password, 28P01; the extension or a privilege
 * missing, 42P01 / 42883 / 42501; ...) stops it instead of being retried forever in silence:
 * its connection is closed, {@link #error()} returns the error and {@code onError} gets it.
 */
public final class LeaderObserver implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.pgfencing");
    static final String CHANNEL = "fencing_events";
    static final String APPLICATION_NAME = "pg_fencing observe";

    private final FencingClient client;
    private final String lockName;
    private final long rereadMillis;
    private final Consumer<Optional<Leader>> onChange;
    private final Consumer<? super SQLException> onError;
    private final Thread thread;
    private volatile boolean closed;
    private volatile Connection connection;
    private volatile SQLException error;

    LeaderObserver(FencingClient client, String lockName, Duration reread,
                   Consumer<Optional<Leader>> onChange, Consumer<? super SQLException> onError) {
        this.client = client;
        this.lockName = lockName;
        this.rereadMillis = Math.max(1, reread.toMillis());
        this.onChange = onChange;
        this.onError = onError;
        this.thread = new Thread(this::run, "pg_fencing observe " + lockName);
        thread.setDaemon(true);
        thread.start();
    }

    private void run() {
        try {
            follow();
        } catch (SQLException e) {
            error = e;
            drop(); // closed before the caller hears of it
            LOG.log(Level.WARNING, "the observer of \"" + lockName + "\" stopped: " + e.getMessage()
                    + " (SQLSTATE " + e.getSQLState() + ")");
            tell(onError, e);
        } finally {
            drop(); // a connection made while close() ran would be left open otherwise
        }
    }

    /**
     * Whether a reconnect may mend e: a broken or refused connection (no SQLSTATE, an I/O
     * error; class 08; 57P0x, the server shutting down or starting; class 53, too many
     * connections). Anything else would fail the same way on every attempt.
     */
    static boolean mayMend(SQLException e) {
        String state = e.getSQLState();
        return state == null || state.startsWith("08") || state.startsWith("53") || state.startsWith("57P0");
    }

    /** Follows until closed; throws the first error no reconnect can mend. */
    private void follow() throws SQLException {
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
                if (closed) {
                    return; // close() aborted the connection
                }
                if (!mayMend(e)) {
                    throw e;
                }
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
                if (!closed && !mayMend(e)) {
                    throw e;
                }
            }
        }
    }

    private void report(Optional<Leader> leader) {
        tell(onChange, leader);
    }

    /** A callback's exception is logged: it must not end the thread. */
    private <T> void tell(Consumer<? super T> callback, T value) {
        try {
            callback.accept(value);
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "the observer of \"" + lockName + "\" failed", e);
        }
    }

    /**
     * The error that stopped the observer, one no reconnect can mend (a wrong password, the
     * extension or a privilege missing); empty while it runs and after a plain close().
     */
    public Optional<SQLException> error() {
        return Optional.ofNullable(error);
    }

    /** Whether its thread still follows the leader: false once closed or stopped by an error. */
    public boolean isRunning() {
        return thread.isAlive() && !closed;
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
