#!/bin/bash
# Single-row UPDATE throughput under a lock-wide fence against a per-row
# fence (issue 15 item 2: one holder's transactions in parallel), with a
# no-trigger baseline and the same lock-wide table in a database whose
# extension is still 1.3 (every writer locks the mark's row), all measured
# in interleaved rounds on one cluster.  Every transaction presents the
# holder's one token.  Run as root:
#
#   bash bench/lockwide_tps.sh [OUT_DIR]
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BENCH_CLIENTS ("1 2 8"),
# BENCH_ROWS (10000).  Writes lockwide_tps.csv
# (benchmark,variant,clients,round,value,unit) and prints the medians.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
out=${1:-bench/results/$(date -u +%Y-%m-%dT%H%MZ)-lockwide}
mkdir -p "$out"
out=$(cd "$out" && pwd)
inner=$(mktemp /tmp/pg_fencing_lockwide.XXXXXX.sh)
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<'INNER'
set -euo pipefail
csv=$1
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 2 8}
rows=${BENCH_ROWS:-10000}
setup() { # database version
  psql -X -q -v ON_ERROR_STOP=1 -d "$1" <<SQL
CREATE EXTENSION pg_fencing VERSION '$2';
-- A grant first: the hand-written tokens below are then below the highest
-- token the database has granted, which 1.5's guards require.
SELECT fencing_grant() IS NOT NULL AS granted;
CREATE TABLE bench_none (id int PRIMARY KEY, tok fencing_token, val bigint NOT NULL DEFAULT 0);
CREATE TABLE bench_row (LIKE bench_none INCLUDING ALL);
CREATE TABLE bench_lock (LIKE bench_none INCLUDING ALL);
INSERT INTO bench_none (id) SELECT g FROM generate_series(1, $rows) g;
INSERT INTO bench_row (id) SELECT g FROM generate_series(1, $rows) g;
INSERT INTO bench_lock (id) SELECT g FROM generate_series(1, $rows) g;
SELECT fencing_protect('bench_row');
SELECT fencing_protect('bench_lock', lock_name => 'bench-lock');
VACUUM ANALYZE;
SQL
}
psql -X -q -c "CREATE DATABASE bench13"
setup "$PGDATABASE" 1.4
setup bench13 1.3
# The holder's token, above any mark either database has.
token=$(psql -X -At -c "SELECT fencing_grant()")
work=$(mktemp -d)
for t in none row lock; do
  { echo "\\set id random(1, $rows)"
    echo "UPDATE bench_$t SET tok = $token, val = val + 1 WHERE id = :id;"; } >"$work/$t.sql"
done
tps() { pgbench -n "$@" 2>/dev/null | awk '/^tps/ {print $3}'; }
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    common=(-c "$clients" -j "$clients" -T "$seconds")
    echo "single_row_tps,none,$clients,$round,$(tps -f "$work/none.sql" "${common[@]}"),tps" >>"$csv"
    echo "single_row_tps,per_row,$clients,$round,$(tps -f "$work/row.sql" "${common[@]}"),tps" >>"$csv"
    echo "single_row_tps,lock_wide,$clients,$round,$(tps -f "$work/lock.sql" "${common[@]}"),tps" >>"$csv"
    echo "single_row_tps,lock_wide_1.3,$clients,$round,$(tps -f "$work/lock.sql" "${common[@]}" bench13),tps" >>"$csv"
  done
done
rm -rf "$work"
INNER
chmod 644 "$inner"
: >"$out/lockwide_tps.csv"
chown postgres: "$out" "$out/lockwide_tps.csv"
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" -o fsync=on -o max_connections=50 \
  bash "$inner" "$out/lockwide_tps.csv"
awk -v baseline=per_row -f bench/tps_medians.awk "$out/lockwide_tps.csv" | tee "$out/lockwide_tps.md"
