#!/bin/bash
# Runs every measurement against the cluster in the environment (PG* set by
# pg_virtualenv) and appends CSV lines "benchmark,variant,clients,round,value,unit"
# to $1.  Rounds interleave the variants, so slow drift of the machine hits
# all of them alike.  QUICK=1 shrinks everything to a smoke test.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
quick=${QUICK:-0}
if ((quick)); then
  rows=2000 rounds=1 seconds=1 clients_list="1 2"
else
  rows=${BENCH_ROWS:-1000000} rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} clients_list="1 2 8"
fi
variants="none guard lockwide plpgsql generic cas"
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }

echo "bench: $rows rows, $rounds rounds, ${seconds}s per pgbench run" >&2
PGOPTIONS="-c bench.rows=$rows" psql_q -f "$here/setup.sql" >/dev/null

# The statement each variant runs: the same UPDATE, except the
# compare-and-swap form, which checks the token in its WHERE clause.
update_sql() { # variant token [where]
  local table=bench_$1 where=${3:-true}
  if [[ $1 == cas ]]; then
    echo "UPDATE $table SET tok = $2, val = val + 1 WHERE ($where) AND tok <= '$2'"
  else
    echo "UPDATE $table SET tok = $2, val = val + 1 WHERE $where"
  fi
}

# ---- Bulk UPDATE of every row in one statement ------------------------------
token=1
for round in $(seq 1 "$rounds"); do
  for v in $variants; do
    token=$((token + 1))
    ms=$(psql -X -At -v ON_ERROR_STOP=1 <<SQL | awk '/^Time:/ {print $2}'
\\timing on
$(update_sql "$v" "$token");
SQL
)
    record bulk_update "$v" 1 "$round" "$ms" ms
    psql_q -c "VACUUM bench_$v" # the next round finds the same free space
  done
done

# ---- Single-row UPDATE throughput (pgbench) -----------------------------------
token=$((token + 1))
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    for v in $variants; do
      script=$(mktemp)
      { echo "\\set id random(1, $rows)"; echo "$(update_sql "$v" "$token" "id = :id");"; } >"$script"
      tps=$(pgbench -n -f "$script" -c "$clients" -j "$clients" -T "$seconds" 2>/dev/null |
        awk '/^tps/ {print $3}')
      rm -f "$script"
      record single_row_tps "$v" "$clients" "$round" "$tps" tps
    done
  done
done

# ---- fencing_grant() against nextval() -------------------------------------------
psql_q -c "CREATE SEQUENCE IF NOT EXISTS bench_plain_seq CACHE 1"
for mode in on off; do
  for round in $(seq 1 "$rounds"); do
    for v in nextval grant; do
      script=$(mktemp)
      if [[ $v == grant ]]; then sql="SELECT fencing_grant();"; else sql="SELECT nextval('bench_plain_seq');"; fi
      echo "$sql" >"$script"
      tps=$(PGOPTIONS="-c synchronous_commit=$mode" pgbench -n -f "$script" -c 1 -T "$seconds" 2>/dev/null |
        awk '/^tps/ {print $3}')
      rm -f "$script"
      record "grant_tps_sync_$mode" "$v" 1 "$round" "$tps" tps
    done
  done
done

# ---- Leases -----------------------------------------------------------------------
BENCH_ROUNDS=$rounds BENCH_SECONDS=$seconds BENCH_CLIENTS="$clients_list" bash "$here/lease_tps.sh" "$out"

# Hand-over latency to waiting acquirers (1, 10 and 100 on one lock), and
# at a lease's end.
bash "$here/handover.sh" "$out"
