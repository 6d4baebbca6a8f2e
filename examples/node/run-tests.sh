#!/bin/bash
# Installs the Node.js example's locked dependencies (npm ci, from
# package-lock.json) and runs its tests with node's built-in test runner.
# The connection comes from the PG* variables, e.g. inside a throwaway cluster:
#
#   source scripts/lib.sh; with_throwaway_cluster bash examples/node/run-tests.sh
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
# With --test-force-exit (Node >= 20.14), a client that a test failed to close
# fails that test (see afterEach) instead of keeping the runner waiting.
flags=()
if node --help | grep -q -- '--test-force-exit'; then flags+=(--test-force-exit); fi
node --test "${flags[@]}" .
