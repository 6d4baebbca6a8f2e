#!/bin/bash
# Installs the Node.js examples' locked dependencies (npm ci: pg, and the
# pg-fencing package copied from clients/node, see .npmrc) and runs their
# test, example.test.js, with node's built-in test runner.  The connection
# comes from the PG* variables, e.g. inside a throwaway cluster:
#
#   source scripts/lib.sh; with_throwaway_cluster bash examples/node/run-tests.sh
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
# With --test-force-exit (Node >= 20.14), a client a test failed to close
# cannot keep the runner waiting.
flags=()
if node --help | grep -q -- '--test-force-exit'; then flags+=(--test-force-exit); fi
node --test "${flags[@]}" example.test.js
