#!/bin/bash
# The README's first command: set up a fresh Debian 12 machine (as root),
# build and install pg_fencing, and replay the pause scenario on a
# throwaway cluster.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$PROJECT_ROOT"

install_packages
build_and_install

log "replaying the pause scenario and a leader election on a throwaway cluster"
# Options after the command go to the demo, e.g. --fencing on, --json.
with_throwaway_cluster build/demo/pg_fencing_demo "$@"
