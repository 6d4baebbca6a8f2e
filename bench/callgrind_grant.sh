#!/bin/bash
# Instructions per fencing_grant() against nextval() of a plain CACHE 1
# sequence, counted by valgrind's callgrind in a single-user backend (the
# counts repeat exactly, whatever else the machine is doing; the timed
# figures are bench/grant_tps.sh).  Each call is a statement of its own, so
# a grant from the sequence pays for its gate and, once per 32, its flush.
#
#   bench/callgrind_grant.sh OUT_DIR [calls]
#
# As root.  PG_BINDIR (default this machine's major) picks the server, so
# that an older build installed under another prefix can be measured the
# same way; PRELOAD=1 loads the library with shared_preload_libraries (the
# grants then come from reserved ranges).  Writes callgrind_grant.csv: variant,instructions,per_call,
# per_call / nextval.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
out=$(cd "$1" && pwd)
calls=${2:-2000}
bindir=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}
work=$(mktemp -d /tmp/pg_fencing_callgrind_grant.XXXXXX)
chown postgres: "$work"
trap 'rm -rf "$work"' EXIT
as_postgres "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null

single() { # runs SQL from stdin in a single-user backend, $1 = callgrind output or ""
  local prefix=()
  [[ -n $1 ]] && prefix=(valgrind --tool=callgrind --callgrind-out-file="$1")
  local preload=()
  [[ ${PRELOAD:-0} == 1 ]] && preload=(-c shared_preload_libraries=pg_fencing)
  as_postgres "${prefix[@]}" "$bindir/postgres" --single -D "$work/data" -c jit=off "${preload[@]}" -j postgres \
    >/dev/null 2>>"$work/valgrind.log"
}
printf '%s\n' "CREATE EXTENSION pg_fencing;" "CREATE SEQUENCE plain_seq CACHE 1;" | single ""

# One statement per call, after one warm-up call (the first grant of a
# backend anchors: measured apart, as "first").
statements() { # $1 = the call, $2 = how many
  echo "SELECT $1;"
  for _ in $(seq 1 "$2"); do echo "SELECT $1;"; done
}
declare -A total
for v in empty nextval grant; do
  case $v in
    empty) call="1" ;;
    nextval) call="nextval('plain_seq')" ;;
    grant) call="fencing_grant()" ;;
  esac
  statements "$call" "$calls" | single "$work/callgrind.$v.out"
  total[$v]=$(awk '/^summary:/ {print $2}' "$work/callgrind.$v.out")
done
{
  echo "variant,instructions,per_call,over_nextval"
  for v in nextval grant; do
    per_call=$(((total[$v] - total[empty]) / (calls + 1)))
    base=$(((total[nextval] - total[empty]) / (calls + 1)))
    echo "$v,${total[$v]},$per_call,$(awk -v a="$per_call" -v b="$base" 'BEGIN { printf "%.3f", a / b }')"
  done
} | tee "$out/callgrind_grant.csv"
