#!/bin/bash
# Lease throughput against the cluster in the environment (PG* set, as by
# pg_virtualenv): acquire+release cycles, each client on its own lock, and
# renewals of a held lease (the scripts in bench/pgbench/); and the
# baseline both are held to, a bare single-row UPDATE and its commit --
# interleaved in each round, so slow
# drift of the machine hits all three alike.  Appends CSV lines
# "benchmark,variant,clients,round,value,unit" to $1 (bench/render.pl reads
# them).  Called by bench/measure.sh; alone:
#
#   pg_virtualenv -t bash bench/lease_tps.sh OUT.csv
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2 8").
set -euo pipefail
out=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2 8}
here=$(cd "$(dirname "$0")" && pwd)
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
psql -X -q -v ON_ERROR_STOP=1 -f "$here/pgbench/bare_update_setup.sql"
tps() { pgbench -n "$@" 2>/dev/null | awk '/^tps/ {print $3}'; }
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    common=(-c "$clients" -j "$clients" -T "$seconds")
    record lease_cycle_tps acquire_release "$clients" "$round" "$(tps -f "$here/pgbench/acquire_release.pgb" "${common[@]}")" tps
    record lease_cycle_tps bare_update "$clients" "$round" "$(tps -f "$here/pgbench/bare_update.pgb" "${common[@]}")" tps
    record lease_renew_tps renew "$clients" "$round" "$(tps -D have_token=0 -f "$here/pgbench/renew.pgb" "${common[@]}")" tps
  done
done
