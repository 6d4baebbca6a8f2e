package io.pgfencing;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.Connection;
import java.time.Duration;

/**
 * The pause scenario's holder A: takes the lock, checks it, says "ready TOKEN", and waits for a
 * line; the test stops it (SIGSTOP) meanwhile, lets its lease run out and another holder write,
 * then resumes it. A then writes with its token, as a client that checked before the pause has
 * every reason to, and says what the database answered. Arguments: lock, table.
 */
public final class PauseHolder {
    public static void main(String[] args) throws Exception {
        String lock = args[0];
        String table = args[1];
        FencingClient client = FencingClient.fromEnvironment();
        try (Connection db = client.connect("pg_fencing pause holder");
             FencedLock fenced = client.lock(lock, LeaseOptions.ofTtl(Duration.ofSeconds(1)))) {
            long token = fenced.lockAndGetToken();
            fenced.check();
            System.out.println("ready " + token);
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine(); // stopped here
            try {
                Fenced.executeUpdate(db, "UPDATE " + table + " SET token = ?, v = 'A' WHERE id = 1", token);
                System.out.println("accepted");
            } catch (StaleTokenException e) {
                System.out.println("rejected " + e.getSQLState());
            }
            System.out.flush();
        }
    }
}
