#!/bin/bash
# A bulk UPDATE of every row of a protected table against the same UPDATE
# with no trigger (issue 15 item 1), with and without HOT updates: the guard
# judged in the UPDATE's projection (pg_fencing.fast_update, the default)
# and by its BEFORE row trigger (fast_update off), per-row and lock-wide,
# all measured in interleaved rounds on one cluster.  Run as root:
#
#   bash bench/bulk_update.sh [OUT_DIR]
#
# Environment: BENCH_ROWS (1000000), BENCH_ROUNDS (3).  Writes
# bulk_update.csv (benchmark,variant,clients,round,value,unit; "clients" is
# the fillfactor: 45 leaves each page room for HOT versions of all its rows,
# 100 none) and prints the medians and their ratios to no trigger, and the
# share of HOT updates each variant got.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
out=${1:-bench/results/$(date -u +%Y-%m-%dT%H%MZ)-bulk}
mkdir -p "$out"
out=$(cd "$out" && pwd)
inner=$(mktemp /tmp/pg_fencing_bulk.XXXXXX.sh)
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<'INNER'
set -euo pipefail
csv=$1 hot=$2
rows=${BENCH_ROWS:-1000000} rounds=${BENCH_ROUNDS:-3}
variants="none per_row per_row_trigger lock_wide lock_wide_trigger"
fillfactors="45 100"
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_q -c "CREATE EXTENSION pg_fencing"
for ff in $fillfactors; do
  for v in $variants; do
    t=bench_${v}_$ff
    psql_q <<SQL
CREATE TABLE $t (id int PRIMARY KEY, tok fencing_token NOT NULL, val int NOT NULL) WITH (fillfactor = $ff);
INSERT INTO $t SELECT g, 0, 0 FROM generate_series(1, $rows) g;
SQL
    case $v in
      per_row*) psql_q -c "SELECT fencing_protect('$t')" >/dev/null ;;
      lock_wide*) psql_q -c "SELECT fencing_protect('$t', lock_name => 'bench-bulk')" >/dev/null ;;
    esac
  done
done
psql_q -c "VACUUM ANALYZE"
# The library is preloaded, so every session plans its first UPDATE with it.
for round in $(seq 1 "$rounds"); do
  token=$(psql -X -At -c "SELECT fencing_grant()")
  for ff in $fillfactors; do
    for v in $variants; do
      t=bench_${v}_$ff
      fast=on
      [[ $v == *_trigger ]] && fast=off
      ms=$(PGOPTIONS="-c pg_fencing.fast_update=$fast" psql -X -At -v ON_ERROR_STOP=1 <<SQL | awk '/^Time:/ {print $2}'
\\timing on
UPDATE $t SET tok = '$token', val = val + 1;
SQL
)
      echo "bulk_update,$v,$ff,$round,$ms,ms" >>"$csv"
      psql_q -c "VACUUM $t" # the next round finds the same free space
    done
  done
done
# How many of the updates were HOT, per table.
psql -X -At -F, -c "SELECT relname, round(n_tup_hot_upd::numeric / greatest(n_tup_upd, 1), 3)
                      FROM pg_stat_user_tables WHERE relname LIKE 'bench_%' ORDER BY relname" >"$hot"
INNER
chmod 644 "$inner"
: >"$out/bulk_update.csv"
: >"$out/hot_share.csv"
chown postgres: "$out" "$out/bulk_update.csv" "$out/hot_share.csv"
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" \
  -o shared_buffers=2GB -o max_wal_size=16GB -o checkpoint_timeout=30min -o fsync=on \
  -o shared_preload_libraries=pg_fencing \
  bash "$inner" "$out/bulk_update.csv" "$out/hot_share.csv"
{
  echo "fillfactor (45: HOT, 100: no HOT), medians in ms and ratios to no trigger:"
  awk -v baseline=none -f bench/tps_medians.awk "$out/bulk_update.csv" | sed 's/^clients/fillfactor/'
  echo "share of HOT updates per table:"
  cat "$out/hot_share.csv"
} | tee "$out/bulk_update.md"
