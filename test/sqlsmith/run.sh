#!/bin/bash
# Random SQL (sqlsmith) against pg_fencing, as an unprivileged role, checking
# that the server never crashes.  Run it inside a throwaway cluster, as root
# or as a superuser the PG* variables name:
#
#   source scripts/lib.sh && with_throwaway_cluster bash test/sqlsmith/run.sh
#   pg_virtualenv -t -v 15 -c "-p 54399" bash test/sqlsmith/run.sh
#
# Environment:
#   SMITH_QUERIES=2000   sqlsmith --max-queries
#   SMITH_SEED=1         sqlsmith --seed (the same seed replays the same queries,
#                        given the same catalog)
#   SMITH_SECONDS=900    wall-clock bound for sqlsmith (timeout); hitting it is not
#                        a failure
#   SMITH_OUT=DIR        where to keep sqlsmith's output and the server log excerpt
#                        (default: a new directory under /tmp)
#
# It creates a database with the extension, tables protected per row (plain,
# allow_unset, skip, partitioned) and lock-wide (two tables under one lock,
# one under another lock with skip), an unprotected one with btree and hash
# indexes, rows, leases and marks, and a login role with
# SELECT/INSERT/UPDATE/DELETE on the tables only.  sqlsmith runs as that role
# (it rolls back what it writes, so the data stays as set up).
#
# Afterwards it checks that no backend crashed.  The decisive checks: a
# superuser "sentinel" session opened before the run must still be alive
# (after a backend crash the postmaster ends every session and restarts),
# and the server log written during the run must have no "terminated by
# signal", "TRAP:", "server process (PID …)", PANIC or crash-recovery line.
# The postmaster's PID and pg_postmaster_start_time() are compared too, but
# they change only if the postmaster itself restarts, not on a backend
# crash.  Exit status: 0 no crash, 1 crash, 2 set-up failure.
#
# It prints the numbers of queries and errors, the most frequent errors and
# those naming pg_fencing, which fencing_* functions the generated queries
# call, and how often each completed a call on the server
# (pg_stat_user_functions, track_functions = all: C, SQL and PL/pgSQL
# functions, counted when a call returns, so calls that raise are missing).
set -uo pipefail

SMITH_QUERIES=${SMITH_QUERIES:-2000}
SMITH_SEED=${SMITH_SEED:-1}
SMITH_SECONDS=${SMITH_SECONDS:-900}
OUT=${SMITH_OUT:-$(mktemp -d /tmp/pg_fencing_sqlsmith.XXXXXX)}
mkdir -p "$OUT"
DB=fencing_smith
ROLE=fencing_smith
ROLE_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')

die() {
  echo "sqlsmith/run.sh: $*" >&2
  exit 2
}
log() { printf '\n==> %s\n' "$*"; }

command -v sqlsmith >/dev/null || die "sqlsmith is not installed (apt-get install sqlsmith)"
[[ -n ${PGHOST:-} && -n ${PGPORT:-} ]] ||
  die "PGHOST/PGPORT are not set: run inside pg_virtualenv (see the header)"

su_psql() { psql -X -v ON_ERROR_STOP=1 -q -At "$@"; }

# ---- Where the server keeps its PID and log ------------------------------------
DATA_DIR=$(su_psql -d postgres -c 'SHOW data_directory') || die "cannot connect as superuser"
postmaster_pid() { head -n 1 "$DATA_DIR/postmaster.pid"; }
LOG_FILE=$(su_psql -d postgres -c 'SELECT pg_current_logfile()')
if [[ -z $LOG_FILE ]]; then
  # Debian's pg_ctlcluster sends stderr to the file pg_lsclusters shows
  # (pg_virtualenv -t: $WORKDIR/log/postgresql-VER-regress.log).
  LOG_FILE=$(pg_lsclusters -h 2>/dev/null | awk -v d="$DATA_DIR" '$6 == d { print $7 }')
elif [[ $LOG_FILE != /* ]]; then
  LOG_FILE=$DATA_DIR/$LOG_FILE
fi
[[ -n $LOG_FILE && -r $LOG_FILE ]] || die "cannot find the server log (got '$LOG_FILE')"
echo "server: port $PGPORT, data $DATA_DIR, log $LOG_FILE, output in $OUT"

# ---- Schema, data, role ------------------------------------------------------------
log "setting up database $DB and role $ROLE"
su_psql -d postgres >"$OUT/setup.log" 2>&1 <<SQL || die "set-up failed (see $OUT/setup.log)"
DROP DATABASE IF EXISTS $DB;
DROP ROLE IF EXISTS $ROLE;
CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PASSWORD';
CREATE DATABASE $DB;
-- Count calls of C, SQL and PL/pgSQL functions (internal ones are never counted).
ALTER DATABASE $DB SET track_functions = 'all';
SQL

su_psql -d "$DB" >>"$OUT/setup.log" 2>&1 <<SQL || die "set-up failed (see $OUT/setup.log)"
SET client_min_messages = warning;
CREATE EXTENSION pg_fencing;
-- The role is the application: the locks are its own (created below by the
-- superuser, they belong to it through this rule), so its random writes
-- reach the guards' lock-wide paths.
SELECT fencing_allow_create('$ROLE');
-- One grant first: the hand-written tokens below are then below the highest
-- token the database has granted, which 1.5's guards require (a per-row
-- fence judges an INSERT's token too).
SELECT fencing_grant();

-- Per-row fences.
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
SELECT fencing_protect('resource');
INSERT INTO resource SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE g * 10 END, 'r' || g
  FROM generate_series(1, 50) g;

CREATE TABLE jobs (id int PRIMARY KEY, fence fencing_token, spare fencing_token, state text);
SELECT fencing_protect('jobs', 'fence', '{allow_unset}');
INSERT INTO jobs SELECT g, g, 1000 - g, 'queued' FROM generate_series(1, 30) g;

CREATE TABLE slots (id int PRIMARY KEY, token fencing_token NOT NULL DEFAULT 0, owner text);
SELECT fencing_protect('slots', options => '{skip}');
INSERT INTO slots SELECT g, g * 3, 'o' || g FROM generate_series(1, 30) g;

CREATE TABLE shards (id int, token fencing_token, payload text) PARTITION BY RANGE (id);
CREATE TABLE shards_low PARTITION OF shards FOR VALUES FROM (MINVALUE) TO (100);
CREATE TABLE shards_high (payload text, id int, token fencing_token);  -- another column order
ALTER TABLE shards ATTACH PARTITION shards_high FOR VALUES FROM (100) TO (MAXVALUE);
SELECT fencing_protect('shards');
INSERT INTO shards SELECT g, g, 's' || g FROM generate_series(1, 200, 7) g;

-- Lock-wide fences: two tables under one lock, one under another with skip.
CREATE TABLE accounts (id int PRIMARY KEY, token fencing_token, balance numeric);
CREATE TABLE ledger (id serial PRIMARY KEY, token fencing_token, entry text);
CREATE TABLE audit (id int, token fencing_token, note text);
INSERT INTO accounts SELECT g, g, 100 FROM generate_series(1, 20) g;
INSERT INTO ledger (token, entry) SELECT g, 'e' || g FROM generate_series(1, 20) g;
INSERT INTO audit SELECT g, NULL, 'n' || g FROM generate_series(1, 10) g;
SELECT fencing_protect('accounts', lock_name => 'tenant-7');
SELECT fencing_protect('ledger', lock_name => 'tenant-7');
SELECT fencing_protect('audit', options => '{skip}', lock_name => 'audit-lock');

-- Unprotected, with both index opclasses and a unique constraint.
CREATE TABLE tokens (id int PRIMARY KEY, token fencing_token UNIQUE, seen fencing_token);
CREATE INDEX tokens_seen_hash ON tokens USING hash (seen);
INSERT INTO tokens SELECT g, g * 7, CASE WHEN g % 3 = 0 THEN NULL ELSE 9223372036854775807 - g END
  FROM generate_series(1, 100) g;

-- Leases and marks: one live, one expired, one released; a mark above the rows.
SELECT fencing_acquire('tenant-7', 'setup', '1 hour');
SELECT fencing_acquire('nightly', 'setup', '1 millisecond');
SELECT fencing_release('released', fencing_acquire('released', 'setup', '1 hour'));
SELECT fencing_present('audit-lock', '5');

GRANT SELECT, INSERT, UPDATE, DELETE
  ON resource, jobs, slots, shards, accounts, ledger, audit, tokens TO $ROLE;
GRANT USAGE ON SEQUENCE ledger_id_seq TO $ROLE;
ANALYZE;
SQL

# A lease held by the fuzzing role itself, so its renew/release calls can succeed.
PGPASSWORD=$ROLE_PASSWORD psql -X -q -At -d "$DB" -U "$ROLE" \
  -c "SELECT fencing_acquire('smith-lock', 'smith', '1 hour')" >/dev/null ||
  die "cannot connect as $ROLE"
su_psql -d "$DB" -c 'SELECT pg_stat_reset()' >/dev/null

# ---- The sentinel and the "before" picture -----------------------------------------
PID_BEFORE=$(postmaster_pid)
START_BEFORE=$(su_psql -d postgres -c 'SELECT pg_postmaster_start_time()')
LOG_OFFSET=$(stat -c %s "$LOG_FILE")
PGOPTIONS='-c statement_timeout=0' PGAPPNAME=fencing_smith_sentinel \
  psql -X -q -At -d postgres -c 'SELECT pg_sleep(86400)' >"$OUT/sentinel.out" 2>&1 &
SENTINEL_CLIENT=$!
sentinel_pid() {
  su_psql -d postgres -c \
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'fencing_smith_sentinel'"
}
for _ in $(seq 50); do
  SENTINEL=$(sentinel_pid)
  [[ -n $SENTINEL ]] && break
  sleep 0.1
done
[[ -n $SENTINEL ]] || die "the sentinel session did not start"

# ---- sqlsmith ------------------------------------------------------------------------
log "sqlsmith: $SMITH_QUERIES queries, seed $SMITH_SEED, at most ${SMITH_SECONDS}s, as $ROLE"
TARGET="host=$PGHOST port=$PGPORT dbname=$DB user=$ROLE password=$ROLE_PASSWORD"
started=$SECONDS
timeout --signal=INT --kill-after=30 "$SMITH_SECONDS" \
  sqlsmith --target="$TARGET" --seed="$SMITH_SEED" --max-queries="$SMITH_QUERIES" \
  --exclude-catalog --verbose --dump-all-queries >"$OUT/queries.sql" 2>"$OUT/sqlsmith.err"
smith_status=$?
case $smith_status in
  0) echo "sqlsmith finished after $((SECONDS - started))s" ;;
  124) echo "sqlsmith was stopped by the time bound (${SMITH_SECONDS}s)" ;;
  *) echo "sqlsmith exited with status $smith_status after $((SECONDS - started))s" \
    "(see $OUT/sqlsmith.err); checking the server" ;;
esac

# ---- Did the server crash? ---------------------------------------------------------
crashed=0
sleep 1  # let the postmaster notice and log a dying child
if [[ -z $(sentinel_pid) || $(sentinel_pid) != "$SENTINEL" ]]; then
  echo "CRASH: the sentinel session (PID $SENTINEL) was terminated" >&2
  crashed=1
fi
if [[ $(postmaster_pid) != "$PID_BEFORE" ]]; then
  echo "CRASH: the postmaster PID changed ($PID_BEFORE -> $(postmaster_pid))" >&2
  crashed=1
fi
START_AFTER=$(su_psql -d postgres -c 'SELECT pg_postmaster_start_time()' 2>/dev/null)
if [[ $START_AFTER != "$START_BEFORE" ]]; then
  echo "CRASH: pg_postmaster_start_time changed ($START_BEFORE -> $START_AFTER)" >&2
  crashed=1
fi
tail -c +"$((LOG_OFFSET + 1))" "$LOG_FILE" >"$OUT/server.log"
if grep -nE 'terminated by signal|terminated by exception|TRAP:|server process \(PID|PANIC:|reinitializing|was interrupted' \
  "$OUT/server.log" >"$OUT/crash-lines.txt"; then
  echo "CRASH: the server log has these lines (full excerpt: $OUT/server.log):" >&2
  head -n 20 "$OUT/crash-lines.txt" >&2
  # The statement a crashed backend was running is logged with it.
  grep -nE -A3 'terminated by signal|terminated by exception' "$OUT/server.log" |
    grep -E 'Failed process was running' | head -n 5 >&2
  crashed=1
fi
su_psql -d postgres -c "SELECT pg_terminate_backend($SENTINEL)" >/dev/null 2>&1
wait "$SENTINEL_CLIENT" 2>/dev/null

# ---- Figures -------------------------------------------------------------------------
log "figures"
# Wait for sqlsmith's backend to exit, which flushes its function counts.
for _ in $(seq 50); do
  [[ $(su_psql -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE usename = '$ROLE'") == 0 ]] && break
  sleep 0.1
done
# sqlsmith --verbose repeats a report from time to time: "queries: N", AST
# stats, a table "COUNT<tab>ERROR: message" (messages cut at 80 characters),
# "error rate: R", an impedance report.  The last one is the whole run's.
# --dump-all-queries writes each query, ending in ";\n".
start_line=$(grep -n '^queries:' "$OUT/sqlsmith.err" | tail -n 1 | cut -d: -f1)
tail -n +"${start_line:-1}" "$OUT/sqlsmith.err" >"$OUT/sqlsmith-report.txt"
queries=$(sed -n 's/^queries: *//p' "$OUT/sqlsmith-report.txt")
rate=$(sed -n 's/^error rate: *//p' "$OUT/sqlsmith-report.txt")
errors=$(awk -F '\t' '/^[0-9]+\t/ { n += $1 } END { print n + 0 }' "$OUT/sqlsmith-report.txt")
echo "queries: ${queries:-?}, errors: $errors (error rate ${rate:-?})"
echo "most frequent errors:"
grep -E '^[0-9]+'$'\t' "$OUT/sqlsmith-report.txt" | sort -rn | head -n 6 | sed 's/^/  /'
echo "errors that name pg_fencing's objects or messages:"
grep -E '^[0-9]+'$'\t' "$OUT/sqlsmith-report.txt" | grep -iE 'fencing|token' | sort -rn |
  sed 's/^/  /'
echo
echo "generated queries naming any fencing_* object: $(awk 'BEGIN { RS = ";\n" } /fencing_/ { n++ } END { print n + 0 }' "$OUT/queries.sql")"
echo "generated queries calling a fencing_* function: $(awk 'BEGIN { RS = ";\n" } /fencing_[a-z_]+\(/ { n++ } END { print n + 0 }' "$OUT/queries.sql")"
echo "fencing_* calls in the generated queries (occurrences):"
grep -oE '\bfencing_[a-z_]+\(' "$OUT/queries.sql" | sort | uniq -c | sort -rn | sed 's/^/  /'
echo "DML on the protected tables in the generated queries:"
grep -oE '^(insert into|update|delete from|merge into) public\.[a-z_]+' "$OUT/queries.sql" |
  sort | uniq -c | sort -rn | sed 's/^/  /'
echo "calls counted by the server (pg_stat_user_functions, track_functions = all):"
su_psql -d "$DB" -F ' ' -c "
  SELECT format('%8s  %s(%s)', calls, funcname, pg_get_function_identity_arguments(funcid))
    FROM pg_stat_user_functions WHERE funcname LIKE 'fencing%' AND calls > 0 ORDER BY calls DESC" |
  sed 's/^/  /'
echo "guard errors in the server log during the run:"
for msg in 'stale fencing token' 'missing fencing token' 'permission denied for function fencing' 'out of range for type fencing_token' 'invalid input syntax for type fencing_token'; do
  printf '  %6d  %s\n' "$(grep -c "$msg" "$OUT/server.log")" "$msg"
done
echo "rows now: $(su_psql -d "$DB" -c "SELECT string_agg(format('%s=%s', t, n), ' ') FROM (
  SELECT 'resource' t, count(*) n FROM resource UNION ALL SELECT 'jobs', count(*) FROM jobs
  UNION ALL SELECT 'slots', count(*) FROM slots UNION ALL SELECT 'shards', count(*) FROM shards
  UNION ALL SELECT 'accounts', count(*) FROM accounts UNION ALL SELECT 'ledger', count(*) FROM ledger
  UNION ALL SELECT 'audit', count(*) FROM audit UNION ALL SELECT 'tokens', count(*) FROM tokens) s")"
echo "output kept in $OUT"

if ((crashed)); then
  echo "RESULT: the server crashed during the sqlsmith run" >&2
  exit 1
fi
echo "RESULT: no crash"
