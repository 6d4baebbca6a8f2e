#!/bin/bash
# The stress harness's fleet mode (RELIABILITY.md, "Fleet mode"), as root, on
# an already built tree, with PgBouncer installed:
#
#   bash test/stress/fleet.sh BUILD_DIR [--duration S] [--fleet N] [--seed N]
#                             [--pg-bindir DIR] [--keep]
#
# 1. a fleet run: N candidates (500) in 10 processes wait in the line of one
#    election through a PgBouncer in transaction pooling (a pool of 10), the
#    leader renews and writes its token into a guarded table, while a nemesis
#    pauses and kills processes (the leader's every other time), crashes the
#    server and restarts PgBouncer: the checker must find no violation;
# 2. the checker against copies of its directory with one defect planted in
#    each: leaders' resignations dropped from their logs (so their leases
#    ended while they lived and renewed, before their ttl), the pauses dropped
#    from the nemesis's log (so a lease lost to a pause was lost while its
#    process lived), every takeover after a kill moved
#    to ttl + 1.5 s after it, a token granted twice, a stale write on the
#    record: each must be reported.
# Builds nothing; the run makes its own throwaway cluster and PgBouncer (as
# "postgres", Unix sockets only) and removes them.  Exit 0 only if all hold.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/suite.sh"

usage_options="[--duration S] [--fleet N] [--seed N] [--pg-bindir DIR] [--keep]"
duration=60
fleet=500
examples=3
own_option() {
  case $1 in
    --fleet) fleet=$2 ;;
    *) return 1 ;;
  esac
}
parse_arguments "$@"
prepare_suite 'the server and PgBouncer run as "postgres", the harness kills processes' \
  pg_fencing_fleet_run
if [[ ! -x /usr/sbin/pgbouncer ]]; then
  echo "$0: PgBouncer is not installed (/usr/sbin/pgbouncer)" >&2
  exit 2
fi

# 1. The fleet run.
expect_no_violation fleet "$duration" --fleet "$fleet"

# 2. Planted defects, on copies of the run's directory: plant NAME EXPECT.
ttl_us=$(($(sed -n 's/^ttl_ms=//p' "$work/fleet/meta.txt" 2>/dev/null || echo 0) * 1000))
plant() {
  local name=$1 expect=$2
  local dir=$work/plant-$name
  copy_run "$work/fleet" "$dir"
  case $name in
    resign-dropped)
      # Every leader's resignation gone from its log: the lock's next grant
      # then ends a lease whose process lived and renewed.
      sed -i '/ ev=resign /d' "$dir"/workers/f*.log ;;
    pause-forgotten)
      # The nemesis's pauses gone from faults.log: a leader's lease lost to
      # a pause of its process (the first pause is the leader's, longer than
      # the ttl) is then a lease lost while its process lived.
      sed -i '/ ev=pause /d; / ev=resume /d' "$dir/faults.log" ;;
    late-takeover)
      # The first grant after every kill moved to ttl + 1.5 s after the kill
      # (later still if it was): every judged takeover is too late.
      local kill_at
      for kill_at in $(sed -n 's/^mono=[0-9]* wall=\([0-9]*\) ev=kill .*/\1/p' "$dir/faults.log"); do
        awk -F'\t' -v OFS='\t' -v k="$kill_at" -v late=$((kill_at + ttl_us + 1500000)) \
          '!done && $5 >= k { if ($5 < late) $5 = late; done = 1 } { print }' \
          "$dir/grants.tsv" >"$dir/t" && mv "$dir/t" "$dir/grants.tsv"
      done ;;
    granted-twice)  # the second grant gets the first one's token
      awk -F'\t' -v OFS='\t' 'NR == 1 { t = $4 } NR == 2 { $4 = t } { print }' "$dir/grants.tsv" >"$dir/t" &&
        mv "$dir/t" "$dir/grants.tsv" ;;
    stale-write)  # the last committed write carries the first grant's token
      local first
      first=$(head -n 1 "$dir/grants.tsv" | cut -f4)
      awk -F'\t' -v OFS='\t' -v n="$(wc -l <"$dir/history.tsv")" -v t="$first" 'NR == n { $4 = t } { print }' \
        "$dir/history.tsv" >"$dir/t" && mv "$dir/t" "$dir/history.tsv" ;;
  esac
  expect_reported "$dir" "$name" "$expect" "plant-$name"
}
echo
echo "==> checker self-test: defects planted in copies of the fleet run"
if [[ -f $work/fleet/grants.tsv ]]; then
  plant resign-dropped "leader lost its lease before its ttl since an acknowledged renewal"
  plant pause-forgotten "leader lost its lease while its process lived and renewed"
  plant late-takeover "takeover later than ttl + 1 s after the leader's death"
  plant granted-twice "token granted twice"
  plant stale-write "stale write accepted"
else
  echo "    no fleet run directory to plant defects in"
  failures+=(self-test)
fi

finish fleet "no violation in the fleet run, planted defects reported"
