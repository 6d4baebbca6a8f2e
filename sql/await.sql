-- CALL fencing_await (1.7): the waiting acquire as a procedure, which
-- commits each attempt before it sleeps.  Here: what it returns, its bad
-- input, its refusal inside a transaction block, and hostile roles; that
-- it holds no snapshot while it waits (and that a function form does) is
-- test/t/011_await_horizon.pl's, arrival order, writer priority and a
-- cancel are test/isolation/specs/await.spec's.
CREATE DATABASE fencing_await_probe;
\c fencing_await_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

CREATE ROLE aw_app;       -- owns the locks
CREATE ROLE aw_follower;  -- may use them
CREATE ROLE aw_stranger;  -- may not
SELECT fencing_create_lock(name, 'aw_app') FROM unnest('{leader,pool,readers}'::text[]) name;
SELECT fencing_grant_lock(name, 'aw_follower') FROM unnest('{leader,pool,readers}'::text[]) name;

-- The room this session holds, if any: a session lock would outlive the
-- CALL that took it and hold up every other waiter of the lock.
CREATE VIEW rooms_held AS
  SELECT count(*) AS rooms_held FROM pg_locks
   WHERE locktype = 'advisory' AND classid = 1178947139 AND pid = pg_backend_pid();
GRANT SELECT ON rooms_held TO PUBLIC;

-- 1. A free lock: one row, its token the lease's.
SET ROLE aw_follower;
CALL fencing_await('leader', 'f1', '1 hour', '10 s') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT holder, token = (SELECT max(token) FROM fencing_leases) AS same_token, live
  FROM fencing_leases WHERE lock_name = 'leader';
-- The holder again: the same token, its lease extended (as fencing_acquire).
CALL fencing_await('leader', 'f1', '1 hour', '0 s') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT token AS f1_token FROM fencing_leases WHERE lock_name = 'leader' \gset
-- Another holder: the wait runs out, NULL, and no room is left held.
CALL fencing_await('leader', 'f2', '1 hour', '200 ms') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
CALL fencing_await('leader', 'f2', '1 hour', '0 s') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT * FROM rooms_held;
SELECT holder, token = :'f1_token' AS still_f1 FROM fencing_leases WHERE lock_name = 'leader';
-- A cancel while it waits (statement_timeout here) leaves no room either.
SET statement_timeout = '300 ms';
CALL fencing_await('leader', 'f2', '1 hour', '10 s');
RESET statement_timeout;
SELECT * FROM rooms_held;
-- Released: the next CALL gets a new, higher token.
SELECT fencing_release('leader', :'f1_token');
CALL fencing_await('leader', 'f2', '1 hour', '10 s', payload => '{"addr": "10.0.0.2"}') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT holder, token > :'f1_token' AS higher, payload FROM fencing_leases WHERE lock_name = 'leader';
RESET ROLE;

-- 2. Permits and shared leases, by their owner first (it decides the kind).
SET ROLE aw_app;
CALL fencing_await('pool', 'p1', '1 hour', '0 s', kind => 'permit', permits => 2) \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
CALL fencing_await('pool', 'p2', '1 hour', '0 s', kind => 'permit', permits => 2) \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
CALL fencing_await('pool', 'p3', '1 hour', '100 ms', kind => 'permit', permits => 2) \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT holder, slot FROM fencing_permits WHERE lock_name = 'pool' AND live ORDER BY slot;
CALL fencing_await('readers', 'r1', '1 hour', '0 s', kind => 'shared') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
CALL fencing_await('readers', 'r2', '1 hour', '0 s', kind => 'shared') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT count(*) AS shared_holders FROM fencing_permits WHERE lock_name = 'readers' AND live;
-- An exclusive waiter of a shared lock waits for its shared holders.
CALL fencing_await('readers', 'w', '1 hour', '100 ms') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
-- The kinds are the lock's: a semaphore is not taken exclusively, nor with
-- another number of permits.
CALL fencing_await('pool', 'p3', '1 hour', '0 s') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
CALL fencing_await('pool', 'p3', '1 hour', '0 s', kind => 'permit', permits => 3) \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT * FROM rooms_held;
RESET ROLE;

-- 3. Bad input: 22023, naming the value and the lock.
CALL fencing_await(NULL, 'h', '1 s', '1 s');
CALL fencing_await('', 'h', '1 s', '1 s');
CALL fencing_await('leader', NULL, '1 s', '1 s');
CALL fencing_await('leader', '', '1 s', '1 s');
CALL fencing_await('leader', 'h', NULL, '1 s');
CALL fencing_await('leader', 'h', '-1 s', '1 s');
CALL fencing_await('leader', 'h', '1 s', NULL);
CALL fencing_await('leader', 'h', '1 s', '-1 s');
CALL fencing_await('leader', 'h', '1 s', '25 days');
CALL fencing_await('leader', 'h', '1 s', '1 s', kind => 'Exclusive');
CALL fencing_await('leader', 'h', '1 s', '1 s', kind => NULL);
CALL fencing_await('pool', 'h', '1 s', '1 s', kind => 'permit');
CALL fencing_await('pool', 'h', '1 s', '1 s', kind => 'permit', permits => 0);
CALL fencing_await('leader', 'h', '1 s', '1 s', permits => 2);
CALL fencing_await('readers', 'h', '1 s', '1 s', kind => 'shared', payload => '{}');

-- 4. Where it cannot commit: 25001, saying what to use instead.
BEGIN;
CALL fencing_await('leader', 'h', '1 s', '1 s');
ROLLBACK;
CREATE FUNCTION await_in_a_function() RETURNS fencing_token LANGUAGE plpgsql AS $$
DECLARE
  t fencing_token;
BEGIN
  CALL fencing_await('leader', 'h', '1 s', '1 s', token => t);
  RETURN t;
END $$;
\set VERBOSITY terse
SELECT await_in_a_function();
\set VERBOSITY default
-- An implicit transaction block (several statements in one query) too.
SELECT 1 AS first \; CALL fencing_await('leader', 'h', '1 s', '1 s');

-- 5. Hostile roles.  A role that may not use a lock gets the usual 42501,
-- whether the lock is free or held, and waits in no room: it can neither
-- learn whether the lock is held nor hold up its followers.
SET ROLE aw_stranger;
CALL fencing_await('leader', 'x', '1 hour', '1 s');
CALL fencing_await('pool', 'x', '1 hour', '1 s', kind => 'permit', permits => 2);
CALL fencing_await('readers', 'x', '1 hour', '1 s', kind => 'shared');
SELECT * FROM rooms_held;
-- Nor may it create a lock (nobody let it, with fencing_allow_create).
CALL fencing_await('strangers_own', 'x', '1 hour', '0 s') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT lock_name, owner FROM fencing_locks WHERE lock_name = 'strangers_own';
RESET ROLE;
-- A user of a lock cannot make its owner's exclusive lock a semaphore.
SELECT fencing_create_lock('owned', 'aw_app');
SELECT fencing_grant_lock('owned', 'aw_follower');
SET ROLE aw_follower;
CALL fencing_await('owned', 'h', '1 hour', '0 s', kind => 'permit', permits => 3);
-- Its token is not a way into another holder's lease: passing one for
-- INOUT token changes nothing.
CALL fencing_await('leader', 'f3', '1 hour', '0 s', token => :'f1_token') \gset aw_
SELECT :{?aw_token} AS granted \g \unset aw_token
SELECT holder FROM fencing_leases WHERE lock_name = 'leader';
SELECT * FROM rooms_held;
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_await_probe;
DROP ROLE aw_app, aw_follower, aw_stranger;

