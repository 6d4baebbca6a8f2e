-- Semaphores: fencing_acquire_permit() grants up to N leases of one lock at
-- once, each on a permit (a slot) fenced on its own.  A table protected
-- under the semaphore accepts a write while its token is the latest grant
-- of its permit, and refuses every write under a token whose permit has
-- been granted again.  In a database of its own: the grants must not move
-- the tokens the other tests print.
CREATE DATABASE fencing_semaphore_probe;
\c fencing_semaphore_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

-- A statement's outcome without the token values (they depend on the grants).
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 'token \d+', 'token N', 'g');
END $$;

CREATE ROLE sem_app;       -- owns the table and uses the semaphore
CREATE ROLE sem_intruder;  -- may neither use the semaphore nor read its permits
GRANT CREATE ON SCHEMA public TO sem_app;
SELECT fencing_allow_create('sem_app');

SET ROLE sem_app;
CREATE TABLE counters (id int PRIMARY KEY, tok fencing_token, hits int);
SELECT fencing_protect('counters', lock_name => 'pool');

-- Three permits: three tokens, then none free.
SELECT fencing_acquire_permit('pool', 'w1', 3, '1 hour') AS p1 \gset
SELECT fencing_acquire_permit('pool', 'w2', 3, '1 hour') AS p2 \gset
SELECT fencing_acquire_permit('pool', 'w3', 3, '1 hour') AS p3 \gset
SELECT :'p1' < :'p2' AND :'p2' < :'p3' AS tokens_increase;
SELECT fencing_acquire_permit('pool', 'w4', 3, '1 hour') IS NULL AS fourth_gets_none;
-- The live holder asking again (a lost reply) gets its own token back.
SELECT fencing_acquire_permit('pool', 'w2', 3, '1 hour') = :'p2' AS retry_gets_same_token;
SELECT kind, permits FROM fencing_locks WHERE lock_name = 'pool';
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'pool' ORDER BY slot;
-- With a wait, when every permit stays taken: NULL once the wait is over.
SELECT fencing_acquire_permit('pool', 'w4', 3, '1 hour', wait => '150 ms') IS NULL
  AS none_after_wait;
-- Nor does it keep the lock's waiting room for the rest of its transaction.
BEGIN;
SELECT fencing_acquire_permit('pool', 'w4', 3, '1 hour', wait => '150 ms') IS NULL
  AS none_after_wait;
SELECT fencing_acquire_permit('pool', 'w4', 3, '1 hour') IS NULL AS none_without_wait;
SELECT count(*) AS rooms_held FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 3 AND pid = pg_backend_pid();
COMMIT;

-- Every live permit writes, to the same row, in any order: a row's token
-- says nothing about its writer under a semaphore.
INSERT INTO counters VALUES (1, :'p3', 0);
UPDATE counters SET tok = :'p1', hits = hits + 1 WHERE id = 1;
UPDATE counters SET tok = :'p2', hits = hits + 1 WHERE id = 1;
BEGIN;
SELECT fencing_present('pool', :'p1');
UPDATE counters SET hits = hits + 1 WHERE id = 1;
COMMIT;
SELECT hits FROM counters;

-- A token that was never one of the permits is refused, however high.
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'p3'::bigint + 1000));

-- The pause: w1's permit expires, and its slot is granted to w4.  Every
-- write under w1's token is refused from then on; the other permits write on.
SELECT fencing_release('pool', :'p1') AS released;
SELECT fencing_acquire_permit('pool', 'w5', 3, '100 ms') AS p5 \gset
SELECT pg_sleep(0.2);
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'pool' ORDER BY slot;
SELECT fencing_acquire_permit('pool', 'w4', 3, '1 hour') AS p4 \gset
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'pool' ORDER BY slot;
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'p5'));
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'pool', :'p5'));
SELECT pg_temp.outcome(format('INSERT INTO counters VALUES (2, %s, 0)', :'p5'));
UPDATE counters SET tok = :'p2', hits = hits + 1 WHERE id = 1;
UPDATE counters SET tok = :'p4', hits = hits + 1 WHERE id = 1;
SELECT hits FROM counters;
-- Renew and release take the permit's token; an expired one renews nothing.
SELECT fencing_renew('pool', :'p5', '1 hour') AS renewed_expired;
SELECT fencing_renew('pool', :'p2', '2 hours') AS renewed_live;
SELECT fencing_release('pool', :'p3') AS released;
SELECT fencing_release('pool', :'p3') AS released_again;
SELECT slot, holder, state FROM fencing_permits WHERE lock_name = 'pool' ORDER BY slot;
-- A released permit's token is still its slot's until the slot is granted
-- again (as a released lease's is until the next grant), so the fence lets
-- the write through; but its lease has ended, and a transaction cannot
-- outlive the lease it writes under (1.6): the COMMIT is refused, 55Z04.
-- (Terse: the detail says when the lease ended.)
\set VERBOSITY terse
UPDATE counters SET tok = :'p3', hits = hits + 1 WHERE id = 1;
\set VERBOSITY default

-- The revoke fences every permit at once.
RESET ROLE;
SELECT fencing_revoke('pool', 'incident') IS NOT NULL AS revoked;
SET ROLE sem_app;
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'p2'));
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'p4'));
SELECT count(*) AS live_after_revoke FROM fencing_permits WHERE lock_name = 'pool' AND live;
SELECT fencing_acquire_permit('pool', 'w6', 3, '1 hour') AS p6 \gset
UPDATE counters SET tok = :'p6', hits = hits + 1 WHERE id = 1;
SELECT hits FROM counters;

-- Conflicting uses of a lock name are errors that say so.
SELECT pg_temp.outcome('SELECT fencing_acquire(''pool'', ''x'', ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 5, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_shared(''pool'', ''x'', ''1 hour'')');
SELECT fencing_acquire('exclusive-lock', 'x', '1 hour') AS other_lock_token \gset
-- Another lock's token is no permit of this one.
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'other_lock_token'));
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''exclusive-lock'', ''x'', 2, ''1 hour'')');
-- Only the lock's owner decides that an exclusive lock becomes a semaphore:
-- a role it granted the lock's use to may not.
RESET ROLE;
CREATE ROLE sem_user;
SET ROLE sem_app;
SELECT fencing_create_lock('owned-lock', 'sem_app');
SELECT fencing_grant_lock('owned-lock', 'sem_user');
SET ROLE sem_user;
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''owned-lock'', ''u'', 2, ''1 hour'')');
SET ROLE sem_app;
SELECT fencing_acquire_permit('owned-lock', 'o', 2, '1 hour') IS NOT NULL AS owner_made_it;
SET ROLE sem_user;
SELECT fencing_acquire_permit('owned-lock', 'u', 2, '1 hour') IS NOT NULL AS user_takes_a_permit;
SET ROLE sem_app;
-- A lock that tokens were written under (from an outside lock service,
-- say) stays exclusive: as a semaphore, every one of them would be refused.
CREATE TABLE outside (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('outside', lock_name => 'outside-lock');
INSERT INTO outside VALUES (1, '5000');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''outside-lock'', ''x'', 2, ''1 hour'')');
SELECT kind FROM fencing_locks WHERE lock_name = 'outside-lock';
-- A permit let go of and granted again in the same transaction: the
-- transaction's own later write under the old token is refused too, and
-- so is its COMMIT: the lease it wrote under first has ended, replaced by
-- another (a release alone, in the transaction that wrote, would end the
-- lease only with the commit: see sql/lease_writers.sql).
SELECT fencing_acquire_permit('one', 'x', 1, '1 hour') AS q1 \gset
CREATE TABLE one_table (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('one_table', lock_name => 'one');
BEGIN;
INSERT INTO one_table VALUES (1, :'q1');
SELECT fencing_release('one', :'q1') AS released;
SELECT fencing_acquire_permit('one', 'y', 1, '1 hour') > :'q1' AS granted_again;
SELECT pg_temp.outcome(format('UPDATE one_table SET tok = %s', :'q1'));
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT count(*) AS rows_of_the_refused_commit FROM one_table;
-- Bad arguments.
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 0, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 1001, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', NULL, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', NULL, 3, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 3, ''-1 s'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit('''', ''x'', 3, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 3, ''1 hour'', ''-1 s'')');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''x'', 3, ''1 hour'')');
ROLLBACK;
RESET ROLE;

-- The history keeps permits too, with their slots (1.7): a slot's lease
-- goes into it when the slot is granted again, and until then its row is
-- its entry.
SET ROLE sem_app;
SELECT fencing_acquire_permit('hist-sem', 'h1', 2, '1 hour') AS h1 \gset
SELECT fencing_acquire_permit('hist-sem', 'h2', 2, '1 hour') AS h2 \gset
SELECT fencing_release('hist-sem', :'h1');
SELECT fencing_acquire_permit('hist-sem', 'h3', 2, '1 hour') AS h3 \gset
SELECT holder, slot, coalesce(end_reason, 'live') AS state, ended_at IS NOT NULL AS ended
  FROM fencing_history WHERE lock_name = 'hist-sem' ORDER BY token;
RESET ROLE;
-- A ring of one entry per lock and kind: the slots' leases end out of
-- order (a slot's lease ends only when that slot is granted again), and an
-- older lease does not replace a newer one in the ring.
SET pg_fencing.history_size = 1;
SET ROLE sem_app;
SELECT fencing_acquire_permit('ring-sem', 'q1', 2, '1 hour') AS q1 \gset
SELECT fencing_acquire_permit('ring-sem', 'q2', 2, '1 hour') AS q2 \gset
SELECT fencing_release('ring-sem', :'q2');
SELECT fencing_acquire_permit('ring-sem', 'q3', 2, '1 hour') IS NOT NULL AS q3_granted;
SELECT fencing_release('ring-sem', :'q1');
SELECT fencing_acquire_permit('ring-sem', 'q4', 2, '1 hour') IS NOT NULL AS q4_granted;
SELECT holder, slot, coalesce(end_reason, 'live') AS state
  FROM fencing_history WHERE lock_name = 'ring-sem' ORDER BY token;
RESET ROLE;
RESET pg_fencing.history_size;
-- A role that may not use the semaphore sees none of its history.
SET ROLE sem_intruder;
SELECT count(*) AS history_seen FROM fencing_history WHERE lock_name IN ('hist-sem', 'ring-sem');
SELECT pg_temp.outcome('SELECT count(*) FROM fencing_grant_history');
RESET ROLE;

-- A role that may not use the semaphore: no permit, no view rows, no
-- internal functions, no write under a permit's token.
GRANT SELECT, UPDATE ON counters TO sem_intruder;
SET ROLE sem_intruder;
SELECT pg_temp.outcome('SELECT fencing_acquire_permit(''pool'', ''evil'', 3, ''1 hour'')');
SELECT pg_temp.outcome(format('SELECT fencing_renew(%L, %L, %L)', 'pool', :'p6', '1 hour'));
SELECT pg_temp.outcome(format('SELECT fencing_release(%L, %L)', 'pool', :'p6'));
SELECT count(*) AS permits_seen FROM fencing_permits;
SELECT pg_temp.outcome('SELECT count(*) FROM fencing_permit');
SELECT pg_temp.outcome(format('UPDATE counters SET tok = %s WHERE id = 1', :'p6'));
SELECT pg_temp.outcome('SELECT fencing_try_permit(1, ''evil'', 3, ''1 hour'')');
SELECT pg_temp.outcome('SELECT fencing_acquire_permits_as(10, ''pool'', ''evil'', 3, ''1 hour'', NULL)');
SELECT pg_temp.outcome('SELECT fencing_lock_permit_gate(1, 1)');
SELECT pg_temp.outcome(format('SELECT fencing_move_permit_end(1, %L, %L, NULL)', :'p6', '1 hour'));
SELECT pg_temp.outcome('SELECT fencing_end_shared_holders(1, ''0'')');
SELECT pg_temp.outcome('SELECT fencing_try_permit_gate(1, 1)');
SELECT pg_temp.outcome('SELECT fencing_share_fence_gate(1)');
SELECT pg_temp.outcome('SELECT fencing_forget_fence(''pool'')');
SELECT pg_temp.outcome('SELECT fencing_lock_of_kind(1, ''semaphore'', 3, true)');
SELECT pg_temp.outcome('SELECT fencing_wait_to_acquire(''pool'', 1, ''evil'', 3, ''1 hour'', ''1 s'', NULL, false)');
SELECT pg_temp.outcome('SELECT fencing_permit_available_at(1)');
RESET ROLE;
-- The holder's permit is as it was.
SELECT holder, state FROM fencing_permits WHERE token = :'p6';

\c contrib_regression
DROP DATABASE fencing_semaphore_probe;
DROP ROLE sem_app, sem_intruder, sem_user;
