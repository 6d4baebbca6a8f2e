# The pieces run.sh and fleet.sh share (sourced, not run): the command line
# both take, the checks before a suite, a run of the harness, the verdict on
# a planted defect and the suite's end.  The sourcing script sets, before
# parse_arguments, usage_options (its usage line after BUILD_DIR), duration
# and own_option (below); examples (per kind, in a run's report) it may.

seed=1
keep=0
pg_bindir=()
examples=2

usage() {
  echo "usage: $0 BUILD_DIR $usage_options" >&2
  exit 2
}

# BUILD_DIR into build, then the options every suite takes (--duration S,
# --seed N, --pg-bindir DIR, --keep); any other option and its value go to
# the script's own_option OPTION VALUE, which fails for one it does not know.
parse_arguments() {
  (($# >= 1)) || usage
  build=$(cd "$1" && pwd) || usage
  shift
  while (($#)); do
    case $1 in
      --duration) duration=$2; shift 2 ;;
      --seed) seed=$2; shift 2 ;;
      --pg-bindir) pg_bindir=(--pg-bindir "$2"); shift 2 ;;
      --keep) keep=1; shift ;;
      *) (($# >= 2)) && own_option "$1" "$2" || usage; shift 2 ;;
    esac
  done
}

# prepare_suite WHY NAME: the suite runs as root (WHY: what for) on a built
# tree (stress, check: its programs); its run directories go in a new
# work=/tmp/NAME.*, and failures lists what did not hold.
prepare_suite() {
  stress=$build/test/stress/pg_fencing_stress
  check=$build/test/stress/pg_fencing_stress_check
  if [[ $EUID -ne 0 ]]; then
    echo "$0: run as root ($1)" >&2
    exit 2
  fi
  if [[ ! -x $stress || ! -x $check ]]; then
    echo "$0: $stress or $check missing; build first (cmake --build $build)" >&2
    exit 2
  fi
  work=$(mktemp -d "/tmp/$2.XXXXXX")
  chmod 755 "$work"
  failures=()
}

# stress_run NAME SECONDS ARGS...: runs the harness into $work/NAME; prints
# the checker's report; returns its status.
stress_run() {
  local name=$1 seconds=$2
  shift 2
  echo
  echo "==> $name: pg_fencing_stress --duration $seconds --seed $seed $*"
  # Bounded: setup, the run, the final stop and the check take well under 5 minutes more.
  timeout --kill-after=30 $((seconds + 300)) \
    "$stress" --dir "$work/$name" --duration "$seconds" --seed "$seed" --examples "$examples" \
    "${pg_bindir[@]}" "$@" >"$work/$name.out" 2>&1
  local rc=$?
  sed -n '/^pg_fencing_stress: faults injected/p; /^== check/,$p' "$work/$name.out"
  if ((rc == 2 || rc >= 124)); then
    echo "--- $name: harness error (status $rc); last lines:"
    tail -n 5 "$work/$name.out"
  fi
  return $rc
}

# expect_no_violation NAME SECONDS ARGS...: a run that must find no
# violation; records a failure otherwise.
expect_no_violation() {
  local name=$1
  stress_run "$@"
  local rc=$?
  if ((rc == 0)); then
    echo "--- $name: PASS (no violation)"
  else
    echo "--- $name: FAILED (status $rc)"
    failures+=("$name")
  fi
}

# copy_run RUN_DIR DIR: a copy of a run's directory (without the server's
# data) to plant a defect in.
copy_run() {
  rm -rf "$2"
  cp -a "$1" "$2"
  rm -rf "$2/pgdata"
}

# expect_reported DIR NAME EXPECT FAILURE: the checker, on a copy with the
# defect NAME planted, must report EXPECT (and find violations); otherwise
# FAILURE goes on the list.
expect_reported() {
  local dir=$1 name=$2 expect=$3 failure=$4
  "$check" "$dir" --examples 1 >"$dir.out" 2>&1
  local rc=$?
  if ((rc == 1)) && grep -q "$expect" "$dir.out"; then
    echo "    planted $name: reported ($(grep -m1 "$expect" "$dir.out" | sed 's/^ *//'))"
  else
    echo "    planted $name: NOT REPORTED (status $rc, expected \"$expect\")"
    failures+=("$failure")
  fi
}

# finish SUITE WHAT_HELD: the suite's verdict and exit status; the run
# directories go after a pass, unless --keep.
finish() {
  echo
  if ((${#failures[@]} == 0)); then
    echo "$1: PASS ($2)"
    ((keep)) && echo "run directories kept in $work" || rm -rf "$work"
    exit 0
  fi
  echo "$1: FAILED: ${failures[*]} (run directories kept in $work)"
  exit 1
}
