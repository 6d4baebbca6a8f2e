-- Lock-delay, revoke and the holder's payload.
\set SHOW_CONTEXT never

-- ---- Payload ---------------------------------------------------------------
-- Given in named notation with either form; shown in fencing_leases; replaced
-- when the live holder acquires again (same token).
SELECT fencing_acquire('pay', 'node-1', '1 minute', payload => '{"addr": "10.0.0.1:5432"}') AS pay_token \gset
SELECT holder, payload, state FROM fencing_leases WHERE lock_name = 'pay';
SELECT fencing_acquire('pay', 'node-1', '1 minute', payload => '{"addr": "10.0.0.9:5432"}') = :'pay_token' AS same_token;
SELECT payload FROM fencing_leases WHERE lock_name = 'pay';
SELECT fencing_release('pay', :'pay_token');
SELECT fencing_acquire('pay', 'node-2', '1 minute', '1 second', payload => '{"addr": "10.0.0.2:5432"}') IS NOT NULL AS granted;
SELECT holder, payload FROM fencing_leases WHERE lock_name = 'pay';
-- Without a payload, a new grant has none.
SELECT fencing_revoke('pay') IS NOT NULL AS revoked;
SELECT fencing_acquire('pay', 'node-3', '1 minute') IS NOT NULL AS granted;
SELECT holder, payload FROM fencing_leases WHERE lock_name = 'pay';

-- ---- Lock-delay ------------------------------------------------------------
SELECT fencing_create_lock('delayed');
SELECT fencing_set_lock_delay('delayed', '5 seconds');
SELECT lock_name, lock_delay FROM fencing_locks WHERE lock_name = 'delayed';
-- After a release: no delay.
SELECT fencing_acquire('delayed', 'a', '1 minute') AS d1 \gset
SELECT fencing_release('delayed', :'d1');
SELECT state, available_at <= clock_timestamp() AS available_now FROM fencing_leases WHERE lock_name = 'delayed';
SELECT fencing_acquire('delayed', 'b', '200 ms') AS d2 \gset
SELECT :'d2' <> '' AS granted_right_after_release;
-- After an expiry: refused until the delay has passed, and a waiter waits
-- it out.
SELECT pg_sleep(0.3);
SELECT state, available_at > clock_timestamp() AS still_delayed,
       available_at - expires_at = lock_delay AS delay_after_expiry
  FROM fencing_leases WHERE lock_name = 'delayed';
SELECT fencing_acquire('delayed', 'c', '1 minute') IS NULL AS refused_within_delay;
SELECT fencing_acquire('delayed', 'c', '1 minute', '20 seconds') IS NOT NULL AS granted_after_waiting;
-- Granted only once the delay after the expiry had passed.
SELECT holder FROM fencing_leases WHERE lock_name = 'delayed';
-- After a revoke: no delay.
SELECT fencing_revoke('delayed', 'incident 42') IS NOT NULL AS revoked;
SELECT state, end_reason, available_at <= clock_timestamp() AS available_now
  FROM fencing_leases WHERE lock_name = 'delayed';
SELECT fencing_acquire('delayed', 'd', '1 minute') IS NOT NULL AS granted_right_after_revoke;
-- Bad values.
SELECT fencing_set_lock_delay('delayed', '-1 s');
SELECT fencing_set_lock_delay('delayed', NULL);
SELECT fencing_set_lock_delay('no-such-lock', '1 s');

-- ---- Revoke ----------------------------------------------------------------
CREATE TABLE revoked_rows (id int PRIMARY KEY, tok fencing_token, v text);
SELECT fencing_protect('revoked_rows', lock_name => 'rev');
SELECT fencing_acquire('rev', 'holder', '1 minute') AS rev_token \gset
INSERT INTO revoked_rows VALUES (1, :'rev_token', 'by the holder');
SELECT fencing_revoke('rev', 'holder looks stuck') AS new_mark \gset
SELECT :'new_mark'::bigint > :'rev_token'::bigint AS mark_above_holders_token;
SELECT high_water = :'new_mark' AS mark_is_returned_value FROM fencing_fences WHERE lock_name = 'rev';
-- The holder: renew false, not the leader, every write under the lock refused.
SELECT fencing_renew('rev', :'rev_token', '1 minute') AS holder_renews;
SELECT fencing_leader('rev') AS leader;
-- Granted tokens are microseconds since 1970, different in every run: an
-- error that names one is shown by its SQLSTATE, then its message with the
-- token's name in place of the number.
\set VERBOSITY sqlstate
UPDATE revoked_rows SET tok = :'rev_token', v = 'after revoke' WHERE id = 1;
SELECT replace(replace(:'LAST_ERROR_MESSAGE', :'new_mark', ':new_mark'), :'rev_token', ':rev_token') AS error;
INSERT INTO revoked_rows VALUES (2, :'rev_token', 'after revoke');
SELECT replace(replace(:'LAST_ERROR_MESSAGE', :'new_mark', ':new_mark'), :'rev_token', ':rev_token') AS error;
BEGIN;
SELECT fencing_present('rev', :'rev_token');
ROLLBACK;
SELECT replace(replace(:'LAST_ERROR_MESSAGE', :'new_mark', ':new_mark'), :'rev_token', ':rev_token') AS error;
\set VERBOSITY default
SELECT state, end_reason FROM fencing_leases WHERE lock_name = 'rev';
-- The next acquire gets a token above the returned mark.
SELECT fencing_acquire('rev', 'next', '1 minute') > :'new_mark'::fencing_token AS next_above_mark;
-- Revoking a lock with no live lease still raises the mark.
SELECT fencing_release('rev', (SELECT token FROM fencing_leases WHERE lock_name = 'rev'));
SELECT fencing_revoke('rev') > (SELECT token FROM fencing_leases WHERE lock_name = 'rev') AS raised_without_lease;

-- Only the lock's owner (or a superuser) may revoke or set the delay; a
-- role that may merely use the lock may not.
CREATE ROLE revoke_user;
SELECT fencing_grant_lock('rev', 'revoke_user');
SET ROLE revoke_user;
SELECT fencing_revoke('rev');
SELECT fencing_set_lock_delay('rev', '1 hour');
SELECT fencing_revoke('no-such-lock');
RESET ROLE;
SELECT fencing_revoke_lock('rev', 'revoke_user');
DROP ROLE revoke_user;
DROP TABLE revoked_rows;
