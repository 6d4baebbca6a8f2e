package io.pgfencing;

/**
 * The lease (or its session) is known lost: expired, refused, revoked, released, or no longer
 * renewable in time. Thrown before anything is sent; its SQLSTATE is null then, or 55Z05 when
 * the server said the session had ended.
 */
public final class LeaseLostException extends FencingException {
    private static final long serialVersionUID = 1L;

    LeaseLostException(String message) {
        super(message, null, null);
    }

    LeaseLostException(String message, String sqlState, Throwable cause) {
        super(message, sqlState, cause);
    }
}
