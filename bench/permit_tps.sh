#!/bin/bash
# What a permit or a shared lease costs against an exclusive lease (issue
# 16; issue 25's target: permit and shared cycles >= 0.9 x the exclusive
# cycle at 1, 2 and 8 clients): acquire+release cycles, each in its own two
# transactions -- an exclusive lease (fencing_acquire), one permit of a
# semaphore of 4 (fencing_acquire_permit) and a shared lease
# (fencing_acquire_shared) -- and the baseline the lease cycle is held to, a
# bare single-row UPDATE and its commit.
#
# Each pgbench client cycles on a lock of its own (bench-lease-N,
# bench-sem-N, bench-rw-N, N its client id; the bare UPDATE on a row of its
# own), so the figures are the cycle's cost, not contention: a semaphore of
# 4 with one client never runs out of permits, a released permit or lease is
# free at once.  The variants are interleaved in every round, and each round
# starts at the next variant (round 1: exclusive permit shared bare_update,
# round 2: permit shared bare_update exclusive, ...), so that slow drift of
# the machine and the order within a round hit them alike.  A pgbench run in
# which a client fails (an acquire that returned NULL makes the release's
# CAST fail) stops the script.
#
# Appends CSV lines "benchmark,variant,clients,round,value,unit" to $1
# (bench/render.pl reads them) and prints the medians and their ratios to
# the exclusive cycle of the same run (bench/tps_medians.awk), then the
# median of the ratios within each round (the same awk script).  What a
# cycle writes and flushes, which a rate at fsync on cannot resolve here, is
# bench/wal_per_cycle.sh's.  Alone, on a
# cluster as bench/run.sh's (fsync on; -o fsync=off for the CPU's share):
#
#   pg_virtualenv -t -o shared_buffers=1GB -o max_wal_size=8GB -o max_connections=150 \
#     -o fsync=on -o shared_preload_libraries=pg_fencing bash bench/permit_tps.sh OUT.csv
#
# A build of its own, which a reinstall cannot change mid-run (make install
# DESTDIR=DIR of another tree; Debian's extension_destdir, and the preload by
# its path, or the SQL and the preload name different libraries):
#   -o extension_destdir=DIR -o shared_preload_libraries=DIR/usr/lib/postgresql/15/lib/pg_fencing.so
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2 8").
set -euo pipefail
out=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2 8}
here=$(cd "$(dirname "$0")" && pwd)
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
psql -X -q -v ON_ERROR_STOP=1 -f "$here/pgbench/bare_update_setup.sql"
script_of() {
  case $1 in
    exclusive) echo "$here/pgbench/acquire_release.pgb" ;;
    permit) echo "$here/pgbench/permit_cycle.pgb" ;;
    shared) echo "$here/pgbench/shared_cycle.pgb" ;;
    bare_update) echo "$here/pgbench/bare_update.pgb" ;;
  esac
}
tps() { # variant clients: one pgbench run, its tps; dies if a client failed
  local log rc=0 value
  log=$(pgbench -n -f "$(script_of "$1")" -c "$2" -j "$2" -T "$seconds" 2>&1) || rc=$?
  value=$(awk '/^tps/ {print $3}' <<<"$log")
  if ((rc != 0)) || [[ -z $value ]] || grep -q '^number of failed transactions: [1-9]' <<<"$log"; then
    echo "permit_tps: pgbench of $1 at $2 clients failed (exit $rc):" >&2
    tail -20 <<<"$log" >&2
    exit 1
  fi
  echo "$value"
}
variants=(exclusive permit shared bare_update)
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    for i in "${!variants[@]}"; do
      v=${variants[(i + round - 1) % ${#variants[@]}]}
      value=$(tps "$v" "$clients")
      record permit_cycle_tps "$v" "$clients" "$round" "$value" tps
    done
  done
done
# Medians per variant and client count, and their ratios to the exclusive
# cycle, from this benchmark's lines only ($out may hold others').
grep '^permit_cycle_tps,' "$out" | awk -v baseline=exclusive -f "$here/tps_medians.awk"
# The same ratios taken within each round, then their median: the figure to
# read at fsync on, where the disk's flush time swings between rounds.
echo "median of the ratios within each round:"
grep '^permit_cycle_tps,' "$out" | awk -v baseline=exclusive -v within_rounds=1 -f "$here/tps_medians.awk"
