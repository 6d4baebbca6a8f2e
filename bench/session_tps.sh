#!/bin/bash
# Sessions (issue 27) against plain leases, in one run:
#  - renew: fencing_session_renew of a session holding 1, 100 or 10,000
#    leases, against fencing_renew of one plain lease (target >= 0.95x at
#    every size: a session's renew writes one row);
#  - cycle: fencing_session_acquire + fencing_release in an open session,
#    against the plain fencing_acquire + fencing_release cycle (>= 0.95x);
#  - acquire_all: the latency of fencing_session_acquire_all of 10 locks
#    against fencing_session_acquire of one (pgbench -r, the statement's
#    own latency; each transaction opens a session, takes, and closes it)
#    (target: within 2x).
# Each client works on sessions and locks of its own (no contention); the
# sessions that renew are opened and filled before the timed runs
# (bench_sessions).  Variants interleave within a round, each round starting
# at the next one, as bench/permit_tps.sh does.  Appends CSV lines
# "benchmark,variant,clients,round,value,unit" to $1 and prints medians and
# ratios (bench/tps_medians.awk; within rounds too).  Alone, on a cluster as
# bench/run.sh's:
#
#   pg_virtualenv -t -o shared_buffers=1GB -o max_wal_size=8GB -o fsync=off \
#     -o shared_preload_libraries=pg_fencing bash bench/session_tps.sh OUT.csv
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2").
set -euo pipefail
out=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2}
here=$(cd "$(dirname "$0")" && pwd)
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
max_clients=$(tr ' ' '\n' <<<"$clients_list" | sort -n | tail -n 1)
# Per client: a session for each size (leases 0 for the cycle's).
psql -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION IF NOT EXISTS pg_fencing;
DROP TABLE IF EXISTS bench_sessions;
CREATE TABLE bench_sessions (leases int, client int, id bigint, PRIMARY KEY (leases, client));
INSERT INTO bench_sessions
  SELECT n, c, fencing_session_open('bench-' || n || '-' || c, '1 hour')
    FROM unnest('{0,1,100,10000}'::int[]) n, generate_series(0, $max_clients - 1) c;
SQL
# Filled 50 grants per transaction: each grant holds its lock's waiting room
# (a lock-manager lock) until its transaction ends, and 10,000 of them in one
# would run out of the lock table (max_locks_per_transaction).
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
DO $$
DECLARE
  s record;
BEGIN
  FOR s IN SELECT leases, client, id FROM bench_sessions WHERE leases > 0 LOOP
    FOR g IN 1 .. s.leases LOOP
      PERFORM fencing_session_acquire(s.id, 'bench-sr-' || s.leases || '-' || s.client || '-' || g);
      IF g % 50 = 0 THEN
        COMMIT;
      END IF;
    END LOOP;
    COMMIT;
  END LOOP;
END $$;
SQL
pgbench_run() { # pgbench arguments...: its output; dies if a client failed
  local log rc=0
  log=$(pgbench -n -T "$seconds" "$@" 2>&1) || rc=$?
  if ((rc != 0)) || ! grep -q '^tps' <<<"$log" || grep -q '^number of failed transactions: [1-9]' <<<"$log"; then
    echo "session_tps: pgbench $* failed (exit $rc):" >&2
    tail -20 <<<"$log" >&2
    exit 1
  fi
  echo "$log"
}
tps_of() { awk '/^tps/ {print $3}' <<<"$1"; }
# pgbench -r: the average latency of the statement that calls $2, in microseconds.
latency_of() { awk -v f="$2" '$0 ~ f && $1 ~ /^[0-9.]+$/ {print $1 * 1000; exit}' <<<"$1"; }
renew_variants=(lease_renew session_renew_1 session_renew_100 session_renew_10000)
cycle_variants=(plain_cycle session_cycle)
take_variants=(acquire_one acquire_all_10)
run_variant() { # variant clients round
  local v=$1 c=$2 r=$3 log
  case $v in
    lease_renew) log=$(pgbench_run -D have_token=0 -f "$here/pgbench/renew.pgb" -c "$c" -j "$c")
      record session_renew_tps "$v" "$c" "$r" "$(tps_of "$log")" tps ;;
    session_renew_*) log=$(pgbench_run -D have_session=0 -D "leases=${v#session_renew_}" \
      -f "$here/pgbench/session_renew.pgb" -c "$c" -j "$c")
      record session_renew_tps "$v" "$c" "$r" "$(tps_of "$log")" tps ;;
    plain_cycle) log=$(pgbench_run -f "$here/pgbench/acquire_release.pgb" -c "$c" -j "$c")
      record session_cycle_tps "$v" "$c" "$r" "$(tps_of "$log")" tps ;;
    session_cycle) log=$(pgbench_run -D have_session=0 -f "$here/pgbench/session_cycle.pgb" -c "$c" -j "$c")
      record session_cycle_tps "$v" "$c" "$r" "$(tps_of "$log")" tps ;;
    acquire_one) log=$(pgbench_run -r -f "$here/pgbench/session_acquire_one.pgb" -c "$c" -j "$c")
      record session_take_us "$v" "$c" "$r" "$(latency_of "$log" 'fencing_session_acquire\\(')" us ;;
    acquire_all_10) log=$(pgbench_run -r -f "$here/pgbench/session_acquire_all.pgb" -c "$c" -j "$c")
      record session_take_us "$v" "$c" "$r" "$(latency_of "$log" 'fencing_session_acquire_all')" us ;;
  esac
}
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    for group in renew_variants cycle_variants take_variants; do
      declare -n vs=$group
      for i in "${!vs[@]}"; do
        run_variant "${vs[(i + round - 1) % ${#vs[@]}]}" "$clients" "$round"
      done
      unset -n vs
    done
  done
done
for b in session_renew_tps:lease_renew session_cycle_tps:plain_cycle session_take_us:acquire_one; do
  echo "== ${b%%:*} (ratios to ${b#*:}; for session_take_us, a ratio above 1 is slower)"
  grep "^${b%%:*}," "$out" | awk -v baseline="${b#*:}" -f "$here/tps_medians.awk"
  echo "median of the ratios within each round:"
  grep "^${b%%:*}," "$out" | awk -v baseline="${b#*:}" -v within_rounds=1 -f "$here/tps_medians.awk"
done
