#!/bin/bash
# Hand-over latency of a lease to a waiting acquirer, against the cluster in
# the environment (PG* set by pg_virtualenv); appends CSV lines
# "benchmark,variant,clients,round,value,unit" to $1.  QUICK=1: a smoke test.
#
# Waiters on one lock (1, 10, 100): waiters + 1 pgbench clients loop on
# acquire (waiting up to 60 s) -> hold 50 ms -> release, so that while one
# client holds the lock the others wait and the first of them sleeps (long
# enough for the poll of 1.1, 1 ms doubling to 20 ms, to reach its pace).  Each
# hand-over: from the release's commit to the next holder's grant
# (granted_at, the server's clock_timestamp() in the granting statement).
# The commit's instant is bracketed by two readings of the server's clock:
#   handover_latency,before_commit: the last statement before COMMIT (the
#     interval includes the release's WAL flush and the commit itself);
#   handover_latency,after_commit: the releaser's first statement after
#     COMMIT returned (the interval misses the reply's round trip, and is
#     negative when the waiter was granted before the releaser got there).
# The lease's end: a holder takes a 500 ms lease and lets it run out while
# one acquirer waits; handover_after_expiry is the new grant's distance from
# the old lease's expires_at.  (With 100 ms, the three psql start-ups before
# the waiter's call sometimes took longer than the lease: the waiter then
# measured its own start-up, not a hand-over.)
set -euo pipefail
out=$1
quick=${QUICK:-0}
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

psql_q <<'SQL'
DROP TABLE IF EXISTS bench_handover;
CREATE TABLE bench_handover (
  waiters int, token bigint, granted_at timestamptz, before_commit timestamptz,
  after_commit timestamptz, PRIMARY KEY (waiters, token));
SQL

script=$(mktemp)
cat >"$script" <<'PGB'
SELECT CAST(fencing_acquire('bench-handover-' || :waiters, 'c' || :client_id, '1 minute', '60 s') AS bigint) AS tok \gset
\sleep 50 ms
BEGIN;
SELECT fencing_release('bench-handover-' || :waiters, CAST(:tok AS fencing_token));
INSERT INTO bench_handover (waiters, token, granted_at, before_commit)
  SELECT :waiters, :tok, granted_at, clock_timestamp() FROM fencing_lease
   WHERE lock_name = 'bench-handover-' || :waiters;
COMMIT;
UPDATE bench_handover SET after_commit = clock_timestamp() WHERE waiters = :waiters AND token = :tok;
PGB
for waiters in 1 10 100; do
  clients=$((waiters + 1))
  # About 300 hand-overs per size (30 in a smoke run), bounded by count:
  # about 20 s per size.
  per_client=$(((quick ? 30 : 300) / clients))
  ((per_client >= 2)) || per_client=2
  pgbench -n -f "$script" -D waiters="$waiters" -c "$clients" -j 2 -t "$per_client" >/dev/null 2>&1 ||
    { echo "handover: pgbench failed with $waiters waiters" >&2; exit 1; }
done
rm -f "$script"

# Consecutive grants of one lock: the release of one (its row) hands over to
# the next grant.  The first grant of each run had no waiter before it.
psql -X -At -F, -v ON_ERROR_STOP=1 <<'SQL' |
SELECT waiters, row_number() OVER (PARTITION BY waiters ORDER BY granted_at),
       round(extract(epoch FROM next_grant - before_commit) * 1000, 3),
       round(extract(epoch FROM next_grant - after_commit) * 1000, 3)
  FROM (SELECT *, lead(granted_at) OVER (PARTITION BY waiters ORDER BY granted_at) AS next_grant
          FROM bench_handover) h
 WHERE next_grant IS NOT NULL
 ORDER BY waiters, 2;
SQL
  while IFS=, read -r waiters i before after; do
    record handover_latency before_commit "$waiters" "$i" "$before" ms
    record handover_latency after_commit "$waiters" "$i" "$after" ms
  done

samples=$((quick ? 3 : 30))
for i in $(seq 1 "$samples"); do
  lock="bench-expiry-$$-$i"  # a lock of its own: the waiter keeps its lease
  psql -X -At -c "SELECT fencing_acquire('$lock', 'holder', '500 ms')" >/dev/null
  ends=$(psql -X -At -c "SELECT expires_at FROM fencing_leases WHERE lock_name = '$lock'")
  psql -X -At -c "SELECT fencing_acquire('$lock', 'waiter', '1 minute', '10 s')" >/dev/null
  ms=$(psql -X -At -c "SELECT round(extract(epoch FROM granted_at - '$ends'::timestamptz) * 1000, 3)
                        FROM fencing_leases WHERE lock_name = '$lock' AND holder = 'waiter'")
  record handover_after_expiry wait 1 "$i" "$ms" ms
done
