-- Leases: acquire, renew, release, leader, expiry on the server's clock.
\set SHOW_CONTEXT never

-- A free lock: the first caller gets a new token.
SELECT fencing_acquire('job', 'worker-a', '10 s') AS a_token \gset
SELECT :'a_token'::fencing_token > '0' AS got_token;
-- Another holder gets NULL while the lease is live.
SELECT fencing_acquire('job', 'worker-b', '10 s') IS NULL AS b_refused;
-- The live holder calling again gets its own token back, lease extended.
SELECT expires_at AS first_expiry FROM fencing_leases WHERE lock_name = 'job' \gset
SELECT fencing_acquire('job', 'worker-a', '20 s') = :'a_token' AS same_token_again;
SELECT expires_at > :'first_expiry' AS extended FROM fencing_leases WHERE lock_name = 'job';
SELECT fencing_leader('job');
SELECT lock_name, holder, token = :'a_token' AS token_is_a, live,
       expires_at - granted_at BETWEEN interval '19 s' AND interval '21 s' AS ttl_applied
FROM fencing_leases WHERE lock_name = 'job';

-- Renew: only with the current token.
SELECT fencing_renew('job', :'a_token', '10 s') AS renewed;
SELECT fencing_renew('job', '999999', '10 s') AS renewed_with_wrong_token;
SELECT fencing_renew('no-such-lock', :'a_token', '10 s') AS renewed_unknown_lock;

-- Release: only with the current token; the lock is free at once.
SELECT fencing_release('job', '999999') AS released_with_wrong_token;
SELECT fencing_release('job', :'a_token') AS released;
SELECT fencing_release('job', :'a_token') AS released_twice;
SELECT fencing_leader('job') IS NULL AS no_leader;
SELECT fencing_renew('job', :'a_token', '10 s') AS renew_after_release;
SELECT fencing_acquire('job', 'worker-b', '10 s') AS b_token \gset
SELECT :'b_token'::fencing_token > :'a_token'::fencing_token AS b_token_is_newer;
SELECT fencing_leader('job');

-- Expiry, judged by clock_timestamp(): a short lease lapses by itself.
SELECT fencing_acquire('short', 'worker-a', '200 ms') AS short_token \gset
SELECT fencing_acquire('short', 'worker-b', '1 s') IS NULL AS busy_before_expiry;
SELECT pg_sleep(0.3);
SELECT fencing_leader('short') IS NULL AS expired, live FROM fencing_leases WHERE lock_name = 'short';
-- An expired lease is never revived, by renew or release ...
SELECT fencing_renew('short', :'short_token', '10 s') AS renew_expired;
SELECT fencing_release('short', :'short_token') AS release_expired;
-- ... and re-acquiring, even by the same holder, yields a new token.
SELECT fencing_acquire('short', 'worker-a', '10 s') > :'short_token'::fencing_token AS new_token_after_expiry;

-- Expiry is judged inside the transaction too, not at its start.
BEGIN;
SELECT fencing_acquire('in-tx', 'worker-a', '200 ms') IS NOT NULL AS acquired;
SELECT pg_sleep(0.3);
SELECT fencing_leader('in-tx') IS NULL AS expired_within_transaction;
COMMIT;

-- Tokens of different locks come from the one sequence: all distinct.
SELECT count(*) = count(DISTINCT token) AS tokens_distinct FROM fencing_leases;

-- Bad arguments: clear errors with SQLSTATE 22023.
SELECT fencing_acquire(NULL, 'w', '1 s');
SELECT fencing_acquire('', 'w', '1 s');
SELECT fencing_acquire('x', NULL, '1 s');
SELECT fencing_acquire('x', '', '1 s');
SELECT fencing_acquire('x', 'w', '0 s');
SELECT fencing_acquire('x', 'w', '-1 s');
SELECT fencing_acquire('x', 'w', NULL);
SELECT fencing_acquire('x', 'w', '1 s', '-1 s');
-- The longest wait lock_timeout can express is accepted; longer ones are
-- refused at once, not cut short (1.1 failed them with a lock_timeout
-- overflow).
SELECT fencing_acquire('x', 'w', '1 s', '30 days');
SELECT fencing_acquire('long-wait', 'w', '1 s', '2147483.647 seconds') IS NOT NULL AS granted_at_once;
-- A NULL wait is no wait (the one fencing_acquire function's default).
SELECT fencing_acquire('null-wait', 'w', '1 s', NULL) IS NOT NULL AS granted_without_waiting;
SELECT fencing_renew('x', '1', '0 s');
SELECT fencing_renew(NULL, '1', '1 s');
SELECT fencing_release(NULL, '1');
\echo :LAST_ERROR_SQLSTATE
-- A NULL token renews or releases nothing.
SELECT fencing_renew('job', NULL, '1 s') AS renew_null, fencing_release('job', NULL) AS release_null;
-- Failed calls left no row behind.
SELECT count(*) FROM fencing_leases WHERE lock_name = 'x';

-- Waiting: returns at once when free, NULL after the wait when busy.
SELECT fencing_acquire('waited', 'worker-a', '10 s', '1 s') IS NOT NULL AS free_lock_at_once;
SELECT clock_timestamp() AS wait_start \gset
SELECT fencing_acquire('waited', 'worker-b', '10 s', '200 ms') IS NULL AS timed_out;
SELECT clock_timestamp() - :'wait_start'::timestamptz >= interval '200 ms' AS waited_the_full_time;
-- ... and gets the lock once the lease expires during the wait.
SELECT fencing_acquire('waited-expiry', 'worker-a', '300 ms') IS NOT NULL AS a_holds;
SELECT fencing_acquire('waited-expiry', 'worker-b', '10 s', '5 s') IS NOT NULL AS b_got_it_after_expiry;
SELECT fencing_leader('waited-expiry');
-- Waiting needs READ COMMITTED.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT fencing_acquire('waited', 'worker-b', '10 s', '1 s');
ROLLBACK;
-- The wait leaves lock_timeout as it was.
SET lock_timeout = '7s';
SELECT fencing_acquire('waited', 'worker-b', '10 s', '10 ms') IS NULL AS timed_out;
SHOW lock_timeout;
RESET lock_timeout;

-- Privileges.  The lease table is private; the view and functions are public.
CREATE ROLE lease_user_1;
CREATE ROLE lease_user_2;
-- Both may use the lock (hostile.sql tries roles that may not).
SELECT fencing_create_lock('roles');
SELECT fencing_grant_lock('roles', 'lease_user_1');
SELECT fencing_grant_lock('roles', 'lease_user_2');
SET SESSION AUTHORIZATION lease_user_1;
SELECT count(*) FROM fencing_lease;
UPDATE fencing_lease SET expires_at = 'infinity';
INSERT INTO fencing_lease VALUES ('forged', 'me', 'lease_user_1', 1, now(), 'infinity');
SELECT fencing_try_acquire('x', 'y', '1 s', 1, NULL);
SELECT fencing_acquire_as(10, 'x', 'y', '1 s', NULL::jsonb);
SELECT fencing_acquire('roles', 'app', '10 s') AS role_token \gset
-- The view shows the leases of the locks the role may use, and no others.
SELECT array_agg(lock_name) AS visible_leases FROM fencing_leases;
-- Another role cannot renew or release it, even knowing the token ...
SET SESSION AUTHORIZATION lease_user_2;
SELECT fencing_renew('roles', :'role_token', '10 s') AS other_role_renews;
SELECT fencing_release('roles', :'role_token') AS other_role_releases;
-- ... nor take it over by using the same holder name.
SELECT fencing_acquire('roles', 'app', '10 s') IS NULL AS other_role_refused;
SET SESSION AUTHORIZATION lease_user_1;
SELECT fencing_renew('roles', :'role_token', '10 s') AS own_role_renews;
SELECT fencing_release('roles', :'role_token') AS own_role_releases;
RESET SESSION AUTHORIZATION;
SELECT fencing_revoke_lock('roles', 'lease_user_1'), fencing_revoke_lock('roles', 'lease_user_2');
DROP ROLE lease_user_1;
DROP ROLE lease_user_2;

-- The public lease functions are C: fencing_acquire, fencing_renew and
-- fencing_release check the caller and write the lease table as its owner
-- (src/backend/lease_engine.cpp); fencing_leader is a gate to its _as
-- function, SECURITY DEFINER with a pinned search_path.  What they call
-- internally PUBLIC may not call: the waiting acquire (fencing_acquire_as)
-- and the attempt it repeats (fencing_try_acquire, C since 1.3).
SELECT p.oid::regprocedure AS function, l.lanname AS language, p.prosecdef AS security_definer,
       array_to_string(p.proconfig, ',') AS config,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
JOIN pg_language l ON l.oid = p.prolang
WHERE p.proname ~ '^fencing_(acquire|try_acquire|renew|release|leader)(_as)?$'
ORDER BY p.oid::regprocedure::text;
-- Lease state is dumped with the database.
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) cfg JOIN pg_class c ON c.oid = cfg
WHERE e.extname = 'pg_fencing' ORDER BY 1;

-- A read-only transaction (or a standby) can take, renew or release
-- nothing, and says so whatever the lock's state: a busy lock answers
-- 25006, not NULL, and a waiting acquire does not wait first.
SELECT fencing_acquire('ro-busy', 'holder', '1 minute') AS ro_token \gset
BEGIN READ ONLY;
SELECT fencing_acquire('ro-busy', 'other', '1 minute');
ROLLBACK;
BEGIN READ ONLY;
SELECT fencing_acquire('ro-busy', 'other', '1 minute', '10 s');
ROLLBACK;
BEGIN READ ONLY;
SELECT fencing_renew('ro-busy', '1', '1 minute');
ROLLBACK;
BEGIN READ ONLY;
SELECT fencing_release('ro-busy', :'ro_token');
ROLLBACK;
BEGIN READ ONLY;
SELECT fencing_acquire_permit('ro-sem', 'other', 2, '1 minute');
ROLLBACK;
BEGIN READ ONLY;
SELECT fencing_acquire_shared('ro-shared', 'other', '1 minute');
ROLLBACK;
SET default_transaction_read_only = on;
CALL fencing_await('ro-busy', 'other', '1 minute', '10 s');
RESET default_transaction_read_only;
SELECT fencing_release('ro-busy', :'ro_token') AS released_after;
