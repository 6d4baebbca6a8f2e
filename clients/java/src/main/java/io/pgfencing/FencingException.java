package io.pgfencing;

import java.sql.SQLException;

/**
 * Base of the errors pg_fencing's guards and leases raise.
 *
 * <p>A {@link SQLException}, not a RuntimeException: a fenced write is a JDBC call, and code that
 * already handles SQLException (or reads {@link #getSQLState()}) keeps working; the guard's
 * refusals keep the server's SQLSTATE and message, with the driver's exception as the cause.
 * Where an interface forbids checked exceptions ({@link java.util.concurrent.locks.Lock}'s
 * methods), they come wrapped in an {@link UncheckedSQLException}.
 */
public class FencingException extends SQLException {
    public static final String STALE_TOKEN = "55Z01";
    public static final String MISSING_TOKEN = "55Z02";
    public static final String NEVER_GRANTED_TOKEN = "55Z03";
    public static final String LEASE_ENDED = "55Z04";
    public static final String SESSION_ENDED = "55Z05";

    private static final long serialVersionUID = 1L;

    protected FencingException(String message, String sqlState, Throwable cause) {
        super(message, sqlState, cause);
    }

    /**
     * The package's exception for a refusal of pg_fencing's (SQLSTATE 55Z01 to 55Z05), else
     * {@code error} itself. For a COMMIT the application runs itself, where 55Z04 arrives.
     */
    public static SQLException map(SQLException error) {
        String state = error.getSQLState();
        if (state == null) {
            return error;
        }
        String message = error.getMessage();
        switch (state) {
            case STALE_TOKEN: return new StaleTokenException(message, error);
            case MISSING_TOKEN: return new MissingTokenException(message, error);
            case NEVER_GRANTED_TOKEN: return new NeverGrantedTokenException(message, error);
            case LEASE_ENDED: return new LeaseEndedException(message, error);
            case SESSION_ENDED: return new LeaseLostException(message, SESSION_ENDED, error);
            default: return error;
        }
    }
}
