#!/bin/bash
# Runs the client integration tests (ctest label "integration") inside a
# throwaway cluster's environment: scripts/test.sh calls it through
# with_throwaway_cluster, which sets PGHOST, PGPORT, PGUSER, PGPASSWORD and
# PGDATABASE.  libpq takes the connection from them, hence the empty DSN.
#
#   with_throwaway_cluster bash test/integration/run-inside.sh BUILD_DIR [ctest arguments]
set -euo pipefail
build=$1
shift
psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS pg_fencing'
export PG_FENCING_TEST_DSN=
ctest --test-dir "$build" -L integration --output-on-failure "$@"
