#!/bin/bash
# The delay from a grant's commit (and from a lease's end) to a follower's
# hearing of it on fencing_events, on a throwaway cluster that preloads
# pg_fencing (the expiry worker), fsync on.  Run as root:
#   bash bench/notify_latency.sh [OUT_DIR] [ROUNDS] [EXPIRIES]
# Writes notify_latency.csv (measure,statistic,milliseconds) to OUT_DIR
# (default: a new directory under bench/results/).
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$PROJECT_ROOT"
out=${1:-bench/results/$(date -u +%Y-%m-%dT%H%MZ)-notify}
mkdir -p "$out"
out=$(cd "$out" && pwd)
script=$(mktemp /tmp/pg_fencing_notify.XXXXXX.py)
cp bench/notify_latency.py "$script"
chmod 644 "$script"
trap 'rm -f "$script"' EXIT
pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" -o fsync=on \
  -o shared_preload_libraries=pg_fencing \
  bash -c "psql -X -q -c 'CREATE EXTENSION pg_fencing' && /usr/bin/python3 '$script' ${2:-200} ${3:-10}" \
  >"$out/notify_latency.csv"
cat "$out/notify_latency.csv"
