#!/bin/bash
# Runs the client integration tests (ctest label "integration") inside a
# throwaway cluster's environment: scripts/test.sh calls it through
# with_throwaway_cluster, which sets PGHOST, PGPORT, PGUSER, PGPASSWORD and
# PGDATABASE.  libpq takes the connection from them, hence the empty DSN.
# The Redis and etcd locks' tests get throwaway servers of their own
# (demo/services.sh), stopped again at the end.  Where those servers are not
# installed (the other majors' roots of scripts/test-majors.sh install only
# PostgreSQL and the build tools), those tests skip and say so; the README's
# test command installs them, so there they always run.
#
#   with_throwaway_cluster bash test/integration/run-inside.sh BUILD_DIR [ctest arguments]
set -euo pipefail
build=$1
shift
psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS pg_fencing'
export PG_FENCING_TEST_DSN=

if command -v redis-server >/dev/null && command -v etcd >/dev/null && id redis >/dev/null 2>&1; then
  source "$(dirname "${BASH_SOURCE[0]}")/../../demo/services.sh"
  trap stop_services EXIT
  start_redis
  start_etcd
  export PG_FENCING_TEST_REDIS=$REDIS_ADDRESS PG_FENCING_TEST_ETCD=$ETCD_URL
else
  echo "run-inside.sh: no redis-server or etcd here: the Redis and etcd lock tests skip"
fi

ctest --test-dir "$build" -L integration --output-on-failure "$@"
