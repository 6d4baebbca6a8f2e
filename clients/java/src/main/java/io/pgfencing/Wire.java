package io.pgfencing;

import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLTimeoutException;
import java.sql.Types;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * Statements on the client's own connections (autocommit, READ COMMITTED), and the one way a
 * statement is waited for only until a deadline.
 *
 * <p>A blocking JDBC call can be neither interrupted nor bounded from its own thread, so a
 * bounded statement runs on a pool thread while the caller waits on its Future: past the
 * deadline the connection is aborted (its answer may still come; it is never used again), and
 * an interrupted caller cancels the statement on the server ({@link java.sql.Statement#cancel()})
 * before it returns.
 */
final class Wire {
    /** How long past its own wait the answer of a wait (or a quick statement) may take. */
    static final long ANSWER_GRACE_NANOS = TimeUnit.SECONDS.toNanos(10);

    private static final ExecutorService CALLS = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "pg_fencing statement");
        thread.setDaemon(true);
        return thread;
    });

    private Wire() {
    }

    /** A text the SQL casts to interval: '1500 milliseconds' (1 ms at least). */
    static String interval(Duration duration) {
        return Math.max(1, duration.toMillis()) + " milliseconds";
    }

    static String interval(long nanos) {
        return interval(Duration.ofNanos(nanos));
    }

    /** Binds parameters by position; a null is bound untyped (the SQL casts it). */
    static void bind(PreparedStatement statement, Object... params) throws SQLException {
        for (int i = 0; i < params.length; i++) {
            Object param = params[i];
            if (param == null) {
                statement.setNull(i + 1, Types.VARCHAR);
            } else if (param instanceof Array) {
                statement.setArray(i + 1, (Array) param);
            } else {
                statement.setObject(i + 1, param);
            }
        }
    }

    /** Runs one statement: its first value as text, null without a row. */
    static String value(Connection connection, String sql, Object... params) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(sql)) {
            bind(statement, params);
            return firstValue(statement);
        }
    }

    private static String firstValue(PreparedStatement statement) throws SQLException {
        if (!statement.execute()) {
            return null;
        }
        try (ResultSet rows = statement.getResultSet()) {
            return rows.next() ? rows.getString(1) : null;
        }
    }

    /**
     * Runs one statement, waiting for its answer until {@code deadline} (System.nanoTime) at most:
     * its first value as text. No answer by then: the connection is aborted and
     * SQLTimeoutException thrown. Interrupted: the statement is cancelled on the server, and if
     * it had answered all the same, {@code abandoned} gets the value (a grant nobody will use).
     */
    static String valueWithin(Connection connection, long deadline, Consumer<String> abandoned,
                              String sql, Object... params)
            throws SQLException, InterruptedException {
        return within(connection, deadline, abandoned, Wire::firstValue, sql, params);
    }

    /** {@link #valueWithin} for every row of the answer, each row's values as text. */
    static List<String[]> rowsWithin(Connection connection, long deadline, String sql,
                                     Object... params) throws SQLException, InterruptedException {
        return within(connection, deadline, null, Wire::allRows, sql, params);
    }

    private interface Reader<T> {
        T read(PreparedStatement statement) throws SQLException;
    }

    private static <T> T within(Connection connection, long deadline, Consumer<T> abandoned,
                                Reader<T> reader, String sql, Object... params)
            throws SQLException, InterruptedException {
        PreparedStatement statement = connection.prepareStatement(sql);
        try {
            bind(statement, params);
            Future<T> answer = CALLS.submit(() -> reader.read(statement));
            try {
                return answer.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (TimeoutException late) {
                abort(connection);
                throw new SQLTimeoutException("no answer from the server before the deadline to: "
                        + sql + "; its connection was aborted");
            } catch (InterruptedException interrupted) {
                T value = cancel(connection, statement, answer);
                if (value != null && abandoned != null) {
                    abandoned.accept(value);
                }
                throw interrupted;
            } catch (ExecutionException failed) {
                Throwable cause = failed.getCause();
                if (cause instanceof SQLException) {
                    throw (SQLException) cause;
                }
                throw new SQLException("statement failed: " + sql, cause);
            }
        } finally {
            closeQuietly(statement);
        }
    }

    private static List<String[]> allRows(PreparedStatement statement) throws SQLException {
        List<String[]> rows = new ArrayList<>();
        if (!statement.execute()) {
            return rows;
        }
        try (ResultSet result = statement.getResultSet()) {
            int columns = result.getMetaData().getColumnCount();
            while (result.next()) {
                String[] values = new String[columns];
                for (int i = 0; i < columns; i++) {
                    values[i] = result.getString(i + 1);
                }
                rows.add(values);
            }
        }
        return rows;
    }

    /**
     * Ends a statement the caller no longer waits for: it is cancelled on the server, again every
     * 100 ms while it runs (a cancel that comes before the driver has sent the statement is a
     * no-op), and waited for up to the grace, after which the connection is aborted. Returns its
     * value if it answered all the same.
     */
    private static <T> T cancel(Connection connection, PreparedStatement statement,
                                Future<T> answer) {
        long end = System.nanoTime() + ANSWER_GRACE_NANOS;
        while (System.nanoTime() < end) {
            try {
                statement.cancel();
            } catch (SQLException ignored) {
                // the statement ended meanwhile, or the connection did
            }
            try {
                return answer.get(100, TimeUnit.MILLISECONDS);
            } catch (TimeoutException stillRunning) {
                continue;
            } catch (ExecutionException ended) {
                return null; // cancelled on the server, as wanted
            } catch (InterruptedException again) {
                continue; // the caller is interrupted already; it learns so when this returns
            }
        }
        abort(connection);
        return null;
    }

    /** Runs one statement: its first row's values as text, null without a row. */
    static String[] row(Connection connection, String sql, Object... params) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(sql)) {
            bind(statement, params);
            return firstRow(statement);
        }
    }

    private static String[] firstRow(PreparedStatement statement) throws SQLException {
        if (!statement.execute()) {
            return null;
        }
        try (ResultSet rows = statement.getResultSet()) {
            if (!rows.next()) {
                return null;
            }
            String[] values = new String[rows.getMetaData().getColumnCount()];
            for (int i = 0; i < values.length; i++) {
                values[i] = rows.getString(i + 1);
            }
            return values;
        }
    }

    /**
     * A short statement (a statement of the line: join, poll, leave), waited for until
     * {@code deadline} at most: its first row. No answer by then: the connection is aborted and
     * SQLTimeoutException thrown. An interrupt does not cancel it (it is short, and its answer
     * -- a place, a grant -- must be known to be given back): its answer is waited for all the
     * same, and then InterruptedException thrown, the row in {@code answered[0]} if the caller
     * passed an array.
     */
    static String[] rowWithin(Connection connection, long deadline, String[][] answered, String sql,
                              Object... params) throws SQLException, InterruptedException {
        PreparedStatement statement = connection.prepareStatement(sql);
        try {
            bind(statement, params);
            Future<String[]> answer = CALLS.submit(() -> firstRow(statement));
            boolean interrupted = false;
            String[] row;
            while (true) {
                try {
                    row = answer.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (TimeoutException late) {
                    abort(connection);
                    if (interrupted) {
                        Thread.currentThread().interrupt();
                    }
                    throw new SQLTimeoutException("no answer from the server before the deadline "
                            + "to: " + sql + "; its connection was aborted");
                } catch (ExecutionException failed) {
                    if (interrupted) {
                        Thread.currentThread().interrupt();
                    }
                    Throwable cause = failed.getCause();
                    if (cause instanceof SQLException) {
                        throw (SQLException) cause;
                    }
                    throw new SQLException("statement failed: " + sql, cause);
                }
            }
            if (interrupted) {
                if (answered != null) {
                    answered[0] = row;
                }
                throw new InterruptedException("interrupted during: " + sql);
            }
            return row;
        } finally {
            closeQuietly(statement);
        }
    }

    /** One attempt of a wait: the grant (as text) or null, waiting {@code sliceNanos} (0: none). */
    interface Attempt {
        String attempt(long sliceNanos) throws SQLException, InterruptedException;
    }

    /** What a wait got, and when the attempt that got it was sent (System.nanoTime). */
    record Grant(String value, long sent) {
    }

    /** A wait without end. */
    static final long FOREVER = Long.MAX_VALUE;
    /** The longest single attempt of a wait: each is waited for only its length plus the grace,
     *  so that a connection that died mid-wait is noticed. */
    static final long SLICE_NANOS = TimeUnit.SECONDS.toNanos(30);

    /**
     * Waits up to {@code waitNanos} (0: one attempt without waiting; {@link #FOREVER}) in
     * slices: the grant, or null when the wait ran out.
     */
    static Grant waitInSlices(long waitNanos, Attempt attempt)
            throws SQLException, InterruptedException {
        long start = System.nanoTime();
        while (true) {
            long sent = System.nanoTime();
            long left = waitNanos == FOREVER ? SLICE_NANOS : waitNanos - (sent - start);
            String value = attempt.attempt(waitNanos == 0 ? 0 : Math.max(1, Math.min(left, SLICE_NANOS)));
            if (value != null) {
                return new Grant(value, sent);
            }
            if (waitNanos != FOREVER && System.nanoTime() - start >= waitNanos) {
                return null;
            }
        }
    }

    /** Closes the connection at once, whatever another thread does on it. */
    static void abort(Connection connection) {
        try {
            connection.abort(Runnable::run);
        } catch (SQLException | RuntimeException ignored) {
            // closed already
        }
    }

    static void closeQuietly(AutoCloseable closeable) {
        if (closeable == null) {
            return;
        }
        try {
            closeable.close();
        } catch (Exception ignored) {
            // nothing to do about it here
        }
    }

    static boolean isClosed(Connection connection) {
        try {
            return connection == null || connection.isClosed();
        } catch (SQLException e) {
            return true;
        }
    }
}
