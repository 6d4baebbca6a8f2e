#!/bin/sh
# ctest client_install_consumer: install the build tree into a throwaway
# prefix, then build test/client_consumer against it twice, once with
# find_package(pg_fencing_client) and once with pkg-config, and run both.
# The consumer includes every installed header, with no PostgreSQL server
# headers anywhere on its include path, and the installed version must be
# pg_fencing.control's.  Last, the libraries alone are configured without
# GoogleTest.
#
#   check.sh BUILD_DIR SOURCE_DIR [CMAKE [CXX]]
set -eu
build=$1
root=$2
cmake=${3:-cmake}
cxx=${4:-c++}
src=$root/test/client_consumer

work=$build/client_consumer_check
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

fail() {
  echo "client_install_consumer: $*" >&2
  exit 1
}

# One version: default_version '1.3' in pg_fencing.control is 1.3.0 here.
control_version=$(sed -n "s/^default_version *= *'\([0-9]*\.[0-9]*\)'.*/\1/p" "$root/pg_fencing.control")
[ -n "$control_version" ] || fail "no default_version in pg_fencing.control"
version=$control_version.0

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix"

echo "== every installed header is included by main.cpp"
headers=$(cd "$prefix/include" && find pg_fencing -name '*.hpp' | sort)
[ -n "$headers" ] || fail "no headers installed"
for header in $headers; do
  grep -q "^#include <$header>" "$src/main.cpp" || fail "main.cpp does not include <$header>"
  echo "   $header"
done
if grep -rl 'postgres\.h\|"postgres_ext\|fmgr\.h\|/server/' "$prefix/include"; then
  fail "an installed header reaches for PostgreSQL's server headers"
fi

echo "== find_package(pg_fencing_client $version EXACT COMPONENTS redis etcd)"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DEXPECTED_VERSION="$version"
"$cmake" --build "$work/build"
"$work/build/consumer"

echo "== pkg-config pg_fencing_client pg_fencing_redis pg_fencing_etcd"
pc=$(find "$prefix" -name pg_fencing_client.pc)
[ -n "$pc" ] || fail "pg_fencing_client.pc was not installed"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
for module in pg_fencing_client pg_fencing_redis pg_fencing_etcd; do
  got=$(pkg-config --modversion "$module")
  [ "$got" = "$version" ] || fail "$module is version $got, pg_fencing.control says $version"
done
flags=$(pkg-config --cflags --libs pg_fencing_redis pg_fencing_etcd)
echo "flags: $flags"
case " $flags " in
  *server*) fail "the flags name PostgreSQL's server headers: $flags" ;;
esac
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++17 -Wall -Wextra -Werror "$src/main.cpp" -o "$work/consumer_pkgconfig" $flags
"$work/consumer_pkgconfig"

echo "== the libraries alone, without GoogleTest"
# As if GoogleTest were not installed: find_package(GTest REQUIRED) fails.
"$cmake" -S "$root" -B "$work/no-tests" -DPG_FENCING_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  >"$work/no-tests.log" 2>&1 || { cat "$work/no-tests.log" >&2; fail "configuring without GoogleTest failed"; }
echo "client_install_consumer: ok"
