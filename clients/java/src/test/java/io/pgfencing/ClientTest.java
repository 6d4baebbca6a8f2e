package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The client's set-up and the errors a caller can trigger before and after sending. */
class ClientTest {
    @Test
    void theEnvironmentNamesTheServerAndASocketDirectoryBecomesTcp() {
        assertEquals("jdbc:postgresql://db.example:6543/app%20one", FencingClient.fromEnvironment(
                Map.of("PGHOST", "db.example", "PGPORT", "6543", "PGDATABASE", "app one", "PGUSER", "u")).url());
        assertEquals("jdbc:postgresql://127.0.0.1:5433/u", FencingClient.fromEnvironment(
                Map.of("PGHOST", "/var/run/postgresql", "PGPORT", "5433", "PGUSER", "u")).url());
        assertEquals("jdbc:postgresql://localhost:5432/u", FencingClient.fromEnvironment(
                Map.of("PGUSER", "u")).url());
    }

    @Test
    void badArgumentsAreRefusedBeforeAnythingIsSentAndSayWhichValue() {
        IllegalArgumentException heartbeat = assertThrows(IllegalArgumentException.class, () ->
                CLIENT.lock("x", LeaseOptions.ofTtl(Duration.ofSeconds(1)).withHeartbeat(Duration.ofSeconds(2))));
        assertTrue(heartbeat.getMessage().contains("PT2S"), heartbeat.getMessage());
        IllegalArgumentException tiny = assertThrows(IllegalArgumentException.class, () ->
                CLIENT.lock("x", LeaseOptions.ofTtl(Duration.ofNanos(2))));
        assertTrue(tiny.getMessage().contains("ttl PT0.000000002S") && tiny.getMessage().contains("ttl/3"),
                tiny.getMessage());
        IllegalArgumentException permits = assertThrows(IllegalArgumentException.class, () ->
                CLIENT.semaphore("pool", 0, LeaseOptions.defaults()));
        assertTrue(permits.getMessage().contains("got 0"), permits.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LeaseOptions.ofTtl(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> CLIENT.lock("", LeaseOptions.defaults()));
    }

    @Test
    void theServersRefusalComesOutOfLocksMethodsUnchecked() {
        // A semaphore's name taken exclusively: the server refuses, the Lock method cannot throw
        // SQLException, and the wrapper keeps it.
        String name = Live.name();
        try (Lease permit = CLIENT.semaphore(name, 2, LeaseOptions.defaults()).acquire()) {
            UncheckedSQLException refused = assertThrows(UncheckedSQLException.class, () ->
                    CLIENT.lock(name, LeaseOptions.defaults()).tryLock());
            assertNotNull(refused.getCause().getSQLState(), refused.getMessage());
            assertTrue(permit.isHeld());
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }
}
