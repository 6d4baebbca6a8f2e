package io.pgfencing;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLTimeoutException;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * The one heartbeat of a {@link FencingClient} (and of the clients {@code withListen} and
 * {@code withPoll} make from it): one thread and one connection renew every session, election
 * and lease of its own the client made. The connection is opened when the first item needs
 * renewing and closed when none is left; it is named {@code pg_fencing heartbeat <pid>:<random>}
 * in pg_stat_activity.
 *
 * <p>Each item keeps its own clock ({@link Heartbeat}: ttl, period, safe deadline, loss). When
 * one is due, ONE statement renews it with every other item due within a quarter of its own
 * period, and each row's answer goes to its item: true, renewed as of the send time; false,
 * lost ("renewal refused: ..."). At most about four statements a period, whatever the number of
 * items of that period. The statement is waited for until the earliest safe deadline
 * of the items in it; without an answer by then the connection is aborted and every item whose
 * deadline passed is lost ("renewal got no answer before the ...'s safe deadline"), the others
 * renewed in the next round on a new connection. A broken connection fails the renewal of every
 * item in the statement (lost: "renewal failed: ..."), and the next round opens a new one.
 *
 * <p>One item must not take the others down with it: the statement sets a lock timeout of its
 * own (a quarter of the time left to the earliest deadline, at most 1 s), so that a renewal
 * waiting behind a row another transaction locked ends the statement in time (55P03) instead of
 * holding it to the deadline. An error other than a broken connection is then the item's: every
 * item of the statement is renewed again alone, the one whose row stays locked is tried again
 * shortly (lost at its deadline, as a renewal without answer), one that fails otherwise is lost
 * ("renewal failed: ...").
 *
 * <p>Transaction pooling: each round is one statement in autocommit (the lock timeout is
 * set_config(..., true), local to its transaction), no prepared statement outlives it, and
 * nothing is held between rounds.
 */
final class SharedHeartbeat {
    /** One row per item: its index and whether it was renewed. The CASE sets the lock timeout
     *  before the item's renewal, for every row. */
    private static final String RENEW = "SELECT r.i, CASE"
            + " WHEN set_config('lock_timeout', ?, true) IS NULL THEN NULL"
            + " WHEN r.kind = 'session' THEN fencing_session_renew(r.session, r.ttl::interval)"
            + " WHEN r.kind = 'lease' THEN fencing_renew(r.lock_name, r.token::fencing_token, r.ttl::interval)"
            // An election's session: the lease in it lives too (a revoke ends the lease only).
            // Polling a granted place answers its token while the lease lives.
            + " ELSE fencing_session_renew(r.session, r.ttl::interval) AND coalesce((SELECT"
            + " p.state = 'granted' AND p.token::bigint = r.token"
            + " FROM fencing_line_poll(ARRAY[r.place]) p), false) END"
            + " FROM unnest(?::integer[], ?::text[], ?::bigint[], ?::text[], ?::bigint[],"
            + " ?::bigint[], ?::text[]) AS r(i, kind, session, lock_name, token, place, ttl)";

    /** SQLSTATE lock_not_available: the lock timeout ended a wait for a row lock. */
    private static final String LOCK_NOT_AVAILABLE = "55P03";
    private static final long MIN_LOCK_TIMEOUT = TimeUnit.MILLISECONDS.toNanos(1);
    private static final long MAX_LOCK_TIMEOUT = TimeUnit.SECONDS.toNanos(1);
    /** The least time before a renewal that met a lock is tried again. */
    private static final long MIN_RETRY = TimeUnit.MILLISECONDS.toNanos(10);

    private final FencingClient client;
    private final String applicationName;
    private final Object lock = new Object();
    /** The items renewed, in the order they came. */
    private final Set<Heartbeat> items = new LinkedHashSet<>();
    /** Runs while there are items; null otherwise. */
    private Thread thread;

    SharedHeartbeat(FencingClient client) {
        this.client = client;
        this.applicationName = "pg_fencing heartbeat " + ProcessHandle.current().pid() + ":"
                + UUID.randomUUID().toString().substring(0, 8);
    }

    /** Its connection's name in pg_stat_activity. */
    String applicationName() {
        return applicationName;
    }

    void add(Heartbeat item) {
        synchronized (lock) {
            items.add(item);
            if (thread == null) {
                thread = new Thread(new Beating()::run, applicationName);
                thread.setDaemon(true);
                thread.start();
            }
            lock.notifyAll();
        }
    }

    void remove(Heartbeat item) {
        synchronized (lock) {
            items.remove(item);
            lock.notifyAll();
        }
    }

    /** One run of the heartbeat's thread, from the first item to the last: its connection. */
    private final class Beating {
        /** Opened at the first round, closed when the thread ends. */
        private Connection connection;

        void run() {
            try {
                while (true) {
                    List<Heartbeat> overdue = new ArrayList<>();
                    List<Heartbeat> batch = new ArrayList<>();
                    if (!next(overdue, batch)) {
                        return;
                    }
                    for (Heartbeat item : overdue) {
                        item.markLost(item.blocked
                                ? "renewal got no answer before the " + item.what + "'s safe deadline"
                                : "not renewed before the " + item.what + "'s safe deadline; "
                                        + "was the process paused?");
                    }
                    if (!batch.isEmpty()) {
                        round(batch);
                    }
                }
            } catch (RuntimeException | Error e) {
                List<Heartbeat> left;
                synchronized (lock) {
                    left = new ArrayList<>(items);
                    items.clear();
                    thread = null;
                }
                for (Heartbeat item : left) {
                    item.markLost("heartbeat failed: " + e); // nothing leaves the thread silently
                }
                throw e;
            } finally {
                Wire.closeQuietly(connection);
            }
        }

        /** Renews {@code batch} in one statement and gives each item its answer. */
        private void round(List<Heartbeat> batch) {
            long earliest = batch.get(0).deadline();
            for (Heartbeat item : batch) {
                earliest = item.deadline() - earliest < 0 ? item.deadline() : earliest;
            }
            long sent = System.nanoTime();
            long lockTimeout = MIN_LOCK_TIMEOUT;
            Connection on = null;
            try {
                on = connection();
                sent = System.nanoTime();
                lockTimeout = Math.min(MAX_LOCK_TIMEOUT, Math.max(MIN_LOCK_TIMEOUT, (earliest - sent) / 4));
                List<String[]> rows = Wire.rowsWithin(on, earliest, RENEW, statement(on, batch, lockTimeout));
                Boolean[] answers = new Boolean[batch.size()];
                for (String[] row : rows) {
                    answers[Integer.parseInt(row[0])] = "t".equals(row[1]);
                }
                for (int i = 0; i < batch.size(); i++) {
                    Heartbeat item = batch.get(i);
                    if (Boolean.TRUE.equals(answers[i])) {
                        item.renewed(sent);
                        item.blocked = false;
                    } else {
                        lose(item, "renewal refused: " + item.refused);
                    }
                }
            } catch (SQLTimeoutException noAnswer) {
                // Wire aborted the connection at the earliest deadline: the items whose deadline
                // passed are lost; the others are renewed in the next round, on a new connection.
                connection = null;
                long now = System.nanoTime();
                for (Heartbeat item : batch) {
                    if (now - item.deadline() >= 0) {
                        lose(item, "renewal got no answer before the " + item.what + "'s safe deadline");
                    }
                }
            } catch (SQLException failed) {
                String state = failed.getSQLState();
                if (on == null || Wire.isClosed(on) || state != null && state.startsWith("08")) {
                    // The connection broke (or could not be made): every renewal in it failed.
                    if (on != null) {
                        Wire.abort(on);
                    }
                    connection = null;
                    for (Heartbeat item : batch) {
                        lose(item, "renewal failed: " + String.valueOf(failed.getMessage()).strip());
                    }
                } else if (batch.size() > 1) {
                    // One item's error (a row locked past the lock timeout, say): each alone.
                    for (Heartbeat item : batch) {
                        round(List.of(item));
                    }
                } else if (LOCK_NOT_AVAILABLE.equals(state)) {
                    Heartbeat item = batch.get(0);
                    item.blocked = true;
                    item.notBefore = System.nanoTime() + Math.max(MIN_RETRY, lockTimeout);
                } else {
                    lose(batch.get(0), "renewal failed: " + String.valueOf(failed.getMessage()).strip());
                }
            } catch (InterruptedException | RuntimeException e) {
                for (Heartbeat item : batch) {
                    lose(item, "heartbeat failed: " + e); // nothing leaves the thread silently
                }
            }
        }

        /** The heartbeat's connection, opened (again) when there is none. */
        private Connection connection() throws SQLException {
            if (Wire.isClosed(connection)) {
                connection = client.connect(applicationName);
            }
            return connection;
        }

    }

    /**
     * Waits until an item is due (or one is past its deadline), then fills {@code overdue} with
     * the items whose deadline passed (no longer renewed) and {@code batch} with the items to
     * renew now. False when no item is left: the thread ends (and closes its connection).
     */
    private boolean next(List<Heartbeat> overdue, List<Heartbeat> batch) {
        synchronized (lock) {
            while (true) {
                if (items.isEmpty()) {
                    thread = null;
                    return false;
                }
                long now = System.nanoTime();
                long wake = Long.MAX_VALUE; // ns from now
                boolean due = false;
                for (Heartbeat item : items) {
                    long deadline = item.deadline();
                    if (now - deadline >= 0) {
                        overdue.add(item);
                        continue;
                    }
                    long at = when(item);
                    due |= now - at >= 0;
                    wake = Math.min(wake, Math.min(at, deadline) - now);
                }
                if (!overdue.isEmpty()) {
                    items.removeAll(overdue);
                    return true;
                }
                if (due) {
                    for (Heartbeat item : items) {
                        // Due, or nearly: within a quarter of its own period (not an item that
                        // waits to try again after a lock).
                        long window = item.blocked ? 0 : item.period / 4;
                        if (when(item) - now <= window) {
                            batch.add(item);
                        }
                    }
                    return true;
                }
                try {
                    TimeUnit.NANOSECONDS.timedWait(lock, Math.max(1, wake));
                } catch (InterruptedException e) {
                    // nobody interrupts this thread; the loop looks again
                }
            }
        }
    }

    /** When the item's next renewal is due: its period after its last renewal, or later after a
     *  renewal that met a lock. */
    private static long when(Heartbeat item) {
        long due = item.due();
        return item.notBefore - due > 0 ? item.notBefore : due;
    }

    /** The statement's parameters: the lock timeout, then one array per column. */
    private static Object[] statement(Connection on, List<Heartbeat> batch, long lockTimeout)
            throws SQLException {
        int n = batch.size();
        Integer[] index = new Integer[n];
        String[] kind = new String[n];
        Long[] session = new Long[n];
        String[] lockName = new String[n];
        Long[] token = new Long[n];
        Long[] place = new Long[n];
        String[] ttl = new String[n];
        for (int i = 0; i < n; i++) {
            Heartbeat item = batch.get(i);
            Heartbeat.Target target = item.target();
            index[i] = i;
            kind[i] = target.kind();
            session[i] = target.session();
            lockName[i] = target.lockName();
            token[i] = target.token();
            place[i] = target.place();
            ttl[i] = item.ttlText;
        }
        return new Object[] {
            Math.max(1, TimeUnit.NANOSECONDS.toMillis(lockTimeout)) + "ms",
            on.createArrayOf("integer", index), on.createArrayOf("text", kind),
            on.createArrayOf("bigint", session), on.createArrayOf("text", lockName),
            on.createArrayOf("bigint", token), on.createArrayOf("bigint", place),
            on.createArrayOf("text", ttl),
        };
    }

    /** No more renewals of the item; its loss reported (once, unless it was stopped). */
    private void lose(Heartbeat item, String reason) {
        remove(item);
        item.markLost(reason);
    }
}
