-- Reads under a lock-wide fence: a row-level security policy USING
-- fencing_reads_allowed() lets only the transactions that presented the
-- lock's current token read the table, so a deposed holder reads nothing.
-- In a database of its own: the lock's grants must not move the tokens the
-- other tests print.
CREATE DATABASE fencing_read_fence_probe;
\c fencing_read_fence_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

-- A statement's outcome without the token values (they depend on the grants).
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\d+', 'N', 'g');
END $$;

CREATE ROLE rf_app;      -- owns the table and uses the lock
CREATE ROLE rf_other;    -- may read the table, may not use the lock
GRANT CREATE ON SCHEMA public TO rf_app;
SELECT fencing_allow_create('rf_app');

SET ROLE rf_app;
CREATE TABLE jobs (id int PRIMARY KEY, tok fencing_token, state text);
SELECT fencing_protect('jobs', lock_name => 'rf-lock');
SELECT fencing_acquire('rf-lock', 'worker-1', '1 hour') AS t1 \gset
BEGIN;
SELECT fencing_present('rf-lock', :'t1');
INSERT INTO jobs VALUES (1, NULL, 'queued'), (2, NULL, 'queued');
COMMIT;
-- The policies: FORCE, so that the owner's sessions are fenced too; one
-- permissive policy (a table with row-level security and none shows
-- nothing), and the fence as a restrictive one, which every read must
-- also pass.  The sub-select makes it one call per statement, not per row.
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY jobs_all ON jobs USING (true);
CREATE POLICY jobs_read_fence ON jobs AS RESTRICTIVE FOR SELECT
  USING ((SELECT fencing_reads_allowed('rf-lock')));
GRANT SELECT ON jobs TO rf_other;

-- Without a presentation: nothing.
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
-- With the current token presented: every row, until the transaction ends.
BEGIN;
SELECT fencing_present('rf-lock', :'t1');
SELECT fencing_reads_allowed('rf-lock') AS allowed;
SELECT id, state FROM jobs ORDER BY id;
COMMIT;
SELECT count(*) FROM jobs;
-- A presentation rolled back with its savepoint no longer counts.
BEGIN;
SAVEPOINT before_present;
SELECT fencing_present('rf-lock', :'t1');
SELECT count(*) FROM jobs;
ROLLBACK TO before_present;
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
COMMIT;
-- The policy applies to an UPDATE's WHERE too: under a read fence a writer
-- presents its token first, or its UPDATE finds no row.
UPDATE jobs SET tok = :'t1', state = 'written without presenting' WHERE id = 2;
BEGIN;
SELECT fencing_present('rf-lock', :'t1');
UPDATE jobs SET state = 'taken' WHERE id = 1;
COMMIT;

-- A newer holder: worker-1's lease is revoked and worker-2 granted.
RESET ROLE;
SELECT fencing_revoke('rf-lock') IS NOT NULL AS revoked;
SET ROLE rf_app;
SELECT fencing_acquire('rf-lock', 'worker-2', '1 hour') AS t2 \gset
-- The deposed holder cannot present its token, so it reads nothing.
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'rf-lock', :'t1'));
BEGIN;
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'rf-lock', :'t1'));
ROLLBACK;
SELECT count(*) FROM jobs;
-- The new holder reads, and sees what the old one wrote before it lost.
BEGIN;
SELECT fencing_present('rf-lock', :'t2');
SELECT id, state FROM jobs ORDER BY id;
COMMIT;
RESET ROLE;

-- Another role that may read the table but not use the lock: it cannot
-- present, so it reads nothing; the function tells it only about its own
-- transaction.
SET ROLE rf_other;
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'rf-lock', :'t2'));
RESET ROLE;
-- Nor does it read in a transaction where a role that may use the lock
-- presented: the role is checked when it reads, as the guard checks a
-- writer.
BEGIN;
SET LOCAL ROLE rf_app;
SELECT fencing_present('rf-lock', :'t2');
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
SET LOCAL ROLE rf_other;
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
COMMIT;
-- The same through a SECURITY DEFINER function of the lock's user that
-- presents for its caller.
SET ROLE rf_app;
CREATE FUNCTION present_for_caller(token fencing_token) RETURNS void
  LANGUAGE sql SECURITY DEFINER AS $$ SELECT fencing_present('rf-lock', token) $$;
RESET ROLE;
SET ROLE rf_other;
BEGIN;
SELECT present_for_caller(:'t2');
SELECT fencing_reads_allowed('rf-lock') AS allowed, count(*) FROM jobs;
COMMIT;
RESET ROLE;
-- Several locks in one statement, each judged on its own: both presented
-- (rf-b, owned by rf_other, by the superuser), only rf-lock usable by rf_app.
SELECT fencing_create_lock('rf-b', 'rf_other');
BEGIN;
SELECT fencing_present('rf-b', '1');
SET LOCAL ROLE rf_app;
SELECT fencing_present('rf-lock', :'t2');
SELECT lock_name, fencing_reads_allowed(lock_name) AS allowed
  FROM (VALUES ('rf-lock'), ('rf-b'), ('rf-lock'), ('rf-none')) l(lock_name);
COMMIT;
-- Bad input.
SELECT fencing_reads_allowed(NULL);
SELECT fencing_reads_allowed('');
-- A superuser bypasses row-level security, as PostgreSQL always lets it.
SELECT count(*) FROM jobs;


-- The same as a table option: fencing_protect(..., options => ARRAY['fence_reads'])
-- makes the policies itself, on the table and every table below it.
-- (rf-lock's holder is worker-2, token t2.)
CREATE FUNCTION pg_temp.rls_state(tbl regclass) RETURNS text LANGUAGE sql AS $$
  SELECT format('rls %s, forced %s, policies: %s', c.relrowsecurity, c.relforcerowsecurity,
                coalesce((SELECT string_agg(p.polname || CASE WHEN p.polpermissive THEN ' (permissive)'
                                                               ELSE ' (restrictive)' END, ', '
                                            ORDER BY p.polname)
                            FROM pg_policy p WHERE p.polrelid = c.oid), 'none'))
    FROM pg_class c WHERE c.oid = tbl $$;
SET ROLE rf_app;
CREATE TABLE tasks (id int PRIMARY KEY, tok fencing_token, state text) PARTITION BY RANGE (id);
CREATE TABLE tasks_low PARTITION OF tasks FOR VALUES FROM (0) TO (100);
CREATE TABLE tasks_high PARTITION OF tasks FOR VALUES FROM (100) TO (200);
-- A table that already has row-level security of its own keeps it.
CREATE TABLE notes (id int PRIMARY KEY, tok fencing_token, body text, author name DEFAULT current_user);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY notes_own ON notes USING (author = current_user);
SELECT fencing_protect('tasks', lock_name => 'rf-lock', options => ARRAY['fence_reads']);
SELECT fencing_protect('notes', lock_name => 'rf-lock', options => ARRAY['fence_reads']);
SELECT t, pg_temp.rls_state(t) FROM unnest('{tasks,tasks_low,tasks_high,notes}'::regclass[]) t;
SELECT obj_description(oid, 'pg_policy') FROM pg_policy
 WHERE polrelid = 'tasks'::regclass AND polname = 'fencing_read_fence';
SELECT obj_description(oid, 'pg_policy') FROM pg_policy
 WHERE polrelid = 'notes'::regclass AND polname = 'fencing_read_fence';
BEGIN;
SELECT fencing_present('rf-lock', :'t2');
INSERT INTO tasks VALUES (1, NULL, 'low'), (150, NULL, 'high');
INSERT INTO notes (id, tok, body) VALUES (1, NULL, 'a note');
SELECT id, state FROM tasks ORDER BY id;
SELECT id, state FROM tasks_high;
SELECT id, body FROM notes;
COMMIT;
-- A read that the planner makes parallel: the policy's sub-select runs in
-- the leader, in parallel mode, and still answers.
BEGIN;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SET LOCAL max_parallel_workers_per_gather = 2;
SELECT fencing_present('rf-lock', :'t2');
CREATE FUNCTION pg_temp.plan_has(statement text, node text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || statement LOOP
    IF line LIKE '%' || node || '%' THEN RETURN true; END IF;
  END LOOP;
  RETURN false;
END $$;
SELECT pg_temp.plan_has('SELECT count(*) FROM tasks_low', 'Gather') AS parallel_plan;
SELECT count(*) FROM tasks_low;
COMMIT;
-- A transaction's own revoke ends its presentation too.
RESET ROLE;
BEGIN;
SELECT fencing_present('rf-lock', :'t2');
SELECT fencing_reads_allowed('rf-lock') AS before_revoke;
SELECT fencing_revoke('rf-lock', 'drill') IS NOT NULL AS revoked;
SELECT fencing_reads_allowed('rf-lock') AS after_revoke;
ROLLBACK;
SET ROLE rf_app;
-- Not presented, or presented by a deposed holder: the owner reads nothing,
-- through the parent or a partition (FORCE).
SELECT (SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM tasks_low) AS tasks_low,
       (SELECT count(*) FROM notes) AS notes;
BEGIN;
SELECT pg_temp.outcome(format('SELECT fencing_present(%L, %L)', 'rf-lock', :'t1'));
ROLLBACK;
SELECT count(*) FROM tasks;
RESET ROLE;
-- Only the table's owner may set up or take down its read fence: a role
-- with TRIGGER on the table may not protect it (the tampering event
-- trigger), nor so change its policies.
SET ROLE rf_app;
CREATE TABLE tasks_plain (id int PRIMARY KEY, tok fencing_token);
GRANT TRIGGER ON tasks_plain TO rf_other;
GRANT TRIGGER ON notes TO rf_other;
SELECT fencing_grant_lock('rf-lock', 'rf_other');
RESET ROLE;
SET ROLE rf_other;
SELECT pg_temp.outcome('SELECT fencing_protect(''tasks_plain'', lock_name => ''rf-lock'', options => ARRAY[''fence_reads''])');
SELECT pg_temp.outcome('SELECT fencing_protect(''notes'', lock_name => ''rf-lock'')');
SELECT pg_temp.outcome('SELECT fencing_remove_read_fence(''notes'')');
SELECT pg_temp.outcome('SELECT fencing_set_read_fence(''tasks_plain'', ''rf-lock'')');
SELECT pg_temp.outcome('SELECT fencing_remove_read_fence(''pg_class'')');
SELECT pg_temp.outcome('SELECT fencing_remove_read_fence(0)');
RESET ROLE;
SELECT t, pg_temp.rls_state(t) FROM unnest('{tasks_plain,notes}'::regclass[]) t;
SET ROLE rf_app;
-- fencing_audit() reports a read fence that its owner weakened.
ALTER TABLE tasks_low NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tasks_high DISABLE ROW LEVEL SECURITY;
SELECT table_name, severity, problem, fix FROM fencing_audit()
 WHERE table_name::text LIKE 'tasks%' ORDER BY 1, 2, 3;
ALTER TABLE tasks_low FORCE ROW LEVEL SECURITY;
ALTER TABLE tasks_high ENABLE ROW LEVEL SECURITY;
DROP POLICY fencing_read_fence ON tasks_high;
ALTER POLICY fencing_read_fence ON tasks_low USING (true);
SELECT table_name, severity, problem, fix FROM fencing_audit()
 WHERE table_name::text LIKE 'tasks%' ORDER BY 1;
-- Protecting again repairs the fence, row-level security turned off included.
ALTER TABLE tasks DISABLE ROW LEVEL SECURITY;
SELECT fencing_protect('tasks', lock_name => 'rf-lock', options => ARRAY['fence_reads']);
SELECT count(*) AS findings FROM fencing_audit() WHERE table_name::text LIKE 'tasks%';
-- The option needs a lock.
SELECT pg_temp.outcome('SELECT fencing_protect(''tasks_plain'', options => ARRAY[''fence_reads''])');
-- Protecting again without the option takes the read fence down, and
-- fencing_unprotect() does too: each table is left as it was before.
SELECT fencing_protect('notes', lock_name => 'rf-lock');
SELECT fencing_unprotect('tasks');
SELECT t, pg_temp.rls_state(t) FROM unnest('{tasks,tasks_low,tasks_high,notes}'::regclass[]) t;
SELECT count(*) FROM tasks;
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_read_fence_probe;
DROP ROLE rf_app, rf_other;
