package io.pgfencing;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

/**
 * The entry point. Every lease, session and election it makes uses connections of its own, from
 * the same JDBC URL and properties (and so as the same role, which renewals and releases
 * require).
 *
 * <pre>{@code
 * FencingClient client = new FencingClient("jdbc:postgresql://db/app", props);
 * FencedLock lock = client.lock("nightly-report", LeaseOptions.ofTtl(Duration.ofSeconds(10)));
 * }</pre>
 */
public final class FencingClient {
    private final String url;
    private final Properties properties;

    /** @param properties the driver's (user, password, ...); copied */
    public FencingClient(String jdbcUrl, Properties properties) {
        this.url = jdbcUrl;
        this.properties = new Properties();
        this.properties.putAll(properties);
    }

    public FencingClient(String jdbcUrl) {
        this(jdbcUrl, new Properties());
    }

    /**
     * A client for the server libpq's PG* variables name: PGHOST (default localhost), PGPORT
     * (5432), PGDATABASE, PGUSER (default: the system user), PGPASSWORD. The driver speaks TCP
     * only: a PGHOST that is a Unix-socket directory (it starts with /) becomes 127.0.0.1, with
     * the same port.
     */
    public static FencingClient fromEnvironment() {
        return fromEnvironment(System.getenv());
    }

    static FencingClient fromEnvironment(Map<String, String> env) {
        String host = env.getOrDefault("PGHOST", "");
        if (host.isEmpty() || host.startsWith("/")) {
            host = host.isEmpty() ? "localhost" : "127.0.0.1";
        }
        String user = env.getOrDefault("PGUSER", System.getProperty("user.name"));
        String database = env.getOrDefault("PGDATABASE", user);
        Properties properties = new Properties();
        properties.setProperty("user", user);
        if (env.get("PGPASSWORD") != null) {
            properties.setProperty("password", env.get("PGPASSWORD"));
        }
        String url = "jdbc:postgresql://" + host + ":" + env.getOrDefault("PGPORT", "5432") + "/"
                + URLEncoder.encode(database, StandardCharsets.UTF_8).replace("+", "%20");
        return new FencingClient(url, properties);
    }

    /** The JDBC URL the client's connections use. */
    public String url() {
        return url;
    }

    /**
     * A connection of the client's own: autocommit, READ COMMITTED (an acquire at a stricter
     * level that meets a just-changed row fails with 40001), named in pg_stat_activity.
     */
    public Connection connect(String applicationName) throws SQLException {
        Properties named = new Properties();
        named.putAll(properties);
        named.setProperty("ApplicationName", applicationName.length() > 63
                ? applicationName.substring(0, 63) : applicationName);
        Connection connection = DriverManager.getConnection(url, named);
        try {
            connection.setAutoCommit(true);
            connection.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
        } catch (SQLException e) {
            Wire.closeQuietly(connection);
            throw e;
        }
        return connection;
    }

    /** An exclusive lock, taken by its lock methods. */
    public FencedLock lock(String name, LeaseOptions options) {
        return new FencedLock(this, name, options);
    }

    public FencedLock lock(String name) {
        return lock(name, LeaseOptions.defaults());
    }

    /** The semaphore {@code name} of {@code permits} permits, each with its own token. */
    public Semaphore semaphore(String name, int permits, LeaseOptions options) {
        return new Semaphore(this, name, permits, options);
    }

    /** Shared leases of {@code name}, beside other shared holders (no exclusive one). */
    public SharedLock shared(String name, LeaseOptions options) {
        return new SharedLock(this, name, options);
    }

    /** Opens a session (fencing_session_open) at once; one heartbeat for many leases. */
    public FencingSession openSession(LeaseOptions options) throws SQLException {
        return new FencingSession(this, options);
    }

    public LeaderElection election(String name, LeaseOptions options) {
        return new LeaderElection(this, name, options);
    }

    /** The live holder of {@code name}'s exclusive lease, if any. */
    public Optional<Leader> leader(String name) throws SQLException {
        try (Connection connection = connect("pg_fencing leader")) {
            return Leader.read(connection, name).leader();
        }
    }
}
