#!/bin/bash
# The README's second command: set up a fresh Debian 12 machine (as root),
# build, install, and run every test suite.  Exits non-zero if any fails.
# TEST_SUITES="FUNCTION ..." runs only the suites those functions implement
# (the suite "scripts from a clone under /root" uses it).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$PROJECT_ROOT"

install_packages
build_and_install

# One Go build cache for the run: the Go client's suite and the README's
# examples compile Debian's pgx once (about 15 s on this machine), not twice.
if [[ -z ${PG_FENCING_GOCACHE:-} ]]; then
  PG_FENCING_GOCACHE=$(mktemp -d /tmp/pg_fencing-gocache.XXXXXX)
  export PG_FENCING_GOCACHE
  trap 'rm -rf "$PG_FENCING_GOCACHE"' EXIT
fi

passed=0
failed=0
failures=()
run_suite() {
  local name=$1
  shift
  [[ -z ${TEST_SUITES:-} || " $TEST_SUITES " == *" $1 "* ]] || return 0
  log "suite: $name"
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "--- $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "--- $name: FAILED ($((SECONDS - start)) s)"
  fi
}

unit_tests() { ctest --test-dir build -LE integration --output-on-failure; }

sanitized_unit_tests() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPG_FENCING_SANITIZE=ON >/dev/null &&
    cmake --build build-asan -j2 --target pg_fencing_core_test >/dev/null &&
    ctest --test-dir build-asan --output-on-failure
}

# pg_regress (sql/, expected/) and pg_isolation_regress (test/isolation/)
# against a throwaway cluster.  PG_FENCING_REGRESS_TESTS and
# PG_FENCING_ISOLATION_SPECS: only these (the clone under /root runs a few).
regress_and_isolation() {
  if ! with_throwaway_cluster make installcheck TAP_TESTS= \
    ${PG_FENCING_REGRESS_TESTS:+REGRESS="$PG_FENCING_REGRESS_TESTS"} \
    ${PG_FENCING_ISOLATION_SPECS:+ISOLATION="$PG_FENCING_ISOLATION_SPECS"}; then
    cat regression.diffs output_iso/regression.diffs 2>/dev/null || true
    return 1
  fi
}

# The client library against a throwaway cluster (ctest label integration),
# its Redis and etcd locks against throwaway servers that run-inside.sh starts.
client_integration_tests() {
  with_throwaway_cluster bash test/integration/run-inside.sh build
}

# The demo, as the README's first command runs it, with its exit status.
demo_run() {
  with_throwaway_cluster build/demo/pg_fencing_demo --no-color
}

# The demo's leader scenario in sessions, every connection through a
# transaction-pooling PgBouncer with two server connections for the demo,
# its three candidates and their heartbeats: the candidates wait in line,
# holding none (waiting in CALL fencing_await, two of them would hold both,
# and the leader's renewals would queue behind them).
demo_pooled_run() {
  with_throwaway_cluster env PG_FENCING_POOL_SIZE=2 bash demo/run-through-pgbouncer.sh \
    build/demo/pg_fencing_demo --no-color --scenario leader --sessions
}

# The demo's leader scenario with each candidate's lease in a session of its
# own (--sessions): it must pass, and every term must have been held in a
# session (the timeline says in which).
demo_sessions_run() {
  local out
  out=$(with_throwaway_cluster build/demo/pg_fencing_demo --no-color --scenario leader --sessions) || {
    printf '%s\n' "$out"
    return 1
  }
  printf '%s\n' "$out"
  local terms in_sessions
  terms=$(grep -c ' holds token ' <<<"$out")
  in_sessions=$(grep -c ' holds token .*(in fencing session [0-9]*)' <<<"$out")
  if ((terms < 3 || in_sessions != terms)); then
    echo "expected every one of the 3 or more terms held in a session; $in_sessions of $terms were" >&2
    return 1
  fi
}

# The same with the guard's fast paths off, so that its tests pass both
# ways: pg_fencing.shared_fence = off (every writer under a lock takes its
# fence gate exclusively, as before 1.4) and pg_fencing.fast_update = off
# (the BEFORE row trigger judges every UPDATE).  Left out: fence_parallel
# and fast_update, the tests that the fast paths are in effect, and
# tenants, which writes no guarded table (its flood takes 15 s).
regress_fast_paths_off() {
  local tests specs
  tests=$(cd sql && ls *.sql | sed 's/\.sql$//' | grep -vx -e fast_update -e tenants | tr '\n' ' ')
  specs=$(cd test/isolation/specs && ls *.spec | sed 's/\.spec$//' | grep -vx fence_parallel | tr '\n' ' ')
  if ! with_throwaway_cluster env PGOPTIONS="-c pg_fencing.shared_fence=off -c pg_fencing.fast_update=off" \
    make installcheck TAP_TESTS= REGRESS="$tests" ISOLATION="$specs"; then
    cat regression.diffs output_iso/regression.diffs 2>/dev/null || true
    return 1
  fi
}

# The Jepsen-style stress run: workers, leases, pauses, kills and server
# crashes, then the history checker; and an unguarded run that the checker
# must catch (about 75 s).
stress_run() {
  bash test/stress/run.sh build
}

# libFuzzer over the PostgreSQL-free core, bounded in time.
fuzz_core() {
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash test/fuzz/run.sh build-fuzz
}

# Random SQL (sqlsmith) as an unprivileged role; fails on a server crash.
sqlsmith_run() {
  with_throwaway_cluster bash test/sqlsmith/run.sh
}

# The Debian package: built from a copy of the tree, installed, checked on a
# throwaway cluster, then purged; the tree's own build is installed again.
debian_package() { bash test/packaging/deb.sh; }

# The benchmark command at tiny size: it must produce every figure and the
# chart; no timing is asserted.
# The documents against the code: every setting, SQL name, file and heading
# they name exists (test/docs/check_docs.py), read from a fresh install.
documents_check() {
  with_throwaway_cluster bash -c 'psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_fencing" &&
    python3 test/docs/check_docs.py'
}

bench_smoke() {
  QUICK=1 bash bench/run.sh >/dev/null
}

# The pause scenario with its lock in Redis and in etcd, on throwaway servers.
demo_lock_services_run() {
  with_throwaway_cluster bash demo/run-with-services.sh build/demo/pg_fencing_demo --no-color
}

# Prometheus and the chart (issue 14): Debian's prometheus-postgres-exporter
# with examples/prometheus/pg_fencing-queries.yaml against a throwaway cluster
# that preloads pg_fencing, a scenario whose counters must move by exactly
# what it did, the chart of a demo run (demo/chart.sh), and the exporter on a
# cluster that does not preload the library (about 25 s).
exporter_and_chart() { bash test/exporter/run.sh; }

# The examples (examples/python, examples/node: the pause demo and a leader
# follower over the client packages) against a throwaway cluster: their tests
# run the demo, which exits non-zero unless the stale write was refused, and
# the follower.  Debian's python3, which python3-psycopg is for (a python3
# earlier on PATH, such as pyenv's, may not have it); npm ci from the Node.js
# example's lock, which installs a copy of clients/node.
examples_run() {
  with_throwaway_cluster bash -c '/usr/bin/python3 -m unittest discover -s examples/python -v &&
    bash examples/node/run-tests.sh'
}

# The Python client (clients/python, psycopg 3) against a throwaway cluster:
# its pytest suite, then an install from its pyproject.toml into a throwaway
# venv, offline (Debian's setuptools, no index), and an import of what was
# installed.  Debian's python3, which the python3-psycopg package is for.
python_client() {
  with_throwaway_cluster bash -c 'cd clients/python && /usr/bin/python3 -m pytest -q -p no:cacheprovider' || return 1
  local venv rc=0
  venv=$(mktemp -d)
  /usr/bin/python3 -m venv --system-site-packages "$venv/v" &&
    "$venv/v/bin/pip" install -q --no-build-isolation --no-index --no-deps "$PROJECT_ROOT/clients/python" &&
    (cd "$venv" && v/bin/python -c 'import pg_fencing, sys; sys.exit(0 if pg_fencing.__version__ else 1)') || rc=1
  rm -rf "$venv" "$PROJECT_ROOT/clients/python/build" "$PROJECT_ROOT"/clients/python/*.egg-info
  return $rc
}

# The Node.js client (clients/node, package pg-fencing): npm ci from its lock,
# tsc over its declarations, node --test, against a throwaway cluster.
node_client() { with_throwaway_cluster bash clients/node/run-tests.sh; }

# The Go client (clients/go, package fencing): built offline from Debian's Go
# and pgx v4 (GOPATH mode over /usr/share/gocode), gofmt, go vet, go test.
go_client() { with_throwaway_cluster bash clients/go/run-tests.sh; }

# The Java client (clients/java, package io.pgfencing): compiled with javac
# against Debian's pgjdbc, its JUnit 5 tests run by JUnit's console launcher.
java_client() { with_throwaway_cluster bash clients/java/run-tests.sh; }

# A wait of more than a minute keeps its place in line, in every client:
# each suite's long test (skipped there), the five side by side against
# one cluster (test/clients/long_waits.sh says why).
client_long_waits() { with_throwaway_cluster bash test/clients/long_waits.sh build; }

# The README's client examples as they stand there, each installed as the
# README says and run on the quick start's table (test/docs/readme_clients.sh).
readme_client_examples() { with_throwaway_cluster bash test/docs/readme_clients.sh; }

# Two PostgreSQL nodes under Patroni (synchronous_mode) and one etcd, on
# loopback: kill -9 of the leader's postmaster, then a switchover, under a
# workload; no token twice, no stale write, no acknowledged write lost (docs/ha.md).
ha_patroni() { bash test/ha/run.sh; }

# PostgreSQL::Test::Cluster TAP tests (test/t/); each makes its own clusters.
# PG_FENCING_TAP_FILES: only these files (the clone under /root runs one).
# Two files at a time: they mostly wait (63 CPU-seconds in 126 s with -j2,
# 229 s one at a time), and each takes its ports through the framework's
# port locks; a failure's details are in the logs printed below.
tap_tests() {
  local copy
  copy=$(make_test_copy)
  if as_postgres make -C "$copy" installcheck REGRESS= ISOLATION= PROVE_FLAGS=-j2 \
    ${PG_FENCING_TAP_FILES:+PROVE_TESTS="$PG_FENCING_TAP_FILES"}; then
    rm -rf "$(dirname "$copy")"
  else
    find "$copy/tmp_check/log" -name '*.log' -exec tail -n 40 {} + 2>/dev/null || true
    return 1
  fi
}

# The test command again, from a clone in a directory that postgres cannot
# enter, for the suites where PostgreSQL, Patroni, etcd or Redis run under
# their own users next to the tree: root on a fresh machine clones into /root
# (mode 700), and a server that inherits that working directory, or must read
# a file of the tree, fails there (Patroni did, in "bootstrap in progress").
# CI clones elsewhere, so the suite makes its own clone of HEAD (committed
# changes only; without git, a copy of the tree minus its build output) in a
# new mode-700 directory under /root, and removes it.  The clone's test
# command builds and installs the clone's extension: the tree's own build is
# installed again afterwards.
ROOT_CLONE_SUITES="regress_and_isolation demo_run demo_lock_services_run tap_tests ha_patroni"
root_clone_run() (
  local parent rc=0
  [[ -d /root ]] || install -d -m 700 /root
  parent=$(mktemp -d /root/pg_fencing_clone.XXXXXX) || return 1
  trap 'rm -rf "$parent"' EXIT
  if as_postgres test -x "$parent"; then
    echo "postgres can enter $parent: this suite would prove nothing" >&2
    return 1
  fi
  if git -C "$PROJECT_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    git clone -q --no-hardlinks "$PROJECT_ROOT" "$parent/src" || return 1
    echo "clone of $(git -C "$parent/src" log -1 --format='%h %s') in $parent/src"
  else
    mkdir "$parent/src" &&
      tar -C "$PROJECT_ROOT" --exclude='./build' --exclude='./build-*' --exclude='*.o' \
        --exclude='*.so' --exclude='*.bc' --exclude='./results' --exclude='./output_iso' \
        --exclude='./tmp_check' -cf - . | tar -C "$parent/src" -xf - || return 1
    echo "copy of the tree in $parent/src"
  fi
  # One TAP file there, and a few pg_regress tests and isolation specs: the
  # suite proves that the scripts and the test copy work from a directory
  # postgres cannot enter, which a few show as well as all of them (the
  # tree's own run has just run every one).
  TEST_SUITES=$ROOT_CLONE_SUITES PG_FENCING_TAP_FILES=test/t/001_grant_durability.pl \
    PG_FENCING_REGRESS_TESTS="token_type grant line" PG_FENCING_ISOLATION_SPECS="line_order" \
    bash "$parent/src/scripts/test.sh" || rc=1
  log "reinstalling the tree's build of the extension (make install)"
  make -C "$PROJECT_ROOT" install >/dev/null || rc=1
  return $rc
)

run_suite "documents agree with the code (test/docs/check_docs.py)" documents_check
run_suite "unit tests (GoogleTest)" unit_tests
run_suite "unit tests under ASan and UBSan" sanitized_unit_tests
run_suite "pg_regress and isolation" regress_and_isolation
run_suite "pg_regress and isolation, the guard's fast paths off" regress_fast_paths_off
run_suite "stress with faults and history checker (test/stress)" stress_run
run_suite "stress, a fleet of 500 candidates in line through PgBouncer under faults (test/stress/fleet.sh, about 65 s)" test/stress/fleet.sh build
run_suite "fuzzing the core (libFuzzer, ${FUZZ_SECONDS:-30} s)" fuzz_core
run_suite "random SQL (sqlsmith)" sqlsmith_run
run_suite "client integration (GoogleTest + libpqxx)" client_integration_tests
run_suite "demo (pg_fencing_demo)" demo_run
run_suite "demo, the leader scenario in sessions (--sessions)" demo_sessions_run
run_suite "demo, the leader scenario through PgBouncer in transaction pooling (demo/run-through-pgbouncer.sh)" demo_pooled_run
run_suite "demo with Redis and etcd locks (demo/run-with-services.sh)" demo_lock_services_run
run_suite "Prometheus exporter and the demo chart (test/exporter/run.sh)" exporter_and_chart
run_suite "examples in Python and Node.js, over the client packages" examples_run
run_suite "Python client (clients/python, psycopg 3, pytest)" python_client
run_suite "Node.js client (clients/node, node-postgres, node --test)" node_client
run_suite "Go client (clients/go, pgx v4, go test)" go_client
run_suite "Java client (clients/java, JDBC, JUnit 5)" java_client
run_suite "a wait of more than a minute keeps its place, in every client side by side (test/clients/long_waits.sh, about 90 s)" client_long_waits
run_suite "the README's client examples (test/docs/readme_clients.sh)" readme_client_examples
run_suite "TAP (PostgreSQL::Test::Cluster)" tap_tests
run_suite "Debian package (test/packaging/deb.sh)" debian_package
run_suite "HA under Patroni: failover and switchover (test/ha/run.sh)" ha_patroni
run_suite "benchmark smoke run (bench/run.sh, QUICK=1)" bench_smoke
run_suite "scripts from a clone under /root (pg_regress, demo, one TAP file, Patroni)" root_clone_run

echo
((failed == 0)) || echo "failed suites: ${failures[*]}"
echo "suites: $passed passed, $failed failed"
((failed == 0))
