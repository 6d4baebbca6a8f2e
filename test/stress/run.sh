#!/bin/bash
# The stress test (see RELIABILITY.md), as root, on an already built tree:
#
#   bash test/stress/run.sh BUILD_DIR [--duration S] [--unguarded-duration S]
#                           [--permit-duration S] [--seed N] [--pg-bindir DIR] [--keep]
#
# 1. a guarded run (both tables protected) with every fault, on a server that
#    preloads pg_fencing (its statistics and expiry worker run through the
#    crashes too, and every UPDATE is judged in its projection): must pass;
#    then a shorter one with the guard's fast paths off (every write judged
#    by the trigger, writers under a lock taking its fence gate in turn);
#    then a permit run: the workers take permits of a three-permit semaphore
#    instead of the lease, its tables protected under it (one behind a read
#    fence), some operations reads under the read fence: must pass;
# 2. an unguarded run (no fencing_protect), same load and faults: the checker
#    must report violations, so its failure is this step's success; and the
#    same with permits (no fencing_protect, no read fence);
# 3. the checker against copies of run 1's directory with one defect planted
#    in each (a lost acknowledged write, a token granted twice, a wrong final
#    row, a false rejection, a token that went down, the frozen write of the
#    freeze fault's variant committed; across the restore: a
#    token granted after it equal to one granted before it, and the writes
#    under it, an acknowledged write from before the backup missing from the
#    restored record), and of the permit run's (a write after its permit was
#    granted again, a stale read, rows seen without a presentation, a lost
#    read, a token granted twice): each must be reported.
# Every run also has the restore fault (a base backup early, the server lost
# and started from a copy of it later; RELIABILITY.md): the runs' directories
# hold the lost server's record in lost-1/, and defects of an event from
# before the backup are planted in every record (the restored one holds it
# too).
# Builds nothing; each run makes its own throwaway cluster (initdb as
# "postgres", Unix socket only) and removes it.  Exit 0 only if all of them hold.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/suite.sh"

usage_options="[--duration S] [--unguarded-duration S] [--permit-duration S] [--seed N] [--pg-bindir DIR] [--keep]"
duration=45
unguarded_duration=20
permit_duration=25
permits=3
own_option() {
  case $1 in
    --unguarded-duration) unguarded_duration=$2 ;;
    --permit-duration) permit_duration=$2 ;;
    *) return 1 ;;
  esac
}
parse_arguments "$@"
prepare_suite 'the server runs as "postgres", the harness kills its processes' pg_fencing_stress_run

# 1. Guarded: no violation allowed; then again with the guard's fast paths
# off (the workers' sessions turn them off).
expect_no_violation guarded "$duration" --preload
PGOPTIONS="-c pg_fencing.fast_update=off -c pg_fencing.shared_fence=off" \
  expect_no_violation guarded_fast_paths_off "$unguarded_duration" --preload
# Permits: no two holders of a permit with overlapping accepted writes, no
# stale read under the read fence.
expect_no_violation permits "$permit_duration" --preload --permits "$permits"

# 2. Unguarded: the checker must catch the stale writes.
# No token-less writes here: the violations must be stale writes.
stress_run unguarded "$unguarded_duration" --unguarded --p-missing 0
rc=$?
if ((rc == 1)) && grep -q "stale write accepted after a higher .* (real time)" "$work/unguarded.out"; then
  echo "--- unguarded: violations reported, as they must be: the harness catches stale writes"
else
  echo "--- unguarded: NOT CAUGHT (status $rc; expected 1, with stale writes among the violations)"
  failures+=(unguarded)
fi
# The same with permits: writes of a permit after it was granted again must
# be among the violations.
stress_run permits_unguarded "$unguarded_duration" --preload --permits "$permits" --unguarded --p-missing 0
rc=$?
if ((rc == 1)) && grep -q "write after its permit was granted again (commit order)" "$work/permits_unguarded.out"; then
  echo "--- permits_unguarded: violations reported, as they must be: the harness catches stale permit writes"
else
  echo "--- permits_unguarded: NOT CAUGHT (status $rc; expected 1, with writes after their permit was granted again)"
  failures+=(permits_unguarded)
fi

# 3. Planted defects, on copies of a run's directory: plant RUN NAME EXPECT.
# Permit tokens' next grants, for the permit defects: "token next_seq" for
# every permit grant that has a next grant of its slot (grants.tsv is in seq
# order; column 7 is the slot).
next_grants() {
  awk -F'\t' '$7 != "\\N" { k = $2 FS $7; if (k in last) print last[k] "\t" $1; last[k] = $4 }' "$1/grants.tsv"
}
# The records of a run directory: its own (the final one) and, after a
# restore, the lost server's (lost-N/).
records() {
  local rec
  for rec in "$1" "$1"/lost-*; do [[ -f $rec/history.tsv ]] && echo "$rec"; done
}
# The first restore's time the server was lost (wall µs), from faults.log.
lost_at() {
  sed -n 's/.* ev=restore n=1 .* lost_at=\([0-9]*\) .*/\1/p' "$1/faults.log" | head -n 1
}
# The value of KEY in an event-log LINE (common.hpp's format).
event_field() {
  sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"
}
plant() {
  local run=$1 name=$2 expect=$3
  local dir=$work/plant-$run-$name rec
  copy_run "$work/$run" "$dir"
  case $name in
    lost-write)  # drop an acknowledged write from the servers' histories
      local wid
      wid=$(grep -h 'ev=w_done .* out=ok' "$dir"/workers/*.log | head -n 1 | sed 's/.* wid=\([^ ]*\) .*/\1/')
      for rec in $(records "$dir"); do
        awk -F'\t' -v w="$wid" '$6 != w' "$rec/history.tsv" >"$dir/t" && mv "$dir/t" "$rec/history.tsv"
      done ;;
    granted-twice)  # the second grant gets the first one's token
      for rec in $(records "$dir"); do
        awk -F'\t' -v OFS='\t' 'NR == 1 { t = $4 } NR == 2 { $4 = t } { print }' "$rec/grants.tsv" >"$dir/t" &&
          mv "$dir/t" "$rec/grants.tsv"
      done ;;
    restore-regrant | restore-stale-write)
      # The first grant after the restore under which the lock's table was
      # written gets the token of the highest grant before it (lost with the
      # timeline, most likely), and so do its writes: a database gone back
      # that hands out again a token it gave away.
      local at high tok
      at=$(lost_at "$dir")
      high=$(cut -f4 "$dir/lost-1/grants.tsv" | sort -n | tail -n 1)
      tok=$(awk -F'\t' -v at="$at" 'FNR == NR { if ($6 >= at) born[$4] = 1; next }
        $2 == "lock" && $8 >= at && ($4 in born) { print $4; exit }' "$dir/grants.tsv" "$dir/history.tsv")
      if [[ -z $tok ]]; then  # the orchestrator runs on until there is one, within a bound
        echo "    planted $name: NOTHING TO PLANT ON (no write to the lock's table under a grant after the restore; see $dir/faults.log)"
        failures+=("plant-$run-$name")
        return
      fi
      awk -F'\t' -v OFS='\t' -v at="$at" -v t="$tok" -v h="$high" '$6 >= at && $4 == t { $4 = h } { print }' \
        "$dir/grants.tsv" >"$dir/t" && mv "$dir/t" "$dir/grants.tsv"
      awk -F'\t' -v OFS='\t' -v at="$at" -v t="$tok" -v h="$high" '$8 >= at && $4 == t { $4 = h } { print }' \
        "$dir/history.tsv" >"$dir/t" && mv "$dir/t" "$dir/history.tsv" ;;
    lost-before-backup)  # the restored record lacks an acknowledged write from before the backup
      local wid
      # The earliest acknowledged write of the run (by its wall clock, not
      # the first of the first worker's log: that worker may not have
      # written before the backup).
      wid=$(grep -h 'ev=w_done .* out=ok' "$dir"/workers/*.log |
        sed 's/^mono=[0-9]* wall=\([0-9]*\) .* wid=\([^ ]*\) .*/\1 \2/' | sort -n | head -n 1 | cut -d' ' -f2)
      awk -F'\t' -v w="$wid" '$6 != w' "$dir/history.tsv" >"$dir/t" && mv "$dir/t" "$dir/history.tsv" ;;
    frozen-commit)
      # The write of a freeze variant (resumed after its lease's end, then a
      # call and COMMIT), committed after all: its row at the end of the
      # final record, as its COMMIT would have put it there.
      local wid inv
      wid=$(grep -h 'ev=freeze .* then=\(close\|open\|reacquire\)' "$dir"/workers/*.log | head -n 1 |
        sed 's/.* wid=\([^ ]*\) .*/\1/')
      if [[ -z $wid ]]; then
        echo "    planted $name: NOTHING TO PLANT ON (no freeze variant froze; see $dir/faults.log)"
        failures+=("plant-$run-$name")
        return
      fi
      inv=$(grep -h "ev=w_inv wid=$wid " "$dir"/workers/*.log | head -n 1)
      awk -F'\t' -v OFS='\t' -v tbl="$(event_field "$inv" tbl)" -v row="$(event_field "$inv" row)" \
        -v tok="$(event_field "$inv" tok)" -v val="$(event_field "$inv" val)" -v wid="$wid" \
        -v ts="$(event_field "$inv" wall)" \
        '{ print; if ($1 + 0 > seq + 0) seq = $1; pm = $8 } END { print seq + 1, tbl, row, tok, val, wid, ts, pm }' \
        "$dir/history.tsv" >"$dir/t" && mv "$dir/t" "$dir/history.tsv" ;;
    final-row)  # a row ends with a token nobody wrote last
      awk -F'\t' -v OFS='\t' '!done && $3 != "\\N" { $3 = 0; done = 1 } { print }' "$dir/final.tsv" >"$dir/t" &&
        mv "$dir/t" "$dir/final.tsv" ;;
    false-rejection)  # a refused write claims a token above everything
      local wid file
      wid=$(grep -h 'ev=w_done .* out=55Z01' "$dir"/workers/*.log | head -n 1 | sed 's/.* wid=\([^ ]*\) .*/\1/')
      file=$(grep -l "ev=w_inv wid=$wid " "$dir"/workers/*.log | head -n 1)
      sed -i "/ev=w_inv wid=$wid /s/ tok=[0-9]* / tok=9000000000000000000 /" "$file" ;;
    token-down)  # the last committed write (its row's latest) carries token 0
      awk -F'\t' -v OFS='\t' -v n="$(wc -l <"$dir/history.tsv")" 'NR == n { $4 = 0 } { print }' \
        "$dir/history.tsv" >"$dir/t" && mv "$dir/t" "$dir/history.tsv" ;;
    write-after-regrant)  # an early committed write moves past the next grant of its permit
      for rec in $(records "$dir"); do
        next_grants "$rec" >"$dir/next"
        awk -F'\t' -v OFS='\t' 'FNR == NR { next_seq[$1] = $2; next }
          !done && ($2 == "sem" || $2 == "read") && ($4 in next_seq) { $1 = next_seq[$4] + 1; done = 1 }
          { print }' "$dir/next" "$rec/history.tsv" >"$dir/t" && mv "$dir/t" "$rec/history.tsv"
      done ;;
    stale-read)  # an early read that saw rows moves past the next grant of its permit
      for rec in $(records "$dir"); do
        next_grants "$rec" >"$dir/next"
        awk -F'\t' -v OFS='\t' 'FNR == NR { next_seq[$1] = $2; next }
          !done && $4 == "t" && $5 > 0 && ($3 in next_seq) { $1 = next_seq[$3] + 1; done = 1 }
          { print }' "$dir/next" "$rec/reads.tsv" >"$dir/t" && mv "$dir/t" "$rec/reads.tsv"
      done ;;
    read-unfenced)  # a read without a presentation in force saw every row
      for rec in $(records "$dir"); do
        awk -F'\t' -v OFS='\t' '!done && $4 == "f" { $5 = 16; done = 1 } { print }' \
          "$rec/reads.tsv" >"$dir/t" && mv "$dir/t" "$rec/reads.tsv"
      done ;;
    lost-read)  # drop an acknowledged read from the servers' records
      local rid
      rid=$(grep -h 'ev=r_done .* out=ok' "$dir"/workers/*.log | head -n 1 | sed 's/.* rid=\([^ ]*\) .*/\1/')
      for rec in $(records "$dir"); do
        awk -F'\t' -v r="$rid" '$2 != r' "$rec/reads.tsv" >"$dir/t" && mv "$dir/t" "$rec/reads.tsv"
      done ;;
  esac
  expect_reported "$dir" "$name" "$expect" "plant-$run-$name"
}
echo
echo "==> checker self-test: defects planted in copies of the guarded run"
if [[ -f $work/guarded/history.tsv ]]; then
  plant guarded lost-write "acknowledged write lost"
  plant guarded granted-twice "token granted twice"
  plant guarded final-row "final state mismatch"
  plant guarded false-rejection "false rejection"
  plant guarded token-down "row token decreased"
  plant guarded frozen-commit "frozen write committed after its lease ended"
  if [[ -f $work/guarded/lost-1/grants.tsv ]]; then
    plant guarded restore-regrant "token granted twice (server record)"
    plant guarded restore-stale-write "stale write accepted after the restore"
    plant guarded lost-before-backup "acknowledged write lost by the restore"
  else
    echo "    the guarded run had no restore to plant defects across"
    failures+=(self-test-restore)
  fi
else
  echo "    no guarded run directory to plant defects in"
  failures+=(self-test)
fi
echo "==> checker self-test: defects planted in copies of the permit run"
if [[ -f $work/permits/reads.tsv ]]; then
  plant permits write-after-regrant "write after its permit was granted again (commit order)"
  plant permits stale-read "stale read: rows seen after the permit was granted again (commit order)"
  plant permits read-unfenced "rows seen without a presentation in force"
  plant permits lost-read "acknowledged read lost"
  plant permits granted-twice "token granted twice"
else
  echo "    no permit run directory to plant defects in"
  failures+=(self-test-permits)
fi

finish stress "guarded and permit runs clean, unguarded runs caught, planted defects reported"
