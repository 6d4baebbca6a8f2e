package io.pgfencing;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

/**
 * The entry point. Every lease, session and election it makes connects with the same JDBC URL
 * and properties (and so as the same role, which renewals and releases require).
 *
 * <pre>{@code
 * FencingClient client = new FencingClient("jdbc:postgresql://db/app", props);
 * FencedLock lock = client.lock("nightly-report", LeaseOptions.ofTtl(Duration.ofSeconds(10)));
 * }</pre>
 *
 * <p>Its connections never use named server-side prepared statements: pgjdbc's
 * {@code prepareThreshold} is 0 on them unless the URL or the properties set it, so that they
 * work through a transaction-pooling PgBouncer. A connection the application passes in (to
 * {@link Fenced#executeUpdate}, {@link Lease#executeUpdate}) is the application's to configure
 * the same way.
 *
 * <p>A wait in a session for an exclusive lease, and a campaign, is a place in the lock's line
 * (1.10), polled every 0.5 s ({@link #withPoll(Duration)}). {@link #withListen(boolean)}
 * {@code true} also keeps one connection LISTENing on {@code fencing_line} while any wait of the
 * client is in line, and a place polls at once when its number is announced (and at the latest
 * every 2 s by default). Leave it off through a transaction-pooling PgBouncer, where LISTEN cannot
 * be relied on; turn it on when the URL names the server (or a session pool).
 *
 * <p>The connections it makes: <b>one heartbeat connection</b> for the client (and the clients
 * {@link #withListen} and {@link #withPoll} make from it), named {@code pg_fencing heartbeat
 * <pid>:<random>}, open while something of the client's lives, on which one thread renews every
 * session, election and lease of its own in one statement per round ({@link SharedHeartbeat});
 * a <b>work connection</b> per session (per campaigning candidate: an election campaigns in a
 * session of its own) and per lease of its own ({@link FencedLock}, {@link Semaphore},
 * {@link SharedLock}: its acquire, its wait and its release), idle between short statements;
 * and, with {@link #withListen(boolean)}, <b>one LISTEN connection</b> while any of its waits is
 * in line. A waiting candidate costs one place in line and its session's row on the server, and
 * through a transaction pooler no server connection between its short statements.
 */
public final class FencingClient {
    private final String url;
    private final Properties properties;
    private final boolean listen;
    private final Duration poll;
    /** LISTENs on fencing_line for the waits in line; null: they poll on their timer alone. */
    private final Line.Listener listener;
    /** Renews everything the client (and the copies made from it) makes: one connection. */
    private final SharedHeartbeat heartbeat;

    /** @param properties the driver's (user, password, ...); copied */
    public FencingClient(String jdbcUrl, Properties properties) {
        this(jdbcUrl, properties, false, null, null);
    }

    private FencingClient(String jdbcUrl, Properties properties, boolean listen, Duration poll,
                          SharedHeartbeat heartbeat) {
        this.url = jdbcUrl;
        this.properties = new Properties();
        this.properties.putAll(properties);
        this.listen = listen;
        Line.pollNanos(poll, listen); // IllegalArgumentException now, not at the first wait
        this.poll = poll;
        this.listener = listen ? new Line.Listener(this) : null;
        // A copy (withListen, withPoll) connects as the same role: it shares the heartbeat.
        this.heartbeat = heartbeat != null ? heartbeat : new SharedHeartbeat(this);
    }

    /** The client's one heartbeat, shared by the copies made from it. */
    SharedHeartbeat heartbeat() {
        return heartbeat;
    }

    /**
     * A client like this one whose waits in line also LISTEN on {@code fencing_line} (one
     * connection for all of them, open while one waits), to learn of a hand-over at once rather
     * than at the next poll. Only for a URL that names the server or a session pool: through a
     * transaction pooler LISTEN cannot be relied on (the waits still poll on their timer). It
     * shares this client's heartbeat.
     */
    public FencingClient withListen(boolean value) {
        return new FencingClient(url, properties, value, poll, heartbeat);
    }

    /** A client like this one whose waits in line poll their place every {@code value} (null:
     *  the default, 0.5 s, or 2 s when listening). It shares this client's heartbeat. */
    public FencingClient withPoll(Duration value) {
        return new FencingClient(url, properties, listen, value, heartbeat);
    }

    /** Whether the waits in line LISTEN on fencing_line. */
    public boolean isListening() {
        return listen;
    }

    /** The listener of the waits in line, or null. */
    Line.Listener lineListener() {
        return listener;
    }

    /** The period between two polls of a place in line (ns). */
    long linePollNanos() {
        return Line.pollNanos(poll, listen);
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
     * level that meets a just-changed row fails with 40001), named in pg_stat_activity, with
     * pgjdbc's {@code prepareThreshold=0} (no named server-side prepared statements, which a
     * transaction pooler breaks) unless the URL or the properties set it.
     */
    public Connection connect(String applicationName) throws SQLException {
        Properties named = new Properties();
        named.putAll(properties);
        if (!setsPrepareThreshold(url, named)) {
            named.setProperty("prepareThreshold", "0");
        }
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

    /** Whether the URL's parameters or the properties choose pgjdbc's prepareThreshold. */
    static boolean setsPrepareThreshold(String url, Properties properties) {
        if (properties.getProperty("prepareThreshold") != null) {
            return true;
        }
        int query = url.indexOf('?');
        if (query < 0) {
            return false;
        }
        for (String parameter : url.substring(query + 1).split("&")) {
            if (parameter.toLowerCase(Locale.ROOT).startsWith("preparethreshold=")) {
                return true;
            }
        }
        return false;
    }

    /** An exclusive lock, taken by its lock methods. Its wait is CALL fencing_await, which
     *  holds a connection for the whole wait (a lease of its own has no session to wait in
     *  line in): through a transaction pooler, wait in a {@link FencingSession} instead. */
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

    /** Opens a session (fencing_session_open) at once; one keepalive for many leases, renewed
     *  by the client's heartbeat. */
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
