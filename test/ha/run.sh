#!/bin/bash
# High availability under Patroni: fencing tokens across a failover and a
# switchover.  See docs/ha.md.  As root, from anywhere:
#
#   bash test/ha/run.sh
#
# On loopback, with ports the kernel picks and a temporary directory: one etcd
# (demo/services.sh's start_etcd), two PostgreSQL 15 nodes under Patroni with
# synchronous_mode: true, each Patroni run as postgres.  Writers
# (test/ha/workload.py) loop against the current leader; the test kill -9s the
# leader's postmaster, waits for the other node to take over and the old one to
# rejoin as the synchronous standby, then runs a patronictl switchover back.
# Finally it checks, from the writers' log and the final leader's tables: no
# token handed out twice, no stale write accepted, no acknowledged write lost.
# Exits non-zero on any violation or if a step does not happen in time.
#
# Environment: HA_WRITERS (4), HA_PHASE_SECONDS (6: workload time before,
# between and after the faults), HA_KEEP=1 keeps the temporary directory.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
WORKLOAD=$HERE/workload.py
WRITERS=${HA_WRITERS:-4}
PHASE=${HA_PHASE_SECONDS:-6}
PG_BIN=/usr/lib/postgresql/15/bin
START=$SECONDS

log() { printf '==> [%3d s] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

((EUID == 0)) || die "run as root (Patroni and PostgreSQL run as postgres)"
# Everything below uses absolute paths and runs from /: Patroni, etcd and
# pg_ctl inherit the working directory, and their users cannot enter a clone
# under /root (mode 700).  Patroni's multiprocessing children chdir() into it
# and die, so the leader never leaves "bootstrap in progress".
cd /

# --- packages and the extension -------------------------------------------
missing=()
for p in patroni etcd-server python3-psycopg2 postgresql-15; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's patroni package enables patroni.service (for /etc/patroni/config.yml);
# we never use it and never start it.
[[ -e /usr/share/postgresql/15/extension/pg_fencing.control ]] ||
  make -C "$ROOT" install >/dev/null

# shellcheck source=../../demo/services.sh
source "$ROOT/demo/services.sh"

# --- state and cleanup ------------------------------------------------------
DIR=$(mktemp -d /tmp/pg_fencing_ha.XXXXXX)
chmod 755 "$DIR"
PATRONI_PIDS=()
WORKLOAD_PID=''
export HA_PASSWORD="ha-$RANDOM$RANDOM"
NAMES=(node1 node2)

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  touch "$DIR/stop"
  if [[ -n $WORKLOAD_PID ]]; then
    timeout 10 tail --pid="$WORKLOAD_PID" -f /dev/null || kill -KILL "$WORKLOAD_PID"
    wait "$WORKLOAD_PID" 2>/dev/null
  fi
  # Patroni stops its PostgreSQL on TERM (fast shutdown).
  for pid in "${PATRONI_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PATRONI_PIDS[@]}"; do
    timeout 20 tail --pid="$pid" -f /dev/null || kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # A postmaster left behind (Patroni killed): immediate shutdown.
  for n in "${NAMES[@]}"; do
    [[ -f $DIR/$n/data/postmaster.pid ]] &&
      runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$DIR/$n/data" stop -m immediate >/dev/null 2>&1
  done
  stop_etcd
  if ((rc != 0)); then
    for n in "${NAMES[@]}"; do
      echo "--- last lines of $n's Patroni log:" >&2
      tail -n 25 "$DIR/$n/patroni.log" >&2 2>/dev/null
    done
  fi
  if [[ ${HA_KEEP:-0} == 1 ]]; then log "kept $DIR"; else rm -rf "$DIR"; fi
  log "done (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits up to $1 seconds for the command to succeed.
wait_for() {
  local secs=$1 deadline
  shift
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

now() { date +%s.%N; }

# --- etcd -------------------------------------------------------------------
start_etcd || die "etcd did not start"
ETCD_HOSTPORT=${ETCD_URL#http://}

# --- Patroni configs --------------------------------------------------------
API_PORTS=()
PG_PORTS=()
for i in 0 1; do
  API_PORTS+=("$(_services_free_port)")
  PG_PORTS+=("$(_services_free_port)")
done
[[ $(printf '%s\n' "${API_PORTS[@]}" "${PG_PORTS[@]}" | sort -u | wc -l) == 4 ]] ||
  die "port collision, try again"

for i in 0 1; do
  n=${NAMES[$i]}
  mkdir -p "$DIR/$n"
  cat >"$DIR/$n/patroni.yml" <<EOF
scope: pg-fencing-ha
namespace: /pg_fencing_ha/
name: $n

log:
  level: INFO

restapi:
  listen: 127.0.0.1:${API_PORTS[$i]}
  connect_address: 127.0.0.1:${API_PORTS[$i]}

etcd3:
  hosts: $ETCD_HOSTPORT

bootstrap:
  dcs:
    # Small timings for a test on loopback (defaults: 30, 10, 10).
    # Patroni needs loop_wait + 2 * retry_timeout <= ttl.
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    # A crashed primary: fail over to the synchronous standby at once instead
    # of trying crash recovery in place for up to 300 s.
    primary_start_timeout: 0
    # Only the synchronous standby may be promoted (whatever its lag), and a
    # primary never acknowledges a commit -- or a fencing_grant() that wrote
    # sequence WAL -- before that standby has it.
    synchronous_mode: true
    # false: with the standby gone, the primary carries on alone (and no
    # failover is possible until a standby is synchronous again).  See docs/ha.md.
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        synchronous_commit: 'on'
        wal_log_hints: 'on'
        max_connections: 50
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 128MB
  initdb:
    - encoding: UTF8
    - data-checksums

postgresql:
  listen: 127.0.0.1:${PG_PORTS[$i]}
  connect_address: 127.0.0.1:${PG_PORTS[$i]}
  data_dir: $DIR/$n/data
  bin_dir: $PG_BIN
  pgpass: $DIR/$n/pgpass
  authentication:
    superuser:
      username: postgres
      password: $HA_PASSWORD
    replication:
      username: replicator
      password: $HA_PASSWORD
  parameters:
    unix_socket_directories: '$DIR/$n'
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 scram-sha-256
    - host replication replicator 127.0.0.1/32 scram-sha-256

watchdog:
  mode: 'off'
EOF
  chown -R postgres: "$DIR/$n"
  chmod 700 "$DIR/$n"
done

# --- Patroni daemons, as postgres, dying with this script ------------------
for i in 0 1; do
  n=${NAMES[$i]}
  setpriv --pdeathsig TERM --reuid=postgres --regid=postgres --init-groups -- \
    env HOME="$DIR/$n" patroni "$DIR/$n/patroni.yml" >"$DIR/$n/patroni.log" 2>&1 </dev/null &
  PATRONI_PIDS+=($!)
done
log "Patroni: ${NAMES[0]} (REST ${API_PORTS[0]}, PostgreSQL ${PG_PORTS[0]}), ${NAMES[1]} (REST ${API_PORTS[1]}, PostgreSQL ${PG_PORTS[1]}); $DIR"

leader() { $PY "$WORKLOAD" leader "${API_PORTS[@]}"; }
sync_standby() { $PY "$WORKLOAD" sync "${API_PORTS[@]}"; }
leader_is() { [[ $(leader | cut -d' ' -f1) == "$1" ]]; }
leader_is_not() { local l; l=$(leader | cut -d' ' -f1) && [[ -n $l && $l != "$1" ]]; }
sync_is() { [[ $(sync_standby) == "$1" ]]; }
patronictl() { command patronictl -c "$DIR/${NAMES[0]}/patroni.yml" "$@"; }

wait_for 60 leader || die "no leader after 60 s"
read -r LEADER LHOST LPORT < <(leader)
OTHER=${NAMES[0]}; [[ $LEADER == "${NAMES[0]}" ]] && OTHER=${NAMES[1]}
log "leader: $LEADER ($LHOST:$LPORT); waiting for $OTHER to be the synchronous standby"
wait_for 60 sync_is "$OTHER" || die "$OTHER never became the synchronous standby"

PGPASSWORD=$HA_PASSWORD psql -X -q -v ON_ERROR_STOP=1 -h "$LHOST" -p "$LPORT" -U postgres -d postgres <<'SQL'
CREATE EXTENSION pg_fencing;
CREATE TABLE ha_resource (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO ha_resource VALUES (1, NULL, 'initial');
SELECT fencing_protect('ha_resource');
CREATE TABLE ha_history (seq bigserial PRIMARY KEY, token fencing_token NOT NULL,
                         writer int NOT NULL, node text NOT NULL, at timestamptz DEFAULT clock_timestamp());
SQL
patronictl list >&2

# --- workload ----------------------------------------------------------------
EVENTS=$DIR/events.jsonl
: >"$EVENTS"
$PY "$WORKLOAD" run "$DIR/writes.jsonl" "$DIR/stop" "$WRITERS" "${API_PORTS[@]}" &
WORKLOAD_PID=$!
log "workload: $WRITERS writers"
sleep "$PHASE"

# --- fault 1: kill -9 of the leader's postmaster -----------------------------
read -r OLD _ < <(leader)
NEW=${NAMES[0]}; [[ $OLD == "${NAMES[0]}" ]] && NEW=${NAMES[1]}
PM_PID=$(head -n 1 "$DIR/$OLD/data/postmaster.pid")
log "kill -9 of $OLD's postmaster (pid $PM_PID)"
t0=$(now)
kill -KILL "$PM_PID"
wait_for 60 leader_is "$NEW" || die "$NEW did not take over within 60 s"
t1=$(now)
secs=$($PY -c "print(round($t1 - $t0, 2))")
printf '{"ev": "kill", "t": %s, "old": "%s", "new": "%s", "secs": %s}\n' "$t0" "$OLD" "$NEW" "$secs" >>"$EVENTS"
log "$NEW is the leader after $secs s; waiting for $OLD to rejoin as synchronous standby"
wait_for 90 sync_is "$OLD" || die "$OLD did not rejoin as synchronous standby within 90 s"
t2=$(now)
rejoin=$($PY -c "print(round($t2 - $t1, 2))")
log "$OLD is the synchronous standby again ($rejoin s later)"
if grep -q 'running pg_rewind' "$DIR/$OLD/patroni.log"; then
  log "$OLD was rewound (pg_rewind) before rejoining"
else
  log "$OLD needed no pg_rewind (its WAL had not diverged from $NEW's)"
fi
sleep "$PHASE"

# --- fault 2: switchover back ---------------------------------------------
OLD2=$NEW NEW2=$OLD
log "patronictl switchover --leader $OLD2 --candidate $NEW2 --force"
t0=$(now)
patronictl switchover --leader "$OLD2" --candidate "$NEW2" --force >&2 ||
  die "switchover failed"
wait_for 60 leader_is "$NEW2" || die "$NEW2 did not take over within 60 s"
t1=$(now)
secs=$($PY -c "print(round($t1 - $t0, 2))")
printf '{"ev": "switchover", "t": %s, "old": "%s", "new": "%s", "secs": %s}\n' "$t0" "$OLD2" "$NEW2" "$secs" >>"$EVENTS"
log "$NEW2 is the leader after $secs s"
wait_for 60 sync_is "$OLD2" || log "warning: $OLD2 not yet the synchronous standby"
sleep "$PHASE"

# --- checks ---------------------------------------------------------------
touch "$DIR/stop"
wait "$WORKLOAD_PID" || die "workload failed"
WORKLOAD_PID=''
patronictl list >&2
log "checks"
echo "failovers: 1 (kill -9 of the postmaster), switchovers: 1; $OLD rejoined as synchronous standby in $rejoin s"
$PY "$WORKLOAD" check "$DIR/writes.jsonl" "$EVENTS" "${API_PORTS[@]}"
log "runtime $((SECONDS - START)) s"
