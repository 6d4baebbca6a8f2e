#!/bin/bash
# fencing_grant() against nextval() of a plain CACHE 1 sequence (issue 15
# item 3), pgbench, fsync on, interleaved rounds on one throwaway cluster.
# Run as root:
#
#   bash bench/grant_tps.sh [OUT_DIR]
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2 8").
# Writes grant_tps.csv (benchmark,variant,clients,round,value,unit) and
# prints the medians and grant / nextval.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
out=${1:-bench/results/$(date -u +%Y-%m-%dT%H%MZ)-grant}
mkdir -p "$out"
out=$(cd "$out" && pwd)
inner=$(mktemp /tmp/pg_fencing_grant.XXXXXX.sh)
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<'INNER'
set -euo pipefail
csv=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2 8}
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_fencing" -c "CREATE SEQUENCE plain_seq CACHE 1"
work=$(mktemp -d)
echo "SELECT fencing_grant();" >"$work/grant.sql"
echo "SELECT nextval('plain_seq');" >"$work/nextval.sql"
tps() { pgbench -n "$@" 2>/dev/null | awk '/^tps/ {print $3}'; }
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    common=(-c "$clients" -j "$clients" -T "$seconds")
    echo "grant_tps,nextval,$clients,$round,$(tps -f "$work/nextval.sql" "${common[@]}"),tps" >>"$csv"
    echo "grant_tps,grant,$clients,$round,$(tps -f "$work/grant.sql" "${common[@]}"),tps" >>"$csv"
  done
done
rm -rf "$work"
INNER
chmod 644 "$inner"
: >"$out/grant_tps.csv"
chown postgres: "$out" "$out/grant_tps.csv"
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" -o fsync=on ${BENCH_SERVER_OPTIONS:-} \
  bash "$inner" "$out/grant_tps.csv"
awk -v baseline=nextval -f bench/tps_medians.awk "$out/grant_tps.csv" | tee "$out/grant_tps.md"
