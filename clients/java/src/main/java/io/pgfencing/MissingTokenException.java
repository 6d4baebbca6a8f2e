package io.pgfencing;

/** 55Z02: the write did not set the protected table's token column. The write changed nothing. */
public final class MissingTokenException extends FencingException {
    private static final long serialVersionUID = 1L;

    MissingTokenException(String message, Throwable cause) {
        super(message, MISSING_TOKEN, cause);
    }
}
