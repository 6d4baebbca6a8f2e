package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;

/**
 * One grant of a lock: an exclusive lease, a semaphore's permit or a shared lease, on its own or
 * in a {@link FencingSession}. Its {@link #token()} goes into every write the lease protects;
 * closing it releases it.
 */
public interface Lease extends AutoCloseable {
    String lockName();

    /** The fencing token of this grant. */
    long token();

    /**
     * Whether the lease can still be trusted, judged on System.nanoTime(). It cannot close the
     * window between this check and a write: the token and the table's guard do.
     */
    boolean isHeld();

    /** Why it is not held ("released", a refused renewal, ...); empty while it is. */
    Optional<String> lostReason();

    /** Waits until the loss has been reported (onLost called); false on timeout. */
    boolean awaitLost(Duration timeout) throws InterruptedException;

    /** 'lock "x"', 'a permit of semaphore "x"', ... for messages. */
    String describe();

    /** The token, or LeaseLostException once the lease is not held any more. */
    default long check() throws LeaseLostException {
        if (!isHeld()) {
            throw new LeaseLostException(describe() + " (token " + token() + ") is no longer held: "
                    + lostReason().orElse("unknown"));
        }
        return token();
    }

    /**
     * {@link Fenced#executeUpdate} after {@link #check()}: LeaseLostException, without sending
     * anything, when the lease is known lost; the guard's refusal if it was lost after the check
     * (a pause no client can see).
     */
    default int executeUpdate(Connection connection, String sql, Object... params)
            throws SQLException {
        check();
        return Fenced.executeUpdate(connection, sql, params);
    }

    /**
     * Gives the lock back: true if it was still this lease's on the server. Idempotent: later
     * calls return false.
     */
    boolean release() throws SQLException;

    /** {@link #release()}. */
    @Override
    default void close() throws SQLException {
        release();
    }
}
