package io.pgfencing;

/**
 * Hears of a {@link LeaderElection}'s terms: {@link #gained} from the thread that campaigned,
 * {@link #lost} once per term, from the heartbeat thread when the lease is lost or from the
 * thread that resigned.
 */
public interface LeadershipListener {
    default void gained(Lease lease) {
    }

    default void lost(String reason) {
    }
}
