#!/bin/bash
# Builds the libFuzzer target test/fuzz/fuzz_core.cpp (the PostgreSQL-free
# core under ASan and UBSan) and runs it for a bounded time.
#
#   bash test/fuzz/run.sh [BUILD_DIR]       # BUILD_DIR defaults to build-fuzz
#
# Environment:
#   FUZZ_SECONDS=30     how long to fuzz (-max_total_time)
#   FUZZ_COVERAGE=1     afterwards, build a coverage binary and print the line
#                       and branch coverage of src/core/ reached by the corpus
#   FUZZ_ARGS="..."     extra libFuzzer flags (e.g. -seed=1 -jobs=2)
#   CXX=clang++-14      the compiler
#
# The seed corpus (test/fuzz/corpus/) is copied into BUILD_DIR/corpus, where
# the units the fuzzer finds accumulate across runs (rm -rf it to start
# over); the seeds in the tree are never written.  A crash leaves its input
# in BUILD_DIR/artifacts/ and makes this script exit non-zero; replay it with
#   FUZZ_TRACE=1 BUILD_DIR/fuzz_core BUILD_DIR/artifacts/crash-…
set -euo pipefail

FUZZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT_ROOT=$(cd "$FUZZ_DIR/../.." && pwd)
BUILD_DIR=${1:-build-fuzz}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
CXX=${CXX:-clang++-14}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

if ! command -v "$CXX" >/dev/null; then
  echo "run.sh: $CXX not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

cd "$PROJECT_ROOT"
echo "==> building $BUILD_DIR/fuzz_core"
# -fno-sanitize-recover: a UBSan report is a crash, not a warning.
"$CXX" -std=c++17 -O1 -g -Wall -Wextra \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Iinclude -Isrc/core test/fuzz/fuzz_core.cpp src/core/*.cpp -o "$BUILD_DIR/fuzz_core"

mkdir -p "$BUILD_DIR/corpus" "$BUILD_DIR/artifacts"
cp -n "$FUZZ_DIR"/corpus/* "$BUILD_DIR/corpus/" 2>/dev/null || true

echo "==> fuzzing for ${FUZZ_SECONDS}s over $BUILD_DIR/corpus ($(find "$BUILD_DIR/corpus" -type f | wc -l) units)"
log="$BUILD_DIR/fuzz.log"
status=0
# shellcheck disable=SC2086
"$BUILD_DIR/fuzz_core" "$BUILD_DIR/corpus" \
  -dict="$FUZZ_DIR/fuzz_core.dict" \
  -max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$BUILD_DIR/artifacts/" ${FUZZ_ARGS:-} >"$log" 2>&1 || status=$?

# The last status line ("#N DONE cov: C ft: F corp: …") and the final stats.
grep -E '^#[0-9]+' "$log" | tail -n 1 || true
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1 || true)
echo "executions: ${execs:-?} (${rate:-?}/s), ${cov:-cov: ?}, corpus: $(find "$BUILD_DIR/corpus" -type f | wc -l) units"

if ((status != 0)); then
  echo "==> the fuzzer stopped with status $status; its log ($log) ends:" >&2
  grep -E 'invariant violated|ERROR: |SUMMARY: |Test unit written' "$log" >&2 || tail -n 40 "$log" >&2
  echo "replay: FUZZ_TRACE=1 $BUILD_DIR/fuzz_core $BUILD_DIR/artifacts/<crash-file>" >&2
  exit 1
fi

if [[ ${FUZZ_COVERAGE:-} == 1 ]]; then
  echo "==> coverage of src/core/ by $BUILD_DIR/corpus"
  "$CXX" -std=c++17 -O0 -g -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping \
    -Iinclude -Isrc/core test/fuzz/fuzz_core.cpp src/core/*.cpp -o "$BUILD_DIR/fuzz_core_cov"
  rm -f "$BUILD_DIR"/cov.profraw
  LLVM_PROFILE_FILE="$BUILD_DIR/cov.profraw" \
    "$BUILD_DIR/fuzz_core_cov" -runs=0 "$BUILD_DIR/corpus" >/dev/null 2>&1
  llvm-profdata-14 merge -sparse "$BUILD_DIR/cov.profraw" -o "$BUILD_DIR/cov.profdata"
  llvm-cov-14 report "$BUILD_DIR/fuzz_core_cov" -instr-profile="$BUILD_DIR/cov.profdata" \
    src/core/*.cpp
fi
