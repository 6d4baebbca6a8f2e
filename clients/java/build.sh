#!/usr/bin/env bash
# Builds build/pg-fencing.jar with javac, offline, against Debian's pgjdbc
# (libpostgresql-jdbc-java). Works from any directory.
set -euo pipefail
cd "$(dirname "$0")"

JDBC_JAR=${PG_FENCING_JDBC_JAR:-/usr/share/java/postgresql.jar}
[ -r "$JDBC_JAR" ] || { echo "build.sh: $JDBC_JAR is missing (apt-get install libpostgresql-jdbc-java)" >&2; exit 2; }

rm -rf build/classes build/pg-fencing.jar build/MANIFEST.MF
mkdir -p build/classes
mapfile -t sources < <(find src/main/java -name '*.java')
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d build/classes -cp "$JDBC_JAR" \
  "${sources[@]}"
# The module name JPMS users require; the version is the extension's this client was written for.
printf 'Automatic-Module-Name: io.pgfencing\nImplementation-Title: pg_fencing Java client\nImplementation-Version: 1.8.0\n' \
  >build/MANIFEST.MF
jar --create --file build/pg-fencing.jar --manifest build/MANIFEST.MF -C build/classes .
echo "built $(pwd)/build/pg-fencing.jar"
