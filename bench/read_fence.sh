#!/bin/bash
# What a read fence (a row-level security policy USING
# fencing_reads_allowed(), docs/functions.md, "Reads under a lock-wide fence") costs a
# SELECT: instructions per row of a full scan (callgrind, single-user
# backend), and single-row SELECT transactions per second (pgbench), each
# against the same table without the policy, measured in the same run.
# Run as root:
#
#   bash bench/read_fence.sh [OUT_DIR]
#
# Environment: BENCH_ROWS (100000, the scan), BENCH_ROUNDS (3),
# BENCH_SECONDS (5), BENCH_CLIENTS ("1 8").  Writes read_fence.csv
# (benchmark,variant,clients,round,value,unit) and read_fence.md.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
out=${1:-bench/results/$(date -u +%Y-%m-%dT%H%MZ)-read-fence}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rows=${BENCH_ROWS:-100000}
bindir=/usr/lib/postgresql/$PG_MAJOR/bin
work=$(mktemp -d /tmp/pg_fencing_read_fence.XXXXXX)
chown postgres: "$work"
trap 'rm -rf "$work"' EXIT
: >"$out/read_fence.csv"
chown postgres: "$out" "$out/read_fence.csv"

# The tables: the same rows without a policy, with the policy calling the
# function per row, and with it called once per statement (the sub-select).
# The role reading them is not a superuser (superusers bypass row-level
# security) and may use the lock.
setup_sql() {
  cat <<SQL
CREATE EXTENSION pg_fencing;
-- A grant first: the hand-written tokens below are then below the highest
-- token the database has granted, which 1.5's guards require.
SELECT fencing_grant() IS NOT NULL AS granted;
CREATE ROLE bench_reader LOGIN;
CREATE TABLE read_none (id int PRIMARY KEY, tok fencing_token, val int);
INSERT INTO read_none SELECT g, NULL, g FROM generate_series(1, $rows) g;
CREATE TABLE read_per_row (LIKE read_none INCLUDING ALL);
INSERT INTO read_per_row SELECT * FROM read_none;
CREATE TABLE read_once (LIKE read_none INCLUDING ALL);
INSERT INTO read_once SELECT * FROM read_none;
ALTER TABLE read_per_row ENABLE ROW LEVEL SECURITY;
CREATE POLICY all_rows ON read_per_row USING (true);
CREATE POLICY read_fence ON read_per_row AS RESTRICTIVE FOR SELECT USING (fencing_reads_allowed('bench-read'));
ALTER TABLE read_once ENABLE ROW LEVEL SECURITY;
CREATE POLICY all_rows ON read_once USING (true);
CREATE POLICY read_fence ON read_once AS RESTRICTIVE FOR SELECT USING ((SELECT fencing_reads_allowed('bench-read')));
GRANT SELECT ON read_none, read_per_row, read_once TO bench_reader;
SELECT fencing_protect(t, lock_name => 'bench-read') FROM unnest(ARRAY['read_none', 'read_per_row', 'read_once']::regclass[]) t;
SELECT fencing_grant_lock('bench-read', 'bench_reader');
UPDATE read_none SET tok = '1' WHERE id = 1;  -- the lock's mark: 1
VACUUM ANALYZE;
SQL
}

# ---- Instructions per row of a full scan ----------------------------------------
as_postgres "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null
port=$(free_port)
as_postgres "$bindir/pg_ctl" -D "$work/data" -o "-p $port -k $work -c listen_addresses=" -w start >/dev/null
setup_sql | psql -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres -d postgres >/dev/null
as_postgres "$bindir/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null
declare -A total
for t in none per_row once; do
  log_file="$work/callgrind.$t.out"
  # Single-user mode runs as the bootstrap superuser: SET ROLE to the reader.
  printf '%s\n\n' "SET ROLE bench_reader;" "BEGIN;" "SELECT fencing_present('bench-read', '1');" \
    "SELECT count(*) FROM read_$t WHERE val >= 0;" "COMMIT;" |
    as_postgres valgrind --tool=callgrind --callgrind-out-file="$log_file" \
      "$bindir/postgres" --single -D "$work/data" -c jit=off -c session_preload_libraries=pg_fencing \
      -j postgres >"$work/out.$t" 2>/dev/null
  grep -q "count = \"$rows\"" "$work/out.$t" || { echo "read_fence.sh: the scan of read_$t did not see $rows rows" >&2; cat "$work/out.$t" >&2; exit 1; }
  total[$t]=$(awk '/^summary:/ {print $2}' "$log_file")
done
for t in none per_row once; do
  echo "scan_instructions_per_row,$t,1,1,$(( (total[$t] - total[none]) / rows )),instructions" >>"$out/read_fence.csv"
done

# ---- Single-row SELECT transactions (pgbench) ------------------------------------
inner=$(mktemp /tmp/pg_fencing_read_fence.XXXXXX.sh)
trap 'rm -rf "$work" "$inner"' EXIT
cat >"$inner" <<'INNER'
set -euo pipefail
csv=$1 rows=$2
rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list=${BENCH_CLIENTS:-1 8}
work=$(mktemp -d)
# Every variant runs the same transaction: present the token, read one row.
for t in none per_row once; do
  { echo "\\set id random(1, $rows)"
    echo "BEGIN;"
    echo "SELECT fencing_present('bench-read', '1');"
    echo "SELECT val FROM read_$t WHERE id = :id;"
    echo "COMMIT;"; } >"$work/$t.sql"
done
# As the reader (the role setting at connection start: superusers bypass
# row-level security).
tps() { PGOPTIONS="-c role=bench_reader" pgbench -n "$@" 2>/dev/null | awk '/^tps/ {print $3}'; }
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    for t in none per_row once; do
      echo "select_tps,$t,$clients,$round,$(tps -f "$work/$t.sql" -c "$clients" -j "$clients" -T "$seconds"),tps" >>"$csv"
    done
  done
done
rm -rf "$work"
INNER
chmod 644 "$inner"
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" -o fsync=on -o shared_preload_libraries=pg_fencing \
  bash -c "$(declare -f setup_sql); rows=$rows; setup_sql | psql -X -q -v ON_ERROR_STOP=1 >/dev/null && bash '$inner' '$out/read_fence.csv' $rows"
{
  echo "instructions per row of a full scan over no policy (callgrind, $rows rows):"
  grep '^scan_instructions_per_row' "$out/read_fence.csv" | cut -d, -f2,5
  echo "single-row SELECT transactions (present, read one row), medians in tps and ratios to no policy:"
  grep '^select_tps' "$out/read_fence.csv" | awk -v baseline=none -f bench/tps_medians.awk
} | tee "$out/read_fence.md"
