-- Sessions (1.8): one keepalive for many leases, many locks at once.
-- Own database: the sessions and leases here are the only ones.
CREATE DATABASE fencing_session_probe;
\c fencing_session_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never
-- Errors that name a session (whose id is a fresh grant) with the id
-- replaced by N, so that the expected output stays the same.
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

CREATE ROLE ss_app;            -- owns the locks and the table
CREATE ROLE ss_worker IN ROLE ss_app;  -- has the application's privileges
CREATE ROLE ss_mallory;        -- another tenant
GRANT CREATE ON SCHEMA public TO ss_app;
SELECT fencing_allow_create('ss_app');
SET ROLE ss_app;
SELECT fencing_create_lock(name) FROM unnest('{p1,p2,p3,p4}'::text[]) name;
CREATE TABLE parts (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('parts', lock_name => 'p1');
RESET ROLE;

-- 1. A session holds many leases, each with its own token; fencing_leases
-- shows them in the session, with the session's end as theirs.
SET ROLE ss_app;
SELECT fencing_session_open('worker-1', '1 hour') AS s \gset
SELECT fencing_session_acquire(:s, 'p1') AS t1, fencing_session_acquire(:s, 'p2') AS t2 \gset
SELECT :t1 < :t2 AS own_tokens;
SELECT l.lock_name, l.holder, l.state, l.session_id = :s AS in_session,
       l.expires_at = s.expires_at AS session_end
  FROM fencing_leases l, fencing_sessions s ORDER BY 1;
SELECT role, holder, ttl, live, leases FROM fencing_sessions;
SELECT fencing_leader('p1') AS leader;
-- The lease guards as any: its token passes, a missing one is refused.
INSERT INTO parts VALUES (1, 'by worker-1', :'t1');
UPDATE parts SET v = 'no token', tok = NULL WHERE id = 1;
SELECT v FROM parts;
-- The same lock again in the same session: the same lease and token.
SELECT fencing_session_acquire(:s, 'p1') = :'t1' AS same_token;
-- Another holder cannot take a lock the session holds.
SELECT fencing_acquire('p2', 'other', '1 minute') IS NULL AS busy;

-- 2. A renew writes one row, whatever the number of leases, and moves
-- every lease's end with it.
SELECT fencing_session_acquire(:s, 'p3') IS NOT NULL AS third;
BEGIN;
SELECT (SELECT n_tup_upd + n_tup_ins FROM pg_stat_xact_all_tables WHERE relname = 'fencing_lease') AS lease_before,
       (SELECT n_tup_upd + n_tup_ins FROM pg_stat_xact_all_tables WHERE relname = 'fencing_session') AS session_before \gset
SELECT fencing_session_renew(:s, '2 hours');
SELECT (SELECT n_tup_upd + n_tup_ins FROM pg_stat_xact_all_tables WHERE relname = 'fencing_lease') - :lease_before AS lease_rows_written,
       (SELECT n_tup_upd + n_tup_ins FROM pg_stat_xact_all_tables WHERE relname = 'fencing_session') - :session_before AS session_rows_written;
COMMIT;
SELECT count(*) AS leases_at_the_new_end FROM fencing_leases l, fencing_sessions s
 WHERE l.session_id = s.session_id AND l.expires_at = s.expires_at
   AND s.expires_at > clock_timestamp() + interval '1 hour 59 minutes';
-- fencing_renew on a lease in a session renews the session.
SELECT fencing_renew('p1', :'t1', '3 hours');
SELECT expires_at > clock_timestamp() + interval '2 hours 59 minutes' AS session_renewed
  FROM fencing_sessions;
-- fencing_release ends one lease of the session; the others stay.
SELECT fencing_release('p3', (SELECT token FROM fencing_leases WHERE lock_name = 'p3'));
SELECT lock_name, state, session_id IS NOT NULL AS in_session FROM fencing_leases ORDER BY 1;
SELECT leases FROM fencing_sessions;

-- 3. Close releases every lease in the session at once, without the
-- lock-delay, and returns how many.
SELECT fencing_set_lock_delay('p2', '1 hour');
SELECT fencing_session_close(:s) AS released;
SELECT lock_name, state, session_id FROM fencing_leases ORDER BY 1;
SELECT count(*) AS sessions FROM fencing_sessions;
SELECT fencing_acquire('p2', 'other', '1 minute') IS NOT NULL AS free_at_once;
SELECT fencing_release('p2', (SELECT token FROM fencing_leases WHERE lock_name = 'p2'));
SELECT fencing_set_lock_delay('p2', '0');
-- An ended session is ended: no renew, no acquire, no second close.
SELECT fencing_session_renew(:s);
SELECT pg_temp.try(format('SELECT fencing_session_acquire(%s, %L)', :s, 'p1'));
SELECT fencing_session_close(:s) AS released_again;

-- 4. A session that is not renewed loses every lease at once, at its end
-- by the server's clock; a write under one of them is refused at COMMIT
-- (55Z04), and under the lock's next grant (55Z01).
SELECT fencing_session_open('worker-2', '1 s') AS s \gset
SELECT fencing_session_acquire(:s, 'p1') AS t1, fencing_session_acquire(:s, 'p2') AS t2 \gset
BEGIN;
UPDATE parts SET v = 'late', tok = :'t1' WHERE id = 1;
SELECT pg_sleep(1.3);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT count(DISTINCT l.expires_at) AS one_end, bool_and(NOT l.live) AS all_ended,
       string_agg(l.state, ',' ORDER BY l.lock_name) AS states
  FROM fencing_leases l WHERE l.lock_name IN ('p1', 'p2');
SELECT live, leases FROM fencing_sessions;
SELECT expires_at AS session_end FROM fencing_sessions \gset
SELECT fencing_session_renew(:s) AS renewed_too_late;
SELECT fencing_acquire('p1', 'worker-3', '1 minute') AS t3 \gset
UPDATE parts SET v = 'by worker-3', tok = :'t3' WHERE id = 1;
SELECT pg_temp.try(format('UPDATE parts SET v = %L, tok = %L WHERE id = 1', 'stale', :'t1'));
SELECT v FROM parts;
-- The history keeps each lease with the session's end as its own.
SELECT lock_name, holder, end_reason, ended_at = :'session_end' AS at_session_end
  FROM fencing_history WHERE holder = 'worker-2' ORDER BY lock_name;
SELECT fencing_release('p1', :'t3');
-- The expiry worker (this cluster does not preload the library) sweeps
-- the ended session; here a superuser's sweep does.  An open no longer
-- sweeps its role's ended sessions below the role's limit (1.10).
RESET ROLE;
SELECT fencing_end_expired_sessions(NULL, 100) AS swept;
SET ROLE ss_app;

-- 5. Many locks at once: every one or none.  Each name once, whatever the
-- order and repeats; tokens in the order asked.
SELECT fencing_session_open('worker-4', '1 hour') AS s \gset
SELECT fencing_session_acquire_all(:s, '{p3,p1,p3}') AS ts \gset
SELECT (:'ts'::fencing_token[])[1] = (:'ts'::fencing_token[])[3] AS repeat_same,
       (:'ts'::fencing_token[])[1] = (SELECT token FROM fencing_leases WHERE lock_name = 'p3') AS p3,
       (:'ts'::fencing_token[])[2] = (SELECT token FROM fencing_leases WHERE lock_name = 'p1') AS p1;
SELECT fencing_session_close(:s) AS released;
-- One of the locks is held by another: NULL, and none of them taken.
SELECT fencing_acquire('p4', 'other', '1 minute') AS t4 \gset
SELECT fencing_session_open('worker-5', '1 hour') AS s \gset
SELECT fencing_session_acquire_all(:s, '{p1,p2,p4}') IS NULL AS none;
SELECT fencing_session_acquire_all(:s, '{p1,p2,p4}', '200 ms') IS NULL AS none_after_a_wait;
SELECT lock_name, holder, state FROM fencing_leases ORDER BY 1;
SELECT leases FROM fencing_sessions;
SELECT fencing_release('p4', :'t4');
SELECT array_length(fencing_session_acquire_all(:s, '{p1,p2,p4}'), 1) AS all_three;
SELECT leases FROM fencing_sessions;

-- 6. A revoke ends that lease only; the session keeps the others.
RESET ROLE;
SELECT fencing_revoke('p2', 'incident') IS NOT NULL AS revoked;
SET ROLE ss_app;
SELECT lock_name, state, end_reason, session_id IS NOT NULL AS in_session
  FROM fencing_leases ORDER BY 1;
SELECT leases FROM fencing_sessions;
RESET ROLE;

-- 7. Bad input.
SET ROLE ss_app;
SELECT fencing_session_open(NULL, '1 minute');
SELECT fencing_session_open('', '1 minute');
SELECT fencing_session_open('w', NULL);
SELECT fencing_session_open('w', '0');
SELECT fencing_session_open('w', '-1 s');
SELECT fencing_session_renew(NULL);
SELECT fencing_session_renew(:s, '0');
SELECT fencing_session_close(NULL);
SELECT fencing_session_acquire(NULL, 'p1');
SELECT fencing_session_acquire(:s, NULL);
SELECT fencing_session_acquire(:s, 'p1', kind => 'semaphore');
SELECT fencing_session_acquire(:s, 'p1', kind => 'permit', permits => 2);
SELECT fencing_session_acquire(:s, 'p1', permits => 2);
SELECT fencing_session_acquire(:s, 'p1', '-1 s');
SELECT fencing_session_acquire(-1, 'p1');
SELECT fencing_session_acquire_all(:s, NULL);
SELECT fencing_session_acquire_all(:s, '{}');
SELECT fencing_session_acquire_all(:s, '{p1,NULL}');
RESET ROLE;

-- 8. Who may do what.  A role with the session role's privileges acts in
-- it; another role may neither see, renew, acquire in nor close it, nor
-- reach the internal functions or the table.  To another role the session
-- answers exactly as an id that does not exist (-7): renew false, close
-- 0, acquire 55Z05.
SET ROLE ss_worker;
SELECT fencing_session_renew(:s) AS worker_renews;
SELECT count(*) AS worker_sees FROM fencing_sessions;
RESET ROLE;
SET ROLE ss_mallory;
SELECT count(*) AS mallory_sees FROM fencing_sessions;
SELECT fencing_session_renew(:s, '1 s') AS renews, fencing_session_renew(-7, '1 s') AS renews_made_up;
SELECT fencing_session_close(:s) AS closes, fencing_session_close(-7) AS closes_made_up;
SELECT pg_temp.try(format('SELECT fencing_session_acquire(%s, %L)', :s, 'm1'));
SELECT pg_temp.try(format('SELECT fencing_session_acquire(%s, %L)', -7, 'm1'));
SELECT pg_temp.try(format('SELECT fencing_session_acquire_all(%s, %L)', :s, '{m1}'));
SELECT pg_temp.try(format('SELECT fencing_session_acquire_all(%s, %L)', -7, '{m1}'));
SELECT fencing_session_close_as('ss_app'::regrole, :s);
SELECT fencing_session_for('ss_app'::regrole, :s, 'x');
SELECT fencing_session_hold(:s, true, false);
SELECT fencing_end_expired_sessions(NULL, 10);
SELECT * FROM fencing_session;
UPDATE fencing_lease SET session_id = NULL;
-- Its own session cannot take another application's lock.
SELECT fencing_session_open('mallory', '1 hour') AS m \gset
SELECT fencing_session_acquire(:m, 'p3');
-- ... nor all at once, and the refusal, caught in a PL/pgSQL block, leaves
-- the transaction as it was (acquire_all's own subtransaction rolled back
-- before the error goes up to the block's): the next transaction block
-- works.
SELECT set_config('ss.m', :'m', false) IS NOT NULL AS set;
DO $$
BEGIN
  PERFORM fencing_session_acquire_all(current_setting('ss.m')::bigint, '{m0,p3}');
EXCEPTION WHEN insufficient_privilege THEN
  RAISE NOTICE 'refused: %', SQLERRM;
END $$;
BEGIN;
SELECT count(*) AS mallory_leases FROM fencing_leases WHERE session_id = :m;
COMMIT;
SELECT fencing_session_close(:m) AS mallory_released;
RESET ROLE;
-- A superuser may close any session, during an incident.
SELECT fencing_session_close(:s) AS released_by_superuser;
SELECT lock_name, state, session_id FROM fencing_leases ORDER BY 1;

-- 9. A shared acquire judges an exclusive lease in a session by the
-- session's end, not the lease's own (which a renewal does not move).
SET ROLE ss_app;
SELECT fencing_create_lock('sh1');
SELECT fencing_acquire_shared('sh1', 'reader', '1 minute') AS r \gset
SELECT fencing_release('sh1', :'r');
SELECT fencing_session_open('writer', '500 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'sh1') IS NOT NULL AS exclusive_in_session;
SELECT fencing_session_renew(:s, '1 hour');
SELECT pg_sleep(0.7);
SELECT fencing_acquire_shared('sh1', 'reader', '1 minute') IS NULL AS shared_refused;
SELECT state FROM fencing_leases WHERE lock_name = 'sh1';
SELECT fencing_session_close(:s) AS released;
-- A wait is cut at the session's end: a lease granted after it would be
-- dead.  p4's holder keeps it a second; the session ends in half of one.
SELECT fencing_acquire('p4', 'other', '1 s') AS t4 \gset
SELECT fencing_session_open('short-wait', '500 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'p4', '3 s') IS NULL AS not_granted;
SELECT holder FROM fencing_leases WHERE lock_name = 'p4';
RESET ROLE;
-- A session whose role was dropped is nobody's: the view still answers
-- (its role shown by oid), and only a superuser can close it.
CREATE ROLE ss_gone;
SET ROLE ss_gone;
SELECT fencing_session_open('orphan', '1 hour') AS s \gset
RESET ROLE;
DROP ROLE ss_gone;
SELECT role::text ~ '^[0-9]+$' AS role_by_oid, holder FROM fencing_sessions WHERE session_id = :s;
SET ROLE ss_app;
SELECT fencing_session_renew(:s) AS renews_orphan, fencing_session_close(:s) AS closes_orphan;
RESET ROLE;
SELECT fencing_session_close(:s) AS released_by_superuser;

-- 10. CALL fencing_await(..., session => id) waits for a lease in the
-- session, committing before each sleep (TAP 012 shows it woken, holding
-- no snapshot): the lease is the session's.
SET ROLE ss_app;
SELECT fencing_session_open('awaiter', '1 hour') AS s \gset
CALL fencing_await('p1', session => :s, wait => '0') \gset p1_
CALL fencing_await(lock_name => 'p2', session => :s, wait => '1 s', payload => '{"n": 2}') \gset p2_
SELECT lock_name, holder, payload, session_id = :s AS in_session, state,
       token = CASE lock_name WHEN 'p1' THEN :'p1_token' ELSE :'p2_token' END::fencing_token AS its_token
  FROM fencing_leases WHERE lock_name IN ('p1', 'p2') ORDER BY 1;
-- A lock held by another: NULL once the wait runs out (\gset unsets the
-- variable for a NULL), nothing taken.
SELECT fencing_acquire('p4', 'other', '1 hour') AS t4 \gset
CALL fencing_await('p4', session => :s, wait => '100 ms') \gset p4_
SELECT :{?p4_token} AS got_p4, leases FROM fencing_sessions WHERE session_id = :s;
-- Bad input: a holder or a ttl of its own, no wait, kinds a session does
-- not hold, inside a transaction block, an ended session.
CALL fencing_await('p3', 'me', session => :s, wait => '0');
CALL fencing_await('p3', ttl => '1 minute', session => :s, wait => '0');
CALL fencing_await('p3', session => :s);
\set VERBOSITY sqlstate
CALL fencing_await('p3', session => :s, wait => '0', kind => 'shared') \gset shr_
\set VERBOSITY default
SELECT :'shr_token'::bigint > 0 AS shared_in_session;
\set VERBOSITY sqlstate
BEGIN;
CALL fencing_await('p3', session => :s, wait => '0');
ROLLBACK;
SELECT fencing_session_close(:s) AS released;
CALL fencing_await('p3', session => :s, wait => '0');
\set VERBOSITY default
SELECT fencing_release('p4', :'t4');
RESET ROLE;
-- Another role cannot wait in the session (42501), nor take the
-- application's lock in its own.
SET ROLE ss_app;
SELECT fencing_session_open('awaiter-2', '1 hour') AS s \gset
RESET ROLE;
SET ROLE ss_mallory;
\set VERBOSITY sqlstate
CALL fencing_await('m1', session => :s, wait => '0');
\set VERBOSITY default
SELECT fencing_session_open('mallory', '1 hour') AS m \gset
CALL fencing_await('p3', session => :m, wait => '0');
SELECT fencing_session_close(:m) AS mallory_released;
RESET ROLE;
SELECT fencing_session_close(:s) AS released;

-- 11. Permits and shared leases in a session: one keepalive for every
-- kind, each with its own token, ended with the session.
SELECT fencing_session_open('sem-worker', '1 hour') AS s \gset
SELECT fencing_session_acquire(:s, 'sem', kind => 'permit', permits => 1) AS pt,
       fencing_session_acquire(:s, 'shr', kind => 'shared') AS st \gset
SELECT leases FROM fencing_sessions WHERE session_id = :s;
SELECT lock_name, kind, state, session_id = :s AS in_session
  FROM fencing_permits WHERE lock_name IN ('sem', 'shr') ORDER BY 1;
SELECT fencing_acquire_permit('sem', 'other', 1, '1 minute') IS NULL AS sem_busy;
-- fencing_renew on a permit in a session renews the session, and with it
-- every lease in it.
SELECT fencing_session_renew(:s, '1 minute') AS shortened;
SELECT fencing_renew('sem', :'pt', '1 hour') AS renewed;
SELECT expires_at > now() + interval '50 minutes' AS session_renewed
  FROM fencing_sessions WHERE session_id = :s;
SELECT bool_and(expires_at > now() + interval '50 minutes') AS both_renewed
  FROM fencing_permits WHERE lock_name IN ('sem', 'shr');
-- A release takes that one out of the session only.
SELECT fencing_release('shr', :'st') AS released_one;
SELECT leases FROM fencing_sessions WHERE session_id = :s;
SELECT state, session_id IS NULL AS out_of_session FROM fencing_permits WHERE lock_name = 'shr';
-- Not renewed: the permit ends with the session, by the server's clock.
SELECT fencing_session_renew(:s, '500 ms') AS renewed_short;
SELECT pg_sleep(0.7);
SELECT state FROM fencing_permits WHERE lock_name = 'sem';
SELECT fencing_renew('sem', :'pt', '1 minute') AS renew_after_end;
-- Close releases permits and shared leases too.
SELECT fencing_session_open('sem-worker-2', '1 hour') AS s2 \gset
SELECT fencing_session_acquire(:s2, 'shr', kind => 'shared') IS NOT NULL AS shared_again;
SELECT fencing_session_close(:s2) AS closed_released;
SELECT state, session_id IS NULL AS out_of_session FROM fencing_permits WHERE lock_name = 'shr';
\set VERBOSITY sqlstate
SELECT fencing_session_acquire(:s2, 'shr', kind => 'shared');
\set VERBOSITY default
-- Another tenant against a permit in the application's session: she may
-- not take a permit in the session, nor the application's semaphore in a
-- session of her own, nor renew or release the permit by its token, and
-- she sees none of it.  The permit and its session are untouched.
SET ROLE ss_app;
SELECT fencing_session_open('pool-worker', '1 hour') AS s3 \gset
SELECT fencing_session_acquire(:s3, 'ss_pool', kind => 'permit', permits => 2) AS pp \gset
RESET ROLE;
SET ROLE ss_mallory;
SELECT pg_temp.try(format('SELECT fencing_session_acquire(%s, %L, kind => %L, permits => 2)',
                          :s3, 'ss_pool', 'permit'));
SELECT fencing_session_open('mallory-pool', '1 hour') AS m3 \gset
SELECT pg_temp.try(format('SELECT fencing_session_acquire(%s, %L, kind => %L, permits => 2)',
                          :m3, 'ss_pool', 'permit'));
SELECT pg_temp.try(format('SELECT fencing_renew(%L, %L, %L)', 'ss_pool', :'pp', '1 minute'));
SELECT pg_temp.try(format('SELECT fencing_release(%L, %L)', 'ss_pool', :'pp'));
SELECT count(*) AS mallory_sees_permits FROM fencing_permits WHERE lock_name = 'ss_pool';
SELECT count(*) AS mallory_sees_sessions FROM fencing_sessions WHERE session_id = :s3;
SELECT fencing_session_close(:m3) AS mallory_released;
RESET ROLE;
SELECT leases, expires_at > now() + interval '50 minutes' AS not_shortened
  FROM fencing_sessions WHERE session_id = :s3;
SELECT state, session_id = :s3 AS in_session FROM fencing_permits WHERE lock_name = 'ss_pool';
SELECT fencing_session_close(:s3) AS pool_released;

\c contrib_regression
DROP DATABASE fencing_session_probe;
DROP ROLE ss_app, ss_worker, ss_mallory;
