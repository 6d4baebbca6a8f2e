package io.pgfencing;

import java.sql.SQLException;

/**
 * A {@link SQLException} from a method whose interface allows no checked exception
 * ({@link java.util.concurrent.locks.Lock#lock()} and the like), as
 * {@link java.io.UncheckedIOException} is for IOException.
 */
public final class UncheckedSQLException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    UncheckedSQLException(SQLException cause) {
        super(cause.getMessage(), cause);
    }

    @Override
    public synchronized SQLException getCause() {
        return (SQLException) super.getCause();
    }
}
