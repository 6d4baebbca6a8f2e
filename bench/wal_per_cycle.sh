#!/bin/bash
# What an acquire+release cycle writes and flushes, per lease kind: the
# share of a cycle's cost that a commit's flush makes (fsync on) and that
# cycles per second cannot resolve on a disk whose flush time swings from
# one second to the next (issue 25: permit_tps.sh's per-round ratios at
# fsync on spread by 0.3-3x on this machine).  Unlike a rate, these counts
# repeat run to run.
#
# Runs bench/pgbench's exclusive, permit and shared cycles (the scripts
# permit_tps.sh times) for N cycles each with one client, and reads from
# pg_stat_wal the WAL records, bytes, writes and flushes per cycle, and from
# pg_walinspect the records per resource manager and type.  Appends CSV
# lines "wal_per_cycle,variant,1,1,value,unit" to $1 and prints a table.
#
#   pg_virtualenv -t -o fsync=on -o shared_preload_libraries=pg_fencing \
#     bash bench/wal_per_cycle.sh OUT.csv [N]
set -euo pipefail
out=$1 cycles=${2:-2000}
here=$(cd "$(dirname "$0")" && pwd)
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pg_fencing; CREATE EXTENSION IF NOT EXISTS pg_walinspect"
script_of() {
  case $1 in
    exclusive) echo "$here/pgbench/acquire_release.pgb" ;;
    permit) echo "$here/pgbench/permit_cycle.pgb" ;;
    shared) echo "$here/pgbench/shared_cycle.pgb" ;;
  esac
}
for v in exclusive permit shared; do
  # A first run creates the lock and its rows; the measured one reuses them.
  pgbench -n -f "$(script_of "$v")" -c 1 -t 10 >/dev/null
  psql -X -q -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
  start=$(psql -X -At -c "SELECT pg_current_wal_insert_lsn()")
  pgbench -n -f "$(script_of "$v")" -c 1 -t "$cycles" >/dev/null
  end=$(psql -X -At -c "SELECT pg_current_wal_insert_lsn()")
  # pg_stat_wal counts what this run's backends reported; the records and
  # bytes are the run's, the writes and flushes those of every process
  # (walwriter included), so they are an upper bound.
  psql -X -At -F, -c "
    SELECT 'wal_per_cycle,$v,1,1,' || round(wal_records::numeric / $cycles, 2) || ',records' FROM pg_stat_wal
    UNION ALL SELECT 'wal_per_cycle,$v,1,1,' || round(pg_wal_lsn_diff('$end', '$start') / $cycles) || ',bytes'
    UNION ALL SELECT 'wal_per_cycle,$v,1,1,' || round(wal_sync::numeric / $cycles, 2) || ',flushes' FROM pg_stat_wal" >>"$out"
  echo "== $v: per cycle, by record type"
  psql -X -q -c "
    SELECT resource_manager, record_type, round(count(*)::numeric / $cycles, 2) AS records,
           round(sum(record_length)::numeric / $cycles) AS bytes
      FROM pg_get_wal_records_info('$start', '$end') GROUP BY 1, 2 ORDER BY 1, 2"
done
echo "variant,records,bytes,flushes"
grep '^wal_per_cycle,' "$out" | awk -F, '{v[$2] = v[$2] "," $5} END {for (k in v) print k v[k]}' | sort
