#!/bin/bash
# The Debian package, end to end, as root:
#   1. META.json, pg_fencing.control and debian/changelog agree on the version;
#   2. a copy of the tree (in a temporary directory: nothing is built in the
#      tree) becomes a source package (3.0 (quilt): orig tarball + debian/),
#      which is unpacked again and built with dpkg-buildpackage -us -uc -b
#      (debian/rules runs pg_regress and the isolation specs against the
#      files being packaged);
#   3. the .deb must hold the module, its LLVM bitcode, the control file and
#      every extension/*.sql of the tree, and nothing outside PostgreSQL's
#      directories and its doc directory;
#   4. apt-get installs it (resolving its Depends); dpkg --verify shows the
#      files on disk are the package's;
#   5. on a throwaway cluster: CREATE EXTENSION gives the current version, and
#      CREATE EXTENSION ... VERSION '1.0' + ALTER EXTENSION UPDATE reaches it.
# Finally the package is purged (unless it was installed before) and the
# tree's own build is installed again (make install), so the machine ends as
# it was.  30 to 60 s on a 2-core machine.  KEEP=1 keeps the temporary
# directory; DEB_BUILD_OPTIONS=nocheck skips the build-time tests.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"
cd "$PROJECT_ROOT"

start=$SECONDS
fail() {
  echo "deb.sh: FAILED: $*" >&2
  exit 1
}

if [[ $(id -u) != 0 ]]; then
  fail "run as root (it installs and removes a package)"
fi
for tool in dpkg-buildpackage dpkg-source dpkg-parsechangelog; do
  command -v "$tool" >/dev/null || {
    log "installing dpkg-dev"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dpkg-dev >/dev/null
    break
  }
done

###############################################################################
# 1. One version everywhere.
###############################################################################
source_name=$(dpkg-parsechangelog -l debian/changelog -S Source)
deb_version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${deb_version%-*}
ext_version=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" pg_fencing.control)
[[ $upstream == "$ext_version" || $upstream == "$ext_version".* ]] ||
  fail "debian/changelog says $upstream, pg_fencing.control default_version $ext_version"
perl -MJSON::PP -e '
  local $/; open my $f, "<", "META.json" or die "META.json: $!\n";
  my $m = JSON::PP->new->decode(<$f>);
  my ($want) = @ARGV;
  my @bad;
  for my $k (qw(name abstract version maintainer license provides meta-spec)) {
    push @bad, "no $k" unless defined $m->{$k};
  }
  push @bad, "version $m->{version}, not $want" if ($m->{version} // "") ne $want;
  my $p = $m->{provides}{pg_fencing} // {};
  push @bad, "provides.pg_fencing.version $p->{version}, not $want" if ($p->{version} // "") ne $want;
  push @bad, "provides.pg_fencing.file $p->{file} does not exist" unless -f ($p->{file} // "");
  push @bad, "meta-spec version is not 1.0.2" if ($m->{"meta-spec"}{version} // "") ne "1.0.2";
  die "META.json: " . join("; ", @bad) . "\n" if @bad;
' "$upstream" || fail "META.json"
echo "version $upstream (extension $ext_version, package $deb_version): META.json, control and changelog agree"

###############################################################################
# 2. Source package from a copy of the tree, binary package from it.
###############################################################################
tmp=$(mktemp -d /tmp/pg_fencing-deb.XXXXXX)
# The build-time tests run the server as postgres, which reads the extension
# from debian/postgresql-*-pg-fencing below here.
chmod 755 "$tmp"
package_installed_before=false
dpkg-query -W -f='${Status}' "postgresql-$PG_MAJOR-pg-fencing" 2>/dev/null |
  grep -q 'install ok installed' && package_installed_before=true
we_installed=false
cleanup() {
  local rc=$?
  if $we_installed; then
    if ! $package_installed_before; then
      log "removing the package"
      dpkg --purge "postgresql-$PG_MAJOR-pg-fencing" >"$tmp/purge.log" 2>&1 || {
        cat "$tmp/purge.log"
        rc=1
      }
    fi
    log "reinstalling the tree's build of the extension (make install)"
    make -C "$PROJECT_ROOT" install >/dev/null || rc=1
  fi
  if [[ ${KEEP:-} ]]; then
    echo "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  exit $rc
}
trap cleanup EXIT

log "copying the tree to $tmp"
src_dir=$tmp/src/$source_name-$upstream
mkdir -p "$src_dir"
if git -C "$PROJECT_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  # Tracked and untracked files that git does not ignore: the sources as they
  # are now, without build output.
  git -C "$PROJECT_ROOT" ls-files -z -co --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
    tar -C "$PROJECT_ROOT" --null -T - -cf - | tar -C "$src_dir" -xf -
else
  tar -C "$PROJECT_ROOT" --exclude='./build' --exclude='./build-*' --exclude='*.o' \
    --exclude='*.so' --exclude='*.bc' --exclude='./results' --exclude='./output_iso' \
    --exclude='./tmp_check' -cf - . | tar -C "$src_dir" -xf -
fi
# Debhelper's leftovers from a build someone ran in the tree itself.
rm -rf "$src_dir"/debian/{.debhelper,files,debhelper-build-stamp,*.substvars,postgresql-*-pg-fencing}

# debian/control names one binary package per major in debian/pgversions
# that this system supports (15 on Debian 12, 17 on Debian 13, ...):
# regenerate it from debian/control.in for this system.
(cd "$src_dir" && pg_buildext updatecontrol >/dev/null) || fail "pg_buildext updatecontrol"

log "source package"
orig=$tmp/src/${source_name}_$upstream.orig.tar.gz
tar -C "$tmp/src" --exclude="$source_name-$upstream/debian" -czf "$orig" "$source_name-$upstream"
(cd "$tmp/src" && dpkg-source -b "$source_name-$upstream" >"$tmp/source.log" 2>&1) || {
  cat "$tmp/source.log"
  fail "dpkg-source -b"
}
dsc=$tmp/src/${source_name}_$deb_version.dsc
[[ -f $dsc ]] || fail "no $dsc"
# Build from the unpacked source package, as a buildd would: whatever the
# orig tarball or debian/ lacks shows up here.
mkdir "$tmp/build"
(cd "$tmp/build" && dpkg-source -x "$dsc" >>"$tmp/source.log" 2>&1) || {
  cat "$tmp/source.log"
  fail "dpkg-source -x"
}
build_dir=$tmp/build/$source_name-$upstream

log "build dependencies"
if ! (cd "$build_dir" && dpkg-checkbuilddeps); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq "$build_dir" >/dev/null
fi

if [[ ${DEB_BUILD_OPTIONS:-} == *nocheck* ]]; then
  log "dpkg-buildpackage -us -uc -b (nocheck: without the build-time tests)"
else
  log "dpkg-buildpackage -us -uc -b (with pg_regress and isolation against the packaged files)"
fi
build_start=$SECONDS
if ! (cd "$build_dir" && dpkg-buildpackage -us -uc -b >"$tmp/build.log" 2>&1); then
  tail -n 80 "$tmp/build.log"
  fail "dpkg-buildpackage (log: $tmp/build.log, KEEP=1 keeps it)"
fi
grep -E '^test |tests passed|tests? failed' "$tmp/build.log" || true
echo "built in $((SECONDS - build_start)) s"

###############################################################################
# 3. What the .deb holds.
###############################################################################
deb=$tmp/build/postgresql-$PG_MAJOR-pg-fencing_${deb_version}_$(dpkg --print-architecture).deb
[[ -f $deb ]] || fail "no $deb"
log "contents of $(basename "$deb")"
contents=$(dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|')
lib=/usr/lib/postgresql/$PG_MAJOR/lib
share=/usr/share/postgresql/$PG_MAJOR/extension
doc=/usr/share/doc/postgresql-$PG_MAJOR-pg-fencing
expected_files=("$lib/pg_fencing.so" "$share/pg_fencing.control" "$lib/bitcode/pg_fencing.index.bc")
for f in extension/*.sql; do expected_files+=("$share/$(basename "$f")"); done
for f in src/core/*.cpp src/backend/*.cpp; do expected_files+=("$lib/bitcode/pg_fencing/${f%.cpp}.bc"); done
missing=0
for f in "${expected_files[@]}"; do
  grep -qxF "$f" <<<"$contents" || {
    echo "missing from the package: $f"
    missing=1
  }
done
((missing == 0)) || fail "the package lacks files"
stray=$(grep -v -e "^$lib/" -e "^$share/" -e "^$doc/" -e '/$' <<<"$contents" || true)
[[ -z $stray ]] || fail "files outside PostgreSQL's and the doc directories: $stray"
# The SQL files and the control file are the tree's, byte for byte.
for f in pg_fencing.control extension/*.sql; do
  dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ".$share/$(basename "$f")" | cmp -s - "$f" ||
    fail "$share/$(basename "$f") in the package differs from $f"
done
echo "$(grep -c '[^/]$' <<<"$contents") files, all expected ones present, nothing stray"
dpkg-deb -f "$deb" Depends

###############################################################################
# 4. Install it.
###############################################################################
log "apt-get install $(basename "$deb")"
we_installed=true
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --no-install-recommends "$deb" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"
  fail "apt-get install"
}
[[ $(dpkg-query -W -f='${Version}' "postgresql-$PG_MAJOR-pg-fencing") == "$deb_version" ]] ||
  fail "installed version is not $deb_version"
dpkg --verify "postgresql-$PG_MAJOR-pg-fencing" || fail "files on disk differ from the package's"
echo "installed $deb_version; dpkg --verify: the files on disk are the package's"

###############################################################################
# 5. The installed package on a throwaway cluster.
###############################################################################
log "CREATE EXTENSION and ALTER EXTENSION UPDATE on a throwaway cluster"
cat >"$tmp/check.sh" <<'EOF'
set -euo pipefail
want=$1
failed=0
q() { psql -XAtq -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
check() {
  if [[ $2 == "$3" ]]; then echo "ok: $1"; else echo "FAILED: $1: got '$2', want '$3'"; failed=1; fi
}
version() { q "$1" "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"; }
check "default version" \
  "$(q postgres "SELECT default_version FROM pg_available_extensions WHERE name = 'pg_fencing'")" "$want"

q postgres 'CREATE DATABASE fresh'
q fresh 'CREATE EXTENSION pg_fencing'
check "CREATE EXTENSION installs $want" "$(version fresh)" "$want"
# A fresh database's first grant is anchored to the clock (1.5): at least
# its microseconds since 1970, a minute of slack for the check's own time.
check "fencing_grant() (the module loads, the token anchored to the clock)" \
  "$(q fresh "SELECT fencing_grant()::bigint >= ((extract(epoch FROM clock_timestamp()) - 60) * 1000000)::bigint")" t
q fresh "CREATE TABLE r (id int PRIMARY KEY, token fencing_token, val text);
         INSERT INTO r VALUES (1, 34, 'x'); SELECT fencing_protect('r')" >/dev/null
check "the guard refuses a stale token" \
  "$(psql -XAtq -d fresh -c 'UPDATE r SET token = 33' 2>&1 | grep -o 'stale fencing token 33' || true)" \
  "stale fencing token 33"
q fresh "SELECT fencing_unprotect('r')" >/dev/null
check "fencing_unprotect() removed the guard" \
  "$(q fresh "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'r'::regclass")" 0

q postgres 'CREATE DATABASE upgraded'
q upgraded "CREATE EXTENSION pg_fencing VERSION '1.0'"
check "CREATE EXTENSION ... VERSION '1.0'" "$(version upgraded)" 1.0
token=$(q upgraded "SELECT fencing_acquire('nightly', 'worker-1', '1 hour')")
q upgraded 'ALTER EXTENSION pg_fencing UPDATE'
check "ALTER EXTENSION pg_fencing UPDATE reaches $want" "$(version upgraded)" "$want"
check "the lease survived the update" \
  "$(q upgraded "SELECT token FROM fencing_leases WHERE lock_name = 'nightly' AND live")" "$token"
check "fencing_unprotect(regclass) exists after the update" \
  "$(q upgraded "SELECT to_regprocedure('fencing_unprotect(regclass)') IS NOT NULL")" t
exit $failed
EOF
with_throwaway_cluster bash "$tmp/check.sh" "$ext_version" || fail "checks on the installed package"

echo
echo "deb.sh: package $(basename "$deb") built, installed and checked in $((SECONDS - start)) s"
