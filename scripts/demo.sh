#!/bin/bash
# The README's first command: set up a fresh Debian 12 machine (as root),
# build and install pg_fencing, and replay the pause scenario on a
# throwaway cluster.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$PROJECT_ROOT"

install_packages
build_and_install

log "replaying the pause scenario on a throwaway cluster"
copy=$(make_test_copy)
with_throwaway_cluster psql -X -v ON_ERROR_STOP=0 -f "$copy/examples/pause_scenario.sql"
rm -rf "$(dirname "$copy")"
