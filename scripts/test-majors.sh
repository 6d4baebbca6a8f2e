#!/bin/bash
# The suites that depend on the PostgreSQL major, on the majors this machine
# does not have: for each, a throwaway Debian root (debootstrap) with that
# major from Debian's packages, the tree copied in, built and tested there.
#
#   bash scripts/test-majors.sh            # every major in MAJORS below
#   PG_MAJORS="17" bash scripts/test-majors.sh
#
# As root.  Per major, inside its root: the extension built with -Werror
# (PGXS, with its LLVM bitcode), the client library, demo, stress harness and
# unit tests (CMake, against that release's libpqxx), pg_regress and the
# isolation specs, the TAP tests (test/t), the Debian package
# (test/packaging/deb.sh: pg_buildext builds it for the root's major, with
# pg_regress and isolation at build time, then installs and checks it), a
# dump of a PostgreSQL 15 database with every kind of guard restored into the
# major (test/majors/dump-restore.sh; the dump is made on this machine's 15),
# in the roots of majors with an older one to upgrade from (UPGRADE_FROM),
# pg_upgrade of a database with every kind of guard from that older major
# (test/majors/pg-upgrade.sh), and a short stress run with its history
# checker.  Ends with one line per major and "N passed, N failed" (majors);
# exits non-zero if any failed.
#
# Prepared roots are cached under $CACHE/<suite> (debootstrap plus the
# packages), and made again when missing or when the package list or mirror
# changes; REFRESH=1 remakes them.  Each run works in an overlay on top of the
# cached root, so nothing it installs or builds stays.  The mirror is the one
# this machine's apt already uses for Debian.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PROJECT_ROOT"

# Major -> the Debian suite that ships it.  16 is packaged by no Debian
# release, so it cannot be tested here; nothing in the code assumes it away.
declare -A SUITE_OF=([17]=trixie [18]=sid)
# Major -> the older major its root also installs, for the pg-upgrade step.
# sid no longer carries postgresql-17 (apt-cache policy in the root knows no
# such package), so it comes from the suite that ships it, SUITE_OF[17]:
# that suite is added to the root's apt sources pinned at 100, below the
# root's own 500, so apt takes from it only what the root's suite does not
# have -- postgresql-17, its client and PGXS packages; every dependency
# installs from sid (tried: nothing else came from trixie).  Chosen over
# building Debian's source package in the root, which would take many
# minutes on two cores and give the same 17 (trixie's source).  Were the
# root's suite to carry the older major again, its own packages would win.
# The older suite's minor release can be newer than the root's: trixie's
# 17.12 is newer than sid's 18.6, a skew pg-upgrade.sh names and works
# around (pg_attver).
declare -A UPGRADE_FROM=([18]=17)
MAJORS=(${PG_MAJORS:-17 18})
CACHE=${PG_FENCING_MAJORS_CACHE:-/var/cache/pg_fencing-majors}
# Time bounds, in seconds.
ROOT_TIMEOUT=${ROOT_TIMEOUT:-1200}  # debootstrap + packages, per root
STEP_TIMEOUT=${STEP_TIMEOUT:-900}   # each suite inside a root

# Packages inside each root, one concern a line ($1 = the major).
root_packages() {
  local major=$1
  echo postgresql-"$major" postgresql-server-dev-"$major" postgresql-common # server, PGXS, pg_virtualenv
  echo g++ make cmake pkg-config                                          # build
  echo libgtest-dev                                                       # unit tests (CMake wants GTest)
  echo libpqxx-dev libpq-dev                                              # client library, demo, stress
  echo libhiredis-dev libcurl4-openssl-dev nlohmann-json3-dev             # demo's Redis and etcd clients
  echo libipc-run-perl pgbouncer                                          # TAP tests
  echo dpkg-dev debhelper build-essential postgresql-server-dev-all       # Debian package
  echo procps util-linux                                                  # ps, kill, runuser
  if [[ -n ${UPGRADE_FROM[$major]:-} ]]; then
    local from=${UPGRADE_FROM[$major]}
    echo postgresql-"$from" postgresql-server-dev-"$from"                  # pg-upgrade: the older major
  fi
}

# The Debian mirror this machine's apt uses: the first source for this
# machine's own suite, from deb822 (.sources) or one-line (.list) files.
debian_mirror() {
  local codename
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f $f ]] || continue
      awk -v want="$codename" '
        /^[[:space:]]*$/ { if (uri != "" && ok) print uri; uri = ""; ok = 0; next }
        /^URIs:/ { uri = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) ok = 1 }
        END { if (uri != "" && ok) print uri }' "$f"
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk -v want="$codename" '$1 == "deb" { u = ($2 ~ /^\[/) ? $3 : $2; s = ($2 ~ /^\[/) ? $4 : $3; if (s == want) print u }'
  } | head -n 1
}

MIRROR=$(debian_mirror)
[[ -n $MIRROR ]] || {
  echo "test-majors: no Debian source for this machine's suite in /etc/apt/sources.list*" >&2
  exit 2
}

install_host_tools() {
  local missing=()
  for p in debootstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Mount points of a root, in mount order; unmounted in reverse.
MOUNTED=()
mount_root_fs() {
  local root=$1
  mount -t proc proc "$root/proc" && MOUNTED+=("$root/proc")
  mount --bind /dev "$root/dev" && MOUNTED+=("$root/dev")
  mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" && MOUNTED+=("$root/dev/pts")
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" && MOUNTED+=("$root/dev/shm")
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  MOUNTED=()
}
# Any server left in a root (a failed suite) would keep its mounts busy.
kill_root_processes() {
  local root=$1 pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$root" ]] && kill -9 "$pid" 2>/dev/null
  done
  true
}

# Runs a command line in a root, as root, with a clean environment, bounded.
in_root() {
  local root=$1 seconds=$2
  shift 2
  timeout --kill-after=20 "$seconds" chroot "$root" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    TERM=dumb DEBIAN_FRONTEND=noninteractive bash -c "$*"
}

root_package_list() { root_packages "$1" | sed 's/#.*//' | tr -s ' \n' ' '; }
# The suite of the older major a root upgrades from, when that is not the
# root's own suite (see UPGRADE_FROM); empty otherwise.
older_suite() {
  local from=${UPGRADE_FROM[$1]:-}
  [[ -n $from && ${SUITE_OF[$from]:-} != "${SUITE_OF[$1]}" ]] && echo "${SUITE_OF[$from]:-}"
  true
}
# What a cached root was made from: made again when this changes.
root_stamp() {
  local older
  older=$(older_suite "$1")
  {
    printf '%s\n' "${SUITE_OF[$1]}" "$MIRROR" "$(root_package_list "$1")"
    [[ -z $older ]] || echo "older suite $older, pinned at 100"
  } | sha256sum | cut -d' ' -f1
}

# Makes $CACHE/<suite> when missing or stale: debootstrap, then the packages.
prepare_root() {
  local major=$1 suite=${SUITE_OF[$1]}
  local root=$CACHE/$suite stamp packages
  packages=$(root_package_list "$major")
  stamp=$(root_stamp "$major")
  if [[ -z ${REFRESH:-} && -f $root/.pg_fencing-stamp && $(cat "$root/.pg_fencing-stamp") == "$stamp" ]]; then
    echo "cached root $root"
    return 0
  fi
  log "making the $suite root for PostgreSQL $major in $root (debootstrap from this machine's mirror)"
  local start=$SECONDS tmp=$root.new
  rm -rf "$tmp"
  mkdir -p "$CACHE"
  timeout "$ROOT_TIMEOUT" debootstrap --variant=minbase \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$suite" "$tmp" "$MIRROR" \
    >"$CACHE/$suite.debootstrap.log" 2>&1 || {
    tail -n 20 "$CACHE/$suite.debootstrap.log"
    return 1
  }
  # No service starts inside the root; unstable's Release file on the
  # mirror can be past its Valid-Until date.
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
  chmod 755 "$tmp/usr/sbin/policy-rc.d"
  echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99pg-fencing-valid-until"
  echo 'APT::Install-Recommends "false";' >"$tmp/etc/apt/apt.conf.d/99pg-fencing-no-recommends"
  # The older major's suite, pinned low (UPGRADE_FROM says why).
  local older
  older=$(older_suite "$major")
  if [[ -n $older ]]; then
    echo "deb $MIRROR $older main" >"$tmp/etc/apt/sources.list.d/pg-fencing-older.list"
    printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n' "$older" >"$tmp/etc/apt/preferences.d/pg-fencing-older"
  fi
  local rc=0
  mount_root_fs "$tmp"
  in_root "$tmp" "$ROOT_TIMEOUT" "apt-get update -qq && apt-get install -y -qq $packages" \
    >"$CACHE/$suite.packages.log" 2>&1 || rc=$?
  in_root "$tmp" 60 "apt-get clean" >/dev/null 2>&1
  kill_root_processes "$tmp"
  unmount_all
  if ((rc != 0)); then
    tail -n 30 "$CACHE/$suite.packages.log"
    return 1
  fi
  echo "$stamp" >"$tmp/.pg_fencing-stamp"
  rm -rf "$root"
  mv "$tmp" "$root"
  echo "made $root in $((SECONDS - start)) s"
}

# Copies the tree (what git tracks plus untracked files it does not ignore,
# as they are now; without git, the tree minus build output) to $2.
copy_tree() {
  local dest=$1
  mkdir -p "$dest"
  if git -C "$PROJECT_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$PROJECT_ROOT" ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
      tar -C "$PROJECT_ROOT" --null -T - -cf - | tar -C "$dest" -xf -
  else
    tar -C "$PROJECT_ROOT" --exclude='./build' --exclude='./build-*' --exclude='*.o' \
      --exclude='*.so' --exclude='*.bc' --exclude='./results' --exclude='./output_iso' \
      --exclude='./tmp_check' -cf - . | tar -C "$dest" -xf -
  fi
}

# The suites run in each root, in order: "name|command line (in the root, as
# root, from /src)".  @MAJOR@, @PORT@ and @FROM@ (UPGRADE_FROM) are filled
# in; pg-upgrade runs only in the roots that have an older major.
STEPS=(
  "build|make -j2 >build.log 2>&1 || { tail -n 60 build.log; exit 1; }; make install >/dev/null"
  "cmake|cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >cmake.log 2>&1 && cmake --build build -j2 >>cmake.log 2>&1 || { tail -n 60 cmake.log; exit 1; }; echo \"libpqxx \$(pkg-config --modversion libpqxx)\"; ctest --test-dir build -LE 'integration|install' 2>&1 | tail -n 3"
  "regress|pg_virtualenv -t -v @MAJOR@ -c '-p @PORT@' make installcheck TAP_TESTS= >regress.log 2>&1 || { cat regress.log regression.diffs output_iso/regression.diffs 2>/dev/null | tail -n 200; exit 1; }; grep -E 'tests (passed|failed)|failed .* tests' regress.log"
  "client|pg_virtualenv -t -v @MAJOR@ -c '-p @PORT@' bash test/integration/run-inside.sh build >client.log 2>&1 || { tail -n 60 client.log; exit 1; }; tail -n 3 client.log"
  "tap|cd / && runuser -u postgres -- make -C /src installcheck REGRESS= ISOLATION= PROVE_FLAGS=-j2 >/src/tap.log 2>&1 || { grep -E '^(not ok|t/|#)' /src/tap.log | tail -n 80; find /src/tmp_check/log -name '*.log' -exec tail -n 30 {} + 2>/dev/null | tail -n 120; exit 1; }; grep -E '^(test/t/[^ ]+ \.+ *(ok|Failed)|Files=|Result)' /src/tap.log"
  "deb|PG_MAJOR=@MAJOR@ bash test/packaging/deb.sh >deb.log 2>&1 || { tail -n 80 deb.log; exit 1; }; tail -n 1 deb.log"
  "dump-restore|pg_virtualenv -t -v @MAJOR@ -c '-p @PORT@' bash test/majors/dump-restore.sh restore /dump15 >dump.log 2>&1 || { tail -n 40 dump.log; exit 1; }; grep -E '^(ok|FAILED)' dump.log; tail -n 1 dump.log"
  "pg-upgrade|bash test/majors/pg-upgrade.sh @FROM@ @MAJOR@ @PORT@ >upgrade.log 2>&1 || { tail -n 60 upgrade.log; exit 1; }; grep -E '^(note|ok|FAILED)' upgrade.log; tail -n 1 upgrade.log"
  "stress|bash test/stress/run.sh build --duration 20 --unguarded-duration 10 --pg-bindir /usr/lib/postgresql/@MAJOR@/bin >stress.log 2>&1 || { tail -n 60 stress.log; exit 1; }; tail -n 2 stress.log"
)
ONLY_STEPS=${STEPS_ONLY:-}

SUMMARY=()
passed=0
failed=0
RUN_DIR=

cleanup() {
  [[ -n $RUN_DIR ]] && kill_root_processes "$RUN_DIR/root"
  unmount_all
  [[ -n $RUN_DIR && -z ${KEEP:-} ]] && rm -rf "$RUN_DIR"
  RUN_DIR=
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

# One major: prepare its root, overlay it, copy the tree in, run the steps.
test_major() {
  local major=$1 suite=${SUITE_OF[$1]:-}
  local start=$SECONDS results=() bad=0 entry name cmd port step_start
  if [[ -z $suite ]]; then
    SUMMARY+=("PostgreSQL $major: FAILED (no Debian suite known to ship it)")
    return 1
  fi
  if ! prepare_root "$major"; then
    SUMMARY+=("PostgreSQL $major ($suite): FAILED (could not make the root)")
    return 1
  fi
  RUN_DIR=$(mktemp -d /tmp/pg_fencing-majors.XXXXXX)
  mkdir -p "$RUN_DIR"/{upper,work,root}
  MOUNTED=()
  if ! mount -t overlay overlay \
    -o "lowerdir=$CACHE/$suite,upperdir=$RUN_DIR/upper,workdir=$RUN_DIR/work" "$RUN_DIR/root"; then
    SUMMARY+=("PostgreSQL $major ($suite): FAILED (overlay mount)")
    return 1
  fi
  MOUNTED+=("$RUN_DIR/root")
  local root=$RUN_DIR/root
  mount_root_fs "$root"
  copy_tree "$root/src"
  [[ -n ${DUMP_DIR:-} ]] && cp -a "$DUMP_DIR" "$root/dump15"
  in_root "$root" 60 "chown -R postgres: /src; chmod 755 /src"
  log "PostgreSQL $major ($suite): $(in_root "$root" 30 "pg_config --version; dpkg-query -W -f='libpqxx \${Version}' libpqxx-dev 2>/dev/null" | tr '\n' ' ')"
  for entry in "${STEPS[@]}"; do
    name=${entry%%|*}
    cmd=${entry#*|}
    [[ -z $ONLY_STEPS || " $ONLY_STEPS " == *" $name "* ]] || continue
    if [[ $name == dump-restore && -z ${DUMP_DIR:-} ]]; then
      results+=("$name FAILED (no PostgreSQL 15 dump)")
      bad=1
      continue
    fi
    [[ $name == pg-upgrade && -z ${UPGRADE_FROM[$major]:-} ]] && continue
    port=$(free_port)
    cmd=${cmd//@FROM@/${UPGRADE_FROM[$major]:-}}
    cmd=${cmd//@MAJOR@/$major}
    cmd=${cmd//@PORT@/$port}
    log "PostgreSQL $major: $name"
    step_start=$SECONDS
    if in_root "$root" "$STEP_TIMEOUT" "cd /src && { $cmd; }"; then
      results+=("$name ok ($((SECONDS - step_start)) s)")
    else
      results+=("$name FAILED ($((SECONDS - step_start)) s)")
      bad=1
    fi
    echo "--- PostgreSQL $major: ${results[-1]}"
  done
  cleanup
  local joined
  joined=$(IFS=','; echo "${results[*]}")
  if ((bad)); then
    SUMMARY+=("PostgreSQL $major ($suite): FAILED in $((SECONDS - start)) s:${joined//,/, }")
  else
    SUMMARY+=("PostgreSQL $major ($suite): ok in $((SECONDS - start)) s:${joined//,/, }")
  fi
  return $bad
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  if [[ $(id -u) != 0 ]]; then
    echo "test-majors: run as root (debootstrap, chroot, mounts)" >&2
    exit 2
  fi
  install_host_tools
  total_start=$SECONDS
  # The PostgreSQL 15 database that every root restores: made on this
  # machine's 15 with the tree's build (the install is shared with other
  # runs on the machine, hence the lock).
  if [[ -z $ONLY_STEPS || " $ONLY_STEPS " == *" dump-restore "* ]]; then
    dump_parent=$(mktemp -d /tmp/pg_fencing-dump15.XXXXXX)
    DUMP_DIR=$dump_parent/dump
    trap 'cleanup; rm -rf "$dump_parent"' EXIT
    log "PostgreSQL $PG_MAJOR: the database to restore in each major (test/majors/dump-restore.sh dump)"
    # A caller that holds the lock already (a session running this under
    # its own flock) says so with PG_FENCING_INSTALL_LOCK_HELD=1.
    local_lock=(flock /tmp/pg_fencing-install.lock)
    [[ ${PG_FENCING_INSTALL_LOCK_HELD:-0} == 1 ]] && local_lock=()
    if ! timeout "$STEP_TIMEOUT" "${local_lock[@]}" bash -c "
        make -C '$PROJECT_ROOT' -j2 >/dev/null && make -C '$PROJECT_ROOT' install >/dev/null &&
        source '$PROJECT_ROOT/scripts/lib.sh' &&
        with_throwaway_cluster bash '$PROJECT_ROOT/test/majors/dump-restore.sh' dump '$DUMP_DIR'" |
      grep -v -e '^Creating new' -e '^Dropping cluster'; then
      echo "test-majors: no PostgreSQL $PG_MAJOR dump; dump-restore will fail in every major" >&2
      DUMP_DIR=
    fi
  fi
  for major in "${MAJORS[@]}"; do
    if test_major "$major"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  echo
  printf '%s\n' "${SUMMARY[@]}"
  echo "all majors in $((SECONDS - total_start)) s"
  echo "majors: $passed passed, $failed failed"
  ((failed == 0))
fi
