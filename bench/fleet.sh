#!/bin/bash
# A fleet waiting for one election (issue 43): pg_fencing's line through a
# transaction-pooling PgBouncer against etcd's own election, with the same
# number of candidates, on this machine, in the same run.  For each count N:
#   pg_fencing: N candidates in min(20, N) client processes (Go, pgx v4, no
#     named prepared statements), each a session (ttl 3 s) with a place in
#     the line (fencing_line_join); a process renews its sessions in one
#     statement (SELECT fencing_session_renew(s) FROM unnest($1::bigint[]) s)
#     every ttl/3 and polls its places in one statement (fencing_line_poll)
#     every 0.5 s, on one connection through PgBouncer 1.18 (transaction
#     pooling, default_pool_size=20, loopback);
#   etcd 3.4: N candidates in as many processes, each a session of 3 s
#     (concurrency.NewSession, one shared client per process) campaigning
#     with concurrency.Election.
# The leader holds the lock before the fleet joins and renews every ttl/3 on
# a client connection of its own, each renewal timed (pg: fencing_session_
# renew through PgBouncer; etcd: KeepAliveOnce of its session's lease), for
# WINDOW with no fleet (the baseline) and WINDOW with the fleet waiting; then
# HANDOVERS hand-overs, each from the resign's return (pg: fencing_line_leave;
# etcd: Resign) to the next leader knowing (pg: its poll answers granted;
# etcd: its Campaign returns), a new leader resigning 200-700 ms (at random)
# after it knew, each pg process polling at a phase of its own;
# for pg, once through the pool alone and once with a direct connection per
# process LISTENing on fencing_line (the process whose place a notification
# names polls that place at once, as the clients do).  The server's client backends, PSS
# (smaps_rollup: postgres and PgBouncer; etcd), CPU and WAL (pg_current_wal_
# lsn; etcd_disk_wal_write_bytes_total) are read over each window.  Last,
# unless SESSIONS=0: SESSIONS sessions holding 10 leases each, renewed every
# ttl/3 in one statement per process through PgBouncer, for WINDOW.
# bench/fleet/fleet.go is the driver; its header says what each phase does.
#
# Usage (as root, Debian 12; installs golang-etcd-server-dev if missing):
#   bench/fleet.sh OUT_DIR [COUNTS]      # COUNTS: "100 1000" by default
# Environment: WINDOW (60s), HANDOVERS (30), SESSIONS (0: skipped; the
#   sessions are opened with a long ttl for the fill, then renewed to 3 s),
#   QUICK=1 (a smoke run: 50 candidates, 5 s windows, 5 hand-overs, 200
#   sessions).  Writes OUT_DIR/fleet.csv ("system,n,phase,metric,value,unit"),
#   every latency in OUT_DIR/fleet_samples.csv ("system,n,phase,metric,i,ms"),
#   and OUT_DIR/table.txt, and prints the table.  The cluster: a throwaway
#   one (pg_virtualenv), fsync on, the library preloaded, Debian's defaults
#   otherwise; etcd: a single member in a temporary directory on loopback.
#   About (2 x WINDOW + 30 s) per system and count, plus the sessions.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ ${1:-} == --inside ]]; then
  # In pg_virtualenv: PG* name the throwaway cluster, run as postgres.
  shift
  bin=$1 out=$2 counts=$3 etcd_url=$4 etcd_pid=$5
  work=$(mktemp -d /tmp/pg_fencing_fleet_bouncer.XXXXXX)
  chown postgres: "$work"
  bport=$(perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die; print $s->sockport')
  cat >"$work/pgbouncer.ini" <<INI
[databases]
fleet = host=127.0.0.1 port=$PGPORT dbname=postgres user=$PGUSER password=$PGPASSWORD

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 20
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
; idle server connections of a previous count close before the next baseline
server_idle_timeout = 10
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
INI
  chown postgres: "$work/pgbouncer.ini"
  runuser -u postgres -- /usr/sbin/pgbouncer -d "$work/pgbouncer.ini"
  for _ in $(seq 50); do [[ -s $work/pgbouncer.pid ]] && break; sleep 0.1; done
  bpid=$(cat "$work/pgbouncer.pid")
  stop_bouncer() { kill "$bpid" 2>/dev/null || true; rm -rf "$work"; }
  trap stop_bouncer EXIT
  psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pg_fencing" \
    -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'" -At >"$out/extversion"
  pool="host=127.0.0.1 port=$bport dbname=fleet user=$PGUSER password=unused sslmode=disable"
  direct="host=127.0.0.1 port=$PGPORT dbname=postgres user=$PGUSER password=$PGPASSWORD sslmode=disable"
  common=(-window "$WINDOW" -handovers "$HANDOVERS" -pool "$pool" -direct "$direct"
    -pgbouncer-pid "$bpid" -etcd "$etcd_url" -etcd-metrics "$etcd_url/metrics" -etcd-pid "$etcd_pid"
    -out "$out/fleet.csv")
  for n in $counts; do
    "$bin" measure -system pg -n "$n" -lock "fleet-$n" "${common[@]}" >/dev/null
    "$bin" measure -system etcd -n "$n" -lock "/fleet-$n" "${common[@]}" >/dev/null
  done
  if ((SESSIONS > 0)); then
    "$bin" measure -system pgsessions -n "$SESSIONS" -leases 10 "${common[@]}" >/dev/null
  fi
  exit 0
fi

source "$here/../scripts/lib.sh"
out=$(mkdir -p "${1:?usage: bench/fleet.sh OUT_DIR [COUNTS]}" && cd "$1" && pwd)
if [[ ${QUICK:-0} == 1 ]]; then
  counts=${2:-50} WINDOW=${WINDOW:-5s} HANDOVERS=${HANDOVERS:-5} SESSIONS=${SESSIONS:-200}
else
  counts=${2:-100 1000} WINDOW=${WINDOW:-60s} HANDOVERS=${HANDOVERS:-30} SESSIONS=${SESSIONS:-0}
fi
export WINDOW HANDOVERS SESSIONS

missing=()
for p in pgbouncer etcd-server golang-go golang-github-jackc-pgx-v4-dev golang-etcd-server-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

tmp=$(mktemp -d /tmp/pg_fencing_fleet.XXXXXX)
etcd_pid=
cleanup() {
  # etcd's own end (143, its SIGTERM) is not the script's: under set -e a
  # failing wait here was the exit status of every run.
  if [[ -n $etcd_pid ]] && kill "$etcd_pid" 2>/dev/null; then wait "$etcd_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The driver, built offline in GOPATH mode from Debian's sources (as
# clients/go/run-tests.sh builds the Go client); FLEET_GOCACHE keeps the
# compiled packages between runs.
echo "building bench/fleet/fleet.go" >&2
mkdir -p "$tmp/gopath"
GO111MODULE=off GOPATH="$tmp/gopath:/usr/share/gocode" GOFLAGS=-p=2 \
  GOCACHE="${FLEET_GOCACHE:-$tmp/gocache}" go build -o "$tmp/fleet" "$here/fleet/fleet.go"
chmod 755 "$tmp" "$tmp/fleet"

# etcd: one member, loopback, its data in the temporary directory.
read -r cport pport < <(perl -MIO::Socket::INET -e 'my @s = map { IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die } 1..2; print join(" ", map { $_->sockport } @s), "\n"')
etcd_url=http://127.0.0.1:$cport
/usr/bin/etcd --name fleet --data-dir "$tmp/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "fleet=http://127.0.0.1:$pport" --initial-cluster-state new \
  --log-level warn --logger zap >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do curl -sf "$etcd_url/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$etcd_url/health" >/dev/null || { echo "etcd did not start:" >&2; cat "$tmp/etcd.log" >&2; exit 1; }

echo "system,n,phase,metric,value,unit" >"$out/fleet.csv"
echo "system,n,phase,metric,i,ms" >"$out/fleet_samples.csv"
{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB, $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -r)"
  echo "PostgreSQL $PG_MAJOR (fsync on, pg_fencing preloaded), $(/usr/sbin/pgbouncer --version | head -1) (transaction pooling, pool 20), etcd $(/usr/bin/etcd --version | awk '/^etcd Version/ {print $3}')"
  echo "counts: $counts; windows $WINDOW; $HANDOVERS hand-overs of each kind; sessions: $SESSIONS"
} >"$out/settings.txt"
with_throwaway_cluster -o fsync=on -o shared_preload_libraries=pg_fencing -o max_connections=200 \
  bash "$0" --inside "$tmp/fleet" "$out" "$counts" "$etcd_url" "$etcd_pid"
echo "pg_fencing $(cat "$out/extversion")" >>"$out/settings.txt"
{ cat "$out/settings.txt"; "$tmp/fleet" table -out "$out/fleet.csv"; } | tee "$out/table.txt"
