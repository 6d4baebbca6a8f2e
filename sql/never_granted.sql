-- A token nobody handed out is refused (1.5): 55Z03 on a per-row fence for
-- a token above every token the database has granted, and under a lock
-- whose leases the database grants for any token above the lock's mark;
-- tables and locks whose tokens come from another service say so and
-- accept any token; fencing_reset_mark() mends a mark that is already
-- wrong.  In a database of its own: its grants and locks must not show in
-- the other tests.
CREATE DATABASE fencing_never_granted_probe;
\c fencing_never_granted_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

-- A statement's outcome, with the granted tokens (microseconds since 1970,
-- different in every run) replaced by N.
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\d{13,}', 'N', 'g');
END $$;
-- The same with the error's detail, hint and column.
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS TABLE (field text, value text)
LANGUAGE plpgsql AS $$
DECLARE
  state text; message text; detail text; hint text; col text;
BEGIN
  EXECUTE statement;
  RETURN QUERY SELECT 'outcome', 'done';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
    detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT, col = COLUMN_NAME;
  RETURN QUERY VALUES ('sqlstate', state),
    ('message', regexp_replace(message, '\d{13,}', 'N', 'g')),
    ('detail', detail), ('hint', hint), ('column', col);
END $$;

CREATE ROLE ng_app;       -- owns the tables and the locks
CREATE ROLE ng_writer;    -- may use the locks, owns nothing
CREATE ROLE ng_intruder;  -- may not use them
GRANT CREATE ON SCHEMA public TO ng_app;
SELECT fencing_allow_create('ng_app');

-- ---- Per-row fence --------------------------------------------------------------
SET ROLE ng_app;
CREATE TABLE rows_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO rows_t VALUES (1, NULL, 'initial'), (2, NULL, 'initial');
GRANT UPDATE, SELECT ON rows_t TO ng_writer;
SELECT fencing_protect('rows_t');
-- fencing_protect() says where the tokens come from: this database.
SELECT encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'rows_t'::regclass;
RESET ROLE;
-- Before any grant every token is above the highest (none).
SELECT pg_temp.outcome($$UPDATE rows_t SET tok = 1, v = 'before any grant' WHERE id = 1$$) AS first_write;
SELECT fencing_grant() AS g1 \gset
-- A granted token, and any lower one (a grant of an earlier run of grants),
-- passes; the row then holds it.
UPDATE rows_t SET tok = :'g1', v = 'granted' WHERE id = 1;
UPDATE rows_t SET tok = 5, v = 'low' WHERE id = 2;
SELECT id, tok = :'g1' AS by_g1, v FROM rows_t ORDER BY id;
-- One above the highest grant, and the largest token: never granted, in
-- the projection's check (a plain UPDATE) and in the trigger alike.
SET ROLE ng_writer;
SELECT pg_temp.outcome(format('UPDATE rows_t SET tok = %s, v = %L WHERE id = 1',
                              (:'g1'::bigint + 1), 'one above')) AS one_above_highest;
SELECT pg_temp.outcome($$UPDATE rows_t SET tok = 9223372036854775807, v = 'max' WHERE id = 1$$) AS largest;
SET pg_fencing.fast_update = off;
SELECT pg_temp.outcome($$UPDATE rows_t SET tok = 9223372036854775807, v = 'max' WHERE id = 1$$) AS largest_in_trigger;
RESET pg_fencing.fast_update;
RESET ROLE;
-- The row is as it was, and still takes the next grant.
SELECT id, tok = :'g1' AS by_g1, v FROM rows_t WHERE id = 1;
SELECT fencing_grant() AS g2 \gset
UPDATE rows_t SET tok = :'g2', v = 'next holder' WHERE id = 1;
SELECT tok = :'g2' AS by_g2 FROM rows_t WHERE id = 1;
-- The message names the token and the highest grant.
SELECT * FROM pg_temp.error_of($$UPDATE rows_t SET tok = 9223372036854775807 WHERE id = 2$$);

-- A per-row fence whose tokens are this database's grants judges an
-- INSERT's token too (COPY, and the insert half of an upsert, are INSERTs):
-- a made-up one would refuse every holder of the row after it.
SELECT pg_temp.outcome($$INSERT INTO rows_t VALUES (3, 9223372036854775807, 'insert')$$) AS insert_largest;
SELECT pg_temp.outcome($$INSERT INTO rows_t VALUES (3, 9223372036854775807, 'upsert') ON CONFLICT (id) DO UPDATE SET v = 'upsert'$$) AS upsert_largest;
\set VERBOSITY sqlstate
COPY rows_t FROM stdin;
4	9223372036854775807	copy
\.
\set VERBOSITY default
INSERT INTO rows_t VALUES (3, NULL, 'no token'), (4, :'g2', 'granted');
SELECT id, tok IS NULL AS no_token, v FROM rows_t WHERE id > 2 ORDER BY id;
-- One above the backend's latest grant: above every grant too (not only
-- above the sequence's reserved end).
SELECT fencing_grant() AS g3 \gset
SELECT pg_temp.outcome(format('UPDATE rows_t SET tok = %s WHERE id = 1', :'g3'::bigint + 1)) AS one_above_latest;

-- A lock named by an option word, as fencing_protect() has always taken it:
-- the lock's setting decides, and the guard says no token source.
SET ROLE ng_app;
CREATE TABLE by_word (id int PRIMARY KEY, tok fencing_token);
INSERT INTO by_word VALUES (1, NULL);
SELECT fencing_protect('by_word', 'tok', ARRAY['lock=ng-word']);
SELECT encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'by_word'::regclass AND tgname = 'fencing_guard';
UPDATE by_word SET tok = :'g3';
SELECT tok = :'g3' AS written FROM by_word;
RESET ROLE;

-- A table whose tokens come from another service says so.
SET ROLE ng_app;
CREATE TABLE etcd_rows (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO etcd_rows VALUES (1, NULL, 'initial');
SELECT fencing_protect('etcd_rows', options => ARRAY['external_tokens']);
SELECT encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'etcd_rows'::regclass;
UPDATE etcd_rows SET tok = 9223372036854775807, v = 'any token' WHERE id = 1;
SELECT tok, v FROM etcd_rows;
-- Contradicting words, or a source word under a lock (the lock decides).
SELECT pg_temp.outcome($$SELECT fencing_protect('etcd_rows', options => ARRAY['external_tokens', 'granted_tokens'])$$) AS both_sources;
SELECT pg_temp.outcome($$SELECT fencing_protect('etcd_rows', options => ARRAY['external_tokens'], lock_name => 'ng-leased')$$) AS source_under_lock;
RESET ROLE;

-- ---- Lock-wide fence, a lock whose leases this database grants ----------------
SET ROLE ng_app;
CREATE TABLE leased (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO leased VALUES (1, NULL, 'initial');
GRANT INSERT, UPDATE, DELETE, SELECT ON leased TO ng_writer;
SELECT fencing_protect('leased', lock_name => 'ng-leased');
SELECT fencing_grant_lock('ng-leased', 'ng_writer');
SELECT token_source FROM fencing_locks WHERE lock_name = 'ng-leased';
RESET ROLE;
SET SESSION AUTHORIZATION ng_writer;
SELECT fencing_acquire('ng-leased', 'holder', '1 hour') AS lease \gset
UPDATE leased SET tok = :'lease', v = 'holder' WHERE id = 1;
-- The issue's buggy write: the largest token, by a role allowed to use the
-- lock.  Refused, and the mark does not move.
SELECT pg_temp.outcome($$UPDATE leased SET tok = 9223372036854775807, v = 'typo' WHERE id = 1$$) AS largest;
-- A token the database did grant, but not for this lock: refused as well
-- (the lock's grants raise its mark first).
SELECT pg_temp.outcome(format('UPDATE leased SET tok = %s, v = %L WHERE id = 1',
                              fencing_grant(), 'another grant')) AS other_grant;
SELECT pg_temp.outcome($$INSERT INTO leased VALUES (2, 9223372036854775807, 'insert')$$) AS insert_largest;
SELECT pg_temp.outcome($$SELECT fencing_present('ng-leased', '9223372036854775807')$$) AS present_largest;
BEGIN;
SELECT fencing_present('ng-leased', :'lease');
DELETE FROM leased WHERE id = 99;
COMMIT;
SELECT high_water = :'lease' AS mark_still_the_lease FROM fencing_fences WHERE lock_name = 'ng-leased';
-- So the lock lives on: its holder writes, a revoke answers above the
-- lease, and the next lease's writes pass.
UPDATE leased SET tok = :'lease', v = 'holder again' WHERE id = 1;
RESET SESSION AUTHORIZATION;
SELECT fencing_revoke('ng-leased', 'test') > :'lease'::fencing_token AS revoke_above_lease;
SET SESSION AUTHORIZATION ng_writer;
SELECT fencing_acquire('ng-leased', 'next', '1 hour') AS next_lease \gset
UPDATE leased SET tok = :'next_lease', v = 'next holder' WHERE id = 1;
SELECT tok = :'next_lease' AS by_next, v FROM leased;
-- The messages.
SELECT * FROM pg_temp.error_of($$SELECT fencing_present('ng-leased', '9223372036854775807')$$);
SELECT * FROM pg_temp.error_of($$UPDATE leased SET tok = 9223372036854775807 WHERE id = 1$$);
RESET SESSION AUTHORIZATION;

-- ---- Lock-wide fence, tokens from fencing_grant() (a lock in Redis) ------------
SET ROLE ng_app;
CREATE TABLE redis_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO redis_t VALUES (1, NULL, 'initial');
SELECT fencing_protect('redis_t', lock_name => 'ng-redis');
RESET ROLE;
SELECT fencing_grant() AS r1 \gset
UPDATE redis_t SET tok = :'r1', v = 'r1' WHERE id = 1;
SELECT fencing_grant() AS r2 \gset
UPDATE redis_t SET tok = :'r2', v = 'r2' WHERE id = 1;
SELECT high_water = :'r2' AS mark_raised_by_a_grant FROM fencing_fences WHERE lock_name = 'ng-redis';
SELECT pg_temp.outcome($$UPDATE redis_t SET tok = 9223372036854775807, v = 'typo' WHERE id = 1$$) AS largest;
SELECT high_water = :'r2' AS mark_unmoved FROM fencing_fences WHERE lock_name = 'ng-redis';

-- ---- Shared lock and semaphore ------------------------------------------------
SELECT fencing_acquire_shared('ng-shared', 'reader', '1 hour') AS shared_token \gset
CREATE TABLE shared_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO shared_t VALUES (1, NULL, 'initial');
SELECT fencing_protect('shared_t', lock_name => 'ng-shared');
UPDATE shared_t SET tok = :'shared_token', v = 'shared holder' WHERE id = 1;
SELECT pg_temp.outcome($$UPDATE shared_t SET tok = 9223372036854775807, v = 'typo' WHERE id = 1$$) AS shared_largest;
-- A shared holder whose lease ended, its slot granted to another: it writes
-- on, as before 1.5 (shared holders do not fence each other; an exclusive
-- grant fences them all).
SELECT fencing_acquire_shared('ng-shared2', 'early', '100 ms') AS early \gset
CREATE TABLE shared2_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO shared2_t VALUES (1, NULL, 'initial');
SELECT fencing_protect('shared2_t', lock_name => 'ng-shared2');
SELECT pg_sleep(0.2);
SELECT fencing_acquire_shared('ng-shared2', 'late', '1 hour') IS NOT NULL AS late_shares;
SELECT pg_temp.outcome(format('UPDATE shared2_t SET tok = %s, v = %L WHERE id = 1', :'early', 'early')) AS ended_shared_holder;
SELECT fencing_acquire_permit('ng-sem', 'p', 2, '1 hour') AS permit_token \gset
CREATE TABLE sem_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO sem_t VALUES (1, NULL, 'initial');
SELECT fencing_protect('sem_t', lock_name => 'ng-sem');
UPDATE sem_t SET tok = :'permit_token', v = 'permit holder' WHERE id = 1;
SELECT pg_temp.outcome($$UPDATE sem_t SET tok = 9223372036854775807, v = 'typo' WHERE id = 1$$) AS semaphore_largest;

-- ---- A lock whose tokens come from another service ------------------------------
SET ROLE ng_app;
CREATE TABLE ext_t (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO ext_t VALUES (1, NULL, 'initial');
SELECT fencing_protect('ext_t', lock_name => 'ng-external');
SELECT fencing_grant_lock('ng-external', 'ng_writer');
SELECT fencing_set_token_source('ng-external', 'external');
SELECT token_source FROM fencing_locks WHERE lock_name = 'ng-external';
UPDATE ext_t SET tok = 9223372036854775000, v = 'a revision' WHERE id = 1;
SELECT tok, v FROM ext_t;
-- Bad values.
SELECT pg_temp.outcome($$SELECT fencing_set_token_source('ng-external', 'unknown')$$) AS set_unknown;
SELECT pg_temp.outcome($$SELECT fencing_set_token_source('ng-external', NULL)$$) AS set_null;
SELECT pg_temp.outcome($$SELECT fencing_set_token_source('no-such-lock', 'granted')$$) AS no_such_lock;
RESET ROLE;
-- Only the lock's owner (or a superuser) sets it: a user of the lock may
-- not loosen it, an intruder not even see it; nor call the internal half.
SET ROLE ng_writer;
SELECT pg_temp.outcome($$SELECT fencing_set_token_source('ng-leased', 'external')$$) AS user_loosens;
SELECT pg_temp.outcome($$SELECT fencing_set_token_source_as(10, 'ng-leased', 'external')$$) AS user_calls_internal;
RESET ROLE;
SET ROLE ng_intruder;
SELECT pg_temp.outcome($$SELECT fencing_set_token_source('ng-leased', 'external')$$) AS intruder_loosens;
SELECT count(*) AS intruder_sees_locks FROM fencing_locks;
RESET ROLE;
SELECT token_source FROM fencing_locks WHERE lock_name = 'ng-leased';

-- ---- fencing_reset_mark(): a mark that is already wrong -------------------------
-- While the lock took any token, a buggy write raised its mark to the
-- largest token: every later lease is below it, and its writes refused.
SET ROLE ng_app;
SELECT fencing_set_token_source('ng-leased', 'external');
RESET ROLE;
INSERT INTO leased VALUES (3, 9223372036854775807, 'poison');
SET ROLE ng_app;
SELECT fencing_set_token_source('ng-leased', 'granted');
RESET ROLE;
SET SESSION AUTHORIZATION ng_writer;
SELECT fencing_release('ng-leased', :'next_lease');
SELECT fencing_acquire('ng-leased', 'victim', '1 hour') AS victim \gset
SELECT pg_temp.outcome(format('UPDATE leased SET tok = %s, v = %L WHERE id = 1', :'victim', 'victim')) AS dead_lock;
-- A user of the lock may not reset it; an intruder neither.
SELECT pg_temp.outcome($$SELECT fencing_reset_mark('ng-leased', fencing_grant())$$) AS user_resets;
SELECT pg_temp.outcome($$SELECT fencing_reset_mark_as(10, 'ng-leased', '1')$$) AS user_calls_internal;
RESET SESSION AUTHORIZATION;
SET ROLE ng_intruder;
SELECT pg_temp.outcome($$SELECT fencing_reset_mark('ng-leased', '1')$$) AS intruder_resets;
RESET ROLE;
-- The owner: not to a token the live holder's would still pass, nor above
-- every grant, nor NULL.
SET ROLE ng_app;
SELECT pg_temp.outcome(format($$SELECT fencing_reset_mark('ng-leased', '%s')$$, :'victim')) AS to_holders_token;
SELECT pg_temp.outcome($$SELECT fencing_reset_mark('ng-leased', '9223372036854775807')$$) AS above_every_grant;
SELECT pg_temp.outcome($$SELECT fencing_reset_mark('ng-leased', NULL)$$) AS to_null;
-- Nor below an ended lease's token, nor, on a lock whose mark is not wrong,
-- below the mark.
SELECT pg_temp.outcome(format($$SELECT fencing_reset_mark('ng-leased', '%s')$$, :'lease')) AS below_ended_lease;
SELECT pg_temp.outcome(format($$SELECT fencing_reset_mark('ng-redis', '%s')$$, :'r1')) AS lower_a_sane_mark;
SELECT high_water = :'r2' AS redis_mark_kept FROM fencing_fences WHERE lock_name = 'ng-redis';
SELECT high_water = '9223372036854775807' AS still_poisoned FROM fencing_fences WHERE lock_name = 'ng-leased';
-- To a fresh grant: the mark is that token, the holder is revoked (its
-- renewal answers false, the reset is the lease's end reason), and the
-- next lease writes again.
SELECT fencing_grant() AS fresh \gset
SELECT fencing_reset_mark('ng-leased', :'fresh') = :'fresh' AS reset_returns_the_token;
SELECT high_water = :'fresh' AS mark_is_fresh FROM fencing_fences WHERE lock_name = 'ng-leased';
SELECT state, end_reason LIKE 'mark reset from 9223372036854775807 to %' AS reason_says_reset
  FROM fencing_leases WHERE lock_name = 'ng-leased';
RESET ROLE;
SET SESSION AUTHORIZATION ng_writer;
SELECT fencing_renew('ng-leased', :'victim', '1 hour') AS victim_renews;
SELECT pg_temp.outcome(format('UPDATE leased SET tok = %s, v = %L WHERE id = 1', :'victim', 'victim')) AS victim_writes;
SELECT fencing_acquire('ng-leased', 'after-reset', '1 hour') AS after_reset \gset
UPDATE leased SET tok = :'after_reset', v = 'after reset' WHERE id = 1;
SELECT id, tok = :'after_reset' AS by_after_reset, v FROM leased ORDER BY id;
RESET SESSION AUTHORIZATION;
-- The row the buggy write made keeps its token (a row's token is its own
-- mark): a superuser mends it with the guard out of the way.
SET session_replication_role = replica;
UPDATE leased SET tok = :'after_reset' WHERE id = 3;
RESET session_replication_role;

-- ---- A database updated from 1.4 keeps its tables' and locks' behaviour ---------
CREATE DATABASE fencing_never_granted_old;
\c fencing_never_granted_old
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\d{13,}', 'N', 'g');
END $$;
CREATE EXTENSION pg_fencing VERSION '1.4';
CREATE TABLE old_rows (id int PRIMARY KEY, tok fencing_token);
INSERT INTO old_rows VALUES (1, NULL);
SELECT fencing_protect('old_rows');
CREATE TABLE old_locked (id int PRIMARY KEY, tok fencing_token);
INSERT INTO old_locked VALUES (1, NULL);
SELECT fencing_protect('old_locked', lock_name => 'old-lock');
ALTER EXTENSION pg_fencing UPDATE;
SELECT lock_name, token_source FROM fencing_locks;
-- Any token, as in 1.4 (no grant was ever made here).
UPDATE old_rows SET tok = 9223372036854775000;
UPDATE old_locked SET tok = 9223372036854775000;
-- fencing_audit() lists both, with the command that tightens each.
SELECT table_name, lock_name, severity, fix FROM fencing_audit()
 WHERE problem LIKE '%never granted%' ORDER BY 1, 2;
SELECT fencing_protect('old_rows', 'tok');
SELECT fencing_set_token_source('old-lock', 'granted');
SELECT count(*) AS findings_left FROM fencing_audit() WHERE problem LIKE '%never granted%';
SELECT pg_temp.outcome($$UPDATE old_rows SET tok = 9223372036854775807$$) AS tightened_rows;
SELECT pg_temp.outcome($$UPDATE old_locked SET tok = 9223372036854775807$$) AS tightened_lock;
\c contrib_regression
DROP DATABASE fencing_never_granted_old;
DROP DATABASE fencing_never_granted_probe;
DROP ROLE ng_app;
DROP ROLE ng_writer;
DROP ROLE ng_intruder;
