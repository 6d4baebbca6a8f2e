#!/bin/bash
# Issue 14, item 6: Prometheus and a picture.  As root, from anywhere:
#
#   bash test/exporter/run.sh
#
# It starts a throwaway cluster with shared_preload_libraries = 'pg_fencing'
# (pg_virtualenv, scripts/lib.sh's with_throwaway_cluster; the server runs as
# postgres), creates the extension, an application role and a monitoring
# role that has nothing but pg_monitor, and starts Debian's
# prometheus-postgres-exporter as nobody on a loopback port of its own, with
# examples/prometheus/pg_fencing-queries.yaml, connected as the monitoring
# role.  It scrapes /metrics, runs a scenario on lock "orders" (grants,
# renewals, releases, a takeover after an expiry, a waiter, stale and
# token-less writes refused on a per-row and a lock-wide protected table, a
# revoke) while lock "jobs" stays held, scrapes again and checks that every
# pg_fencing series moved by exactly what the scenario did.  Then it charts a
# run of the demo (demo/chart.sh, from its --json output) and checks the PNG.
# Last, on a second cluster that does not preload the library, the exporter
# must report a failed scrape and no counter series, not zeros.
#
# It installs nothing (scripts/lib.sh's install_packages does) and needs the
# extension installed and the demo built (build_and_install).  It stops what
# it started on any exit and is bounded in time (EXPORTER_TEST_SECONDS, 240,
# per cluster).  EXPORTER_TEST_KEEP=1 keeps its directories (scrapes, the
# exporter's log, the chart).  Exit status: 0 when every check passed, 1 when
# one failed, 2 when the set-up failed.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
QUERIES=$ROOT/examples/prometheus/pg_fencing-queries.yaml
DEMO=$ROOT/build/demo/pg_fencing_demo
START=$SECONDS

log() { printf '==> [%3d s] %s\n' "$((SECONDS - START))" "$*"; }
die() {
  echo "exporter/run.sh: $*" >&2
  exit 2
}

# ---- Outside: start the throwaway clusters and run this script inside each --
if [[ -z ${PG_FENCING_EXPORTER_INSIDE:-} ]]; then
  ((EUID == 0)) || die "run as root (the server runs as postgres, the exporter as nobody)"
  for cmd in prometheus-postgres-exporter curl gnuplot pg_virtualenv setpriv; do
    command -v "$cmd" >/dev/null || die "$cmd is not installed (scripts/lib.sh's install_packages installs it)"
  done
  # shellcheck source=../../scripts/lib.sh
  source "$ROOT/scripts/lib.sh"
  cd /
  bound=(timeout --kill-after=15 "${EXPORTER_TEST_SECONDS:-240}")
  # run_in MODE [pg_virtualenv options]: this script inside a new cluster.
  run_in() {
    local mode=$1 status=0
    shift
    PG_FENCING_EXPORTER_INSIDE=$mode with_throwaway_cluster "$@" "${bound[@]}" bash "$HERE/run.sh" ||
      status=$?
    ((status != 124)) || echo "exporter/run.sh: $mode: stopped after ${bound[2]} s" >&2
    return "$status"
  }
  rc=0
  run_in preloaded -o shared_preload_libraries=pg_fencing || rc=$?
  run_in not-preloaded || ((rc != 0)) || rc=$?
  exit "$rc"
fi

# ---- Inside: PGHOST, PGPORT, PGUSER (a superuser), PGPASSWORD are set -------
[[ -n ${PGHOST:-} && -n ${PGPORT:-} ]] || die "PGHOST/PGPORT are not set: run it without PG_FENCING_EXPORTER_INSIDE"
MODE=$PG_FENCING_EXPORTER_INSIDE # preloaded | not-preloaded
# shellcheck source=../../scripts/lib.sh
source "$ROOT/scripts/lib.sh" # free_port
DB=fencing_exporter
APP=fencing_app
MONITOR=fencing_monitor
APP_PASSWORD=app-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
MONITOR_PASSWORD=mon-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
DIR=$(mktemp -d /tmp/pg_fencing_exporter.XXXXXX)
chmod 755 "$DIR"
EXPORTER_PID=''
WAITER_PID=''
failures=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [[ -n $WAITER_PID ]]; then
    kill -TERM "$WAITER_PID" 2>/dev/null
    wait "$WAITER_PID" 2>/dev/null
  fi
  if [[ -n $EXPORTER_PID ]]; then
    kill -TERM "$EXPORTER_PID" 2>/dev/null
    timeout 10 tail --pid="$EXPORTER_PID" -f /dev/null || kill -KILL "$EXPORTER_PID" 2>/dev/null
    wait "$EXPORTER_PID" 2>/dev/null
  fi
  if ((rc != 0)) && [[ -s $DIR/exporter.log ]]; then
    echo "--- the exporter's log (last 20 lines):"
    tail -n 20 "$DIR/exporter.log"
  fi
  if [[ ${EXPORTER_TEST_KEEP:-0} == 1 ]]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

su_sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
# The application's statements, each in its own session (autocommit).
app_sql() {
  PGUSER=$APP PGPASSWORD=$APP_PASSWORD PGOPTIONS='-c statement_timeout=30s' \
    psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -c "$1"
}
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# expect_refused SQLSTATE SQL: the application's statement fails with SQLSTATE.
expect_refused() {
  local out
  if out=$(PGUSER=$APP PGPASSWORD=$APP_PASSWORD psql -X -q -At -v VERBOSITY=sqlstate -d "$DB" -c "$2" 2>&1); then
    fail "accepted, expected $1: $2"
  elif [[ $out != *"ERROR:  $1"* ]]; then
    fail "expected $1, got '$out': $2"
  fi
}

# ---- Database, roles, tables -------------------------------------------------
log "cluster on port $PGPORT; setting up database $DB"
preload=$(psql -X -At -d postgres -c 'SHOW shared_preload_libraries')
case $MODE in
  preloaded) [[ $preload == *pg_fencing* ]] || die "the cluster does not preload pg_fencing" ;;
  not-preloaded) [[ $preload != *pg_fencing* ]] || die "the cluster preloads pg_fencing" ;;
  *) die "PG_FENCING_EXPORTER_INSIDE is '$MODE', not preloaded or not-preloaded" ;;
esac
psql -X -q -v ON_ERROR_STOP=1 -d postgres >/dev/null <<SQL || die "cannot create the database and roles"
CREATE DATABASE $DB;
CREATE ROLE $APP LOGIN PASSWORD '$APP_PASSWORD';
-- The exporter's role: pg_monitor (which includes pg_read_all_stats) and
-- nothing else, as examples/prometheus/pg_fencing-queries.yaml says.
CREATE ROLE $MONITOR LOGIN PASSWORD '$MONITOR_PASSWORD' IN ROLE pg_monitor;
SQL
su_sql >/dev/null <<SQL || die "cannot create the extension and tables"
SET client_min_messages = warning;
CREATE EXTENSION pg_fencing;
SELECT fencing_allow_create('$APP');  -- every lock name belongs to the application
SELECT fencing_create_lock('orders');
SELECT fencing_create_lock('jobs');
-- A per-row fence and a lock-wide fence under "orders".
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
SELECT fencing_protect('resource');
INSERT INTO resource VALUES (1, NULL, 'initial');
CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, entry text);
SELECT fencing_protect('ledger', lock_name => 'orders');
GRANT SELECT, INSERT, UPDATE, DELETE ON resource, ledger TO $APP;
SQL

# ---- The exporter --------------------------------------------------------------
PORT=$(free_port) || die "no free port"
URL=http://127.0.0.1:$PORT/metrics
cp "$QUERIES" "$DIR/queries.yaml"
chmod 644 "$DIR/queries.yaml"
log "starting prometheus-postgres-exporter on 127.0.0.1:$PORT as nobody, connected as $MONITOR"
# A clean environment: the PG* variables of the cluster name its superuser.
env -i PATH=/usr/bin:/bin \
  DATA_SOURCE_NAME="postgresql://$MONITOR:$MONITOR_PASSWORD@127.0.0.1:$PGPORT/$DB?sslmode=disable" \
  setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
  prometheus-postgres-exporter --web.listen-address="127.0.0.1:$PORT" \
  --extend.query-path="$DIR/queries.yaml" >"$DIR/exporter.log" 2>&1 &
EXPORTER_PID=$!
for _ in $(seq 100); do
  curl -fsS --max-time 2 -o /dev/null "$URL" 2>/dev/null && break
  kill -0 "$EXPORTER_PID" 2>/dev/null || die "the exporter exited (see its log above)"
  sleep 0.1
done
curl -fsS --max-time 2 -o /dev/null "$URL" || die "the exporter does not answer on $URL"

# ---- Reading /metrics ----------------------------------------------------------
scrapes=0
# scrape NAME: /metrics into $DIR/NAME.prom.
scrape() {
  curl -fsS --max-time 10 -o "$DIR/$1.prom" "$URL" || die "scrape $1 failed"
  scrapes=$((scrapes + 1))
}
# value FILE METRIC LABEL...: the sample of METRIC whose labels include every
# LABEL (key="value"); empty when there is none, "ambiguous" when several.
value() {
  local file=$1 metric=$2
  shift 2
  # OFMT: tokens are 16-digit integers (microseconds since 1970), exact in
  # the exposition's float64 but printed by awk as 1.79618e+15 by default.
  awk -v metric="$metric" -v want="$*" '
    BEGIN { n = split(want, labels, " "); OFMT = "%.16g"; CONVFMT = "%.16g" }
    index($0, metric "{") == 1 || $1 == metric {
      ok = 1
      for (i = 1; i <= n; i++) if (index($1, labels[i]) == 0) ok = 0
      if (ok) { found++; v = $2 }
    }
    END { if (found == 1) print v + 0; else if (found > 1) print "ambiguous" }' "$file"
}
# The exporter's own verdict on the scrape: no query failed, the file loaded.
check_scrape_clean() {
  local file=$DIR/$1.prom v
  v=$(value "$file" pg_exporter_last_scrape_error)
  [[ $v == 0 ]] || fail "$1: pg_exporter_last_scrape_error is '${v:-absent}' (see the exporter's log)"
  v=$(value "$file" pg_exporter_user_queries_load_error 'filename="'"$DIR/queries.yaml"'"')
  [[ $v == 0 ]] || fail "$1: pg_exporter_user_queries_load_error is '${v:-absent}'"
  v=$(value "$file" pg_up)
  [[ $v == 1 ]] || fail "$1: pg_up is '${v:-absent}'"
}

# Checks against the baseline; each prints nothing when it holds.
# delta METRIC LABELS EXPECTED: the counter moved by exactly EXPECTED since
# the baseline (absent in the baseline counts as 0; absent now fails).
check_delta() {
  local now=$1 metric=$2 labels=$3 want=$4 a b
  a=$(value "$DIR/baseline.prom" "$metric" "$labels")
  b=$(value "$DIR/$now.prom" "$metric" "$labels")
  if [[ -z $b || $b == ambiguous || $a == ambiguous ]]; then
    echo "$metric{$labels}: ${b:-absent} in scrape $now"
  elif (($(awk -v a="${a:-0}" -v b="$b" 'BEGIN { print b - a }') != want)); then
    echo "$metric{$labels}: moved by $(awk -v a="${a:-0}" -v b="$b" 'BEGIN { print b - a }') (${a:-absent} -> $b), expected $want"
  fi
}
# is METRIC LABELS EXPECTED: the sample is EXPECTED now ("absent": no sample).
check_is() {
  local now=$1 metric=$2 labels=$3 want=$4 b
  b=$(value "$DIR/$now.prom" "$metric" "$labels")
  if [[ $want == absent ]]; then
    [[ -z $b ]] || echo "$metric{$labels}: $b in scrape $now, expected no sample"
  elif [[ -z $b || $b == ambiguous ]] || (($(awk -v b="$b" -v w="$want" 'BEGIN { print (b == w) }') != 1)); then
    echo "$metric{$labels}: ${b:-absent} in scrape $now, expected $want"
  fi
}
# until_checks NAME SECONDS CHECKS_FUNCTION: scrapes until the checks hold
# (counts committed by another backend, an expiry counted by the background
# worker, can take a moment), then reports what still does not.
until_checks() {
  local name=$1 seconds=$2 checks=$3 deadline out
  deadline=$((SECONDS + seconds))
  while :; do
    scrape "$name"
    out=$("$checks" "$name") || true
    [[ -z $out ]] && break
    ((SECONDS < deadline)) || break
    sleep 0.5
  done
  check_scrape_clean "$name"
  if [[ -n $out ]]; then
    while IFS= read -r line; do fail "$line"; done <<<"$out"
    return 1
  fi
}

O='lock_name="orders"'
J='lock_name="jobs"'
D='datname="'$DB'"'
RES='relname="resource"'
LED='relname="ledger"'

# ---- Without shared_preload_libraries: unavailable, not zeros ----------------------
if [[ $MODE == not-preloaded ]]; then
  log "without shared_preload_libraries: the counters must be missing, not zero"
  app_sql "SELECT fencing_acquire('jobs', 'worker-1', '120 s')" >/dev/null
  scrape unavailable
  v=$(value "$DIR/unavailable.prom" pg_exporter_last_scrape_error)
  [[ $v == 1 ]] || fail "pg_exporter_last_scrape_error is '${v:-absent}', expected 1 (fencing_lock_stats raises 55000)"
  if grep -E '^pg_fencing_(lock|table)_' "$DIR/unavailable.prom" >"$DIR/unexpected.txt"; then
    fail "counter series without the library preloaded: $(head -n 3 "$DIR/unexpected.txt")"
  fi
  grep -q 'pg_fencing statistics are not available' "$DIR/exporter.log" ||
    fail "the exporter's log does not say why: 'pg_fencing statistics are not available'"
  # What needs no shared memory still works.
  [[ $(value "$DIR/unavailable.prom" pg_up) == 1 ]] || fail "pg_up is not 1"
  v=$(value "$DIR/unavailable.prom" pg_fencing_lease_live "$D $J")
  [[ $v == 1 ]] || fail "pg_fencing_lease_live{jobs} is '${v:-absent}', expected 1"
  if ((failures)); then
    echo "RESULT: $failures check(s) failed without shared_preload_libraries"
    exit 1
  fi
  echo "RESULT: without shared_preload_libraries the exporter reports the counters unavailable"
  exit 0
fi

# ---- Baseline --------------------------------------------------------------------
log "baseline scrape"
baseline_checks() {
  # Every lock has its row from the start, with zeros.
  check_is "$1" pg_fencing_lock_grants_total "$D $O" 0
  check_is "$1" pg_fencing_lock_grants_total "$D $J" 0
  check_is "$1" pg_fencing_lock_waiting "$D $O" 0
  check_is "$1" pg_fencing_leases_live "$D" 0
}
until_checks baseline 5 baseline_checks || true
((failures == 0)) || {
  echo "RESULT: the exporter does not show pg_fencing's series (the views missing, or not visible to $MONITOR?)"
  exit 1
}

# ---- The scenario ------------------------------------------------------------------
log "scenario: grants, renewals, releases, a takeover, refused writes, a waiter, a revoke"
tJ=$(app_sql "SELECT fencing_acquire('jobs', 'worker-1', '120 s')")
# A: granted, renews twice, writes, releases.
tA=$(app_sql "SELECT fencing_acquire('orders', 'node-a', '60 s')")
[[ $(app_sql "SELECT fencing_renew('orders', '$tA', '60 s')") == t ]] || fail "A's first renewal"
[[ $(app_sql "SELECT fencing_renew('orders', '$tA', '60 s')") == t ]] || fail "A's second renewal"
app_sql "INSERT INTO ledger VALUES (1, $tA, 'A')" >/dev/null
app_sql "UPDATE resource SET token = $tA, val = 'A' WHERE id = 1" >/dev/null
[[ $(app_sql "SELECT fencing_release('orders', '$tA')") == t ]] || fail "A's release"
# B: granted with a short lease, writes, and lets it run out (a pause).
tB=$(app_sql "SELECT fencing_acquire('orders', 'node-b', '1 s')")
app_sql "UPDATE ledger SET token = $tB, entry = 'B' WHERE id = 1" >/dev/null
for _ in $(seq 50); do
  [[ $(su_sql -c "SELECT live FROM fencing_leases WHERE lock_name = 'orders'") == f ]] && break
  sleep 0.1
done
# C takes over, and writes both tables.
tC=$(app_sql "SELECT fencing_acquire('orders', 'node-c', '60 s')")
[[ -n $tC ]] || fail "C was not granted the lock after B's lease ran out"
app_sql "UPDATE ledger SET token = $tC, entry = 'C' WHERE id = 1" >/dev/null
app_sql "UPDATE resource SET token = $tC, val = 'C' WHERE id = 1" >/dev/null
# B wakes up and writes with its stale token; then writes without a token.
expect_refused 55Z01 "INSERT INTO ledger VALUES (2, $tB, 'B, stale')"            # the lock's mark
expect_refused 55Z01 "UPDATE resource SET token = $tB, val = 'B, stale' WHERE id = 1" # the row's token
expect_refused 55Z02 "UPDATE resource SET val = 'no token' WHERE id = 1"
expect_refused 55Z02 "DELETE FROM ledger WHERE id = 1"                          # nothing presented
# D waits for the lock that C holds.
PGUSER=$APP PGPASSWORD=$APP_PASSWORD psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" \
  -c "SELECT fencing_acquire('orders', 'node-d', '60 s', '30 s')" >"$DIR/waiter.out" 2>&1 &
WAITER_PID=$!
echo "tokens: jobs $tJ; orders A $tA, B $tB, C $tC"

log "scrape while D waits and C holds the lock"
waiting_checks() {
  check_is "$1" pg_fencing_lock_waiting "$D $O" 1
  check_is "$1" pg_fencing_lock_waiting "$D $J" 0
  check_delta "$1" pg_fencing_lock_grants_total "$D $O" 3
  check_delta "$1" pg_fencing_lock_takeovers_total "$D $O" 1
  check_is "$1" pg_fencing_leader_token "$D $O"' holder="node-c"' "$tC"
  check_is "$1" pg_fencing_leader_token "$D $J"' holder="worker-1"' "$tJ"
  check_is "$1" pg_fencing_lease_live "$D $O" 1
  check_is "$1" pg_fencing_lease_token "$D $O" "$tC"
  check_is "$1" pg_fencing_leases_live "$D" 2
}
until_checks waiting 10 waiting_checks || true
# What the monitoring role sees of the leases, asked directly: the lease
# series above are only as complete as this.
seen=$(PGUSER=$MONITOR PGPASSWORD=$MONITOR_PASSWORD psql -X -At -d "$DB" -c 'SELECT count(*) FROM fencing_leases')
all=$(su_sql -c 'SELECT count(*) FROM fencing_leases')
[[ $seen == "$all" ]] || fail "fencing_leases shows $MONITOR (pg_monitor) $seen of its $all rows;" \
  "the queries file relies on members of pg_read_all_stats seeing every lock's row"

# C releases; D is granted at once.  Then the owner revokes D's lease.
[[ $(app_sql "SELECT fencing_release('orders', '$tC')") == t ]] || fail "C's release"
timeout 20 tail --pid="$WAITER_PID" -f /dev/null || fail "D was not granted the lock within 20 s of C's release"
wait "$WAITER_PID" || fail "D's acquire failed: $(cat "$DIR/waiter.out")"
WAITER_PID=''
tD=$(cat "$DIR/waiter.out")
if [[ ! $tD =~ ^[0-9]+$ ]] || ((tD <= tC)); then fail "D's token '$tD' is not above C's $tC"; fi
app_sql "SELECT fencing_revoke('orders', 'exporter test')" >/dev/null
echo "tokens: orders D $tD, then revoked"

# ---- After -------------------------------------------------------------------------
log "final scrape"
# orders: grants A, B, C, D; renewals A twice; releases A, C; B's lease ran
# out and C took over; D's was revoked; refused writes: one stale and one
# without a token under the lock (ledger), the same on the per-row table
# (resource), which is under no lock.  jobs: one grant, still live.
final_checks() {
  check_delta "$1" pg_fencing_lock_grants_total "$D $O" 4
  check_delta "$1" pg_fencing_lock_renewals_total "$D $O" 2
  check_delta "$1" pg_fencing_lock_releases_total "$D $O" 2
  check_delta "$1" pg_fencing_lock_expiries_total "$D $O" 1
  check_delta "$1" pg_fencing_lock_takeovers_total "$D $O" 1
  check_delta "$1" pg_fencing_lock_revokes_total "$D $O" 1
  check_is "$1" pg_fencing_lock_waiting "$D $O" 0
  check_delta "$1" pg_fencing_lock_stale_rejections_total "$D $O" 1
  check_delta "$1" pg_fencing_lock_missing_rejections_total "$D $O" 1
  check_delta "$1" pg_fencing_lock_grants_total "$D $J" 1
  local m
  for m in renewals releases expiries takeovers revokes stale_rejections missing_rejections; do
    check_delta "$1" "pg_fencing_lock_${m}_total" "$D $J" 0
  done
  check_delta "$1" pg_fencing_table_stale_rejections_total "$D $LED" 1
  check_delta "$1" pg_fencing_table_missing_rejections_total "$D $LED" 1
  check_delta "$1" pg_fencing_table_stale_rejections_total "$D $RES" 1
  check_delta "$1" pg_fencing_table_missing_rejections_total "$D $RES" 1
  check_is "$1" pg_fencing_lease_live "$D $O" 0
  check_is "$1" pg_fencing_lease_token "$D $O" "$tD"
  check_is "$1" pg_fencing_lease_expires_in_seconds "$D $O" 0
  check_is "$1" pg_fencing_leader_token "$D $O" absent
  check_is "$1" pg_fencing_lease_live "$D $J" 1
  check_is "$1" pg_fencing_leases_live "$D" 1
}
until_checks final 10 final_checks || true
grep -E '^pg_fencing_(lock|table)_' "$DIR/final.prom" | grep -E 'orders|ledger|resource' | sed 's/^/  /'

# ---- The chart -------------------------------------------------------------------
log "the chart: the demo's --json through demo/chart.sh"
if [[ ! -x $DEMO ]]; then
  fail "no demo at $DEMO (scripts/lib.sh's build_and_install builds it)"
else
  # In the cluster's postgres database, away from the scenario's locks.
  PGDATABASE=postgres "$DEMO" --json --no-color >"$DIR/demo.json" 2>"$DIR/demo.err" ||
    fail "the demo failed (exit $?): $(tail -n 3 "$DIR/demo.err")"
  if bash "$ROOT/demo/chart.sh" "$DIR/demo.json" "$DIR/chart.png"; then
    # A PNG (its signature), as tall as the demo's seven runs make it (IHDR height).
    [[ $(od -An -N8 -tx1 "$DIR/chart.png" | tr -d ' \n') == 89504e470d0a1a0a ]] ||
      fail "demo/chart.sh wrote no PNG"
    height=$((16#$(od -An -j20 -N4 -tx1 "$DIR/chart.png" | tr -d ' \n')))
    ((height == 165 * 7 + 44)) || fail "the chart is $height pixels tall, not seven runs' $((165 * 7 + 44))"
    size=$(stat -c %s "$DIR/chart.png")
    ((size > 20000)) || fail "the chart has only $size bytes"
    echo "chart: $size bytes, $height pixels tall"
  else
    fail "demo/chart.sh failed"
  fi
  # and it refuses an input with no run in it.
  if echo '{"type":"summary","ok":true}' | bash "$ROOT/demo/chart.sh" - "$DIR/none.png" 2>/dev/null; then
    fail "demo/chart.sh charted an input without a run"
  fi
fi

echo "$scrapes scrapes of $URL in $((SECONDS - START)) s"
if ((failures)); then
  echo "RESULT: $failures check(s) failed"
  exit 1
fi
echo "RESULT: every pg_fencing series moved as the scenario says; the chart is drawn"
