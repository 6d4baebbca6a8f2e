#!/bin/bash
# pg_upgrade from one PostgreSQL major to a later one keeps every guarantee.
#
#   bash test/majors/pg-upgrade.sh OLD NEW PORT    # e.g. 17 18 54321
#
# As root, inside a root of scripts/test-majors.sh that has both majors'
# server and PGXS packages (/usr/lib/postgresql/OLD and NEW), from the tree
# copied into it.  The extension is built from that tree for OLD, and for NEW
# unless the root's build step installed it already.  The servers run as
# "postgres" on a Unix socket in a directory of their own, on PORT only.
#
# On an OLD cluster: a database with the extension, a per-row protected
# table (t1), a table under the lock-wide fence of lock 'L' (t2), a live
# lease of 'L' whose token t2 was written with, a semaphore with both of its
# permits taken, the lock model (a creator rule, a lock it made, a role
# granted that lock's use) and tokens granted past the sequence's 32-value
# log-ahead and moved a day ahead of the clock (fencing_bump_tokens), so
# that a next grant above them cannot come from the clock alone.  Then pg_upgrade (copy mode) to a NEW cluster, ALTER EXTENSION
# pg_fencing UPDATE, and checks on NEW: a stale token is refused with 55Z01
# and a missing one with 55Z02 on both tables (and the current one passes);
# the lease is still held by its holder and renews with its token; the
# permits are still there, renew, and still fill the semaphore; a session
# (1.8) is still open with its lease, renews and closes; the lock
# model still lets the granted role in and keeps a stranger out; the next
# fencing_grant() is above every token granted before, and so is the next
# lease of 'L', whose token then passes the fence and the old one does not.  Prints one line per
# check, "ok: ..." or "FAILED: ...", and exits non-zero if any failed.
#
# Both clusters preload the library (shared_preload_libraries), as the
# README recommends: tokens then come from ranges reserved in shared memory,
# the sequence moved past each range, and the expiry worker runs, also in
# the servers pg_upgrade starts itself.
set -euo pipefail
old=${1:-}
new=${2:-}
port=${3:-}
[[ -n $old && -n $new && -n $port ]] || {
  echo "usage: $0 OLD NEW PORT" >&2
  exit 2
}
tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
old_bin=/usr/lib/postgresql/$old/bin
new_bin=/usr/lib/postgresql/$new/bin
for b in "$old_bin" "$new_bin"; do
  [[ -x $b/pg_config && -x $b/initdb ]] || {
    echo "pg-upgrade: no server and PGXS in $b" >&2
    exit 2
  }
done

work=$(mktemp -d /tmp/pg-upgrade.XXXXXX)
chmod 755 "$work"
# Whatever happens, no server is left running (it would keep the root's
# mounts busy) and nothing stays behind.
cleanup() {
  [[ -f $work/pg/old/postmaster.pid ]] && as_postgres "$old_bin/pg_ctl" -D "$work/pg/old" -m immediate stop >/dev/null 2>&1
  [[ -f $work/pg/new/postmaster.pid ]] && as_postgres "$new_bin/pg_ctl" -D "$work/pg/new" -m immediate stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
# The servers and every client program run as postgres, from a directory it
# may write to (pg_upgrade writes there and puts its sockets there).
as_postgres() { (cd "$work/pg" && runuser -u postgres -- "$@"); }
mkdir "$work/pg"
chown postgres: "$work/pg"

# The extension for a major, from a clean copy of the tree: the copy has
# none of the root's build output (made for another major), and the build
# of one major does not touch what another step of the root left in /src.
build_for() {
  local major=$1
  local dir=$work/build-$major
  mkdir -p "$dir"
  tar -C "$tree" --exclude='./build' --exclude='./build-*' --exclude='*.o' --exclude='*.so' \
    --exclude='*.bc' --exclude='./results' --exclude='./output_iso' --exclude='./tmp_check' \
    --exclude='*.log' -cf - . | tar -C "$dir" -xf -
  make -C "$dir" -j2 PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >"$work/build-$major.log" 2>&1 &&
    make -C "$dir" PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" install >>"$work/build-$major.log" 2>&1 || {
    tail -n 40 "$work/build-$major.log"
    echo "pg-upgrade: the extension does not build for PostgreSQL $major" >&2
    exit 1
  }
  echo "built and installed the extension for PostgreSQL $major"
}
installed_for() { [[ -f $("/usr/lib/postgresql/$1/bin/pg_config" --pkglibdir)/pg_fencing.so ]]; }
start=$SECONDS
build_for "$old"
installed_for "$new" || build_for "$new"
echo "builds in $((SECONDS - start)) s"

# Both clusters alike, as pg_upgrade requires: the same encoding and locale,
# and data checksums on both (initdb turns them on by default from 18 on).
make_cluster() {
  local bin=$1 dir=$2
  as_postgres "$bin/initdb" -D "$dir" -U postgres -A trust -E UTF8 --no-locale -k >"$dir.initdb.log" 2>&1 || {
    cat "$dir.initdb.log"
    exit 1
  }
  cat >>"$dir/postgresql.conf" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$work/pg'
shared_preload_libraries = 'pg_fencing'
EOF
}
start_cluster() {
  as_postgres "$1/pg_ctl" -D "$2" -l "$2.server.log" -w start >/dev/null || {
    tail -n 30 "$2.server.log"
    exit 1
  }
}
stop_cluster() { as_postgres "$1/pg_ctl" -D "$2" -m fast -w stop >/dev/null; }

db=fencing_upgrade
bin=$old_bin  # the psql of the running server's major
q() { as_postgres "$bin/psql" -XAtq -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U postgres -d "$db" -c "$1"; }
# The SQLSTATE of a statement that must fail, or "ok" if it succeeded.
state_of() {
  local out
  if out=$(as_postgres "$bin/psql" -XAtq -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U postgres -d "$db" \
    -c '\set VERBOSITY verbose' -c "$1" 2>&1); then
    echo ok
  else
    sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' <<<"$out" | head -n 1
  fi
}

# --- the OLD cluster, used -------------------------------------------------
make_cluster "$old_bin" "$work/pg/old"
start_cluster "$old_bin" "$work/pg/old"
db=postgres
# Roles are global: pg_upgrade carries them over with their OIDs, which the
# lock model's regrole columns rely on.
q "CREATE ROLE lock_owner; CREATE ROLE lock_user; CREATE ROLE stranger"
q "CREATE DATABASE fencing_upgrade"
db=fencing_upgrade
q "CREATE EXTENSION pg_fencing"
q "CREATE TABLE t1 (id int PRIMARY KEY, token fencing_token, val text);
   INSERT INTO t1 VALUES (1, NULL, 'initial'), (2, NULL, 'initial');
   SELECT fencing_protect('t1');
   CREATE TABLE t2 (id int PRIMARY KEY, token fencing_token, val text);
   INSERT INTO t2 VALUES (1, NULL, 'initial'), (2, NULL, 'initial'), (3, NULL, 'initial');
   SELECT fencing_protect('t2', lock_name => 'L');
   SELECT fencing_allow_create('lock_owner', 'app/');
   SELECT fencing_create_lock('app/jobs');
   SELECT fencing_grant_lock('app/jobs', 'lock_user');
   GRANT USAGE ON SCHEMA public TO lock_user, stranger;" >/dev/null
# Past one 32-value log-ahead of the sequence.
q "SELECT fencing_grant() FROM generate_series(1, 40)" >/dev/null
# Tokens start at the clock (1.5), so a next grant above the last one would
# prove nothing if it only came from the clock: move them a day ahead of it
# first.  An upgrade that lost the sequence or the floor then grants below.
floor=$(q "SELECT fencing_bump_tokens(86400000000)")
lease=$(q "SELECT fencing_acquire('L', 'holder', '1 hour')")
q "UPDATE t2 SET token = '$lease', val = 'by the lease' WHERE id = 1"
row_token=$(q "SELECT fencing_grant()")
q "UPDATE t1 SET token = '$row_token', val = 'by $row_token' WHERE id = 1"
permit_a=$(q "SELECT fencing_acquire_permit('S', 'worker-a', 2, '1 hour')")
permit_b=$(q "SELECT fencing_acquire_permit('S', 'worker-b', 2, '1 hour')")
session=$(q "SELECT fencing_session_open('sess-holder', '1 hour')")
session_token=$(q "SELECT fencing_session_acquire($session, 'SL')")
last=$(q "SELECT fencing_grant()")
triggers=$(q "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fencing_guard%'")
echo "PostgreSQL $old: floor $floor (a day ahead of the clock), lease $lease, row token $row_token, permits $permit_a $permit_b, last grant $last, $triggers guard triggers"
[[ $floor =~ ^[0-9]+$ && $lease =~ ^[0-9]+$ && -n $permit_a && -n $permit_b && $last =~ ^[0-9]+$ &&
  $session =~ ^[0-9]+$ && $session_token =~ ^[0-9]+$ ]] &&
  ((lease > floor)) || {
  echo "pg-upgrade: the PostgreSQL $old database was not set up" >&2
  exit 1
}
stop_cluster "$old_bin" "$work/pg/old"

# --- pg_upgrade ------------------------------------------------------------
# Copy mode: the old cluster stays as it was, so a failed attempt can be
# made again from it (and looked at); the database is small, so copying
# costs nothing worth --link's caveats.
upgrade_once() {
  rm -rf "$work/pg/new" "$work/pg/new".*.log
  make_cluster "$new_bin" "$work/pg/new"
  cause=
  as_postgres "$new_bin/pg_upgrade" -b "$old_bin" -B "$new_bin" -d "$work/pg/old" -D "$work/pg/new" \
    -p "$port" -P "$port" -s "$work/pg" -U postgres >"$work/pg_upgrade.log" 2>&1 && return 0
  # The log pg_upgrade names for the cause (a schema restore's, say).
  cause=$(sed -n 's/.*Consult the last few lines of "\([^"]*\)".*/\1/p' "$work/pg_upgrade.log" | head -n 1)
  return 1
}
upgrade_failed() {
  tail -n 40 "$work/pg_upgrade.log"
  if [[ -n $cause && -f $cause ]]; then
    echo "==> $cause"
    grep -E -A 3 '(error|ERROR):' "$cause" | head -n 20
    echo "..."
    tail -n 20 "$cause"
  else
    find "$work/pg" -path '*pg_upgrade_output.d*' -name '*.log' -exec tail -n 30 {} + 2>/dev/null | tail -n 120
  fi
  echo "pg-upgrade: FAILED (pg_upgrade $old -> $new)"
  exit 1
}
upgrade_start=$SECONDS
if ! upgrade_once; then
  # A known skew between minor releases, not pg_fencing's: 17.12 (trixie,
  # November 2026) keeps an "attribute version" of every column of every
  # relation in attoptions under the reserved key pg_attver; its own
  # pg_dump leaves the key out, but the pg_dump of an 18 that predates it
  # (sid's 18.6) dumps it as "ALTER COLUMN ... SET (pg_attver=...)", which
  # its server refuses ("unrecognized parameter"), so pg_upgrade fails on
  # any database with a table.  Only on exactly that error, the key is
  # taken out of the old cluster's user relations (superuser DML on
  # pg_attribute: ALTER ... RESET ignores the key), leaving the columns as
  # a database made before 17.12 has them, and pg_upgrade is run again.
  # An 18 whose pg_dump knows the key never comes here.
  if [[ -z $cause || ! -f $cause ]] || ! grep -q 'unrecognized parameter "pg_attver"' "$cause"; then
    upgrade_failed
  fi
  echo "note: pg_upgrade $old -> $new failed on pg_attver (PostgreSQL $("$old_bin/postgres" -V | awk '{print $3}') -> $("$new_bin/postgres" -V | awk '{print $3}'), a skew of minor releases); again with the attribute versions taken out of the old cluster"
  start_cluster "$old_bin" "$work/pg/old"
  for d in $(db=postgres q "SELECT datname FROM pg_database WHERE datallowconn"); do
    db=$d q "UPDATE pg_catalog.pg_attribute
                SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(attoptions) o
                                               WHERE o NOT LIKE 'pg_attver=%'), '{}')
              WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg_attver=%'" >/dev/null
  done
  db=fencing_upgrade
  stop_cluster "$old_bin" "$work/pg/old"
  upgrade_once || upgrade_failed
fi
echo "pg_upgrade $old -> $new in $((SECONDS - upgrade_start)) s"
start_cluster "$new_bin" "$work/pg/new"
bin=$new_bin
q "ALTER EXTENSION pg_fencing UPDATE"

# --- the checks, on NEW ----------------------------------------------------
failed=0
check() {
  if [[ $2 == "$3" ]]; then
    echo "ok: $1"
  else
    echo "FAILED: $1: got '$2', want '$3'"
    failed=1
  fi
}
control=$("$new_bin/pg_config" --sharedir)/extension/pg_fencing.control
check "server is PostgreSQL $new" "$(q "SELECT current_setting('server_version_num')::int / 10000")" "$new"
check "extension at the installed default version" \
  "$(q "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'")" \
  "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$control")"
check "guard triggers" "$(q "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fencing_guard%'")" "$triggers"
check "per-row guard (t1): a stale token is refused" \
  "$(state_of "UPDATE t1 SET token = '$((row_token - 1))', val = 'stale' WHERE id = 1")" 55Z01
check "per-row guard (t1): a missing token is refused" \
  "$(state_of "UPDATE t1 SET val = 'no token' WHERE id = 1")" 55Z02
check "per-row guard (t1): the current token passes" \
  "$(state_of "UPDATE t1 SET token = '$row_token', val = 'again' WHERE id = 1")" ok
check "lock-wide fence (t2): a stale token is refused on a row it never saw" \
  "$(state_of "UPDATE t2 SET token = '$((lease - 1))', val = 'stale' WHERE id = 2")" 55Z01
check "lock-wide fence (t2): a missing token is refused" \
  "$(state_of "UPDATE t2 SET val = 'no token' WHERE id = 3")" 55Z02
check "lock-wide fence (t2): the lease's token passes" \
  "$(state_of "UPDATE t2 SET token = '$lease', val = 'again' WHERE id = 2")" ok
check "the lease is still held by its holder" "$(q "SELECT fencing_leader('L')")" holder
check "another holder cannot acquire it" "$(q "SELECT fencing_acquire('L', 'other', '1 hour') IS NULL")" t
check "the lease renews with its token" "$(q "SELECT fencing_renew('L', '$lease', '1 hour')")" t
check "the permits are still live, with their holders and tokens" \
  "$(q "SELECT string_agg(holder || '=' || token || ':' || state, ' ' ORDER BY slot) FROM fencing_permits WHERE lock_name = 'S'")" \
  "worker-a=$permit_a:live worker-b=$permit_b:live"
check "a permit renews with its token" "$(q "SELECT fencing_renew('S', '$permit_b', '1 hour')")" t
check "the semaphore is still full (no third permit)" \
  "$(q "SELECT fencing_acquire_permit('S', 'worker-c', 2, '1 hour') IS NULL")" t
check "lock model: the lock keeps its owner and the role granted its use" \
  "$(q "SELECT owner || ' ' || array_to_string(users, ',') FROM fencing_locks WHERE lock_name = 'app/jobs'")" \
  "lock_owner lock_user"
check "lock model: the granted role may use the lock" \
  "$(state_of "SET ROLE lock_user; SELECT fencing_acquire('app/jobs', 'job-runner', '1 hour')")" ok
check "lock model: a stranger may not" \
  "$(state_of "SET ROLE stranger; SELECT fencing_acquire('app/jobs', 'intruder', '1 hour')")" 42501
check "lock model: the creator rule still lets its role create a name" \
  "$(state_of "SET ROLE lock_owner; SELECT fencing_create_lock('app/reports')")" ok
check "lock model: and nobody else" \
  "$(state_of "SET ROLE stranger; SELECT fencing_create_lock('app/intruder')")" 42501
check "the session (1.8) is still open with its lease" \
  "$(q "SELECT leases FROM fencing_sessions WHERE session_id = $session AND live")" 1
check "the session's lease keeps its holder and token" \
  "$(q "SELECT holder || '=' || token FROM fencing_leases WHERE lock_name = 'SL' AND live AND session_id = $session")" \
  "sess-holder=$session_token"
check "another holder cannot take the session's lock" \
  "$(q "SELECT fencing_acquire('SL', 'other', '1 hour') IS NULL")" t
check "the session renews" "$(q "SELECT fencing_session_renew($session)")" t
check "closing the session releases its lease" "$(q "SELECT fencing_session_close($session)")" 1
next=$(q "SELECT fencing_grant()")
check "the next grant ($next) is above every token granted before the upgrade ($last)" \
  "$( ((next > last)) && echo above || echo "not above")" above
# Under a lock with leases, only its leases' tokens pass (55Z03 for one
# from fencing_grant()): the lease handed over after the upgrade.
check "the lease is released with its token" "$(q "SELECT fencing_release('L', '$lease')")" t
after=$(q "SELECT fencing_acquire('L', 'holder-2', '1 hour')")
check "the next lease of 'L' ($after) is above every token granted before the upgrade" \
  "$( ((${after:-0} > last)) && echo above || echo "not above")" above
check "lock-wide fence (t2): the new lease's token passes" \
  "$(state_of "UPDATE t2 SET token = '$after', val = 'after' WHERE id = 3")" ok
check "lock-wide fence (t2): the old lease's token is now stale" \
  "$(state_of "UPDATE t2 SET token = '$lease', val = 'zombie' WHERE id = 3")" 55Z01
stop_cluster "$new_bin" "$work/pg/new"
if ((failed)); then
  echo "pg-upgrade: FAILED ($old -> $new)"
  exit 1
fi
echo "pg-upgrade: every guarantee held from PostgreSQL $old to $new through pg_upgrade"
