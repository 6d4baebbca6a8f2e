package io.pgfencing;

import java.net.InetAddress;
import java.time.Duration;
import java.util.Objects;
import java.util.UUID;
import java.util.function.Consumer;

/**
 * How a lease (or a session) is kept: its ttl, how often it is renewed, the holder's label, who
 * hears of its loss, and the payload an exclusive lease publishes. Immutable; the with-methods
 * return a copy.
 *
 * @param ttl       the server ends the lease this long after the last renewal
 * @param heartbeat time between renewals; null for ttl/3
 * @param holder    the application's label in fencing_leases; null for host:pid:random
 * @param onLost    called once, with the reason, from a thread of the client's (not the one that
 *                  renews, so that it may block); may be null
 * @param payload   JSON text published with an exclusive lease; may be null
 */
public record LeaseOptions(Duration ttl, Duration heartbeat, String holder, Consumer<String> onLost,
                           String payload) {

    public LeaseOptions {
        Objects.requireNonNull(ttl, "ttl");
        if (ttl.isNegative() || ttl.isZero()) {
            throw new IllegalArgumentException("ttl must be positive, got " + ttl);
        }
    }

    /** A ttl of 10 s, renewed every ttl/3. */
    public static LeaseOptions defaults() {
        return ofTtl(Duration.ofSeconds(10));
    }

    public static LeaseOptions ofTtl(Duration ttl) {
        return new LeaseOptions(ttl, null, null, null, null);
    }

    public LeaseOptions withTtl(Duration value) {
        return new LeaseOptions(value, heartbeat, holder, onLost, payload);
    }

    public LeaseOptions withHeartbeat(Duration value) {
        return new LeaseOptions(ttl, value, holder, onLost, payload);
    }

    public LeaseOptions withHolder(String value) {
        return new LeaseOptions(ttl, heartbeat, value, onLost, payload);
    }

    public LeaseOptions withOnLost(Consumer<String> value) {
        return new LeaseOptions(ttl, heartbeat, holder, value, payload);
    }

    public LeaseOptions withPayload(String value) {
        return new LeaseOptions(ttl, heartbeat, holder, onLost, value);
    }

    /** The holder, or host:pid:random, new at each call: two leases never share a grant. */
    String holderOrDefault() {
        if (holder != null) {
            return holder;
        }
        return Host.NAME + ":" + ProcessHandle.current().pid() + ":"
                + UUID.randomUUID().toString().substring(0, 8);
    }

    /** The host's name, looked up once (it may ask DNS). */
    private static final class Host {
        static final String NAME = lookUp();

        private static String lookUp() {
            try {
                return InetAddress.getLocalHost().getHostName();
            } catch (java.io.IOException e) {
                return "localhost";
            }
        }
    }
}
