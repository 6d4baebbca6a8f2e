#!/bin/bash
# A bulk UPDATE of every row of a protected table against the same UPDATE
# with no trigger (issue 15 item 1), with and without HOT updates: the guard
# judged in the UPDATE's projection (pg_fencing.fast_update, the default)
# and by its BEFORE row trigger (fast_update off), per-row and lock-wide,
# and the same comparison in an AFTER row trigger and in an AFTER statement
# trigger over transition tables (bench/prototypes), all measured in
# interleaved rounds on one cluster.  Run as root:
#
#   bash bench/bulk_update.sh [OUT_DIR]
#
# Environment: BENCH_ROWS (1000000), BENCH_ROUNDS (3), BENCH_VARIANTS (all
# of them: none per_row per_row_trigger lock_wide lock_wide_trigger after_row
# after_statement), BENCH_FILLFACTORS ("45 100").  Writes
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
prototypes=$(mktemp -d /tmp/pg_fencing_prototypes.XXXXXX)
trap 'rm -rf "$inner" "$prototypes"' EXIT
make -s -C bench/prototypes with_llvm=no >/dev/null
install -m 755 bench/prototypes/trigger_variants.so "$prototypes/"
chmod 755 "$prototypes"
cat >"$inner" <<'INNER'
set -euo pipefail
csv=$1 hot=$2 prototypes=$3
rows=${BENCH_ROWS:-1000000} rounds=${BENCH_ROUNDS:-3}
variants=${BENCH_VARIANTS:-none per_row per_row_trigger lock_wide lock_wide_trigger after_row after_statement}
fillfactors=${BENCH_FILLFACTORS:-45 100}
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_q -c "CREATE EXTENSION pg_fencing"
# A grant first: the hand-written tokens below are then below the highest
# token the database has granted, which 1.5's guards require.
psql_q -c "SELECT fencing_grant()" >/dev/null
psql_q <<SQL
CREATE FUNCTION proto_after_row() RETURNS trigger AS '$prototypes/trigger_variants.so' LANGUAGE C;
CREATE FUNCTION proto_after_statement() RETURNS trigger AS '$prototypes/trigger_variants.so' LANGUAGE C;
SQL
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
      after_row) psql_q -c "CREATE TRIGGER guard AFTER UPDATE ON $t FOR EACH ROW EXECUTE FUNCTION proto_after_row()" ;;
      after_statement) psql_q -c "CREATE TRIGGER guard AFTER UPDATE ON $t REFERENCING OLD TABLE AS o NEW TABLE AS n
                                  FOR EACH STATEMENT EXECUTE FUNCTION proto_after_statement()" ;;
    esac
  done
done
psql_q -c "VACUUM ANALYZE"
# The library is preloaded, so every session plans its first UPDATE with it.
for round in $(seq 1 "$rounds"); do
  token=$(psql -X -At -c "SELECT fencing_grant()")
  # Each round starts one variant later, so that no variant always runs
  # first (right after the previous round's last VACUUM).
  n=$(wc -w <<<"$variants")
  rotated=$(printf '%s\n' $variants $variants | tail -n +$(( (round - 1) % n + 1 )) | head -n "$n" | tr '\n' ' ')
  for ff in $fillfactors; do
    for v in $rotated; do
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
  bash "$inner" "$out/bulk_update.csv" "$out/hot_share.csv" "$prototypes"
{
  echo "fillfactor (45: HOT, 100: no HOT), medians in ms and ratios to no trigger:"
  awk -v baseline=none -f bench/tps_medians.awk "$out/bulk_update.csv" | sed 's/^clients/fillfactor/'
  echo "share of HOT updates per table:"
  cat "$out/hot_share.csv"
} | tee "$out/bulk_update.md"
# The chart: per variant (not no trigger itself), its ratio with HOT and without.
awk -v baseline=none -f bench/tps_medians.awk "$out/bulk_update.csv" | awk -F, '
  NR == 1 { for (i = 2; i <= NF; i++) if ($i ~ /\/none$/) { name[i] = $i; sub("/none", "", name[i]) } next }
  { for (i in name) ratio[name[i], $1] = $i; ff[NR] = $1 }
  END { for (i = 2; i <= 100; i++) if (i in name) print name[i], ratio[name[i], 45], ratio[name[i], 100] }' \
  >"$out/bulk_chart.dat"
gnuplot -e "data='$out/bulk_chart.dat'; out='$out/bulk_update.png'" bench/bulk_chart.gp
