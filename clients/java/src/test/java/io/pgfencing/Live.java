package io.pgfencing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * The live server the tests run against, named by the PG* variables (say, inside
 * scripts/lib.sh's with_throwaway_cluster), as a role that may create the extension and revoke
 * leases (the cluster's superuser); and child processes for the scenarios that stop or kill one.
 */
final class Live {
    static final FencingClient CLIENT = FencingClient.fromEnvironment();

    static {
        try (Connection db = CLIENT.connect("pg_fencing tests");
             Statement statement = db.createStatement()) {
            statement.execute("CREATE EXTENSION IF NOT EXISTS pg_fencing");
        } catch (SQLException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private Live() {
    }

    /** A connection for the test's own statements, in autocommit. */
    /** A client object of its own (its own heartbeat), logged in as role. */
    static FencingClient clientAs(String role, String password) {
        java.util.Properties properties = new java.util.Properties();
        properties.setProperty("user", role);
        properties.setProperty("password", password);
        return new FencingClient(CLIENT.url(), properties);
    }

    /** One statement of its own. */
    static void execute(Connection db, String sql) throws SQLException {
        try (java.sql.Statement statement = db.createStatement()) {
            statement.execute(sql);
        }
    }

    static Connection db() throws SQLException {
        return CLIENT.connect("pg_fencing tests");
    }

    /** A lock or table name of the test's own. */
    static String name() {
        return "java_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    }

    /** The first value of a query, as text. */
    static String value(Connection db, String sql, Object... params) throws SQLException {
        return Wire.value(db, sql, params);
    }

    /** A table whose one row is written under lockName's lock-wide fence. */
    static void protectedTable(Connection db, String table, String lockName) throws SQLException {
        try (Statement statement = db.createStatement()) {
            statement.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, token fencing_token, v text)");
            statement.execute("INSERT INTO " + table + " VALUES (1, NULL, 'initial')");
        }
        Wire.value(db, "SELECT fencing_protect(?::regclass, lock_name => ?)", table, lockName);
    }

    static void eventually(Duration timeout, BooleanSupplier condition) throws InterruptedException {
        long end = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean() && System.nanoTime() < end) {
            TimeUnit.MILLISECONDS.sleep(20);
        }
    }

    /** A JVM of its own running {@code main} from the test classes, lines on stdin and stdout. */
    static final class Child implements AutoCloseable {
        final Process process;
        private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        private final Writer input;

        Child(Class<?> main, String... args) throws IOException {
            List<String> command = new ArrayList<>(List.of(
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                    "-cp", classPath(main), main.getName()));
            command.addAll(List.of(args));
            process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            input = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
            Thread reader = new Thread(() -> {
                try (BufferedReader out = new BufferedReader(new InputStreamReader(
                        process.getInputStream(), StandardCharsets.UTF_8))) {
                    for (String line; (line = out.readLine()) != null; ) {
                        lines.add(line);
                    }
                } catch (IOException ignored) {
                    // the child is gone
                }
            }, "child " + process.pid());
            reader.setDaemon(true);
            reader.start();
        }

        /** Where the test classes, the package and the driver were loaded from (the console
         *  launcher's own class path has none of them). */
        private static String classPath(Class<?> main) {
            List<String> parts = new ArrayList<>();
            for (Class<?> of : List.of(main, FencingClient.class, org.postgresql.Driver.class)) {
                try {
                    parts.add(Path.of(of.getProtectionDomain().getCodeSource().getLocation().toURI()).toString());
                } catch (java.net.URISyntaxException e) {
                    throw new IllegalStateException(e);
                }
            }
            return String.join(java.io.File.pathSeparator, parts);
        }

        /** The next line, or AssertionError after the timeout. */
        String readLine(Duration timeout) throws InterruptedException {
            String line = lines.poll(timeout.toMillis(), TimeUnit.MILLISECONDS);
            if (line == null) {
                throw new AssertionError("no line from pid " + process.pid() + " within " + timeout);
            }
            return line;
        }

        /** The next line if one is there. */
        String pollLine() {
            return lines.poll();
        }

        void writeLine(String line) throws IOException {
            input.write(line + "\n");
            input.flush();
        }

        void signal(String name) throws IOException, InterruptedException {
            Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(process.pid())).start();
            if (!kill.waitFor(5, TimeUnit.SECONDS) || kill.exitValue() != 0) {
                throw new AssertionError("kill -" + name + " " + process.pid() + " failed");
            }
        }

        /** SIGKILL: a lease it holds is left to run out. */
        void kill() throws InterruptedException {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }

        @Override
        public void close() throws IOException {
            if (process.isAlive()) {
                process.destroyForcibly(); // SIGKILL ends a stopped process too
            }
        }
    }

    /** How many CALL fencing_await of connections named applicationName are running. */
    static int waitsOnTheServer(Connection db, String applicationName) throws SQLException {
        return count(db, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%' "
                + "AND state = 'active' AND application_name = ?", applicationName);
    }

    /** Waits until waitsOnTheServer() says {@code expected}: what it says then. */
    static int awaitWaitsOnTheServer(Connection db, String applicationName, int expected)
            throws InterruptedException {
        eventually(Duration.ofSeconds(5), () -> {
            try {
                return waitsOnTheServer(db, applicationName) == expected;
            } catch (SQLException e) {
                return false;
            }
        });
        try {
            return waitsOnTheServer(db, applicationName);
        } catch (SQLException e) {
            throw new AssertionError(e);
        }
    }

    /** How many places wait in a lock's line for sessions of {@code holder} (1.10). */
    static int placesInLine(Connection db, String holder) throws SQLException {
        return count(db, "SELECT count(*) FROM fencing_line l JOIN fencing_sessions s USING (session_id) "
                + "WHERE s.holder = ? AND l.token IS NULL", holder);
    }

    /** Waits until placesInLine() says {@code expected}: what it says then. */
    static int awaitPlacesInLine(Connection db, String holder, int expected) throws InterruptedException {
        eventually(Duration.ofSeconds(5), () -> {
            try {
                return placesInLine(db, holder) == expected;
            } catch (SQLException e) {
                return false;
            }
        });
        try {
            return placesInLine(db, holder);
        } catch (SQLException e) {
            throw new AssertionError(e);
        }
    }

    static int count(Connection db, String sql, Object... params) throws SQLException {
        return Integer.parseInt(value(db, sql, params));
    }

}
