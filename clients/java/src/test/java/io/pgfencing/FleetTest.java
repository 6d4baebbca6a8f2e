package io.pgfencing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * A fleet behind a real transaction-pooling PgBouncer (pool of 5), as README's "A fleet behind
 * PgBouncer" runs it (issue 43): each waiting candidate is a place in line, polled by short
 * statements, so that the pool stays free for the leader's renewals.
 */
class FleetTest {
    private static final int CANDIDATES = 40;

    @Test
    void aFleetOfCandidatesWaitsInLineThroughATransactionPoolerWhileTheLeaderRenews() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Bouncer.PGBOUNCER), "PgBouncer is not installed");
        String lock = Live.name();
        try (Bouncer bouncer = new Bouncer(5, 400); Connection db = Live.db()) {
            FencingClient pooled = bouncer.client();
            List<String> leaderLost = new CopyOnWriteArrayList<>();
            LeaderElection leader = pooled.election(lock, LeaseOptions.ofTtl(Duration.ofSeconds(2))
                    .withHolder(lock + "-leader").withOnLost(leaderLost::add));
            Lease leaderLease = leader.campaign("{\"who\": \"leader\"}", 10, TimeUnit.SECONDS).orElseThrow();

            AtomicInteger leaders = new AtomicInteger(1); // the leader's term
            AtomicInteger mostLeaders = new AtomicInteger(1);
            List<String> winners = new CopyOnWriteArrayList<>();
            List<Throwable> errors = new CopyOnWriteArrayList<>();
            CountDownLatch gaveUp = new CountDownLatch(CANDIDATES - 1);
            AtomicInteger gaveUpCount = new AtomicInteger();
            CountDownLatch winnerMayResign = new CountDownLatch(1);
            long start = System.nanoTime();
            long giveUpAt = start + TimeUnit.SECONDS.toNanos(21);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < CANDIDATES; i++) {
                String holder = String.format("%s-c%02d", lock, i);
                Thread thread = new Thread(() -> {
                    try {
                        LeaderElection election = pooled.election(lock,
                                LeaseOptions.ofTtl(Duration.ofSeconds(5)).withHolder(holder));
                        var won = election.campaign("{\"who\": \"" + holder + "\"}",
                                giveUpAt - System.nanoTime(), TimeUnit.NANOSECONDS);
                        if (won.isEmpty()) {
                            gaveUpCount.incrementAndGet();
                            gaveUp.countDown();
                            return;
                        }
                        mostLeaders.accumulateAndGet(leaders.incrementAndGet(), Math::max);
                        winners.add(holder);
                        // Leads until the test has looked at the others, who give up meanwhile.
                        winnerMayResign.await(60, TimeUnit.SECONDS);
                        leaders.decrementAndGet();
                        election.resign();
                    } catch (Throwable e) {
                        errors.add(e);
                    }
                }, "candidate " + holder);
                thread.setDaemon(true);
                threads.add(thread);
                thread.start();
                if (i == 0) {
                    // The first candidate's place is in line before anyone else's (checked
                    // below: c00 leads next, every candidate waits in line).
                    Live.awaitPlacesInLine(db, holder, 1);
                }
            }

            // ~15 s: the leader renews through the pool while 40 candidates wait in it.
            int notLeader = 0;
            while (System.nanoTime() - start < TimeUnit.SECONDS.toNanos(15)) {
                if (!leader.isLeader()) {
                    notLeader++;
                }
                TimeUnit.MILLISECONDS.sleep(100);
            }
            assertEquals(List.of(), leaderLost, "the leader lost its lease while the fleet waited");
            assertEquals(0, notLeader, "the leader was not sure of its lease");
            assertEquals(leaderLease.token(), Live.CLIENT.leader(lock).orElseThrow().token());
            assertEquals(List.of(), winners, "a candidate led beside the leader");
            assertEquals(CANDIDATES, Live.count(db, "SELECT count(*) FROM fencing_line l "
                    + "JOIN fencing_sessions s USING (session_id) WHERE s.holder LIKE ? AND l.token IS NULL",
                    lock + "-c%"), "every candidate waits in line");

            leaders.decrementAndGet();
            assertTrue(leader.resign(), "the leader's lease was not its own any more");
            Live.eventually(Duration.ofSeconds(5), () -> !winners.isEmpty());
            assertEquals(List.of(lock + "-c00"), winners, "not the first in line leads");
            Leader next = Live.CLIENT.leader(lock).orElseThrow();
            assertEquals(lock + "-c00", next.holder());
            assertTrue(next.token() > leaderLease.token());

            // The others give up at their deadline, leaving the line.
            assertTrue(gaveUp.await(40, TimeUnit.SECONDS), "candidates still campaign: "
                    + gaveUp.getCount() + ", errors " + errors);
            assertEquals(List.of(lock + "-c00"), winners, "never two leaders");
            assertEquals(1, mostLeaders.get(), "two leaders at once");
            assertEquals(List.of(lock + "-c00"), liveHolders(db, lock),
                    "a candidate that gave up holds a lease");
            winnerMayResign.countDown();
            for (Thread thread : threads) {
                thread.join(20_000);
                assertFalse(thread.isAlive(), thread.getName() + " still runs");
            }
            assertEquals(List.of(), errors);
            assertEquals(CANDIDATES - 1, gaveUpCount.get());
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_line l JOIN fencing_lock k "
                    + "USING (lock_id) WHERE k.lock_name = ?", lock), "fencing_line is not empty");
            assertEquals(List.of(), liveHolders(db, lock), "a lease is held after everyone gave up");
            assertEquals(0, Live.count(db, "SELECT count(*) FROM fencing_sessions WHERE holder LIKE ? AND live",
                    lock + "-%"), "a candidate's session lives on");
        }
    }

    private static List<String> liveHolders(Connection db, String lock) throws java.sql.SQLException {
        String holders = Live.value(db, "SELECT coalesce(string_agg(holder, ',' ORDER BY holder), '') "
                + "FROM fencing_leases WHERE lock_name = ? AND state = 'live'", lock);
        return holders.isEmpty() ? List.of() : List.of(holders.split(","));
    }
}
