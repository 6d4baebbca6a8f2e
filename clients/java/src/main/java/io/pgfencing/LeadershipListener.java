package io.pgfencing;

/**
 * Hears of a {@link LeaderElection}'s terms: {@link #gained} from the thread that campaigned,
 * {@link #lost} once per term, from the thread that reports the loss of the lease (the
 * options' onLost runs there too; not the heartbeat's, which renews on) or from the thread that
 * resigned.
 */
public interface LeadershipListener {
    default void gained(Lease lease) {
    }

    default void lost(String reason) {
    }
}
