#!/bin/bash
# Developer shortcut: run pg_regress/isolation/TAP from a copy of the tree
# owned by the postgres user.  Usage: scripts/regress-local.sh [make args]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cp -a "$src" "$work/src"
chown -R postgres "$work"
cd "$work/src"
status=0
source "$src/scripts/lib.sh"
with_throwaway_cluster make installcheck "$@" || status=$?
for f in results/*.out output_iso/results/*.out; do
  [ -f "$f" ] && mkdir -p "$src/$(dirname "$f")" && cp "$f" "$src/$f"
done
[ -f regression.diffs ] && cp regression.diffs "$src/" 
[ -f output_iso/regression.diffs ] && cp output_iso/regression.diffs "$src/isolation.diffs"
rm -rf "$work"
exit $status
