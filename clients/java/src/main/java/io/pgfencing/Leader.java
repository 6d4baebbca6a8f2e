package io.pgfencing;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * The live holder of a lock's exclusive lease, as the view fencing_leases shows it.
 *
 * @param payload JSON text, as the server prints it; null without one
 */
public record Leader(String holder, long token, String payload) {

    /** The live lease and how long it has left by the server's clock (ms), so that the client's
     *  clock and the server's never meet. */
    private static final String READ = "SELECT holder, token::text, payload::text,"
            + " ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
            + " FROM fencing_leases WHERE lock_name = ? AND state = 'live'";

    /** What one read of fencing_leases found: the leader, and the ms its lease has left. */
    record Reading(Optional<Leader> leader, OptionalLong millisLeft) {
    }

    static Reading read(Connection connection, String lockName) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(READ)) {
            statement.setString(1, lockName);
            try (ResultSet row = statement.executeQuery()) {
                if (!row.next()) {
                    return new Reading(Optional.empty(), OptionalLong.empty());
                }
                Leader leader = new Leader(row.getString(1), Long.parseLong(row.getString(2)),
                        row.getString(3));
                return new Reading(Optional.of(leader), OptionalLong.of(row.getLong(4)));
            }
        }
    }

    /** Whether {@code after} is another leader than {@code before}: a renewal, or a new payload
     *  of the same grant, is none. */
    static boolean changed(Optional<Leader> before, Optional<Leader> after) {
        if (before.isEmpty() || after.isEmpty()) {
            return before.isPresent() != after.isPresent();
        }
        return !before.get().holder().equals(after.get().holder())
                || before.get().token() != after.get().token();
    }
}
