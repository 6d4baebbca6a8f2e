-- Shared and exclusive leases of one lock: fencing_acquire_shared() grants
-- the lock to any number of shared holders, fencing_acquire() to one
-- exclusive holder, never both at once.  An exclusive grant fences every
-- shared holder before it (their tokens fall below the lock's mark); the
-- first shared grant after an exclusive one fences the exclusive holder.
-- Writers are not starved: an exclusive acquirer that waits stops new
-- shared grants (test/isolation/specs/shared_lease.spec).  In a database of
-- its own: the grants must not move the tokens the other tests print.
CREATE DATABASE fencing_shared_lease_probe;
\c fencing_shared_lease_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\d+', 'N', 'g');
END $$;

CREATE ROLE sh_app;
CREATE ROLE sh_intruder;
GRANT CREATE ON SCHEMA public TO sh_app;
SELECT fencing_allow_create('sh_app');

SET ROLE sh_app;
CREATE TABLE config (key text PRIMARY KEY, tok fencing_token, value text);
SELECT fencing_protect('config', lock_name => 'cfg');

-- An exclusive holder first, then released: the lock becomes shared at its
-- first shared grant, and that grant fences the exclusive holder.
SELECT fencing_acquire('cfg', 'writer-1', '1 hour') AS e1 \gset
INSERT INTO config VALUES ('a', :'e1', 'from writer-1');
SELECT fencing_acquire_shared('cfg', 'reader-1', '1 hour') IS NULL AS not_beside_exclusive;
SELECT fencing_release('cfg', :'e1') AS released;
SELECT fencing_acquire_shared('cfg', 'reader-1', '1 hour') AS s1 \gset
SELECT fencing_acquire_shared('cfg', 'reader-2', '1 hour') AS s2 \gset
SELECT fencing_acquire_shared('cfg', 'reader-1', '1 hour') = :'s1' AS retry_gets_same_token;
SELECT kind, permits FROM fencing_locks WHERE lock_name = 'cfg';
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'cfg' ORDER BY slot;
SELECT pg_temp.outcome(format('UPDATE config SET tok = %s, value = %L WHERE key = %L',
                              :'e1', 'late writer-1', 'a'));

-- Shared holders write side by side, in any order, to the same row.
UPDATE config SET tok = :'s2', value = 'from reader-2' WHERE key = 'a';
UPDATE config SET tok = :'s1', value = 'from reader-1' WHERE key = 'a';
BEGIN;
SELECT fencing_present('cfg', :'s2');
INSERT INTO config (key, value) VALUES ('b', 'from reader-2');
COMMIT;
SELECT key, value FROM config ORDER BY key;

-- No exclusive grant while a shared holder is live.
SELECT fencing_acquire('cfg', 'writer-2', '1 hour') IS NULL AS not_beside_shared;
SELECT fencing_release('cfg', :'s1') AS released;
SELECT fencing_acquire('cfg', 'writer-2', '1 hour') IS NULL AS not_beside_one_shared;
-- A shared lease that expires holds the lock no longer (lock-delay 0).
SELECT fencing_renew('cfg', :'s2', '100 ms') AS shortened;
SELECT pg_sleep(0.2);
SELECT fencing_acquire('cfg', 'writer-2', '1 hour') AS e2 \gset
SELECT :'e2' IS NOT NULL AS exclusive_granted;
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'cfg' ORDER BY slot;
-- The exclusive grant fenced both shared holders, the expired one too.
SELECT pg_temp.outcome(format('UPDATE config SET tok = %s WHERE key = %L', :'s2', 'a'));
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'cfg', :'s1'));
SELECT fencing_renew('cfg', :'s2', '1 hour') AS expired_renews_nothing;
UPDATE config SET tok = :'e2', value = 'from writer-2' WHERE key = 'a';
-- And no shared grant beside the live exclusive one.
SELECT fencing_acquire_shared('cfg', 'reader-3', '1 hour') IS NULL AS not_beside_exclusive;
SELECT fencing_acquire_shared('cfg', 'reader-3', '1 hour', wait => '150 ms') IS NULL
  AS none_after_wait;

-- A revoke ends the exclusive lease and fences everyone.
SELECT fencing_release('cfg', :'e2') AS released;
SELECT fencing_acquire_shared('cfg', 'reader-3', '1 hour') AS s3 \gset
RESET ROLE;
SELECT fencing_revoke('cfg', 'incident') IS NOT NULL AS revoked;
SET ROLE sh_app;
SELECT pg_temp.outcome(format('UPDATE config SET tok = %s WHERE key = %L', :'s3', 'a'));
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'cfg' ORDER BY slot;

-- A shared acquire that is not granted leaves the lock as it was.
SELECT fencing_acquire('ex-only', 'w', '1 hour') IS NOT NULL AS exclusive_granted;
SELECT fencing_acquire_shared('ex-only', 'r', '1 hour') IS NULL AS not_granted;
SELECT kind FROM fencing_locks WHERE lock_name = 'ex-only';
-- A lock whose mark writes raised above its grants (tokens from an outside
-- lock service) is not taken shared: its writes would stop raising the
-- mark, and those tokens would no longer fence each other.
CREATE TABLE outside (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('outside', lock_name => 'outside-lock');
INSERT INTO outside VALUES (1, '5000');
SELECT pg_temp.outcome('SELECT fencing_acquire_shared(''outside-lock'', ''x'', ''1 hour'')');
SELECT kind FROM fencing_locks WHERE lock_name = 'outside-lock';
-- A shared lock is not a semaphore.
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''cfg'', ''x'', 2, ''1 hour'')');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.outcome('SELECT fencing_acquire(''cfg'', ''x'', ''1 hour'')');
ROLLBACK;
SELECT pg_temp.outcome('SELECT fencing_acquire_shared(''cfg'', '''', ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_shared(''cfg'', ''x'', NULL)');

-- The history keeps shared leases with their slots beside the lock's
-- exclusive leases (slot NULL), each kind in a ring of its own (1.7).
SELECT fencing_acquire_shared('hist-rw', 'ha', '1 hour') AS ha \gset
SELECT fencing_acquire_shared('hist-rw', 'hb', '1 hour') AS hb \gset
SELECT fencing_release('hist-rw', :'ha') AND fencing_release('hist-rw', :'hb') AS both_released;
SELECT fencing_acquire('hist-rw', 'hx', '1 hour') AS hx \gset
SELECT fencing_release('hist-rw', :'hx') AS exclusive_released;
SELECT fencing_acquire_shared('hist-rw', 'hc', '1 hour') IS NOT NULL AS shared_again;
SELECT holder, slot, coalesce(end_reason, 'live') AS state
  FROM fencing_history WHERE lock_name = 'hist-rw' ORDER BY token;

-- A role that may not use the lock gets nothing and sees nothing.
SELECT fencing_acquire_shared('cfg', 'reader-4', '1 hour') AS s4 \gset
RESET ROLE;
GRANT SELECT, UPDATE ON config TO sh_intruder;
SET ROLE sh_intruder;
SELECT pg_temp.outcome('SELECT fencing_acquire_shared(''cfg'', ''evil'', ''1 hour'')');
SELECT pg_temp.outcome(format('SELECT fencing_release(%L, %L)', 'cfg', :'s4'));
SELECT pg_temp.outcome(format('UPDATE config SET tok = %s WHERE key = %L', :'s4', 'a'));
SELECT count(*) AS permits_seen FROM fencing_permits;
RESET ROLE;
SELECT holder, state FROM fencing_permits WHERE token = :'s4';

\c contrib_regression
DROP DATABASE fencing_shared_lease_probe;
DROP ROLE sh_app, sh_intruder;
