package io.pgfencing;

import java.sql.Connection;
import java.time.Duration;

/**
 * A leader candidate: campaigns, says "leader TOKEN" once it leads, and writes under its token
 * every 100 ms until its lease is lost, then campaigns again. Arguments: lock, table, holder.
 */
public final class Candidate {
    public static void main(String[] args) throws Exception {
        String lock = args[0];
        String table = args[1];
        String me = args[2];
        FencingClient client = FencingClient.fromEnvironment();
        LeaderElection election = client.election(lock,
                LeaseOptions.ofTtl(Duration.ofSeconds(1)).withHolder(me));
        try (Connection db = client.connect("pg_fencing candidate " + me)) {
            while (true) {
                Lease lease = election.campaign(null);
                System.out.println("leader " + lease.token());
                System.out.flush();
                while (lease.isHeld()) {
                    try {
                        lease.executeUpdate(db, "UPDATE " + table + " SET token = ?, v = ? WHERE id = 1",
                                lease.token(), me);
                    } catch (LeaseLostException | StaleTokenException e) {
                        break;
                    }
                    Thread.sleep(100);
                }
            }
        }
    }
}
