#!/bin/bash
# Brings its own lock services: starts a throwaway Redis and etcd on loopback
# (demo/services.sh), runs the demo's pause scenario with its lock in each,
# fencing off and on, and stops them again.  The database is the one the PG*
# environment names, e.g. a throwaway cluster:
#
#   source scripts/lib.sh
#   with_throwaway_cluster bash demo/run-with-services.sh build/demo/pg_fencing_demo
#
# Arguments after the demo's path go to every run (--json, --ttl 2000, ...).
# Exit status: 0 when every run showed what it should; otherwise the highest
# status of the demo's runs (1: a run did not show what it should, 2: a
# bad command line or an unusable database or service), or 2 when a server
# did not start.
set -euo pipefail

demo=${1:?"usage: $0 PATH/TO/pg_fencing_demo [DEMO OPTION]..."}
shift
source "$(dirname "${BASH_SOURCE[0]}")/services.sh"
trap stop_services EXIT

start_redis || exit 2
start_etcd || exit 2

status=0
summary=()
run_demo() {  # SERVICE DEMO-OPTION...
  local service=$1 run_status=0
  shift
  printf '\n==> pause scenario, lock in %s: %s %s\n' "$service" "$demo" "$*"
  "$demo" "$@" || run_status=$?
  summary+=("$service: $([[ $run_status == 0 ]] && echo ok || echo "FAILED (exit status $run_status)")")
  ((run_status <= status)) || status=$run_status
}

run_demo redis --scenario pause --lock redis --redis "$REDIS_ADDRESS" "$@"
run_demo etcd --scenario pause --lock etcd --etcd "$ETCD_URL" "$@"

printf '\n==> lock services:\n'
printf '    %s\n' "${summary[@]}"
exit "$status"
