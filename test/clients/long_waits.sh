#!/bin/bash
# A wait of more than a minute keeps its place in line, in every client
# (issue 43): each client's suite has the test (Python tests/test_long_wait.py,
# Go TestAWaitLongerThanAMinuteKeepsItsPlace, Java LineTest#aWaitLonger...,
# Node test/long-wait.test.js, C++ ClientTest.LongWait...), skipped unless
# PG_FENCING_LONG_WAIT=1, because each takes about 70 s.  This script runs
# the five side by side against one server, so that they cost the test
# command about 90 s rather than six minutes, and checks that each one RAN
# and passed (a skipped test would pass vacuously).
#
#   source scripts/lib.sh; with_throwaway_cluster bash test/clients/long_waits.sh BUILD_DIR
#
# BUILD_DIR: the CMake build with the C++ client's integration tests.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:?usage: long_waits.sh BUILD_DIR}
psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS pg_fencing' || exit 1
export PG_FENCING_LONG_WAIT=1 PYTHONDONTWRITEBYTECODE=1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Each client: its name, the command that runs its long wait alone, and the
# line its output has when the test ran and passed.
declare -A command ran
command[python]="cd clients/python && /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs tests/test_long_wait.py"
ran[python]='^1 passed'
command[go]="bash clients/go/run-tests.sh -run 'TestAWaitLongerThanAMinuteKeepsItsPlace\$' -timeout 300s -v"
ran[go]='^--- PASS: TestAWaitLongerThanAMinuteKeepsItsPlace'
command[java]="PG_FENCING_TEST_SELECT='--select-method io.pgfencing.LineTest#aWaitLongerThanAMinuteKeepsItsPlaceInLine' bash clients/java/run-tests.sh"
ran[java]='1 tests successful'
command[node]="cd clients/node && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; } && node --test test/long-wait.test.js"
ran[node]='^# pass 1$'
# The C++ test binary directly: ctest gives every integration test 60 s.
command[cpp]="PG_FENCING_TEST_DSN= $build/pg_fencing_client_test --gtest_filter='ClientTest.LongWait*'"
ran[cpp]='^\[  PASSED  \] 1 test\.'
clients=(python go java node cpp)

for c in "${clients[@]}"; do
  (eval "${command[$c]}") >"$logs/$c.log" 2>&1 &
  echo $! >"$logs/$c.pid"
done
rc=0
for c in "${clients[@]}"; do
  if wait "$(cat "$logs/$c.pid")" && grep -Eq "${ran[$c]}" "$logs/$c.log"; then
    echo "ok: $c, a wait of more than a minute kept its place"
  else
    echo "FAILED: $c (its output follows)"
    tail -n 60 "$logs/$c.log"
    rc=1
  fi
done
exit $rc
