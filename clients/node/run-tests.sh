#!/bin/bash
# Tests of the pg-fencing package against the live server named by the PG*
# variables (as a role that may create the extension: a throwaway cluster's
# superuser).  From the repository's root:
#
#   source scripts/lib.sh; with_throwaway_cluster bash clients/node/run-tests.sh
#
# npm ci installs the locked dependencies (pg; typescript and @types/node
# for the declarations' check) into node_modules/, which git ignores; tsc
# then checks index.d.ts against a typed usage file, and node's own test
# runner runs the suite.  Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
npx --no-install tsc --project test/tsconfig.json
psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS pg_fencing' >/dev/null
# With --test-force-exit (Node >= 20.14) a client a test forgot to close
# cannot keep the runner waiting.
flags=()
if node --help | grep -q -- '--test-force-exit'; then flags+=(--test-force-exit); fi
node --test "${flags[@]}" test/*.test.js
