package io.pgfencing;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

/**
 * A real PgBouncer (/usr/sbin/pgbouncer) in front of the live server, started by a test: transaction
 * pooling on a free loopback port, as test/t/003_pgbouncer.pl sets it up. Clients authenticate
 * to it with auth_type any; it logs in to the server with the PG* variables' user and password.
 */
final class Bouncer implements AutoCloseable {
    static final Path PGBOUNCER = Path.of("/usr/sbin/pgbouncer");

    final int port;
    final Path dir;
    private final Process process;

    Bouncer(int poolSize, int maxClients) throws IOException, InterruptedException {
        Map<String, String> env = System.getenv();
        String host = env.getOrDefault("PGHOST", "");
        if (host.isEmpty() || host.startsWith("/") || host.equals("localhost")) {
            host = "127.0.0.1";
        }
        String user = env.getOrDefault("PGUSER", System.getProperty("user.name"));
        String server = "host=" + host + " port=" + env.getOrDefault("PGPORT", "5432")
                + " dbname=" + env.getOrDefault("PGDATABASE", user) + " user=" + user
                + (env.get("PGPASSWORD") != null ? " password=" + env.get("PGPASSWORD") : "");
        try (ServerSocket free = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = free.getLocalPort();
        }
        dir = Files.createTempDirectory("pg_fencing_bouncer");
        // PgBouncer refuses to run as root: then it runs as postgres (-u), which must read the
        // configuration and write its log here.
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwxrwx"));
        Path ini = dir.resolve("pgbouncer.ini");
        Files.writeString(ini, String.join("\n",
                "[databases]",
                "app = " + server,
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                "listen_port = " + port,
                "unix_socket_dir =",
                "auth_type = any",
                "pool_mode = transaction",
                "default_pool_size = " + poolSize,
                "min_pool_size = 0",
                "reserve_pool_size = 0",
                "max_client_conn = " + maxClients,
                "server_check_delay = 0",
                // pgjdbc sends it at start-up; PgBouncer refuses what it does not know.
                "ignore_startup_parameters = extra_float_digits",
                "logfile = " + dir.resolve("pgbouncer.log"),
                "pidfile = " + dir.resolve("pgbouncer.pid"),
                ""));
        Files.setPosixFilePermissions(ini, PosixFilePermissions.fromString("rw-r--r--"));
        List<String> command = new ArrayList<>(List.of(PGBOUNCER.toString()));
        if ("root".equals(System.getProperty("user.name"))) {
            command.addAll(List.of("-u", "postgres"));
        }
        command.add(ini.toString());
        process = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(dir.resolve("pgbouncer.out").toFile()).start();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            try (Socket probe = new Socket("127.0.0.1", port)) {
                return;
            } catch (IOException notYet) {
                if (!process.isAlive() || System.nanoTime() > end) {
                    close();
                    throw new IOException("PgBouncer did not start: " + log());
                }
                Live.eventually(Duration.ofMillis(50), () -> false);
            }
        }
    }

    /** A client of the package whose every connection goes through the pooler. */
    FencingClient client() {
        Properties properties = new Properties();
        properties.setProperty("user", System.getenv().getOrDefault("PGUSER", System.getProperty("user.name")));
        return new FencingClient("jdbc:postgresql://127.0.0.1:" + port + "/app", properties);
    }

    String log() {
        try {
            return Files.readString(dir.resolve("pgbouncer.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Override
    public void close() throws IOException {
        process.destroy();
        try {
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }
}
