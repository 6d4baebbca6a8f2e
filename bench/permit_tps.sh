#!/bin/bash
# What a permit or a shared lease costs against an exclusive lease (issue
# 16): acquire+release cycles, each client on its own lock -- an exclusive
# lease (fencing_acquire), one permit of a semaphore of 4
# (fencing_acquire_permit) and a shared lease (fencing_acquire_shared) --
# and the baseline all are held to, a bare single-row UPDATE and its
# commit, interleaved in each round so that slow drift of the machine hits
# them alike.  Appends CSV lines "benchmark,variant,clients,round,value,unit"
# to $1 (bench/render.pl reads them) and prints the medians and their
# ratios to the exclusive cycle (bench/tps_medians.awk).  Alone:
#
#   pg_virtualenv -t bash bench/permit_tps.sh OUT.csv
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2").
set -euo pipefail
out=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2}
here=$(cd "$(dirname "$0")" && pwd)
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
psql -X -q -v ON_ERROR_STOP=1 -f "$here/pgbench/bare_update_setup.sql"
tps() { pgbench -n "$@" 2>/dev/null | awk '/^tps/ {print $3}'; }
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    common=(-c "$clients" -j "$clients" -T "$seconds")
    record permit_cycle_tps exclusive "$clients" "$round" "$(tps -f "$here/pgbench/acquire_release.pgb" "${common[@]}")" tps
    record permit_cycle_tps permit "$clients" "$round" "$(tps -f "$here/pgbench/permit_cycle.pgb" "${common[@]}")" tps
    record permit_cycle_tps shared "$clients" "$round" "$(tps -f "$here/pgbench/shared_cycle.pgb" "${common[@]}")" tps
    record permit_cycle_tps bare_update "$clients" "$round" "$(tps -f "$here/pgbench/bare_update.pgb" "${common[@]}")" tps
  done
done
# Medians per variant and client count, and their ratios to the exclusive cycle.
awk -v baseline=exclusive -f "$here/tps_medians.awk" "$out"
