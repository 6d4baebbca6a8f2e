package io.pgfencing;

/** 55Z04: the COMMIT of a transaction that wrote under a lease which ended before it; nothing it did was kept. The write changed nothing. */
public final class LeaseEndedException extends FencingException {
    private static final long serialVersionUID = 1L;

    LeaseEndedException(String message, Throwable cause) {
        super(message, LEASE_ENDED, cause);
    }
}
