#!/bin/bash
# One command for the benchmarks: installs what is missing, builds and
# installs the extension, measures on a throwaway cluster, and writes the
# table and chart to bench/results/.  Run as root:
#
#   bash bench/run.sh            # the full run (about 10 minutes)
#   QUICK=1 bash bench/run.sh    # a smoke test at tiny size (the test command runs this)
#
# Environment: BENCH_ROWS (1000000), BENCH_ROUNDS (3), BENCH_SECONDS (5).
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
install_packages
build_and_install

stamp=$(date -u +%Y-%m-%dT%H%MZ)
if [[ ${QUICK:-0} == 1 ]]; then out=$(mktemp -d /tmp/pg_fencing_bench.XXXXXX); else out=bench/results/$stamp; fi
mkdir -p "$out"
raw=$out/raw.csv
: >"$raw"

log "measuring (results in $out)"
# A cluster sized so that checkpoints stay out of the measured statements,
# with fsync on (pg_virtualenv turns it off unless told otherwise), and the
# library preloaded, as the README's set-up recommends (grants from reserved
# ranges, the statistics counted).
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" \
  -o shared_buffers=1GB -o max_wal_size=8GB -o checkpoint_timeout=30min -o max_connections=150 \
  -o fsync=on -o shared_preload_libraries=pg_fencing \
  env QUICK="${QUICK:-0}" bash bench/measure.sh "$raw"

log "counting instructions per row (callgrind)"
bash bench/callgrind.sh "$out" "$( [[ ${QUICK:-0} == 1 ]] && echo 2000 || echo 100000)"

log "rendering"
{
  echo "# pg_fencing benchmark results, $stamp"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(. /etc/os-release; echo "$PRETTY_NAME"), $(uname -r), PostgreSQL $(pg_config --version | awk '{print $2}')."
  echo "Settings: shared_buffers=1GB, max_wal_size=8GB, max_connections=150 (101 clients wait for one lock), shared_preload_libraries=pg_fencing, everything else the Debian default (fsync on, synchronous_commit on)."
  if [[ ${QUICK:-0} == 1 ]]; then
    echo "QUICK smoke run (2000 rows, 1 round, 1 s pgbench runs): the figures mean nothing."
  else
    echo "Rows: ${BENCH_ROWS:-1000000} (bulk), rounds: ${BENCH_ROUNDS:-3} interleaved, pgbench runs of ${BENCH_SECONDS:-5} s."
  fi
  echo
  perl bench/render.pl "$raw" "$out/tables.md" "$out/chart.dat"
  cat "$out/tables.md"
  echo
  echo "### Instructions per row (callgrind, single-user backend, bulk UPDATE)"
  echo
  echo "| variant | instructions in total | extra instructions per row over no trigger |"
  echo "|---|---|---|"
  tail -n +2 "$out/callgrind.csv" | awk -F, '{printf "| %s | %s | %s |\n", $1, $2, $3}'
} >"$out/results.md"
gnuplot -e "data='$out/chart.dat'; out='$out/chart.png'; title='pg_fencing: cost relative to baseline, $stamp'" bench/chart.gp
cat "$out/results.md"
if [[ ${QUICK:-0} == 1 ]]; then
  # The smoke test checks that every benchmark produced numbers, nothing more.
  for b in bulk_update single_row_tps grant_tps_sync_on lease_cycle_tps lease_renew_tps handover_latency handover_after_expiry; do
    grep -q "^$b," "$raw" || { echo "bench: no $b figures" >&2; exit 1; }
  done
  # Both waiting forms of the hand-over.
  for v in handover_latency,await_before_commit handover_after_expiry,await; do
    grep -q "^$v," "$raw" || { echo "bench: no $v figures" >&2; exit 1; }
  done
  [[ -s $out/chart.png ]] || { echo "bench: no chart" >&2; exit 1; }
  rm -rf "$out"
else
  ln -sfn "$stamp" bench/results/latest
fi
