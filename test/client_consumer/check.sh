#!/bin/sh
# ctest client_install_consumer: install the build tree into a throwaway
# prefix, then build test/client_consumer against it twice, once with
# find_package(pg_fencing_client) and once with pkg-config, and run both.
#
#   check.sh BUILD_DIR CONSUMER_SOURCE_DIR [CMAKE [CXX]]
set -eu
build=$1
src=$2
cmake=${3:-cmake}
cxx=${4:-c++}

work=$build/client_consumer_check
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix"

echo "== find_package(pg_fencing_client)"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx"
"$cmake" --build "$work/build"
"$work/build/consumer"

echo "== pkg-config pg_fencing_client"
pc=$(find "$prefix" -name pg_fencing_client.pc)
[ -n "$pc" ] || { echo "pg_fencing_client.pc was not installed" >&2; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs pg_fencing_client)
echo "flags: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++17 -Wall -Wextra -Werror "$src/main.cpp" -o "$work/consumer_pkgconfig" $flags
"$work/consumer_pkgconfig"
