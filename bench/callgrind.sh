#!/bin/bash
# Instructions per row of a bulk UPDATE, per variant, counted by valgrind's
# callgrind in a single-user backend (no other process, same binary, same
# input: the counts repeat exactly, whatever else the machine is doing).
# Per-row cost = (instructions with the variant - without a trigger) / rows.
# Usage (as root): bench/callgrind.sh OUT_DIR [rows]
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
out=$(cd "$1" && pwd)
rows=${2:-100000}
bindir=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}  # another build under its own prefix: PG_BINDIR
work=$(mktemp -d /tmp/pg_fencing_callgrind.XXXXXX)
chown postgres: "$work"
trap 'rm -rf "$work"' EXIT
as_postgres "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null
# The AFTER-trigger prototypes (bench/prototypes), where postgres can read them.
make -s -C "$(dirname "$0")/prototypes" with_llvm=no >/dev/null
install -m 755 "$(dirname "$0")/prototypes/trigger_variants.so" "$work/"

single() { # runs SQL from stdin in a single-user backend
  as_postgres "$bindir/postgres" --single -D "$work/data" -c jit=off -j postgres >/dev/null
}
# Load the tables through the same setup the timed benchmark uses.  In
# single-user mode each statement is its own line, so feed it a server
# instead: start one briefly.
port=$(free_port)
as_postgres "$bindir/pg_ctl" -D "$work/data" -o "-p $port -k $work -c listen_addresses=" -w start >/dev/null
PGHOST=$work PGPORT=$port PGUSER=postgres PGOPTIONS="-c bench.rows=$rows" \
  psql -X -q -d postgres -f "$(dirname "$0")/setup.sql" >/dev/null
# The same guards once more, for the runs with the trigger judging every row
# (pg_fencing.fast_update off): each run needs a table of its own, in the
# state the others start from.
PGHOST=$work PGPORT=$port PGUSER=postgres psql -X -q -d postgres >/dev/null <<SQL
CREATE TABLE bench_guard_trigger (LIKE bench_guard INCLUDING ALL);
INSERT INTO bench_guard_trigger SELECT * FROM bench_guard;
SELECT fencing_protect('bench_guard_trigger');
CREATE TABLE bench_lockwide_trigger (LIKE bench_lockwide INCLUDING ALL);
INSERT INTO bench_lockwide_trigger SELECT * FROM bench_lockwide;
SELECT fencing_protect('bench_lockwide_trigger', lock_name => 'bench');
-- The same comparison in an AFTER row trigger, and in an AFTER statement
-- trigger over the transition tables (prototypes, not the extension).
CREATE FUNCTION proto_after_row() RETURNS trigger AS '$work/trigger_variants.so' LANGUAGE C;
CREATE FUNCTION proto_after_statement() RETURNS trigger AS '$work/trigger_variants.so' LANGUAGE C;
CREATE TABLE bench_after_row (LIKE bench_none INCLUDING ALL);
INSERT INTO bench_after_row SELECT * FROM bench_none;
CREATE TRIGGER guard AFTER UPDATE ON bench_after_row FOR EACH ROW EXECUTE FUNCTION proto_after_row();
CREATE TABLE bench_after_statement (LIKE bench_none INCLUDING ALL);
INSERT INTO bench_after_statement SELECT * FROM bench_none;
CREATE TRIGGER guard AFTER UPDATE ON bench_after_statement REFERENCING OLD TABLE AS o NEW TABLE AS n
  FOR EACH STATEMENT EXECUTE FUNCTION proto_after_statement();
VACUUM ANALYZE;
SQL
as_postgres "$bindir/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null

{
  echo "variant,instructions,per_row_over_no_trigger"
} >"$out/callgrind.csv"
# Every run loads the library before its UPDATE is planned (a session that
# loads it only when the trigger first fires plans its first UPDATE without
# the projection's check); the *_trigger runs turn that check off.
variants="none guard guard_trigger lockwide lockwide_trigger after_row after_statement plpgsql"
declare -A total
for v in $variants; do
  log_file="$work/callgrind.$v.out"
  fast_update=on
  [[ $v == *_trigger ]] && fast_update=off
  echo "UPDATE bench_$v SET tok = 5, val = val + 1;" |
    as_postgres valgrind --tool=callgrind --callgrind-out-file="$log_file" \
      "$bindir/postgres" --single -D "$work/data" -c jit=off -c session_preload_libraries=pg_fencing \
      -c pg_fencing.fast_update=$fast_update -j postgres >/dev/null 2>"$work/valgrind.$v.log"
  total[$v]=$(awk '/^summary:/ {print $2}' "$log_file")
  cp "$log_file" "$out/callgrind.$v.out"
done
for v in $variants; do
  per_row=$(( (total[$v] - total[none]) / rows ))
  echo "$v,${total[$v]},$per_row" >>"$out/callgrind.csv"
done
# Where a guarded row's instructions go: the top of the inclusive profile.
for v in guard guard_trigger; do
  callgrind_annotate --inclusive=yes "$out/callgrind.$v.out" 2>/dev/null | head -60 >"$out/callgrind.$v.top.txt" || true
done
cat "$out/callgrind.csv"
