#!/bin/bash
# How long a lease takes to pass to a session already waiting for it, with
# the two ways of waiting side by side in one run: the function form
# (SELECT fencing_acquire(lock, holder, ttl, wait)) and the procedure of 1.7
# (CALL fencing_await(lock, holder, ttl, wait), which commits each attempt
# and sleeps outside any transaction).  Runs against the cluster in the
# environment (PG* set by pg_virtualenv) and appends CSV lines
# "benchmark,variant,clients,round,value,unit" to $1.  QUICK=1: a smoke test.
#
# Queue sizes 1, 10 and 100: waiters + 1 pgbench clients each repeat
# "acquire, waiting up to 60 s; keep the lease 50 ms; release", so at any
# moment one client holds the lock and the rest queue behind it.  Each form
# has a lock of its own per size ("bench-handover-N" for the function,
# "bench-await-N" for the procedure), and the sizes run in turn, each size's
# function run followed by its procedure run, so slow drift of the machine
# touches both forms alike.  The grant's instant is the new lease's
# granted_at (clock_timestamp() of the statement that granted it, on the
# server).  The release's commit cannot be read on the server, so two
# readings of the server's clock bound it:
#   before: the release transaction's last statement before COMMIT; the
#     interval to the next grant includes the commit's WAL flush;
#   after: the releaser's first statement once COMMIT has returned; the
#     interval leaves out the reply's trip back, and it is below zero when
#     the waiter had the lock before the releaser's next statement arrived.
# Variants: before_commit / after_commit (the function form, the names of
# the runs before 1.7, so old figures compare) and await_before_commit /
# await_after_commit (the procedure).  Per size about 300 hand-overs per
# form (30 with QUICK=1), at least two per client: 202 with 100 waiters.
#
# A lease's end: a holder takes a 500 ms lease and lets it run out while one
# session waits for the lock (a lock of its own per sample, so that the
# waiter may keep its lease); handover_after_expiry is the waiter's
# granted_at minus the old lease's expires_at, variant "wait" for the
# function form and "await" for the procedure, the samples alternating.
# (A 100 ms lease sometimes ended during the psql start-ups before the
# waiter's call, which then timed its own start-up.)
#
# About 2 minutes in all on 2 cores (the 50 ms holds and the 500 ms leases
# are most of it).
set -euo pipefail
out=$1
quick=${QUICK:-0}
record() { echo "$1,$2,$3,$4,$5,$6" >>"$out"; }
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

psql_q <<'SQL'
DROP TABLE IF EXISTS bench_handover;
CREATE TABLE bench_handover (
  form text, waiters int, token bigint, granted_at timestamptz, before_commit timestamptz,
  after_commit timestamptz, PRIMARY KEY (form, waiters, token));
SQL

# The pgbench script of one form: its acquire sets :token (the function's
# result column named so, the procedure's INOUT argument is called so; \gset
# takes the one row a CALL returns as it takes a SELECT's), then the hold
# and the release, whose transaction notes the lease it ends.
handover_script() { # form lock-prefix
  local form=$1 prefix=$2
  if [[ $form == await ]]; then
    echo "CALL fencing_await('$prefix' || :waiters, 'c' || :client_id, '1 minute', '60 s') \\gset"
  else
    echo "SELECT fencing_acquire('$prefix' || :waiters, 'c' || :client_id, '1 minute', '60 s') AS token \\gset"
  fi
  cat <<PGB
\\sleep 50 ms
BEGIN;
SELECT fencing_release('$prefix' || :waiters, CAST(:token AS fencing_token));
INSERT INTO bench_handover (form, waiters, token, granted_at, before_commit)
  SELECT '$form', :waiters, :token, granted_at, clock_timestamp() FROM fencing_lease
   WHERE lock_name = '$prefix' || :waiters;
COMMIT;
UPDATE bench_handover SET after_commit = clock_timestamp()
 WHERE form = '$form' AND waiters = :waiters AND token = :token;
PGB
}

script_function=$(mktemp)
script_await=$(mktemp)
trap 'rm -f "$script_function" "$script_await"' EXIT
handover_script function bench-handover- >"$script_function"
handover_script await bench-await- >"$script_await"
for waiters in 1 10 100; do
  clients=$((waiters + 1))
  per_client=$(((quick ? 30 : 300) / clients))
  ((per_client >= 2)) || per_client=2
  for form in function await; do
    script=$script_function
    [[ $form == await ]] && script=$script_await
    pgbench -n -f "$script" -D waiters="$waiters" -c "$clients" -j 2 -t "$per_client" >/dev/null 2>&1 ||
      { echo "handover: pgbench failed with $waiters waiters ($form form)" >&2; exit 1; }
  done
done

# Within one form and size, each grant follows the release recorded in the
# row before it; the first grant of a run followed no release.
psql -X -At -F, -v ON_ERROR_STOP=1 <<'SQL' |
SELECT CASE form WHEN 'await' THEN 'await_' ELSE '' END, waiters,
       row_number() OVER (PARTITION BY form, waiters ORDER BY granted_at),
       round(extract(epoch FROM next_grant - before_commit) * 1000, 3),
       round(extract(epoch FROM next_grant - after_commit) * 1000, 3)
  FROM (SELECT *, lead(granted_at) OVER (PARTITION BY form, waiters ORDER BY granted_at) AS next_grant
          FROM bench_handover) h
 WHERE next_grant IS NOT NULL
 ORDER BY form DESC, waiters, 3;
SQL
  while IFS=, read -r prefix waiters i before after; do
    record handover_latency "${prefix}before_commit" "$waiters" "$i" "$before" ms
    record handover_latency "${prefix}after_commit" "$waiters" "$i" "$after" ms
  done

samples=$((quick ? 3 : 30))
for i in $(seq 1 "$samples"); do
  for form in wait await; do
    lock="bench-expiry-$form-$$-$i"
    psql -X -At -v ON_ERROR_STOP=1 -c "SELECT fencing_acquire('$lock', 'holder', '500 ms')" >/dev/null
    ends=$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT expires_at FROM fencing_leases WHERE lock_name = '$lock'")
    if [[ $form == await ]]; then
      psql -X -At -v ON_ERROR_STOP=1 -c "CALL fencing_await('$lock', 'waiter', '1 minute', '10 s')" >/dev/null
    else
      psql -X -At -v ON_ERROR_STOP=1 -c "SELECT fencing_acquire('$lock', 'waiter', '1 minute', '10 s')" >/dev/null
    fi
    ms=$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT round(extract(epoch FROM granted_at - '$ends'::timestamptz) * 1000, 3)
                          FROM fencing_leases WHERE lock_name = '$lock' AND holder = 'waiter'")
    record handover_after_expiry "$form" 1 "$i" "$ms" ms
  done
done
