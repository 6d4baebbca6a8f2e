# Shared steps of scripts/demo.sh and scripts/test.sh.  Sourced, not run.
#
# Everything the project needs is installed here, from Debian's packages, so
# that a fresh Debian 12 machine (as root) needs nothing else.

PROJECT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_MAJOR=${PG_MAJOR:-15}  # the roots of scripts/test-majors.sh set their own

# Debian packages, one concern a line.
PACKAGES=(
  postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-common  # server, PGXS, pg_virtualenv
  g++ make cmake pkg-config                                               # build
  googletest libgtest-dev                                                 # unit tests
  libpqxx-dev libpq-dev                                                   # client library and demo
  libipc-run-perl                                                         # PostgreSQL::Test::Cluster TAP tests
  pgbouncer                                                               # transaction-pooling tests
  gnuplot-nox valgrind                                                    # benchmark and demo charts, callgrind
  prometheus-postgres-exporter curl                                       # test/exporter: the real exporter, scrapes
  clang-14 libclang-rt-14-dev sqlsmith                                    # libFuzzer, random SQL
  dpkg-dev build-essential debhelper postgresql-server-dev-all            # Debian package (test/packaging/deb.sh)
  libhiredis-dev libcurl4-openssl-dev nlohmann-json3-dev                  # demo: Redis and etcd clients (--lock redis|etcd)
  redis-server etcd-server                                                # demo/run-with-services.sh: throwaway lock services
  python3 python3-psycopg2                                                # test/ha/workload.py, bench/notify_latency.py
  python3-psycopg python3-pytest python3-venv python3-pip python3-setuptools  # clients/python: psycopg 3, pytest, an offline install
  patroni                                                                 # test/ha/run.sh: HA under Patroni (docs/ha.md)
  default-jdk-headless libpostgresql-jdbc-java junit5                    # clients/java: javac, JDBC, JUnit 5's console launcher
  golang-go golang-github-jackc-pgx-v4-dev                                # clients/go: Go and pgx v4, offline
)
# Node.js and npm for examples/node: the machine's own if it has them (some
# machines have NodeSource's nodejs, which bundles npm and conflicts with
# Debian's npm package), else Debian's (Node 18, which the example supports).
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

log() { printf '\n==> %s\n' "$*"; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    # Debian's exporter package starts a service that serves metrics on port
    # 9187 of every interface where systemd runs; the tests start their own
    # on loopback.  Stopped only when we installed it.
    if [[ " ${missing[*]} " == *" prometheus-postgres-exporter "* ]] && command -v systemctl >/dev/null &&
      systemctl is-enabled prometheus-postgres-exporter >/dev/null 2>&1; then
      systemctl disable --now prometheus-postgres-exporter >/dev/null 2>&1 || true
    fi
  fi
  # Debian's postgresql package creates a "main" cluster; we never use it.
  # Each run makes its own throwaway cluster on a port of its own.
}

build_and_install() {
  log "building and installing the extension (PGXS)"
  make -C "$PROJECT_ROOT" -j2 >/dev/null
  make -C "$PROJECT_ROOT" install >/dev/null
  log "building the unit tests, client library and demo (CMake)"
  cmake -S "$PROJECT_ROOT" -B "$PROJECT_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$PROJECT_ROOT/build" -j2 >/dev/null
}

# PostgreSQL::Test::Cluster runs initdb and the server as the calling user,
# which must not be root, and writes into the tree: the TAP tests run as
# "postgres" in a copy of the tree that it owns.  Prints the copy's path.
make_test_copy() {
  local dir
  dir=$(mktemp -d /tmp/pg_fencing.XXXXXX)
  cp -a "$PROJECT_ROOT" "$dir/src"
  chown -R postgres: "$dir"
  echo "$dir/src"
}

# Runs a command as postgres, from /: postgres cannot enter a clone under
# /root (mode 700), and PostgreSQL's programs complain ("could not change
# directory to ...") when they cannot return to their working directory.
# Hence absolute paths only in the command.
as_postgres() { (cd / && exec runuser -u postgres -- "$@"); }

# A free TCP port on loopback with no PostgreSQL socket file, from a random
# start in 54320-59999, so that runs started at the same moment rarely try
# the same one.
free_port() {
  perl -MIO::Socket::INET -e '
    my $start = 54320 + int(rand(5680));
    for my $port ($start .. 59999, 54320 .. $start - 1) {
      next if -e "/var/run/postgresql/.s.PGSQL.$port";
      my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port,
                                    Proto => "tcp", ReuseAddr => 1, Listen => 1) or next;
      close $s; print "$port\n"; exit 0;
    }
    exit 1;'
}

# Runs a command (as root) against a throwaway cluster: pg_virtualenv -t
# creates it in a temporary directory, runs the server as postgres, sets
# PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE, and drops it all when
# the command ends.  The port is our own: pg_virtualenv alone picks the
# first free port from 5432, which two runs started at once can both pick.
with_throwaway_cluster() {
  pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" "$@"
}
