-- Sessions among tenants that do not trust each other (1.9): what one
-- role can cost the others.  Tenant A's application role (tn_app), tenant
-- B's (tn_b), which has nothing but PUBLIC's EXECUTE, and every ttl and
-- wait judged as a duration from now on the server's clock.  Own
-- database: the sessions here are the only ones.
CREATE DATABASE fencing_tenants_probe;
\c fencing_tenants_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.try(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  detail text;
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN regexp_replace(SQLSTATE || ': ' || SQLERRM || coalesce(' (' || nullif(detail, '') || ')', ''),
                        '[0-9]{10,}', 'N', 'g');
END $$;

CREATE ROLE tn_app;
CREATE ROLE tn_b;
CREATE ROLE tn_c;
SELECT fencing_allow_create('tn_app');

-- 1. B floods sessions that end at once, at REPEATABLE READ (where an open
-- does not sweep): as many as the default limit lets it have, 20,000 of
-- them.  Before 1.9 every open at READ COMMITTED, A's too, then swept
-- them all in one transaction, one lock each, and failed with 53200 (out
-- of shared memory), as did the expiry worker's every pass.
SET ROLE tn_b;
SHOW pg_fencing.max_sessions_per_role;
SET default_transaction_isolation = 'repeatable read';
SELECT count(fencing_session_open('junk', '1 microsecond')) AS opened
  FROM generate_series(1, 20000);
RESET default_transaction_isolation;
RESET ROLE;
-- A opens at READ COMMITTED: its open sweeps its own sessions only.
SET ROLE tn_app;
SELECT fencing_session_open('a-worker', '1 hour') AS a \gset
SELECT fencing_create_lock('sw-job');
SELECT fencing_session_acquire(:a, 'sw-job') IS NOT NULL AS a_holds;
RESET ROLE;
-- The worker's pass (here by hand: this cluster does not preload the
-- library) ends one batch of B's sessions, in locks the lock table holds,
-- and comes back at once for the rest: the next end it answers is past.
BEGIN;
SELECT fencing_announce_expiries() <= clock_timestamp() AS more_to_sweep;
SELECT count(*) AS holds_taken FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 5 AND pid = pg_backend_pid();
COMMIT;
SELECT count(*) AS b_sessions_left FROM fencing_sessions WHERE role = 'tn_b'::regrole;
-- Batch after batch, each in a transaction of its own, end them all (as
-- the worker's passes do, or a job a DBA schedules without the preload).
SELECT fencing_end_expired_sessions(NULL, 100) AS swept;
DO $$
BEGIN
  WHILE fencing_end_expired_sessions(NULL, 100) > 0 LOOP
    COMMIT;
  END LOOP;
END $$;
SELECT count(*) AS b_sessions_left FROM fencing_sessions WHERE role = 'tn_b'::regrole;
SELECT count(*) AS a_sessions_left FROM fencing_sessions WHERE role = 'tn_app'::regrole;

-- 2. The limit: a superuser sets it per role (ALTER ROLE ... SET, here
-- SET in the session); B cannot raise it, and an open past it is refused
-- with 53400 and opens nothing.  Sessions that ended count until swept:
-- B's own next open at READ COMMITTED sweeps them.
SET pg_fencing.max_sessions_per_role = 5;
SET ROLE tn_b;
SET pg_fencing.max_sessions_per_role = 1000;
SELECT count(fencing_session_open('b', '1 hour')) AS opened FROM generate_series(1, 5);
SELECT pg_temp.try($$SELECT fencing_session_open('b', '1 hour')$$);
SELECT count(*) AS b_sessions FROM fencing_sessions;
-- A is not B: its open works.
RESET ROLE;
SET ROLE tn_app;
SELECT fencing_session_open('a', '1 hour') IS NOT NULL AS a_opens;
RESET ROLE;
SET ROLE tn_b;
SELECT count(fencing_session_close(session_id)) AS closed FROM fencing_sessions;
SET default_transaction_isolation = 'repeatable read';
SELECT count(fencing_session_open('b', '1 microsecond')) AS opened FROM generate_series(1, 5);
SELECT pg_temp.try($$SELECT fencing_session_open('b', '1 hour')$$);
RESET default_transaction_isolation;
SELECT fencing_session_open('b', '1 hour') IS NOT NULL AS opens_after_its_own_sweep;
SELECT count(*) AS b_sessions FROM fencing_sessions;
RESET ROLE;
-- Below the limit an open neither sweeps nor counts the role's rows
-- (1.10): it counts the entries of the index on the sessions' role (at
-- least as many as the role has sessions; a deleted row's entry counts
-- until VACUUM, so C, which never had a session, shows it exactly), and
-- only when they reach the limit does it sweep and count.  C's two ended
-- sessions stay through three opens under its limit of 5, and are swept
-- by the open that finds the limit reached.
SET ROLE tn_c;
SET default_transaction_isolation = 'repeatable read';
SELECT count(fencing_session_open('c', '1 microsecond')) AS opened FROM generate_series(1, 2);
RESET default_transaction_isolation;
SELECT count(fencing_session_open('c', '1 hour')) AS opened_below_the_limit
  FROM generate_series(1, 3);
SELECT count(*) FILTER (WHERE NOT live) AS ended_left, count(*) AS c_sessions FROM fencing_sessions;
SELECT fencing_session_open('c', '1 hour') IS NOT NULL AS opens_at_the_limit;
SELECT count(*) FILTER (WHERE NOT live) AS ended_left, count(*) AS c_sessions FROM fencing_sessions;
RESET ROLE;
RESET pg_fencing.max_sessions_per_role;

-- 3. A session id is not a secret B can learn from pg_locks: the hold an
-- acquire keeps on A's session until its transaction ends is keyed by a
-- random number, not by the session's id.
SET ROLE tn_app;
BEGIN;
SELECT fencing_session_acquire(:a, 'sw-job') IS NOT NULL AS a_holds;
SET LOCAL ROLE tn_b;
SELECT count(*) AS holds_seen,
       count(*) FILTER (WHERE (classid::bigint << 32 | objid::bigint) = :a) AS showing_the_id
  FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 5;
COMMIT;
RESET ROLE;

-- The internal functions of 1.9 are not B's: the note that tells the
-- COMMIT check a lease was ended by the transaction itself (which would
-- let B commit writes made after its lease ran out), the sweep, the
-- hold's give-back.  And an EXECUTE granted by mistake still does not let
-- B declare a lease ended by its own transaction.
SET ROLE tn_b;
\set VERBOSITY sqlstate
SELECT fencing_note_ended_here('1');
SELECT fencing_session_unhold(1);
SELECT fencing_end_expired_sessions('tn_app', 1);
SELECT fencing_session_entries('tn_app'::regrole, 10);
RESET ROLE;
GRANT EXECUTE ON FUNCTION fencing_note_ended_here(fencing_token) TO tn_b;
SET ROLE tn_b;
\set VERBOSITY default
SELECT fencing_note_ended_here('1');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION fencing_note_ended_here(fencing_token) FROM tn_b;

-- 4. Every ttl and wait is a duration from now on the server's clock:
-- '-1 year 360 days 1 sec' is positive to the interval's own ordering
-- (months of 30 days) but ends five days before now.  Refused with 22023
-- by every function alike; before 1.9 each of these opened a session
-- that was already over, granted a lease that had already ended, or
-- (a negative wait, in acquire_all) granted.
SET ROLE tn_app;
SELECT fencing_session_open('a', '1 hour') AS s \gset
SELECT '-1 year 360 days 1 sec'::interval > '0' AS positive_as_an_interval,
       now() + '-1 year 360 days 1 sec'::interval < now() AS ends_before_now;
\set VERBOSITY sqlstate
SELECT fencing_session_open('cal', '-1 year 360 days 1 sec');
SELECT fencing_session_renew(:s, '-1 year 360 days 1 sec');
SELECT fencing_acquire('sw-cal', 'a', '-1 year 360 days 1 sec');
SELECT fencing_acquire('sw-cal', 'a', '1 min', wait => '-1 year 360 days 1 sec');
SELECT fencing_renew('sw-job', '1', '-1 year 360 days 1 sec');
SELECT fencing_acquire_shared('sw-cal', 'a', '-1 year 360 days 1 sec');
SELECT fencing_acquire_permit('sw-cal', 'a', 2, '-1 year 360 days 1 sec');
CALL fencing_await('sw-cal', 'a', '-1 year 360 days 1 sec', '0');
CALL fencing_await('sw-cal', 'a', '1 min', '-1 year 360 days 1 sec');
SELECT fencing_session_acquire(:s, 'sw-cal', '-1 year 360 days 1 sec');
SELECT fencing_session_acquire_all(:s, '{sw-cal}', '-1 year 360 days 1 sec');
SELECT fencing_session_acquire_all(:s, '{sw-cal}', '-1 s');
\set VERBOSITY default
-- The message says how the clock counts it (the moment replaced by T).
SELECT regexp_replace(pg_temp.try($$SELECT fencing_session_open('cal', '-1 year 360 days 1 sec')$$),
                      'at [0-9-]+ [0-9:.+-]+', 'at T') AS message;
SELECT fencing_session_acquire_all(:s, '{sw-cal}', '-1 s');
-- Nothing was opened or granted.
SELECT count(*) AS sessions_named_cal FROM fencing_sessions WHERE holder = 'cal';
SELECT count(*) AS leases_of_sw_cal FROM fencing_leases WHERE lock_name = 'sw-cal';
-- A calendar interval that does end later is a ttl like any.
SELECT fencing_session_open('cal', '1 mon -29 days') IS NOT NULL AS opens;
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_tenants_probe;
DROP ROLE tn_app, tn_b, tn_c;
