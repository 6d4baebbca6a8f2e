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

usage() {
  echo "usage: $0 BUILD_DIR [--duration S] [--fleet N] [--seed N] [--pg-bindir DIR] [--keep]" >&2
  exit 2
}
(($# >= 1)) || usage
build=$(cd "$1" && pwd) || usage
shift
duration=60
fleet=500
seed=1
keep=0
pg_bindir=()
while (($#)); do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --fleet) fleet=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --pg-bindir) pg_bindir=(--pg-bindir "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    *) usage ;;
  esac
done

stress=$build/test/stress/pg_fencing_stress
check=$build/test/stress/pg_fencing_stress_check
if [[ $EUID -ne 0 ]]; then
  echo "$0: run as root (the server and PgBouncer run as \"postgres\", the harness kills processes)" >&2
  exit 2
fi
if [[ ! -x $stress || ! -x $check ]]; then
  echo "$0: $stress or $check missing; build first (cmake --build $build)" >&2
  exit 2
fi
if [[ ! -x /usr/sbin/pgbouncer ]]; then
  echo "$0: PgBouncer is not installed (/usr/sbin/pgbouncer)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/pg_fencing_fleet_run.XXXXXX)
chmod 755 "$work"
failures=()

# 1. The fleet run.
echo "==> fleet: pg_fencing_stress --fleet $fleet --duration $duration --seed $seed"
timeout --kill-after=30 $((duration + 240)) \
  "$stress" --fleet "$fleet" --dir "$work/fleet" --duration "$duration" --seed "$seed" --examples 3 \
  "${pg_bindir[@]}" >"$work/fleet.out" 2>&1
rc=$?
sed -n '/^pg_fencing_stress: faults injected/p; /^== check/,$p' "$work/fleet.out"
if ((rc == 0)); then
  echo "--- fleet: PASS (no violation)"
else
  echo "--- fleet: FAILED (status $rc); last lines:"
  tail -n 5 "$work/fleet.out"
  failures+=(fleet)
fi

# 2. Planted defects, on copies of the run's directory: plant NAME EXPECT.
ttl_us=$(($(sed -n 's/^ttl_ms=//p' "$work/fleet/meta.txt" 2>/dev/null || echo 0) * 1000))
plant() {
  local name=$1 expect=$2
  local dir=$work/plant-$name
  rm -rf "$dir"
  cp -a "$work/fleet" "$dir"
  rm -rf "$dir/pgdata"
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
  "$check" "$dir" --examples 1 >"$dir.out" 2>&1
  local rc=$?
  if ((rc == 1)) && grep -q "$expect" "$dir.out"; then
    echo "    planted $name: reported ($(grep -m1 "$expect" "$dir.out" | sed 's/^ *//'))"
  else
    echo "    planted $name: NOT REPORTED (status $rc, expected \"$expect\")"
    failures+=("plant-$name")
  fi
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

echo
if ((${#failures[@]} == 0)); then
  echo "fleet: PASS (no violation in the fleet run, planted defects reported)"
  ((keep)) && echo "run directories kept in $work" || rm -rf "$work"
  exit 0
fi
echo "fleet: FAILED: ${failures[*]} (run directories kept in $work)"
exit 1
