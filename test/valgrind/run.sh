#!/bin/bash
# Runs the pg_regress suite against a server running under valgrind's
# memcheck, and reports every error whose stack passes through pg_fencing.
# Documented in RELIABILITY.md; not part of scripts/test.sh (it takes
# minutes).  Run as root after "make install":  bash test/valgrind/run.sh
#
# Debian's PostgreSQL is not built with USE_VALGRIND, so memcheck sees
# malloc-level errors and uses of uninitialised memory, not misuse inside
# palloc'd chunks.  PostgreSQL itself trips a few known reports (see its
# src/tools/valgrind.supp); we keep only the ones in our frames.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"
cd "$PROJECT_ROOT"
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }

work=$(mktemp -d /tmp/pg_fencing_valgrind.XXXXXX)
chown postgres: "$work"
port=$(free_port)
bindir=/usr/lib/postgresql/$PG_MAJOR/bin
as_postgres "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null
as_postgres valgrind --quiet --trace-children=yes --track-origins=yes --read-var-info=no \
  --num-callers=30 --error-limit=no --log-file="$work/valgrind.%p.log" \
  "$bindir/postgres" -D "$work/data" -p "$port" -k "$work" -c listen_addresses= \
  -c max_connections=20 -c jit=off >"$work/server.log" 2>&1 &
for _ in $(seq 1 120); do
  as_postgres "$bindir/pg_isready" -q -h "$work" -p "$port" && break
  sleep 1
done
status=0
PGHOST=$work PGPORT=$port PGUSER=postgres make installcheck TAP_TESTS= \
  EXTRA_REGRESS_OPTS="--host=$work --port=$port" || status=$?
as_postgres "$bindir/pg_ctl" -D "$work/data" -m fast -w -t 300 stop >/dev/null || true

reports=$(grep -l 'pg_fencing' "$work"/valgrind.*.log 2>/dev/null || true)
echo "valgrind logs: $(ls "$work"/valgrind.*.log | wc -l) processes; with pg_fencing frames: $(echo -n "$reports" | grep -c . || true)"
for f in $reports; do echo "== $f"; cat "$f"; done
echo "suite exit status: $status"
[[ -z $reports && $status == 0 ]]
