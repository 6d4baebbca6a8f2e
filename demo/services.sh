# Throwaway Redis and etcd servers on loopback, for pg_fencing_demo --lock
# redis|etcd (the demo itself never starts a service).  Sourced, not run:
#
#   source demo/services.sh
#   trap stop_services EXIT
#   start_redis     # sets REDIS_ADDRESS (127.0.0.1:PORT)
#   start_etcd      # sets ETCD_URL (http://127.0.0.1:PORT)
#   pg_fencing_demo --scenario pause --lock redis --redis "$REDIS_ADDRESS"
#   stop_services   # stops whatever was started, removes the temporary directories
#
# Call the start functions directly, not in $(...): the servers are children
# of the calling shell, they get SIGTERM if it dies (setpriv --pdeathsig),
# and the functions report through variables.
#
# Each server gets ports of its own on 127.0.0.1, a temporary directory and
# nothing persistent: Redis with --save '' --appendonly no, etcd with its data
# directory in the temporary directory.  Neither refuses to run as root
# (checked with Debian 12's Redis 7.0.15 and etcd 3.4.23), but as root they
# run as the users their packages create, redis and etcd, as PostgreSQL runs
# as postgres.  Needs the Debian packages redis-server and etcd-server, and
# perl (for picking ports).
#
# The functions return non-zero, with the server's log on stderr, when a
# server does not come up.

SERVICES_READY_TIMEOUT=${SERVICES_READY_TIMEOUT:-15}  # seconds per server

REDIS_ADDRESS='' REDIS_PID='' REDIS_DIR=''
ETCD_URL='' ETCD_PID='' ETCD_DIR=''

_services_log() { printf '==> %s\n' "$*" >&2; }

# A port the kernel considers free on 127.0.0.1 right now.  Another process
# can take it before the server binds it; the start functions then retry.
_services_free_port() {
  perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0,
                                  Proto => "tcp", Listen => 1) or exit 1;
    print $s->sockport, "\n";'
}

# A temporary directory the server's user owns.
_services_make_dir() {  # USER PREFIX
  local dir
  dir=$(mktemp -d "/tmp/$2.XXXXXX") || return 1
  if ((EUID == 0)); then chown "$1:" "$dir" || return 1; fi
  echo "$dir"
}

# Runs a server in the background as USER (when root and USER exists) and
# sets _SERVICES_PID.  Output goes to LOG.
_services_spawn() {  # USER LOG COMMAND...
  local user=$1 log=$2
  shift 2
  local as_user=()
  if ((EUID == 0)) && id -u "$user" >/dev/null 2>&1; then
    as_user=(--reuid="$user" --regid="$user" --init-groups)
  fi
  # From /: the server's user may not be able to enter the caller's working
  # directory (a clone under /root is mode 700).  exec keeps $! the server's
  # PID and this shell its parent, for --pdeathsig.
  (cd / && exec setpriv --pdeathsig TERM "${as_user[@]}" -- "$@") >"$log" 2>&1 </dev/null &
  _SERVICES_PID=$!
}

# Waits until PROBE succeeds; fails if the process PID exits first or the
# timeout passes.
_services_await() {  # PID PROBE...
  local pid=$1
  shift
  local deadline=$((SECONDS + SERVICES_READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    kill -0 "$pid" 2>/dev/null || return 1
    "$@" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Stops PID (TERM, then KILL after 10 s) and reaps it.
_services_stop_pid() {  # PID
  local pid=$1 i
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# An HTTP GET over bash's /dev/tcp, so that no HTTP client is needed.  In a
# shell of its own, which the timeout bounds and whose descriptor dies with it.
_services_http_get() {  # PORT PATH
  # shellcheck disable=SC2016  # $1 and $2 are the inner shell's
  timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
    cat <&3' _ "$1" "$2"
}

_redis_ready() {  # PORT
  [[ $(redis-cli -h 127.0.0.1 -p "$1" ping) == PONG ]]
}

_etcd_ready() {  # CLIENT_PORT
  # Healthy once it has a leader: a single member elects itself after one
  # election timeout.
  [[ $(_services_http_get "$1" /health) == *'"health":"true"'* ]]
}

start_redis() {
  local attempt port dir
  for attempt in 1 2 3; do
    port=$(_services_free_port) || return 1
    dir=$(_services_make_dir redis pg_fencing_redis) || return 1
    _services_spawn redis "$dir/redis.log" redis-server \
      --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" --daemonize no
    if _services_await "$_SERVICES_PID" _redis_ready "$port"; then
      REDIS_ADDRESS=127.0.0.1:$port REDIS_PID=$_SERVICES_PID REDIS_DIR=$dir
      _services_log "Redis on $REDIS_ADDRESS (pid $REDIS_PID, $dir)"
      return 0
    fi
    _services_log "Redis did not come up on port $port (attempt $attempt):"
    cat "$dir/redis.log" >&2
    _services_stop_pid "$_SERVICES_PID"
    rm -rf "$dir"
  done
  return 1
}

start_etcd() {
  local attempt client_port peer_port dir
  for attempt in 1 2 3; do
    client_port=$(_services_free_port) || return 1
    peer_port=$(_services_free_port) || return 1
    [[ $peer_port != "$client_port" ]] || continue
    dir=$(_services_make_dir etcd pg_fencing_etcd) || return 1
    # --heartbeat-interval and --election-timeout (ms) well below their
    # defaults (100, 1000): etcd raises any lease TTL to 1.5 x the election
    # timeout, rounded up to whole seconds, which would turn the demo's 1 s
    # lease into 2 s.  One member on loopback needs no more.
    _services_spawn etcd "$dir/etcd.log" etcd \
      --name pg-fencing-demo --data-dir "$dir/data" \
      --listen-client-urls "http://127.0.0.1:$client_port" \
      --advertise-client-urls "http://127.0.0.1:$client_port" \
      --listen-peer-urls "http://127.0.0.1:$peer_port" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
      --initial-cluster "pg-fencing-demo=http://127.0.0.1:$peer_port" \
      --heartbeat-interval 10 --election-timeout 100
    if _services_await "$_SERVICES_PID" _etcd_ready "$client_port"; then
      ETCD_URL=http://127.0.0.1:$client_port ETCD_PID=$_SERVICES_PID ETCD_DIR=$dir
      _services_log "etcd on $ETCD_URL (pid $ETCD_PID, $dir)"
      return 0
    fi
    _services_log "etcd did not come up on ports $client_port/$peer_port (attempt $attempt):"
    tail -n 20 "$dir/etcd.log" >&2
    _services_stop_pid "$_SERVICES_PID"
    rm -rf "$dir"
  done
  return 1
}

stop_redis() {
  _services_stop_pid "$REDIS_PID"
  [[ -z $REDIS_DIR ]] || rm -rf "$REDIS_DIR"
  REDIS_ADDRESS='' REDIS_PID='' REDIS_DIR=''
}

stop_etcd() {
  _services_stop_pid "$ETCD_PID"
  [[ -z $ETCD_DIR ]] || rm -rf "$ETCD_DIR"
  ETCD_URL='' ETCD_PID='' ETCD_DIR=''
}

stop_services() {
  stop_redis
  stop_etcd
}
