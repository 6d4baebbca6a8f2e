package io.pgfencing;

import static io.pgfencing.Live.CLIENT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** A session's wait for an exclusive lease is a place in the lock's line (1.10, issue 43). */
class LineTest {
    private static final LeaseOptions TTL = LeaseOptions.ofTtl(Duration.ofSeconds(10));

    /** A thread that waits for {@code lock} in {@code session}; its outcome once it ends. */
    private static Thread waitFor(FencingSession session, String lock, AtomicReference<Object> outcome) {
        return waitFor(session, lock, Duration.ofSeconds(30), outcome);
    }

    /** The same, waiting up to {@code wait}. */
    private static Thread waitFor(FencingSession session, String lock, Duration wait,
                                  AtomicReference<Object> outcome) {
        Thread thread = new Thread(() -> {
            try {
                Optional<Lease> lease = session.tryLock(lock, wait.toMillis(), TimeUnit.MILLISECONDS);
                outcome.set(lease.isPresent() ? lease.get() : "timed out");
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        thread.setDaemon(true);
        thread.start();
        return thread;
    }

    private static String[] twoValues(Connection db, String sql, Object... params) throws java.sql.SQLException {
        try (java.sql.PreparedStatement statement = db.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                statement.setObject(i + 1, params[i]);
            }
            try (java.sql.ResultSet rows = statement.executeQuery()) {
                rows.next();
                return new String[] {rows.getString(1), rows.getString(2)};
            }
        }
    }

    @Test
    void aWaitKeepsItsPlaceInLine() throws Exception {
        String lock = Live.name();
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(TTL);
             FencingSession first = CLIENT.openSession(TTL.withHolder(lock + "-first"));
             FencingSession second = CLIENT.openSession(TTL.withHolder(lock + "-second"))) {
            Lease held = holder.lock(lock);
            AtomicReference<Object> firstGot = new AtomicReference<>();
            AtomicReference<Object> secondGot = new AtomicReference<>();
            Thread firstWait = waitFor(first, lock, firstGot);
            assertEquals(1, Live.awaitPlacesInLine(db, lock + "-first", 1), "the first wait has no place in line");
            Thread secondWait = waitFor(second, lock, secondGot);
            assertEquals(1, Live.awaitPlacesInLine(db, lock + "-second", 1), "the second wait has no place in line");

            // Released, and a plain acquire by a third party in the same statement, before any
            // waiter could poll: the lock is the first place's, not the third party's.
            // (A select list is evaluated in order.)
            String[] third = twoValues(db, "SELECT fencing_release(?, ?::fencing_token)::text, "
                    + "coalesce(fencing_acquire(?, 'third', '10 s')::text, 'nothing')", lock, held.token(), lock);
            assertEquals("true", third[0], "the holder's release");
            assertEquals("nothing", third[1], "the third party's plain acquire was granted during the wait");
            assertNull(Live.value(db, "SELECT fencing_acquire(?, 'third', '10 s')", lock),
                    "the third party took the lock while the first place waited");

            firstWait.join(10_000);
            assertTrue(firstGot.get() instanceof Lease, "the first in line: " + firstGot.get());
            Lease firstLease = (Lease) firstGot.get();
            assertNull(secondGot.get(), "the second in line got an answer before the first released");
            assertEquals(lock + "-first", CLIENT.leader(lock).orElseThrow().holder());
            assertEquals(1, Live.placesInLine(db, lock + "-second"), "the second lost its place");
            assertNull(Live.value(db, "SELECT fencing_acquire(?, 'third', '10 s')", lock));

            assertTrue(firstLease.release());
            secondWait.join(10_000);
            assertTrue(secondGot.get() instanceof Lease, "the second in line: " + secondGot.get());
            Lease secondLease = (Lease) secondGot.get();
            assertTrue(secondLease.token() > firstLease.token());
            assertEquals(lock + "-second", CLIENT.leader(lock).orElseThrow().holder());
            assertTrue(secondLease.release());
            // (The holder's place, whose lease the plain fencing_release above ended, is a row
            // until its session closes or joins again; none waits.)
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line l JOIN fencing_lock k "
                    + "USING (lock_id) WHERE k.lock_name = ? AND l.token IS NULL", lock), "places left in line");
        }
    }

    /**
     * A candidate that comes back with waits shorter than its poll period (200 ms waits, a poll
     * every 1 s, its other work between them: the C++ demo's leader scenario's 250 ms attempts)
     * polls its place just before each deadline: when the holder releases during one of its
     * waits, it takes the lock within a few attempts, and a third party's plain acquire meanwhile
     * gets nothing. (A wait that left at its deadline without polling left the lock free and its
     * line empty.)
     */
    @Test
    void aCandidateThatComesBackWithShortWaitsTakesItsTurn() throws Exception {
        String lock = Live.name();
        String looping = lock + "-looping";
        FencingClient rare = CLIENT.withPoll(Duration.ofSeconds(1));
        List<Long> attempts = new ArrayList<>(); // when each attempt began (nanoTime)
        AtomicReference<Object> got = new AtomicReference<>();
        int[] gotAt = new int[1];
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(TTL);
             FencingSession candidate = rare.openSession(TTL.withHolder(looping))) {
            Lease held = holder.lock(lock);
            Thread loop = new Thread(() -> {
                try {
                    while (!Thread.currentThread().isInterrupted()) {
                        int n;
                        synchronized (attempts) {
                            attempts.add(System.nanoTime());
                            n = attempts.size();
                        }
                        Optional<Lease> lease = candidate.tryLock(lock, 200, TimeUnit.MILLISECONDS);
                        if (lease.isPresent()) {
                            gotAt[0] = n;
                            got.set(lease.get());
                            return;
                        }
                        Thread.sleep(100); // its other work
                    }
                } catch (Throwable e) {
                    got.set(e);
                }
            });
            loop.setDaemon(true);
            loop.start();
            try {
                // 50 ms into its third attempt (or a later one), its place in line: the release.
                int releasedIn = 0;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (releasedIn == 0 && System.nanoTime() - deadline < 0 && got.get() == null) {
                    int seen;
                    long at;
                    synchronized (attempts) {
                        seen = attempts.size();
                        at = seen == 0 ? 0 : attempts.get(seen - 1);
                    }
                    long into = System.nanoTime() - at;
                    if (seen >= 3 && into < TimeUnit.MILLISECONDS.toNanos(50)) {
                        TimeUnit.NANOSECONDS.sleep(TimeUnit.MILLISECONDS.toNanos(50) - into);
                        int now;
                        synchronized (attempts) {
                            now = attempts.size();
                        }
                        if (now == seen && Live.placesInLine(db, looping) == 1) {
                            assertTrue(held.release());
                            releasedIn = seen;
                            continue;
                        }
                    }
                    Thread.sleep(2);
                }
                assertTrue(releasedIn > 0, "no attempt of the candidate's to release during: " + got.get());
                int third = 0;
                while (got.get() == null && System.nanoTime() - deadline < 0) {
                    String stolen = Live.value(db, "SELECT fencing_acquire(?, 'third', '10 s')", lock);
                    if (stolen != null) {
                        int seen;
                        synchronized (attempts) {
                            seen = attempts.size();
                        }
                        fail("a third party's plain acquire took the lock after attempt " + seen
                                + " of the candidate (released in " + releasedIn + ")");
                    }
                    third++;
                    Thread.sleep(10);
                }
                loop.join(5_000);
                assertTrue(got.get() instanceof Lease, "the candidate: " + got.get());
                Lease lease = (Lease) got.get();
                assertTrue(gotAt[0] <= releasedIn + 2, "taken at attempt " + gotAt[0] + ", released in " + releasedIn);
                assertTrue(third > 0);
                assertEquals(looping, CLIENT.leader(lock).orElseThrow().holder());
                assertTrue(lease.release());
                assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line l JOIN fencing_lock k "
                        + "USING (lock_id) WHERE k.lock_name = ? AND l.token IS NULL", lock), "places left in line");
            } finally {
                loop.interrupt();
                loop.join(5_000);
            }
        }
    }

    /** The places waiting for {@code lock}, in order: "place:position,...". */
    private static String lineOf(Connection db, String lock) throws java.sql.SQLException {
        return Live.value(db, "SELECT coalesce(string_agg(place || ':' || position, ',' ORDER BY place), '') "
                + "FROM fencing_lines WHERE lock_name = ?", lock);
    }

    /**
     * A wait longer than a minute keeps its place in line for the whole wait (issue 43): A waits
     * 150 s in line (polling, no listener) behind a holder renewed by the heartbeat, B joins behind
     * it in plain SQL, and for 65 s the line shows A's place number, first, and B's, second; at the
     * release A takes the lease and B still waits. It catches a client that re-queues its wait
     * (leaves and joins again, say every 30 s: A's place number changes, or A goes behind B) and
     * one whose wait ends early (a 30 s slice: the wait returns, or its place leaves the line).
     * About 70 s, so only with PG_FENCING_LONG_WAIT=1 (a script runs the clients' long waits side
     * by side).
     */
    @Test
    void aWaitLongerThanAMinuteKeepsItsPlaceInLine() throws Exception {
        Assumptions.assumeTrue("1".equals(System.getenv("PG_FENCING_LONG_WAIT")),
                "a wait of 65 s: set PG_FENCING_LONG_WAIT=1 to run it");
        String lock = "long-wait-" + Live.name();
        try (Connection db = Live.db();
             FencingSession holder = CLIENT.openSession(LeaseOptions.ofTtl(Duration.ofSeconds(3)));
             FencingSession a = CLIENT.openSession(TTL.withHolder(lock + "-A"))) {
            Lease held = holder.lock(lock);
            AtomicReference<Object> aGot = new AtomicReference<>();
            Thread aWait = waitFor(a, lock, Duration.ofSeconds(150), aGot);
            Live.eventually(Duration.ofSeconds(5), () -> {
                try {
                    return Live.count(db, "SELECT count(*) FROM fencing_lines WHERE lock_name = ?", lock) == 1;
                } catch (java.sql.SQLException e) {
                    return false;
                }
            });
            assertEquals(1, Live.count(db, "SELECT count(*) FROM fencing_lines WHERE lock_name = ?", lock),
                    "A's wait has no place in line");
            String aPlace = Live.value(db, "SELECT place FROM fencing_lines WHERE lock_name = ?", lock);

            // B: a session of 5 min without renewal, its place behind A's, in plain SQL.
            String bSession = Live.value(db, "SELECT fencing_session_open('long-wait-B', '5 min')");
            try {
                String bPlace = Live.value(db, "SELECT place FROM fencing_line_join(?::bigint, ?)",
                        Long.parseLong(bSession), lock);
                String inOrder = aPlace + ":1," + bPlace + ":2";

                long start = System.nanoTime();
                long end = start + TimeUnit.SECONDS.toNanos(65);
                for (long now = start; ; now = System.nanoTime()) {
                    long second = TimeUnit.NANOSECONDS.toSeconds(now - start);
                    assertNull(aGot.get(), "A's wait returned after " + second + " s");
                    assertEquals(inOrder, lineOf(db, lock), "the line after " + second + " s (place:position)");
                    assertTrue(held.isHeld(), "the holder's lease after " + second + " s");
                    if (now - end >= 0) {
                        break;
                    }
                    TimeUnit.NANOSECONDS.sleep(Math.min(TimeUnit.SECONDS.toNanos(5), end - now));
                }

                assertTrue(held.release());
                aWait.join(10_000);
                assertInstanceOf(Lease.class, aGot.get(), "A, within 10 s of the release: " + aGot.get());
                Lease aLease = (Lease) aGot.get();
                assertTrue(aLease.token() > held.token(), aLease.token() + " after " + held.token());
                assertEquals(bPlace + ":1", lineOf(db, lock), "B still waits, first now");
                assertEquals("waiting", Live.value(db, "SELECT state FROM fencing_line_poll(ARRAY[?::bigint])",
                        Long.parseLong(bPlace)));
                assertTrue(aLease.release());
            } finally {
                Live.value(db, "SELECT fencing_session_close(?::bigint)", Long.parseLong(bSession));
            }
        }
    }
}
