package io.pgfencing;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Savepoint;

/**
 * The fenced-statement helper: one write whose refusals by pg_fencing's guard come back as this
 * package's exceptions.
 *
 * <pre>{@code
 * Fenced.executeUpdate(db, "UPDATE reports SET token = ?, body = ? WHERE id = 7", token, body);
 * }</pre>
 */
public final class Fenced {
    private Fenced() {
    }

    /**
     * Runs one write (? placeholders, bind parameters) and returns its row count. In autocommit
     * it is a transaction of its own; inside the caller's transaction it runs in a savepoint, so
     * that a refusal leaves the transaction usable. The guard's refusals become
     * {@link StaleTokenException} (55Z01), {@link MissingTokenException} (55Z02),
     * {@link NeverGrantedTokenException} (55Z03) and {@link LeaseEndedException} (55Z04, at an
     * autocommit's COMMIT; for the caller's own COMMIT see {@link FencingException#map}); other
     * errors come unchanged.
     */
    public static int executeUpdate(Connection connection, String sql, Object... params)
            throws SQLException {
        Savepoint savepoint = connection.getAutoCommit() ? null : connection.setSavepoint();
        try (PreparedStatement statement = connection.prepareStatement(sql)) {
            Wire.bind(statement, params);
            int rows = statement.executeUpdate();
            if (savepoint != null) {
                connection.releaseSavepoint(savepoint);
            }
            return rows;
        } catch (SQLException error) {
            if (savepoint != null) {
                try {
                    connection.rollback(savepoint);
                } catch (SQLException ignored) {
                    // the transaction is broken beyond the savepoint; the error says why
                }
            }
            throw FencingException.map(error);
        }
    }
}
