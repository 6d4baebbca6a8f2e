#!/bin/bash
# Takeover behind a holder frozen in its transaction (issue 24), against a
# throwaway cluster that preloads pg_fencing.  Per round, on a lock of its
# own: holder A takes a 500 ms lease, opens a transaction, writes a row
# under its token, and then sits idle in the transaction (its psql waits on
# its input: a frozen client).  Waiter B is already waiting in
# fencing_acquire(..., wait => 10 s).  Measured from A's lease end
# (expires_at, the server's clock):
#   lockwide,frozen     B's grant returned (the server's clock right after,
#                       in B's session): it waits for the fence gate A holds
#                       until A's transaction is ended
#   lockwide,baseline   the same without A's open transaction (A's lease just
#                       runs out): the hand-over after an expiry
#   perrow,frozen       B's UPDATE of the row A wrote, under B's token (it
#                       waits for A's row lock), its clock_timestamp() after
#                       the row was locked
#   perrow,baseline     the same without A's open transaction
# Each round appends "frozen_holder,VARIANT,1,ROUND,MS,ms" to OUT/frozen_holder.csv
# and the script prints the medians and maxima with their ratio to the
# baseline of the same run.  The bound docs/leases.md states: within 1 s.
#
# Usage (as root): bench/frozen_holder.sh OUT_DIR [ROUNDS]
set -euo pipefail
if [[ ${1:-} != --inside ]]; then
  source "$(dirname "$0")/../scripts/lib.sh"
  out=$(mkdir -p "$1" && cd "$1" && pwd)
  rounds=${2:-10}
  pg_virtualenv -t -v "$PG_MAJOR" -c "-p $(free_port)" -o "shared_preload_libraries=pg_fencing" \
    bash "$0" --inside "$out" "$rounds"
  exit
fi
out=$2
rounds=$3
csv=$out/frozen_holder.csv
: >"$csv"
q() { psql -X -At -v ON_ERROR_STOP=1 "$@"; }

q -q <<'SQL'
CREATE EXTENSION IF NOT EXISTS pg_fencing;
SELECT fencing_grant() IS NOT NULL;
SQL

# One round: variant (lockwide|perrow), frozen (1|0), round number.
round() {
  local kind=$1 frozen=$2 i=$3 lock="frozen-$1-$2-$3" table="t_$1_$2_$3"
  q -q -c "CREATE TABLE $table (id int PRIMARY KEY, tok fencing_token, v text)" \
    -c "INSERT INTO $table VALUES (1, NULL, 'initial')"
  if [[ $kind == lockwide ]]; then
    q -q -c "SELECT fencing_protect('$table', lock_name => '$lock')" >/dev/null
  else
    q -q -c "SELECT fencing_protect('$table')" >/dev/null
  fi
  local a
  a=$(q -c "SELECT fencing_acquire('$lock', 'A', '500 ms')")
  local frozen_pid=
  if ((frozen)); then
    # A writes and then waits on its input, idle in the transaction.
    { echo "BEGIN;"; echo "UPDATE $table SET tok = $a, v = 'by A' WHERE id = 1;"; sleep 5; } |
      psql -X -q >/dev/null 2>&1 &
    frozen_pid=$!
    # Until A's write is in (its transaction holds the row).
    for _ in $(seq 1 100); do
      [[ $(q -c "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                 WHERE c.relname = '$table' AND l.mode = 'RowExclusiveLock' AND l.granted") == 1 ]] && break
      sleep 0.01
    done
  fi
  local ends
  ends=$(q -c "SELECT expires_at FROM fencing_leases WHERE lock_name = '$lock'")
  # B, in one session: the acquire, then (lock-wide) the server's clock as
  # soon as it returned, or (per-row) its write of A's row and the clock
  # once the row was its.  (granted_at would not do: a grant writes its
  # lease before it raises the mark, which is what waits for the gate.)
  local ms since="round(extract(epoch FROM clock_timestamp() - '$ends'::timestamptz) * 1000, 3)"
  if [[ $kind == lockwide ]]; then
    ms=$(q -q <<SQL | tail -n 1
SELECT fencing_acquire('$lock', 'B', '1 minute', '10 s') AS b \gset
SELECT $since;
SQL
    )
  else
    ms=$(q -q <<SQL | tail -n 1
SELECT fencing_acquire('$lock', 'B', '1 minute', '10 s') AS b \gset
UPDATE $table SET tok = :'b', v = 'by B' WHERE id = 1 RETURNING $since;
SQL
    )
  fi
  [[ -n $frozen_pid ]] && { kill "$frozen_pid" 2>/dev/null || true; wait "$frozen_pid" 2>/dev/null || true; }
  [[ $(q -c "SELECT v FROM $table") == "by A" ]] && { echo "round $i: A's write landed" >&2; exit 1; }
  echo "frozen_holder,$kind,$((frozen ? 1 : 0)),$i,$ms,ms" >>"$csv"
}

for i in $(seq 1 "$rounds"); do
  for kind in lockwide perrow; do
    round "$kind" 1 "$i"
    round "$kind" 0 "$i"
  done
done

# Medians and maxima per variant, and the frozen ones against the baseline.
awk -F, '
  { v = $2 "," ($3 ? "frozen" : "baseline"); n[v]++; x[v, n[v]] = $5 }
  END {
    for (v in n) {
      m = n[v]; for (i = 1; i <= m; i++) a[i] = x[v, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      med[v] = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2; max[v] = a[m]
    }
    printf "%-18s %8s %8s %10s\n", "variant", "median", "max", "vs base"
    split("lockwide perrow", kinds, " ")
    for (k = 1; k <= 2; k++) for (f = 1; f <= 2; f++) {
      v = kinds[k] "," (f == 1 ? "baseline" : "frozen"); b = kinds[k] ",baseline"
      printf "%-18s %6.1f ms %6.1f ms %9.1fx\n", v, med[v], max[v], (med[b] > 0 ? med[v] / med[b] : 0)
    }
  }' "$csv"
