#!/bin/bash
# Instructions per lease operation, counted by valgrind's callgrind in a
# real backend: the whole server runs under callgrind, psql drives one
# session over the unix socket (the simple query protocol, as pgbench
# -M simple), and the backend's own count is read when it exits.  Each
# figure is (count of a session that ran N operations - count of the same
# session with none) / N, so connection start-up and exit cancel out.
# The counts repeat to within a few hundred instructions run to run,
# whatever else the machine is doing.
#
#   acquire_release  SELECT fencing_acquire(...); SELECT fencing_release(...)  (two transactions)
#   renew            SELECT fencing_renew(...)  (one transaction, lease held)
#   bare_update      UPDATE t SET val = val + 1 WHERE id = 1  (one transaction)
#   row_update       the same UPDATE on a table with a per-row fence, setting its token
#   lock_update      the same on a table under a lock-wide fence (the holder's token)
#   row_update_leased, lock_update_leased  the same two with the token of a live lease
#                    (1.6: the transaction notes the lease and reads it again at COMMIT)
#   grant            SELECT fencing_grant()  (one transaction)
#   nextval          SELECT nextval() of a plain sequence, CACHE 1  (one transaction)
#   permit_cycle     SELECT fencing_acquire_permit(...) (one permit of a semaphore of 4);
#                    SELECT fencing_release(...)  (two transactions)
#   shared_cycle     SELECT fencing_acquire_shared(...); SELECT fencing_release(...)  (two transactions)
#   permit_renew     SELECT fencing_renew(...) of a held permit  (one transaction)
#   shared_renew     SELECT fencing_renew(...) of a held shared lease  (one transaction)
#   session_cycle    SELECT fencing_session_acquire(...) in an open session;
#                    SELECT fencing_release(...)  (two transactions; 1.8)
#   session_renew    SELECT fencing_session_renew(...) of a session holding one lease  (1.8)
#   session_take_1   fencing_session_open, fencing_session_acquire of one lock,
#                    fencing_session_close  (three transactions; 1.8)
#   session_take_10  the same with fencing_session_acquire_all of 10 locks
# KINDS="..." picks the kinds (default: bare_update acquire_release renew);
# KINDS=permits is "acquire_release permit_cycle shared_cycle renew
# permit_renew shared_renew" (issue 25: the permit and shared forms against
# the exclusive lease's), KINDS=sessions "acquire_release session_cycle
# renew session_renew" (issue 27: a session's against a plain lease's); the
# ratios are written to
# OUT_DIR/callgrind_lease_ratios.csv: each cycle against acquire_release,
# each renew against renew, when both were counted).  Each cycled lock
# (cycled, cycled-sem, cycled-rw) has its kind settled by a first cycle at
# set-up, and every session runs one uncounted operation of its kind first;
# a grant that returns NULL, or a renew that returns false, stops the script.
#
# Usage (as root): bench/callgrind_lease.sh OUT_DIR [N] [LIVE_LOCKS]
# LIVE_LOCKS other locks with live leases are made first (the scale curve).
# PRELOAD=1: the server preloads pg_fencing (statistics counted);
# ANNOUNCE=1: the cycled lock is announced (a NOTIFY per grant and release);
# HISTORY_SIZE=N: pg_fencing.history_size (0: no history kept);
# EXTVERSION=V: CREATE EXTENSION at version V (1.5: no transaction is tied
# to a lease; the baseline of 1.6's cost, with the same library);
# EXTENSION_DESTDIR=DIR: the server's extension_destdir (Debian's setting):
# a build installed with make install DESTDIR=DIR is used before the
# installed one (a build of its own, which a reinstall cannot change mid-run).
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
out=$(mkdir -p "$1" && cd "$1" && pwd)
n=${2:-500}
live=${3:-0}
bindir=/usr/lib/postgresql/$PG_MAJOR/bin
work=$(mktemp -d /tmp/pg_fencing_cglease.XXXXXX)
chown postgres: "$work"
port=$(free_port)
stop_server() { as_postgres "$bindir/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null 2>&1 || true; }
# The server under valgrind writes its counts after pg_ctl has seen it go:
# wait for the process itself before removing its directory.
server_pid=
cleanup() {
  stop_server
  [[ -n $server_pid ]] && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
as_postgres "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null
settings="-p $port -k $work -c listen_addresses= -c jit=off -c autovacuum=off -c fsync=off"
library=pg_fencing
if [[ -n ${EXTENSION_DESTDIR:-} ]]; then
  settings+=" -c extension_destdir=$EXTENSION_DESTDIR"
  # The preload by its path: by its name it would be the installed library,
  # and the SQL's $libdir/pg_fencing the other one.
  library=$EXTENSION_DESTDIR$("$bindir/pg_config" --pkglibdir)/pg_fencing.so
  [[ -f $library ]] || { echo "callgrind_lease: no $library" >&2; exit 1; }
fi
[[ ${PRELOAD:-0} == 1 ]] && settings+=" -c shared_preload_libraries=$library"
[[ -n ${HISTORY_SIZE:-} ]] && settings+=" -c pg_fencing.history_size=$HISTORY_SIZE"
q() { PGHOST=$work PGPORT=$port PGUSER=postgres psql -X -q -v ON_ERROR_STOP=1 -d postgres "$@"; }

# Set-up on a server without valgrind.
as_postgres "$bindir/pg_ctl" -D "$work/data" -o "$settings" -w start >/dev/null
q <<SQL
CREATE EXTENSION pg_fencing ${EXTVERSION:+VERSION '$EXTVERSION'};
-- A grant first: the hand-written tokens below are then below the highest
-- token the database has granted, which 1.5's guards require.
SELECT fencing_grant() IS NOT NULL AS granted;
CREATE TABLE bare (id int PRIMARY KEY, val bigint NOT NULL);
INSERT INTO bare VALUES (1, 0);
CREATE TABLE row_fenced (id int PRIMARY KEY, tok fencing_token, val bigint NOT NULL);
INSERT INTO row_fenced VALUES (1, NULL, 0);
SELECT fencing_protect('row_fenced');
CREATE TABLE lock_fenced (id int PRIMARY KEY, tok fencing_token, val bigint NOT NULL);
INSERT INTO lock_fenced VALUES (1, NULL, 0);
SELECT fencing_protect('lock_fenced', lock_name => 'fenced');
CREATE SEQUENCE plain_seq CACHE 1;
UPDATE lock_fenced SET tok = 1000000, val = 0;  -- the lock's mark: the holder's token
UPDATE row_fenced SET tok = 1000000, val = 0;
-- In transactions of 1,000 locks each (\gexec runs each statement on its
-- own): one transaction of 100,000 acquires runs out of shared memory for
-- locks.
\o /dev/null
SELECT format('SELECT count(fencing_acquire(''scale-'' || i, ''h'', ''1 day'')) FROM generate_series(%s, %s) i',
              lo, least(lo + 999, $live))
  FROM generate_series(1, $live, 1000) lo \gexec
\o
SELECT fencing_acquire('renewed', 'r', '1 day');
-- Tables written under a live lease's token (lease 'leased', a day long).
CREATE TABLE row_leased (id int PRIMARY KEY, tok fencing_token, val bigint NOT NULL);
INSERT INTO row_leased VALUES (1, NULL, 0);
SELECT fencing_protect('row_leased');
CREATE TABLE lock_leased (id int PRIMARY KEY, tok fencing_token, val bigint NOT NULL);
INSERT INTO lock_leased VALUES (1, NULL, 0);
SELECT fencing_protect('lock_leased', lock_name => 'leased');
SELECT fencing_acquire('leased', 'l', '1 day');
SELECT fencing_create_lock('cycled');
SELECT fencing_set_announce('cycled', ${ANNOUNCE:-0} = 1);
-- What a failed check (below and in the sessions) calls: an error, which
-- stops psql (ON_ERROR_STOP) and the script.
CREATE FUNCTION bench_fail(what text) RETURNS void LANGUAGE plpgsql AS
  \$\$BEGIN RAISE EXCEPTION 'callgrind_lease: %', what; END\$\$;
-- The permit and shared forms' locks, cycled as 'cycled' is, their kind (a
-- semaphore of 4, a shared lock) settled here by a first cycle; then a
-- permit and a shared lease held for a day, renewed by their tokens.
SELECT fencing_create_lock('cycled-sem');
SELECT fencing_set_announce('cycled-sem', ${ANNOUNCE:-0} = 1);
SELECT fencing_acquire_permit('cycled-sem', 'c', 4, '1 minute') AS tok \gset
SELECT fencing_release('cycled-sem', :'tok') AS released \gset
\if :released
\else
SELECT bench_fail('the first permit of cycled-sem was not released');
\endif
SELECT fencing_create_lock('cycled-rw');
SELECT fencing_set_announce('cycled-rw', ${ANNOUNCE:-0} = 1);
SELECT fencing_acquire_shared('cycled-rw', 'c', '1 minute') AS tok \gset
SELECT fencing_release('cycled-rw', :'tok') AS released \gset
\if :released
\else
SELECT bench_fail('the first shared lease of cycled-rw was not released');
\endif
CREATE TABLE held_tokens (what text PRIMARY KEY, tok fencing_token NOT NULL);
INSERT INTO held_tokens VALUES ('permit', fencing_acquire_permit('renewed-sem', 'r', 4, '1 day'));
INSERT INTO held_tokens VALUES ('shared', fencing_acquire_shared('renewed-rw', 'r', '1 day'));
-- 1.8: a session to cycle a lease in ('cycled-s'), and one holding a lease,
-- renewed.  Their ids are tokens too (fencing_grant()).
SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'fencing_session_open') AS has_sessions \gset
\if :has_sessions
INSERT INTO held_tokens VALUES ('cycle_session', fencing_session_open('c', '1 day')::fencing_token);
INSERT INTO held_tokens VALUES ('renew_session', fencing_session_open('r', '1 day')::fencing_token);
SELECT fencing_create_lock('cycled-s');
SELECT fencing_set_announce('cycled-s', ${ANNOUNCE:-0} = 1);
SELECT fencing_session_acquire(tok::bigint, 'renewed-s') IS NOT NULL AS held
  FROM held_tokens WHERE what = 'renew_session' \gset
\endif
VACUUM ANALYZE;
SQL
stop_server

# The same server under callgrind: every process it forks writes its own
# count, named by pid, when it exits.
as_postgres valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
  "$bindir/postgres" -D "$work/data" $settings >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 120); do q -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done

# One session: its pid, then N operations of a kind.  Prints the pid.
session() { # kind count
  local kind=$1 count=$2 script=$work/script.$1.$2.sql
  {
    echo '\o /dev/null'
    echo "SELECT pg_backend_pid() AS pid \\gset"
    echo "SELECT token AS renew_token FROM fencing_leases WHERE lock_name = 'renewed' \\gset"
    echo "SELECT token AS leased_token FROM fencing_leases WHERE lock_name = 'leased' \\gset"
    echo "SELECT tok AS permit_token FROM held_tokens WHERE what = 'permit' \\gset"
    echo "SELECT tok AS shared_token FROM held_tokens WHERE what = 'shared' \\gset"
    echo "SELECT max(tok) FILTER (WHERE what = 'cycle_session') AS cycle_session, max(tok) FILTER (WHERE what = 'renew_session') AS renew_session FROM held_tokens \\gset"
    echo "SELECT 1;"  # warm the caches the first operation would otherwise pay for
    case $kind in
      acquire_release)
        echo "SELECT fencing_acquire('cycled', 'c', '1 minute') AS tok \\gset"
        echo "SELECT fencing_release('cycled', :'tok');"
        for _ in $(seq 1 "$count"); do
          echo "SELECT fencing_acquire('cycled', 'c', '1 minute') AS tok \\gset"
          echo "SELECT fencing_release('cycled', :'tok');"
        done ;;
      renew)
        for _ in $(seq 0 "$count"); do echo "SELECT fencing_renew('renewed', :'renew_token', '1 day');"; done ;;
      bare_update)
        for _ in $(seq 0 "$count"); do echo "UPDATE bare SET val = val + 1 WHERE id = 1;"; done ;;
      row_update)
        for _ in $(seq 0 "$count"); do echo "UPDATE row_fenced SET tok = 1000000, val = val + 1 WHERE id = 1;"; done ;;
      grant)
        for _ in $(seq 0 "$count"); do echo "SELECT fencing_grant();"; done ;;
      nextval)
        for _ in $(seq 0 "$count"); do echo "SELECT nextval('plain_seq');"; done ;;
      lock_update)
        for _ in $(seq 0 "$count"); do echo "UPDATE lock_fenced SET tok = 1000000, val = val + 1 WHERE id = 1;"; done ;;
      row_update_leased)
        for _ in $(seq 0 "$count"); do echo "UPDATE row_leased SET tok = :'leased_token', val = val + 1 WHERE id = 1;"; done ;;
      lock_update_leased)
        for _ in $(seq 0 "$count"); do echo "UPDATE lock_leased SET tok = :'leased_token', val = val + 1 WHERE id = 1;"; done ;;
      session_cycle)
        for _ in $(seq 0 "$count"); do
          echo "SELECT fencing_session_acquire(:'cycle_session', 'cycled-s') AS tok \\gset"
          echo "SELECT fencing_release('cycled-s', :'tok') AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: a release returned false');"; echo "\\endif"
        done ;;
      session_take_1 | session_take_10)
        local take="fencing_session_acquire(:'s', 'taken-1')" want=1
        if [[ $kind == session_take_10 ]]; then
          take="fencing_session_acquire_all(:'s', '{taken-1,taken-2,taken-3,taken-4,taken-5,taken-6,taken-7,taken-8,taken-9,taken-10}')"
          want=10
        fi
        for _ in $(seq 0 "$count"); do
          echo "SELECT fencing_session_open('t', '1 minute') AS s \\gset"
          echo "SELECT $take IS NOT NULL AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: not granted');"; echo "\\endif"
          echo "SELECT fencing_session_close(:'s') = $want AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: not all released');"; echo "\\endif"
        done ;;
      session_renew)
        for _ in $(seq 0 "$count"); do
          echo "SELECT fencing_session_renew(:'renew_session', '1 day') AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: a renew returned false');"; echo "\\endif"
        done ;;
      permit_cycle | shared_cycle)
        # As acquire_release, one uncounted cycle first.  Every result is
        # checked in psql (the server's work is the same as unchecked): a
        # NULL grant unsets tok and the release's :'tok' is then a syntax
        # error; a release that returns false calls bench_fail.
        local acquire lock
        if [[ $kind == permit_cycle ]]; then
          acquire="fencing_acquire_permit('cycled-sem', 'c', 4, '1 minute')" lock=cycled-sem
        else
          acquire="fencing_acquire_shared('cycled-rw', 'c', '1 minute')" lock=cycled-rw
        fi
        for _ in $(seq 0 "$count"); do
          echo "SELECT $acquire AS tok \\gset"
          echo "SELECT fencing_release('$lock', :'tok') AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: a release returned false');"; echo "\\endif"
        done ;;
      permit_renew | shared_renew)
        local renew
        if [[ $kind == permit_renew ]]; then
          renew="fencing_renew('renewed-sem', :'permit_token', '1 day')"
        else
          renew="fencing_renew('renewed-rw', :'shared_token', '1 day')"
        fi
        for _ in $(seq 0 "$count"); do
          echo "SELECT $renew AS ok \\gset"
          echo "\\if :ok"; echo "\\else"; echo "SELECT bench_fail('$kind: a renew returned false');"; echo "\\endif"
        done ;;
    esac
    echo '\o'
    echo "SELECT :pid;"
  } >"$script"
  q -At -f "$script" | tail -1
}
count_of() { # pid: the backend's instruction count once it has exited
  local f=$work/cg.$1
  for _ in $(seq 1 60); do [[ -s $f ]] && grep -q '^summary:\|^totals:' "$f" && break; sleep 1; done
  awk '/^summary:/ {print $2; exit} /^totals:/ {t=$2} END {if (t) print t}' "$f" | head -1
}

echo "kind,live_locks,operations,instructions_per_operation" >"$out/callgrind_lease.csv"
kinds=${KINDS:-bare_update acquire_release renew}
[[ $kinds == permits ]] && kinds="acquire_release permit_cycle shared_cycle renew permit_renew shared_renew"
[[ $kinds == sessions ]] && kinds="acquire_release session_cycle renew session_renew session_take_1 session_take_10"
for kind in $kinds; do
  p0=$(session "$kind" 0)
  p1=$(session "$kind" "$n")
  c0=$(count_of "$p0")
  c1=$(count_of "$p1")
  per=$(( (c1 - c0) / n ))
  echo "$kind,$live,$n,$per" >>"$out/callgrind_lease.csv"
  case $kind in
    acquire_release | lock_update | permit_cycle | shared_cycle | session_cycle | session_take_*) cp "$work/cg.$p1" "$out/callgrind.$kind.out" ;;
  esac
done
cat "$out/callgrind_lease.csv"
# The permit and shared forms against the exclusive lease's (issue 25's
# target: a cycle within 1.2 x the exclusive cycle's instructions).
awk -F, '
  NR > 1 { per[$1] = $4; order[++n] = $1 }
  END {
    base["permit_cycle"] = base["shared_cycle"] = base["session_cycle"] = "acquire_release"
    base["permit_renew"] = base["shared_renew"] = base["session_renew"] = "renew"
    base["session_take_10"] = "session_take_1"
    print "kind,instructions_per_operation,baseline,baseline_instructions,ratio"
    for (i = 1; i <= n; i++) {
      k = order[i]; b = base[k]
      if (b != "" && (b in per) && per[b] > 0) printf "%s,%d,%s,%d,%.3f\n", k, per[k], b, per[b], per[k] / per[b]
    }
  }' "$out/callgrind_lease.csv" >"$out/callgrind_lease_ratios.csv"
if [[ $(wc -l <"$out/callgrind_lease_ratios.csv") -gt 1 ]]; then cat "$out/callgrind_lease_ratios.csv"; else rm -f "$out/callgrind_lease_ratios.csv"; fi
