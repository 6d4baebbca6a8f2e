package io.pgfencing;

/** 55Z01: the token is lower than one the row (or lock) has seen: another holder has taken over; stop acting on this lease. The write changed nothing. */
public final class StaleTokenException extends FencingException {
    private static final long serialVersionUID = 1L;

    StaleTokenException(String message, Throwable cause) {
        super(message, STALE_TOKEN, cause);
    }
}
