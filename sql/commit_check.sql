-- The COMMIT check cannot be talked past (1.9): a transaction that wrote
-- under a lease which ended before the transaction ended it itself is
-- refused at COMMIT (55Z04), whatever it calls in between -- the close of
-- its own session, an open whose sweep ends that session, a new acquire
-- of the same lock, a release, a revoke.  Only a lease that was live when
-- the transaction itself released it counts as ended by the transaction.
-- Before 1.9 each of these committed.  This cluster does not preload the
-- library: the COMMIT is what refuses (test/t/010_frozen_holder.pl and
-- the stress harness run the preloaded side).  The per-backend memory of
-- which lease a token is: test/isolation/specs/token_cache.spec.
CREATE DATABASE fencing_commit_check_probe;
\c fencing_commit_check_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

CREATE ROLE cc_app;
GRANT CREATE ON SCHEMA public TO cc_app;
SELECT fencing_allow_create('cc_app');
SET ROLE cc_app;
SELECT fencing_create_lock('cc-job');
SELECT fencing_release('cc-shared', fencing_acquire_shared('cc-shared', 'owner', '1 s'));
CREATE TABLE jobs (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('jobs', lock_name => 'cc-job');
CREATE TABLE readings (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('readings', lock_name => 'cc-shared');
INSERT INTO jobs VALUES (1, 'initial', fencing_acquire('cc-job', 'setup', '1 h'));
SELECT fencing_release('cc-job', tok) FROM jobs;

-- 1. The write's lease is its session's, which runs out before COMMIT;
-- the transaction then closes the session (which answers 0: nothing was
-- live to release).  Refused.
SELECT fencing_session_open('w', '300 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'cc-job') AS t \gset
BEGIN;
UPDATE jobs SET v = 'after its session ended, then closed', tok = :'t' WHERE id = 1;
SELECT pg_sleep(0.4);
SELECT fencing_session_close(:s) AS released;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT v FROM jobs;

-- 2. The same, with an unrelated open instead of the close: its sweep
-- (of the caller's own ended sessions, which an open makes when the role
-- is at its limit, here 1) writes the session's end into the lease inside
-- the writer's transaction.  Refused.
RESET ROLE;
SET pg_fencing.max_sessions_per_role = 1;
SET ROLE cc_app;
SELECT fencing_session_open('w', '300 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'cc-job') AS t \gset
BEGIN;
UPDATE jobs SET v = 'after its session ended, then swept', tok = :'t' WHERE id = 1;
SELECT pg_sleep(0.4);
SELECT fencing_session_open('unrelated', '1 min') IS NOT NULL AS opened;
SELECT count(*) AS swept FROM fencing_sessions WHERE session_id = :s;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT v FROM jobs;
RESET ROLE;
RESET pg_fencing.max_sessions_per_role;
SET ROLE cc_app;

-- 3. A write under a shared lease, which runs out; the transaction then
-- takes the lock exclusively (its grant marks the ended shared lease).
-- Refused, and the exclusive grant goes with the transaction.
SELECT fencing_acquire_shared('cc-shared', 'A', '300 ms') AS r \gset
BEGIN;
INSERT INTO readings VALUES (1, 'after its shared lease ended', :'r');
SELECT pg_sleep(0.4);
SELECT fencing_acquire('cc-shared', 'A', '30 s') IS NOT NULL AS exclusive_granted;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT count(*) AS readings FROM readings;
SELECT count(*) AS live_leases FROM fencing_leases WHERE lock_name = 'cc-shared';

-- 4. A plain lease that runs out, then a new acquire of the same lock in
-- the same transaction (a takeover of its own ended lease): refused.
SELECT fencing_acquire('cc-job', 'A', '300 ms') AS t \gset
BEGIN;
UPDATE jobs SET v = 'after its lease ended, then reacquired', tok = :'t' WHERE id = 1;
SELECT pg_sleep(0.4);
SELECT fencing_acquire('cc-job', 'A', '30 s') > :'t' AS new_token;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT v FROM jobs;

-- 5. A release or a revoke after the lease ran out ends nothing (it had
-- ended): refused.
SELECT fencing_acquire('cc-job', 'A', '300 ms') AS t \gset
BEGIN;
UPDATE jobs SET v = 'after its lease ended, then released', tok = :'t' WHERE id = 1;
SELECT pg_sleep(0.4);
SELECT fencing_release('cc-job', :'t') AS released;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT fencing_acquire('cc-job', 'A', '300 ms') AS t \gset
BEGIN;
UPDATE jobs SET v = 'after its lease ended, then revoked', tok = :'t' WHERE id = 1;
SELECT pg_sleep(0.4);
SELECT fencing_revoke('cc-job') > :'t' AS mark_raised;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT v FROM jobs;

-- 6. What the transaction itself ends while the lease lives is ended by
-- it, with its commit: a release, a session's close.  These commit.
SELECT fencing_acquire('cc-job', 'A', '30 s') AS t \gset
BEGIN;
UPDATE jobs SET v = 'released while live', tok = :'t' WHERE id = 1;
SELECT fencing_release('cc-job', :'t') AS released;
COMMIT;
SELECT v FROM jobs;
SELECT fencing_session_open('w', '30 s') AS s \gset
SELECT fencing_session_acquire(:s, 'cc-job') AS t \gset
BEGIN;
UPDATE jobs SET v = 'closed while live', tok = :'t' WHERE id = 1;
SELECT fencing_session_close(:s) AS released;
COMMIT;
SELECT v FROM jobs;
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_commit_check_probe;
DROP ROLE cc_app;
