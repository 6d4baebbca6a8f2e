#!/bin/bash
# A PostgreSQL 15 database restored into a later major keeps every guarantee.
#
#   bash test/majors/dump-restore.sh dump DIR      # on PostgreSQL 15
#   bash test/majors/dump-restore.sh restore DIR   # on the major under test
#
# Both run inside a throwaway cluster (pg_virtualenv sets PGHOST, PGPORT, ...);
# scripts/test-majors.sh runs "dump" on this machine's 15 and "restore" in
# each root.  "dump" builds a database with a per-row guard, a lock-wide fence
# over two tables, a live lease and granted tokens (past one 32-value
# sequence log-ahead), writes pg_dump -Fc of it to DIR/db.dump and what it
# granted to DIR/facts.  "restore" restores that into a new database and
# checks, on the major it runs on: the extension and its triggers are there;
# a stale or missing token is refused by the per-row guard and by the
# lock-wide fence (also on a row and a table the newer token never touched);
# the lease is still held and can be renewed; and the next fencing_grant() is
# above every token granted before the dump.
set -euo pipefail
mode=${1:-}
dir=${2:-}
[[ ($mode == dump || $mode == restore) && -n $dir ]] || {
  echo "usage: $0 dump|restore DIR" >&2
  exit 2
}
db=fencing_across_majors
q() { psql -XAtq -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
# The SQLSTATE of a statement that must fail, or "ok" if it succeeded.
state_of() {
  local out
  if out=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$db" -c '\set VERBOSITY verbose' -c "$1" 2>&1); then
    echo ok
  else
    sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' <<<"$out" | head -n 1
  fi
}
major=$(psql -XAtq -d postgres -c 'SHOW server_version_num')
major=$((major / 10000))

if [[ $mode == dump ]]; then
  mkdir -p "$dir"
  psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db"
  q "CREATE EXTENSION pg_fencing"
  q "CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
     INSERT INTO resource VALUES (1, NULL, 'initial'), (2, NULL, 'initial');
     SELECT fencing_protect('resource');
     CREATE TABLE accounts (id int PRIMARY KEY, token fencing_token, balance int);
     CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, entry text);
     INSERT INTO accounts SELECT g, NULL, 100 FROM generate_series(1, 3) g;
     SELECT fencing_protect('accounts', lock_name => 'tenant-7');
     SELECT fencing_protect('ledger', lock_name => 'tenant-7');" >/dev/null
  q "SELECT fencing_grant() FROM generate_series(1, 40)" >/dev/null
  lease=$(q "SELECT fencing_acquire('leader', 'node-a', '1 hour')")
  row_token=$(q "SELECT fencing_grant()")
  q "UPDATE resource SET token = '$row_token', val = 'by $row_token' WHERE id = 1"
  fence_token=$(q "SELECT fencing_grant()")
  q "UPDATE accounts SET token = '$fence_token', balance = 90 WHERE id = 1"
  last=$(q "SELECT fencing_grant()")
  {
    echo "dumped_major=$major"
    echo "version=$(q "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'")"
    echo "triggers=$(q "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fencing_guard%'")"
    echo "lease=$lease"
    echo "row_token=$row_token"
    echo "fence_token=$fence_token"
    echo "last=$last"
  } >"$dir/facts"
  pg_dump -Fc -d "$db" -f "$dir/db.dump"
  chmod -R a+rX "$dir"
  echo "dump-restore: PostgreSQL $major database dumped to $dir ($(tr '\n' ' ' <"$dir/facts"))"
  exit 0
fi

# restore
source "$dir/facts"
failed=0
check() {
  if [[ $2 == "$3" ]]; then
    echo "ok: $1"
  else
    echo "FAILED: $1: got '$2', want '$3'"
    failed=1
  fi
}
psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db"
pg_restore --exit-on-error -d "$db" "$dir/db.dump"
echo "restored a PostgreSQL $dumped_major dump into PostgreSQL $major"

check "extension version" "$(q "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'")" "$version"
check "guard triggers" "$(q "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'fencing_guard%'")" "$triggers"
check "per-row guard: a stale token is refused" \
  "$(state_of "UPDATE resource SET token = '$((row_token - 1))', val = 'stale' WHERE id = 1")" 55Z01
check "per-row guard: a missing token is refused" \
  "$(state_of "UPDATE resource SET val = 'no token' WHERE id = 1")" 55Z02
check "per-row guard: the current token passes" \
  "$(state_of "UPDATE resource SET token = '$row_token', val = 'again' WHERE id = 1")" ok
check "lock-wide fence: a stale token is refused on a row it never saw" \
  "$(state_of "UPDATE accounts SET token = '$((fence_token - 1))', balance = 0 WHERE id = 2")" 55Z01
check "lock-wide fence: and on another table under the lock" \
  "$(state_of "INSERT INTO ledger VALUES (9, '$((fence_token - 1))', 'stale')")" 55Z01
check "lock-wide fence: a write without a token is refused" \
  "$(state_of "UPDATE accounts SET balance = 0 WHERE id = 3")" 55Z02
check "the lease is still held" "$(q "SELECT fencing_leader('leader')")" node-a
check "the lease can be renewed with its token" \
  "$(q "SELECT fencing_renew('leader', '$lease', '1 hour')")" t
next=$(q "SELECT fencing_grant()")
check "the next grant ($next) is above every token granted before the dump ($last)" \
  "$(((next > last)) && echo above || echo "not above")" above
check "lock-wide fence: the new grant passes" \
  "$(state_of "UPDATE accounts SET token = '$next', balance = 80 WHERE id = 2")" ok
if ((failed)); then
  echo "dump-restore: FAILED ($dumped_major -> $major)"
  exit 1
fi
echo "dump-restore: every guarantee held from PostgreSQL $dumped_major to $major"
