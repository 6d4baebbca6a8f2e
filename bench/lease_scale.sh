#!/bin/bash
# Does a lease operation cost the same whatever the number of live locks,
# and with many sessions waiting on one lock?  (The goal: acquire, renew and
# release flat within 10 % from 10 to 100,000 live locks, and with 1,000
# waiters on one lock.)
#
#   1. instructions per operation (bench/callgrind_lease.sh, which makes
#      LIVE other locks with live leases first) for LIVE = 10 .. 100,000:
#      OUT_DIR/scale_callgrind.csv "kind,live_locks,operations,instructions_per_operation";
#   2. throughput (pgbench, one throwaway cluster): LIVE live leases (ttl
#      1 day) on 'scale-1' .. 'scale-LIVE', then interleaved rounds, at 1
#      and 2 clients, of acquire+release cycles on the client's own lock,
#      renewals of a lease the client holds, and the bare single-row UPDATE
#      as the baseline of the same round;
#   3. the same with 1 and then 1,000 sessions queued on the lock 'hot'
#      (LIVE = 10): one lease holds it, the waiters sit in
#      fencing_acquire(..., wait), and pgbench also renews the 'hot' lease
#      (renew_hot: every renew wakes the first waiter, who looks again and
#      sleeps again; also measured without waiters).  Then 'hot' is
#      released (a waiter takes it), the waiters are terminated and the
#      tables vacuumed.  A waiter holds back the xmin horizon for as long as
#      it waits, so 1 waiter, not none, is the reference for 1,000.
#      Both: OUT_DIR/scale_tps.csv "live_locks,waiters,kind,clients,round,tps";
#   4. OUT_DIR/scale.md (tables, ratios) and OUT_DIR/scale.png
#      (bench/lease_scale.gp).
#
# Usage (as root): bash bench/lease_scale.sh OUT_DIR
#   QUICK=1: a smoke run (LIVE 10 and 1000, 50 waiters, 1 round of 1 s;
#            about a minute); the figures mean nothing.
#   SCALE_LIVE ("10 100 1000 10000 100000"), SCALE_WAITERS (1000),
#   SCALE_ROUNDS (3), SCALE_SECONDS (5), SCALE_CALLGRIND_N (300) override.
# The full run takes about 17 minutes on 2 cores (the 1,000 waiters take up
# to a minute to connect and queue).
#
# The extension may be reinstalled while this runs: the callgrind sweep
# starts again (up to 3 times) if the installed files change during it, and
# the pgbench cluster loads a copy of the build taken before it starts.
#
# Everything is bounded: each pgbench run by -T, the waiters by their own
# 10-minute wait, each step by timeout(1); the servers listen on loopback
# or a unix socket only; the clusters and every background process go away
# on exit, also on Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
self=$here/$(basename "$0")

quick=${QUICK:-0}
if ((quick)); then
  live_list=${SCALE_LIVE:-10 1000} waiters=${SCALE_WAITERS:-50} rounds=${SCALE_ROUNDS:-1}
  seconds=${SCALE_SECONDS:-1} cg_n=${SCALE_CALLGRIND_N:-50}
else
  live_list=${SCALE_LIVE:-10 100 1000 10000 100000} waiters=${SCALE_WAITERS:-1000}
  rounds=${SCALE_ROUNDS:-3} seconds=${SCALE_SECONDS:-5} cg_n=${SCALE_CALLGRIND_N:-300}
fi
clients_list="1 2"
base_live=${live_list%% *} # the reference: the first (smallest) LIVE
bindir=/usr/lib/postgresql/$PG_MAJOR/bin
pkglibdir=$("$bindir/pg_config" --pkglibdir)
sharedir=$("$bindir/pg_config" --sharedir)
# The installed build: a digest of the extension's library, control and SQL files.
ext_sum() {
  { cat "$pkglibdir/pg_fencing.so" "$sharedir"/extension/pg_fencing.control "$sharedir"/extension/pg_fencing--*.sql 2>/dev/null || true; } |
    md5sum | cut -c1-12
}
# The advisory lock class of the waiting rooms: 'FENC' (src/core/lease_wait.hpp).
room_class=1178947139

# Runs a command under timeout(1) in the background and waits for it, so
# that a signal to this script is handled at once (the trap stops it).
bounded() { # seconds command...
  local limit=$1
  shift
  timeout -k 30 "$limit" "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=
  return "$rc"
}

# ============================================================================
# The measurement inside the cluster (the environment: PG* of pg_virtualenv).
# ============================================================================
if [[ ${1:-} == --measure ]]; then
  csv=$2 notes=$3 library=$4
  tmp=$(mktemp -d /tmp/pg_fencing_scale.XXXXXX)
  waiters_pid=
  bench_pid=
  cleanup_measure() {
    set +e
    [[ -n $bench_pid ]] && kill "$bench_pid" 2>/dev/null
    if [[ -n $waiters_pid ]] && kill -0 "$waiters_pid" 2>/dev/null; then
      psql -X -q -At -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                          WHERE application_name = 'lease_scale_waiter'" >/dev/null 2>&1
      kill "$waiters_pid" 2>/dev/null
      wait "$waiters_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
  }
  trap cleanup_measure EXIT
  trap 'exit 130' INT TERM HUP
  psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
  val() { psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }
  note() { echo "$*" >>"$notes"; echo "lease_scale: $*" >&2; }
  # pgbench with 1,000 connections needs as many descriptors.
  if (($(ulimit -n) < waiters + 200)); then ulimit -n $((waiters + 200)); fi

  psql_q <<'SQL'
CREATE EXTENSION pg_fencing;
CREATE TABLE scale_bare (id int PRIMARY KEY, val bigint NOT NULL);
INSERT INTO scale_bare SELECT i, 0 FROM generate_series(1, 100) i;
SQL

  # The pgbench scripts: the lease benchmarks' own (bench/pgbench/).
  cp "$here/pgbench/acquire_release.pgb" "$here/pgbench/renew.pgb" "$tmp/"
  echo "UPDATE scale_bare SET val = val + 1 WHERE id = :client_id + 1;" >"$tmp/bare_update.pgb"
  # Every client renews the one 'hot' lease (with 2 clients they queue on its row).
  echo "SELECT fencing_renew('hot', CAST(:hot_token AS fencing_token), '1 day');" >"$tmp/renew_hot.pgb"

  run_pgbench() { # kind clients: sets tps
    local kind=$1 clients=$2 log=$tmp/pgbench.log
    pgbench -n -D have_token=0 -D hot_token="$hot_token" -f "$tmp/$kind.pgb" \
      -c "$clients" -j "$clients" -T "$seconds" >"$log" 2>&1 &
    bench_pid=$!
    local rc=0
    wait "$bench_pid" || rc=$?
    bench_pid=
    tps=$(awk '/^tps/ {print $3}' "$log")
    if ((rc != 0)) || [[ -z $tps ]] || grep -q 'aborted\|ERROR' "$log"; then
      echo "lease_scale: pgbench $kind -c $clients failed:" >&2
      cat "$log" >&2
      exit 1
    fi
  }
  # Interleaved rounds: round 1 of every clients x kind, then round 2, ...
  measure_phase() { # live waiters kinds...
    local live=$1 w=$2
    shift 2
    local round clients kind
    for round in $(seq 1 "$rounds"); do
      for clients in $clients_list; do
        for kind in "$@"; do
          run_pgbench "$kind" "$clients"
          echo "$live,$w,$kind,$clients,$round,$tps" >>"$csv"
        done
      done
    done
  }
  # Locks 'scale-<from>' .. 'scale-<to>' with live leases, 1,000 a
  # transaction (one transaction of 100,000 runs out of lock memory).
  add_leases() { # from to
    ((${1} <= ${2})) || return 0
    psql_q <<SQL
\\o /dev/null
SELECT format('SELECT count(fencing_acquire(''scale-'' || i, ''h'', ''1 day'')) FROM generate_series(%s, %s) i',
              lo, least(lo + 999, $2))
  FROM generate_series($1, $2, 1000) lo \\gexec
\\o
SQL
  }
  settle() { psql_q -c 'VACUUM ANALYZE' -c 'CHECKPOINT'; }

  # The lease on 'hot' that the waiters queue behind, and renew_hot renews.
  take_hot() {
    hot_token=$(val "SELECT fencing_acquire('hot', 'holder', '1 day')")
    [[ -n $hot_token ]] || { echo "lease_scale: could not take 'hot'" >&2; exit 1; }
  }
  in_room() { val "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $room_class"; }

  # ---- With $1 sessions queued on 'hot' ----------------------------------------
  # One waiter already holds back the xmin horizon (it waits inside its
  # SELECT's snapshot), so that no table sheds its dead rows while it waits:
  # 1 waiter is the reference for $waiters.  Each phase starts from vacuumed
  # tables and runs the same schedule.
  waiters_phase() { # live count
    local live=$1 w=$2 started queued holder released next left
    echo "lease_scale: $live live locks, $w waiter(s) on 'hot'" >&2
    echo "SELECT fencing_acquire('hot', 'w' || :client_id, '1 minute', wait => '10 minutes');" >"$tmp/waiter.pgb"
    started=$(date +%s.%N)
    PGAPPNAME=lease_scale_waiter pgbench -n -f "$tmp/waiter.pgb" -c "$w" -j $((w < 2 ? 1 : 2)) -t 1 \
      >"$tmp/waiters.log" 2>&1 &
    waiters_pid=$!
    # Queued: the first holds the waiting room, the others wait for it.
    queued=0
    for _ in $(seq 1 600); do
      queued=$(in_room)
      ((queued >= w)) && break
      kill -0 "$waiters_pid" 2>/dev/null || { cat "$tmp/waiters.log" >&2; exit 1; }
      sleep 0.5
    done
    ((queued >= w)) || { echo "lease_scale: only $queued of $w waiters queued" >&2; exit 1; }
    note "$w waiter(s): queued on 'hot' in $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
    # Past deadlock_timeout every waiter has run its one deadlock check.
    sleep "$(val "SELECT extract(epoch FROM current_setting('deadlock_timeout')::interval) + 2")"
    note "$w waiter(s): the waiting room of 'hot' before the measurements: $(val "SELECT count(*) FILTER (WHERE granted) || ' holding, ' || count(*) FILTER (WHERE NOT granted) || ' waiting' FROM pg_locks WHERE locktype = 'advisory' AND classid = $room_class"); $(val "SELECT count(backend_xmin) FROM pg_stat_activity WHERE application_name = 'lease_scale_waiter'") of them with a backend_xmin"

    measure_phase "$live" "$w" acquire_release renew bare_update renew_hot

    note "$w waiter(s): after the measurements: $(in_room) sessions in the waiting room; dead rows: $(val "SELECT string_agg(relname || ' ' || n_dead_tup, ', ' ORDER BY relname) FROM pg_stat_user_tables WHERE relname IN ('fencing_lease', 'scale_bare')")"
    holder=$(val "SELECT holder FROM fencing_leases WHERE lock_name = 'hot' AND live")
    [[ $holder == holder ]] || { echo "lease_scale: 'hot' is held by '$holder', not by 'holder'" >&2; exit 1; }
    # Release 'hot': the first waiter is woken and takes it.
    released=$(val "SELECT fencing_release('hot', '$hot_token') || ',' || clock_timestamp()")
    [[ ${released%%,*} == true ]] || { echo "lease_scale: the release of 'hot' failed: $released" >&2; exit 1; }
    next=
    for _ in $(seq 1 100); do
      next=$(val "SELECT holder || ' took it ' || round(extract(epoch FROM granted_at - '${released#*,}'::timestamptz) * 1000, 1) || ' ms after the release statement'
                    FROM fencing_leases WHERE lock_name = 'hot' AND live AND holder LIKE 'w%'")
      [[ -n $next ]] && break
      sleep 0.1
    done
    [[ -n $next ]] || { echo "lease_scale: no waiter took 'hot' within 10 s of its release" >&2; exit 1; }
    note "$w waiter(s): 'hot' released: $next"
    # Stop the waiters, and see that nothing is left.
    val "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE application_name = 'lease_scale_waiter'" >/dev/null
    for _ in $(seq 1 120); do kill -0 "$waiters_pid" 2>/dev/null || break; sleep 0.5; done
    kill "$waiters_pid" 2>/dev/null || true
    wait "$waiters_pid" 2>/dev/null || true # pgbench reports its clients' lost connections
    waiters_pid=
    for _ in $(seq 1 60); do
      left=$(val "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lease_scale_waiter'")
      ((left == 0)) && break
      sleep 0.5
    done
    ((left == 0)) || { echo "lease_scale: $left waiter sessions are left" >&2; exit 1; }
    # The waiter that took 'hot' has gone: end its lease too, and take 'hot' again.
    [[ $(val "SELECT fencing_release('hot', token) FROM fencing_leases WHERE lock_name = 'hot' AND live") == t ]] ||
      { echo "lease_scale: could not release the waiter's lease on 'hot'" >&2; exit 1; }
    take_hot
    settle
  }

  note "settings: $(val "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) FROM pg_settings
                         WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections', 'max_wal_size',
                                        'checkpoint_timeout', 'deadlock_timeout', 'autovacuum', 'pg_fencing.wait_recheck')")"
  take_hot
  # The library the backends load: the copy, not the installed file.
  loaded=$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT fencing_renew('hot', '$hot_token', '1 day')" \
    -c "SELECT string_agg(DISTINCT m[1], ' ') FROM regexp_matches(pg_read_file('/proc/self/maps'), '(/\S*pg_fencing\.so)', 'g') m" | tail -1)
  [[ $loaded == "$library" ]] || { echo "lease_scale: the backends load '$loaded', not '$library'" >&2; exit 1; }
  echo "live_locks,waiters,kind,clients,round,tps" >"$csv"
  have=0
  for live in $live_list; do
    add_leases $((have + 1)) "$live"
    have=$live
    n_live=$(val "SELECT count(*) FROM fencing_leases WHERE lock_name LIKE 'scale-%' AND live")
    [[ $n_live == "$live" ]] || { echo "lease_scale: $n_live live scale- leases, not $live" >&2; exit 1; }
    settle
    echo "lease_scale: $live live locks" >&2
    if [[ $live == "$base_live" ]]; then
      measure_phase "$live" 0 acquire_release renew bare_update renew_hot
      waiters_phase "$live" 1
      waiters_phase "$live" "$waiters"
    else
      measure_phase "$live" 0 acquire_release renew bare_update
    fi
  done
  exit 0
fi

# ============================================================================
# The driver.
# ============================================================================
[[ $# -eq 1 ]] || { echo "usage: bash bench/lease_scale.sh OUT_DIR" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
child= snap=
trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; wait; exit 130' INT TERM HUP
trap '[[ -n $snap ]] && rm -rf "$snap"' EXIT
t_start=$(date +%s)

# The extension may be reinstalled while this runs (by someone else).  The
# callgrind sweep runs the installed build: it starts again, up to 3 times,
# when the installed files change during it.
cg_build= cg_warning=
for attempt in 1 2 3; do
  cg_build=$(ext_sum)
  changed=0
  log "instructions per operation (callgrind), live locks: $live_list (build $cg_build)"
  echo "kind,live_locks,operations,instructions_per_operation" >"$out/scale_callgrind.csv"
  for live in $live_list; do
    mkdir -p "$out/cg-$live"
    rm -f "$out/cg-$live/callgrind_lease.csv"
    rc=0
    bounded 900 bash "$here/callgrind_lease.sh" "$out/cg-$live" "$cg_n" "$live" >"$out/cg-$live/run.log" 2>&1 || rc=$?
    # callgrind_lease.sh's trap can fail to remove its work directory: the
    # postmaster under valgrind writes its own count after pg_ctl saw it stop.
    # Its figures are complete by then; the directory is removed here.
    leftover=$(sed -n "s|^rm: cannot remove '\(/tmp/pg_fencing_cglease\.[A-Za-z0-9]*\)': Directory not empty$|\1|p" "$out/cg-$live/run.log")
    if [[ -n $leftover ]]; then sleep 2; rm -rf "$leftover"; fi
    if [[ $(grep -c ",$live,$cg_n," "$out/cg-$live/callgrind_lease.csv" 2>/dev/null) != 3 ]] || { ((rc != 0)) && [[ -z $leftover ]]; }; then
      echo "lease_scale: callgrind_lease.sh failed at $live live locks (exit $rc):" >&2
      tail -20 "$out/cg-$live/run.log" >&2
      exit 1
    fi
    tail -n +2 "$out/cg-$live/callgrind_lease.csv" | tee -a "$out/scale_callgrind.csv"
    if [[ $(ext_sum) != "$cg_build" ]]; then changed=1; break; fi
  done
  ((changed)) || break
  log "the installed extension changed during the callgrind sweep"
done
((changed)) && cg_warning="**The installed extension changed during every one of 3 callgrind sweeps: the counts mix builds.**"
t_callgrind=$(date +%s)

# The pgbench cluster runs a copy of the installed build, taken now
# (extension_destdir, Debian's setting, puts it before the installed files):
# a reinstall during the measurements does not reach it.
snap=$(mktemp -d /tmp/pg_fencing_scale_ext.XXXXXX)
copied=0
for _ in 1 2 3 4 5; do
  before=$(ext_sum)
  rm -rf "${snap:?}"/usr
  mkdir -p "$snap$pkglibdir" "$snap$sharedir/extension"
  cp -p "$pkglibdir/pg_fencing.so" "$sharedir"/extension/pg_fencing.control "$sharedir"/extension/pg_fencing--*.sql \
    "$snap/" 2>/dev/null || true
  mv "$snap/pg_fencing.so" "$snap$pkglibdir/" 2>/dev/null || true
  mv "$snap"/pg_fencing.control "$snap"/pg_fencing--*.sql "$snap$sharedir/extension/" 2>/dev/null || true
  pg_build=$({ cat "$snap$pkglibdir/pg_fencing.so" "$snap$sharedir"/extension/pg_fencing.control \
    "$snap$sharedir"/extension/pg_fencing--*.sql 2>/dev/null || true; } | md5sum | cut -c1-12)
  if [[ $before == "$pg_build" && $(ext_sum) == "$pg_build" ]]; then copied=1; break; fi
  sleep 5
done
((copied)) || { echo "lease_scale: could not copy a stable build of the extension" >&2; exit 1; }
chmod -R a+rX "$snap"
log "throughput (pgbench, $rounds round(s) of ${seconds} s, $waiters waiters; build $pg_build)"
: >"$out/scale_notes.txt"
# As bench/run.sh's cluster, with room for the waiters.
bounded $((quick ? 600 : 3600)) pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" \
  -o shared_buffers=1GB -o max_wal_size=8GB -o checkpoint_timeout=30min \
  -o max_connections=$((waiters + 100)) -o extension_destdir="$snap" \
  env QUICK="$quick" SCALE_LIVE="$live_list" SCALE_WAITERS="$waiters" SCALE_ROUNDS="$rounds" \
  SCALE_SECONDS="$seconds" SCALE_CALLGRIND_N="$cg_n" \
  bash "$self" --measure "$out/scale_tps.csv" "$out/scale_notes.txt" "$snap$pkglibdir/pg_fencing.so"
t_tps=$(date +%s)
rm -rf "$snap"
snap=

log "rendering $out/scale.md and $out/scale.png"
{
  echo "# pg_fencing: lease cost against live locks and waiters, $(date -u +%Y-%m-%dT%H%MZ)"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(. /etc/os-release; echo "$PRETTY_NAME"), PostgreSQL $("$bindir/pg_config" --version | awk '{print $2}')."
  echo "Extension: the installed build (md5 of its library, control and SQL files) $cg_build for callgrind, $pg_build for pgbench$([[ $cg_build == "$pg_build" ]] && echo ' (the same)' || echo ' (**not the same build**: reinstalled in between)'); the source tree at $(git -C "$PROJECT_ROOT" describe --always --dirty 2>/dev/null || echo '?')."
  [[ -n $cg_warning ]] && echo "$cg_warning"
  echo "pgbench: one pg_virtualenv cluster ($(sed -n 's/^settings: //p' "$out/scale_notes.txt"); pg_virtualenv turns fsync off), $rounds interleaved round(s) of ${seconds} s runs at 1 and 2 clients (simple protocol)."
  echo "Live locks: the count of other locks with a live lease ('scale-1' .. 'scale-N'; a few more are the benchmark's own). Callgrind: $cg_n operations per figure."
  ((quick)) && echo "**QUICK smoke run: the figures mean nothing.**"
  echo "Took: callgrind $((t_callgrind - t_start)) s, pgbench $((t_tps - t_callgrind)) s."
  echo
  perl - "$out" "$base_live" "$waiters" <<'PERL'
use strict;
use warnings;
my ($dir, $base, $nwait) = @ARGV;
sub median { my @v = sort { $a <=> $b } @_; return undef unless @v; @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2 }
sub f { my ($x, $p) = @_; defined $x ? sprintf("%.${\($p // 3)}f", $x) : 'n/a' }
sub g { defined $_[0] ? sprintf('%.0f', $_[0]) : 'n/a' }

# ---- callgrind
my (%ins, %lives, @kinds);
open my $c, '<', "$dir/scale_callgrind.csv" or die $!;
<$c>;
while (<$c>) { chomp; my ($k, $l, $n, $i) = split /,/; push @kinds, $k unless grep { $_ eq $k } @kinds; $ins{$k}{$l} = $i; $lives{$l} = 1 }
my @lives = sort { $a <=> $b } keys %lives;
print "## Instructions per operation (callgrind)\n\n";
print '| live locks | ', join(' | ', map { "$_ | ratio to $base" } @kinds), " |\n";
print '|---:|', join('', map { '---:|---:|' } @kinds), "\n";
open my $cd, '>', "$dir/scale_cg.dat" or die $!;
print $cd join(' ', 'live', @kinds, map { "${_}_ratio" } @kinds), "\n";
for my $l (@lives) {
	my @cells; my @r;
	for my $k (@kinds) {
		my $ratio = $ins{$k}{$base} ? $ins{$k}{$l} / $ins{$k}{$base} : undef;
		push @cells, $ins{$k}{$l}, f($ratio); push @r, f($ratio, 4);
	}
	print "| $l | ", join(' | ', @cells), " |\n";
	print $cd join(' ', $l, map({ $ins{$_}{$l} } @kinds), @r), "\n";
}
close $cd;
print "\n";
for my $k (@kinds) {
	my ($worst) = sort { abs($b - 1) <=> abs($a - 1) } map { $ins{$k}{$_} / $ins{$k}{$base} } @lives;
	printf "- %s: the farthest from %s live locks is %s × (%s)\n", $k, $base, f($worst),
		abs($worst - 1) <= 0.10 ? 'flat within 10 %' : '**not flat within 10 %**';
}
print "\n";

# ---- pgbench
my (%tps, %phase, %kindseen);    # tps{phase}{kind}{clients}{round}
open my $t, '<', "$dir/scale_tps.csv" or die $!;
<$t>;
while (<$t>) {
	chomp; my ($l, $w, $k, $cl, $r, $v) = split /,/;
	$tps{"$l,$w"}{$k}{$cl}{$r} = $v; $phase{"$l,$w"} = [$l, $w]; $kindseen{$k} = 1;
}
my @phases = sort { $phase{$a}[1] <=> $phase{$b}[1] || $phase{$a}[0] <=> $phase{$b}[0] } keys %phase;
my @tkinds = grep { $kindseen{$_} } qw(acquire_release renew renew_hot bare_update);
my %clients; for my $p (@phases) { for my $k (@tkinds) { $clients{$_} = 1 for keys %{ $tps{$p}{$k} || {} } } }
my @clients = sort { $a <=> $b } keys %clients;
my $ref = "$base,0";
# stats of one kind in one phase: median tps, min, max, n, median ratio to bare of the same round
sub st {
	my ($p, $k, $cl) = @_;
	my $h = $tps{$p}{$k}{$cl} or return;
	my @v = values %$h;
	my @r = map { my $b = $tps{$p}{bare_update}{$cl}{$_}; $b ? $h->{$_} / $b : () } keys %$h;
	my @s = sort { $a <=> $b } @v;
	return { med => median(@v), min => $s[0], max => $s[-1], n => scalar @v, bare => median(@r) };
}
my @wphases = sort { $phase{$a}[1] <=> $phase{$b}[1] } grep { $phase{$_}[1] } @phases;
my $wmax = @wphases ? $wphases[-1] : undef;
my $wone = (grep { $phase{$_}[1] == 1 } @wphases)[0];
print "## Throughput against live locks (pgbench, tps, higher is better)\n\n";
print "Columns: median tps (min–max over the rounds); ÷ bare: the median over the rounds of tps ÷ the bare UPDATE's tps in the same round; ÷ ref: median tps ÷ that at $base live locks; ÷ ref, normalised: (÷ bare) ÷ (÷ bare at $base live locks), which takes out the machine's drift between phases.\n\n";
print "| kind | clients | live locks | tps | ÷ bare | ÷ ref | ÷ ref, normalised |\n|---|---:|---:|---:|---:|---:|---:|\n";
my @summary;
for my $k (@tkinds) {
	for my $cl (@clients) {
		my $r = st($ref, $k, $cl);
		my ($low_raw, $low_norm, $at);
		for my $p (grep { !$phase{$_}[1] } @phases) {
			my $s = st($p, $k, $cl) or next;
			my $raw = $r && $r->{med} ? $s->{med} / $r->{med} : undef;
			my $norm = $r && $r->{bare} ? $s->{bare} / $r->{bare} : undef;
			printf "| %s | %s | %s | %s (%s–%s) | %s | %s | %s |\n", $k, $cl, $phase{$p}[0],
				g($s->{med}), g($s->{min}), g($s->{max}), f($s->{bare}), f($raw), f($norm);
			next if $p eq $ref || !defined $raw;
			($low_raw, $low_norm, $at) = ($raw, $norm, $phase{$p}[0]) if !defined $low_raw || $raw < $low_raw;
		}
		next unless defined $low_raw && $k ne 'bare_update';
		push @summary, sprintf "- %s, %s client(s): lowest tps over the live-lock counts %s × that at %s (at %s live locks; %s × normalised by the bare UPDATE)%s",
			$k, $cl, f($low_raw), $base, $at, f($low_norm), $low_raw >= 0.9 ? '' : ' **more than 10 % lower**';
	}
}
print "\n", join("\n", @summary), "\n\n" if @summary;

my @wrows;
if ($wmax) {
	my $W = $phase{$wmax}[1];
	print "## Throughput with waiters on one lock ($base live locks)\n\n";
	print "The waiters queue on the lock 'hot' in fencing_acquire(..., wait); renew_hot renews the 'hot' lease they wait for (every renew wakes the first waiter, who looks and sleeps again; with 2 clients the renewals also queue on the lease's row). Even 1 waiter holds back the xmin horizon while it waits, so no table sheds its dead rows during a waiting phase and tps falls as they pile up: 1 waiter is the reference for $W, both phases from freshly vacuumed tables on the same schedule. Median tps of the rounds; normalised: the ratio of (tps ÷ the bare UPDATE of the same round).\n\n";
	print "| kind | clients | no waiters | 1 waiter | $W waiters | 1 waiter ÷ none | $W ÷ 1 waiter | $W ÷ 1 waiter, normalised |\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
	my @wsum;
	for my $k (@tkinds) {
		for my $cl (@clients) {
			my ($s0, $s1, $sw) = map { $_ ? st($_, $k, $cl) : undef } ($ref, $wone, $wmax);
			next unless $s0 && $sw;
			my $one_none = $s1 && $s0->{med} ? $s1->{med} / $s0->{med} : undef;
			my $w_one = $s1 && $s1->{med} ? $sw->{med} / $s1->{med} : undef;
			my $w_one_n = $s1 && $s1->{bare} ? $sw->{bare} / $s1->{bare} : undef;
			printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $k, $cl, g($s0->{med}), g($s1 && $s1->{med}), g($sw->{med}),
				f($one_none), f($w_one), f($w_one_n);
			push @wrows, [ "$k ${cl}c", $one_none, $w_one, $w_one_n ];
			push @wsum, sprintf "- %s, %s client(s): %s × the tps with 1 waiter (%s × normalised)%s", $k, $cl, f($w_one), f($w_one_n),
				defined $w_one && $w_one < 0.9 ? ' **more than 10 % lower**' : '' if $k ne 'bare_update';
		}
	}
	print "\n", join("\n", @wsum), "\n\n" if @wsum;
}

# gnuplot data: tps ÷ ref per live-lock count (no waiters), one column per kind x clients
my @cols = map { my $k = $_; map { "$k,$_" } @clients } grep { $kindseen{$_} } @kinds;  # the colours of the callgrind panels
open my $td, '>', "$dir/scale_tps.dat" or die $!;
print $td join(' ', 'live', map { my $x = $_; $x =~ s/,(\d+)$/_${1}c/; $x } @cols), "\n";
for my $p (grep { !$phase{$_}[1] } @phases) {
	my @row = ($phase{$p}[0]);
	for my $kc (@cols) {
		my ($k, $cl) = split /,/, $kc;
		my ($s, $r) = (st($p, $k, $cl), st($ref, $k, $cl));
		push @row, $s && $r && $r->{med} ? f($s->{med} / $r->{med}, 4) : 'NaN';
	}
	print $td join(' ', @row), "\n";
}
close $td;
open my $wd, '>', "$dir/scale_waiters.dat" or die $!;
print $wd "# label one_over_none many_over_one many_over_one_normalised\n";
print $wd join(' ', "\"$_->[0]\"", map { defined $_ ? f($_, 4) : 'NaN' } @$_[1 .. 3]), "\n" for @wrows;
close $wd;
open my $gc, '>', "$dir/scale_cols.gp" or die $!;
printf $gc "kinds = %d\ntcols = %d\n", scalar @kinds, 1 + scalar @cols;
close $gc;
PERL
  if [[ -s $out/scale_notes.txt ]]; then
    echo
    echo "## Notes from the run"
    echo
    sed 's/^/- /' "$out/scale_notes.txt"
  fi
  echo
  echo '![lease cost against live locks](scale.png)'
} >"$out/scale.md"
gnuplot -e "dir='$out'; title='pg_fencing: lease cost against live locks ($(date -u +%Y-%m-%dT%H%MZ)$( ((quick)) && echo ', QUICK smoke run'))'; waiters='$waiters'; base='$base_live'" \
  "$here/lease_scale.gp"
[[ -s $out/scale.png ]] || { echo "lease_scale: no chart" >&2; exit 1; }
cat "$out/scale.md"
log "done in $(($(date +%s) - t_start)) s: $out/scale.md, $out/scale.png"
