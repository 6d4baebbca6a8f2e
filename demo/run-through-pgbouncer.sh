#!/bin/bash
# Runs the demo with every connection of it and of its candidates through a
# real PgBouncer in transaction pooling (Debian's /usr/sbin/pgbouncer), on a
# free loopback port, with PG_FENCING_POOL_SIZE server connections for
# everyone (5 by default): the fleet's set-up (issue 43), where a waiting
# candidate must hold no server connection.  The
# database is the one the PG* environment names, e.g. a throwaway cluster:
#
#   source scripts/lib.sh
#   with_throwaway_cluster bash demo/run-through-pgbouncer.sh build/demo/pg_fencing_demo \
#     --scenario leader --sessions
#
# Arguments after the demo's path go to the demo.  Exit status: the demo's,
# or 2 when PgBouncer did not start.
set -euo pipefail

demo=${1:?"usage: $0 PATH/TO/pg_fencing_demo [DEMO OPTION]..."}
shift
pgbouncer=/usr/sbin/pgbouncer
[[ -x $pgbouncer ]] || { echo "$0: PgBouncer is not installed ($pgbouncer)" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

dir=$(mktemp -d /tmp/pg_fencing_bouncer.XXXXXX)
port=$(free_port)
bouncer_pid=
stop_bouncer() {
  if [[ -n $bouncer_pid ]]; then
    kill "$bouncer_pid" 2>/dev/null || true
    wait "$bouncer_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop_bouncer EXIT

# The server as the PG* variables name it; PgBouncer logs in with them.
server="host=${PGHOST:-localhost} port=${PGPORT:-5432} dbname=${PGDATABASE:-postgres} user=${PGUSER:-postgres}"
[[ -n ${PGPASSWORD:-} ]] && server+=" password=$PGPASSWORD"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
fencing = $server

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = ${PG_FENCING_POOL_SIZE:-5}
max_client_conn = 100
server_check_delay = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
run_as=()
if ((EUID == 0)); then  # PgBouncer refuses to run as root
  chown -R postgres: "$dir"
  run_as=(-u postgres)
fi
"$pgbouncer" "${run_as[@]}" "$dir/pgbouncer.ini" 2>"$dir/stderr" &
bouncer_pid=$!
pooled="host=127.0.0.1 port=$port dbname=fencing user=${PGUSER:-postgres}"
for _ in $(seq 100); do
  psql -X -q -d "$pooled" -c 'SELECT 1' >/dev/null 2>&1 && break
  kill -0 "$bouncer_pid" 2>/dev/null || { cat "$dir/stderr" >&2; exit 2; }
  sleep 0.1
done
psql -X -q -d "$pooled" -c 'SELECT 1' >/dev/null || { cat "$dir/stderr" >&2; exit 2; }

printf '==> through PgBouncer (transaction pooling, a pool of %s): %s\n' "${PG_FENCING_POOL_SIZE:-5}" "$pooled"
status=0
"$demo" --db "$pooled" "$@" || status=$?
exit "$status"
