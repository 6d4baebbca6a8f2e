package io.pgfencing;

/** 55Z03: a token the database never granted: a bug, not a lost lease. The write changed nothing. */
public final class NeverGrantedTokenException extends FencingException {
    private static final long serialVersionUID = 1L;

    NeverGrantedTokenException(String message, Throwable cause) {
        super(message, NEVER_GRANTED_TOKEN, cause);
    }
}
