#!/usr/bin/env bash
# Builds the Java client (build.sh) and its tests with javac, offline, from Debian's jars, into
# build/ (gitignored), and runs the JUnit 5 tests against the live server the PG* variables
# name, as a role that may create the extension. From /work/main:
#   source scripts/lib.sh; with_throwaway_cluster bash clients/java/run-tests.sh
set -euo pipefail
cd "$(dirname "$0")"

JDBC_JAR=${PG_FENCING_JDBC_JAR:-/usr/share/java/postgresql.jar}
JUNIT_JAR=${PG_FENCING_JUNIT_JAR:-/usr/share/java/junit-platform-console-standalone.jar}
[ -r "$JUNIT_JAR" ] || { echo "run-tests.sh: $JUNIT_JAR is missing (apt-get install junit5)" >&2; exit 2; }

bash build.sh
rm -rf build/test-classes
mkdir -p build/test-classes
mapfile -t sources < <(find src/test/java -name '*.java')
# -try: a test keeps an observer open in try-with-resources without calling it.
javac --release 17 -Xlint:all,-try -Werror -encoding UTF-8 -d build/test-classes \
  -cp "build/pg-fencing.jar:$JDBC_JAR:$JUNIT_JAR" "${sources[@]}"

# Exits non-zero when a test fails (1) or none ran (2). PG_FENCING_TEST_SELECT narrows the run,
# e.g. PG_FENCING_TEST_SELECT='--select-method io.pgfencing.SessionTest#sessionLocksManyAndLosesThemTogether'.
# shellcheck disable=SC2086
exec java -jar "$JUNIT_JAR" --disable-banner --disable-ansi-colors --fail-if-no-tests --details=tree \
  --class-path "build/pg-fencing.jar:build/test-classes:$JDBC_JAR" \
  ${PG_FENCING_TEST_SELECT:---select-package io.pgfencing}
