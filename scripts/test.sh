#!/bin/bash
# The README's second command: set up a fresh Debian 12 machine (as root),
# build, install, and run every test suite.  Exits non-zero if any fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$PROJECT_ROOT"

install_packages
build_and_install

passed=0
failed=0
failures=()
run_suite() {
  local name=$1
  shift
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

unit_tests() { ctest --test-dir build --output-on-failure; }

sanitized_unit_tests() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPG_FENCING_SANITIZE=ON >/dev/null &&
    cmake --build build-asan -j2 --target pg_fencing_core_test >/dev/null &&
    ctest --test-dir build-asan --output-on-failure
}

# pg_regress (sql/, expected/) and pg_isolation_regress (test/isolation/)
# against a throwaway cluster made by pg_virtualenv.
regress_and_isolation() {
  local copy
  copy=$(make_test_copy)
  if with_throwaway_cluster make -C "$copy" installcheck TAP_TESTS=; then
    rm -rf "$(dirname "$copy")"
  else
    cat "$copy"/regression.diffs "$copy"/output_iso/regression.diffs 2>/dev/null || true
    return 1
  fi
}

# PostgreSQL::Test::Cluster TAP tests (test/t/); each makes its own clusters.
tap_tests() {
  local copy
  copy=$(make_test_copy)
  if as_postgres make -C "$copy" installcheck REGRESS= ISOLATION= PROVE_FLAGS=--verbose; then
    rm -rf "$(dirname "$copy")"
  else
    find "$copy/tmp_check/log" -name '*.log' -exec tail -n 40 {} + 2>/dev/null || true
    return 1
  fi
}

run_suite "unit tests (GoogleTest)" unit_tests
run_suite "unit tests under ASan and UBSan" sanitized_unit_tests
run_suite "pg_regress and isolation" regress_and_isolation
run_suite "TAP (PostgreSQL::Test::Cluster)" tap_tests

echo
((failed == 0)) || echo "failed suites: ${failures[*]}"
echo "suites: $passed passed, $failed failed"
((failed == 0))
