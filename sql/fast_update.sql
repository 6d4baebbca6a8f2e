-- Plain UPDATEs judged in their own projection (pg_fencing.fast_update):
-- where the projection's check stands in for the guard's trigger, where it
-- does not, that both refuse alike, and what a role can do with the check.
-- In a database of its own: its lock's mark must not show in other tests.
CREATE DATABASE fencing_fast_update_probe;
\c fencing_fast_update_probe
CREATE EXTENSION pg_fencing;
-- The hand-written tokens below stand for grants: one grant first, so that
-- they are below the highest token the database has granted (a token
-- above it is refused, sql/never_granted.sql).
SELECT fencing_grant() IS NOT NULL AS granted_once;
\set SHOW_CONTEXT never
\set VERBOSITY default
SET track_functions = 'all';

-- Runs a statement and says how often the trigger and the check ran for
-- it.  (The counts of the current transaction; PostgreSQL counts a call
-- when it returns, so a statement that fails cannot be counted.)
CREATE FUNCTION pg_temp.calls_of(statement text, OUT guard_calls bigint, OUT check_calls bigint)
LANGUAGE plpgsql AS $$
DECLARE
  guard_before bigint := coalesce(pg_stat_get_xact_function_calls('fencing_guard'::regproc), 0);
  check_before bigint := coalesce(pg_stat_get_xact_function_calls('fencing_guard_check'::regproc), 0);
BEGIN
  EXECUTE statement;
  guard_calls := coalesce(pg_stat_get_xact_function_calls('fencing_guard'::regproc), 0) - guard_before;
  check_calls := coalesce(pg_stat_get_xact_function_calls('fencing_guard_check'::regproc), 0) - check_before;
END $$;
-- The plan, without the trigger's OID.
CREATE FUNCTION pg_temp.plan_of(statement text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || statement LOOP
    RETURN NEXT regexp_replace(line, '''\d+''::oid, ''\d+''::oid\)', 'TRIGGER, TABLE)');
  END LOOP;
END $$;

-- A refusal with every field PostgreSQL reports for it.
CREATE FUNCTION pg_temp.refusal(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text; message text; detail text; hint text; schema_name text; table_name text; column_name text;
BEGIN
  EXECUTE statement;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL,
    hint = PG_EXCEPTION_HINT, schema_name = SCHEMA_NAME, table_name = TABLE_NAME, column_name = COLUMN_NAME;
  RETURN format(E'%s: %s\ndetail: %s\nhint: %s\nschema %s, table %s, column %s',
                state, message, detail, hint, schema_name, table_name, column_name);
END $$;

CREATE TABLE fu_rows (id int PRIMARY KEY, tok fencing_token, val int);
INSERT INTO fu_rows SELECT g, 10, 0 FROM generate_series(1, 20) g;
SELECT fencing_protect('fu_rows');

-- The check wraps the new token, with the old row's token beside it.
SELECT * FROM pg_temp.plan_of('UPDATE fu_rows SET tok = 11, val = val + 1');
SELECT * FROM pg_temp.calls_of('UPDATE fu_rows SET tok = 11, val = val + 1');

-- It refuses as the trigger does: same SQLSTATE, message and fields.
SELECT pg_temp.refusal('UPDATE fu_rows SET tok = 5 WHERE id = 1');
SELECT pg_temp.refusal('UPDATE fu_rows SET tok = NULL WHERE id = 1');
-- All or nothing: one stale row refuses the statement.
UPDATE fu_rows SET tok = CASE WHEN id = 20 THEN 3 ELSE 12 END;
SELECT tok, count(*) FROM fu_rows GROUP BY tok;
-- An equal token passes (the same holder again); so does a higher one.
UPDATE fu_rows SET tok = 11 WHERE id = 1;
UPDATE fu_rows SET tok = 12 WHERE id = 1 RETURNING id, tok;

-- An UPDATE that does not set the column is left to the trigger (only the
-- trigger says "does not set").
SELECT * FROM pg_temp.plan_of('UPDATE fu_rows SET val = 7 WHERE id = 2');
UPDATE fu_rows SET val = 7 WHERE id = 2;

-- Off, the trigger judges every row, with the same verdicts.
SET pg_fencing.fast_update = off;
SELECT * FROM pg_temp.plan_of('UPDATE fu_rows SET tok = 13, val = val + 1');
SELECT * FROM pg_temp.calls_of('UPDATE fu_rows SET tok = 13, val = val + 1');
SELECT pg_temp.refusal('UPDATE fu_rows SET tok = 5 WHERE id = 1');
SELECT pg_temp.refusal('UPDATE fu_rows SET tok = NULL WHERE id = 1');
RESET pg_fencing.fast_update;
-- A plan made while it was on (a statement without parameters is planned
-- once, and the plan kept) and run while it is off keeps the trigger.
PREPARE fu_write AS UPDATE fu_rows SET tok = 14 WHERE id = 3;
SELECT * FROM pg_temp.calls_of('EXECUTE fu_write');
SET pg_fencing.fast_update = off;
SELECT * FROM pg_temp.calls_of('EXECUTE fu_write');   -- both judge
RESET pg_fencing.fast_update;
DEALLOCATE fu_write;

-- An UPDATE of the one table gets the check in its scan, after planning
-- (planning the call would cost a one-row UPDATE what the trigger costs).
SELECT * FROM pg_temp.plan_of('UPDATE fu_rows SET tok = 11 WHERE id = 3');
-- A sub-select, which the planner may turn into a join: the check is put
-- in before planning, and the planner carries the old token to it.
SELECT * FROM pg_temp.calls_of($$UPDATE fu_rows SET tok = '15' WHERE id IN (SELECT 3 UNION SELECT 4)$$);
-- Other shapes of UPDATE that reach the table: a join, a view, PL/pgSQL.
SELECT * FROM pg_temp.calls_of($$UPDATE fu_rows r SET tok = s.tok FROM (VALUES (5, '20'::fencing_token)) s(id, tok) WHERE r.id = s.id$$);
UPDATE fu_rows r SET tok = s.tok FROM (VALUES (5, '19'::fencing_token)) s(id, tok) WHERE r.id = s.id;
CREATE VIEW fu_view AS SELECT id, tok, val FROM fu_rows;
SELECT * FROM pg_temp.calls_of($$UPDATE fu_view SET tok = '21' WHERE id = 5$$);
UPDATE fu_view SET tok = '3' WHERE id = 5;
DO $$ BEGIN UPDATE fu_rows SET tok = '2' WHERE id = 5; END $$;
SELECT tok FROM fu_rows WHERE id = 5;

-- Tables the check does not handle keep the trigger for every row.
-- Option skip: only the trigger can leave a row as it is.
CREATE TABLE fu_skip (id int PRIMARY KEY, tok fencing_token, val int);
INSERT INTO fu_skip SELECT g, 10, 0 FROM generate_series(1, 4) g;
SELECT fencing_protect('fu_skip', options => ARRAY['skip']);
SELECT * FROM pg_temp.calls_of('UPDATE fu_skip SET tok = CASE WHEN id = 1 THEN 5 ELSE 11 END');
SELECT id, tok FROM fu_skip ORDER BY id;
-- Another BEFORE UPDATE row trigger, which could change the token after
-- the check.
CREATE TABLE fu_other (id int PRIMARY KEY, tok fencing_token, val int);
INSERT INTO fu_other VALUES (1, 10, 0);
SELECT fencing_protect('fu_other');
CREATE FUNCTION fu_lower_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.tok := 1; RETURN NEW; END $$;
CREATE TRIGGER a_lower BEFORE UPDATE ON fu_other FOR EACH ROW EXECUTE FUNCTION fu_lower_token();
SELECT * FROM pg_temp.plan_of('UPDATE fu_other SET tok = 11');
UPDATE fu_other SET tok = 11;
-- A domain over fencing_token.
CREATE DOMAIN fu_token AS fencing_token;
CREATE TABLE fu_domain (id int PRIMARY KEY, tok fu_token, val int);
INSERT INTO fu_domain VALUES (1, 10, 0);
SELECT fencing_protect('fu_domain');
SELECT * FROM pg_temp.calls_of('UPDATE fu_domain SET tok = 11');
-- A partitioned table, updated through its root (rows may move): the
-- trigger; a partition updated by name: the check.
CREATE TABLE fu_parts (id int, tok fencing_token, val int) PARTITION BY RANGE (id);
CREATE TABLE fu_parts_low PARTITION OF fu_parts FOR VALUES FROM (0) TO (10);
CREATE TABLE fu_parts_high PARTITION OF fu_parts FOR VALUES FROM (10) TO (20);
INSERT INTO fu_parts SELECT g, 10, 0 FROM generate_series(0, 19) g;
SELECT fencing_protect('fu_parts');
SELECT * FROM pg_temp.calls_of('UPDATE fu_parts SET tok = 11');
SELECT * FROM pg_temp.calls_of('UPDATE fu_parts_low SET tok = 12');
UPDATE fu_parts_low SET tok = 5 WHERE id = 1;

-- Under a lock-wide fence: the lock's mark as well as the row's.
CREATE TABLE fu_locked (id int PRIMARY KEY, tok fencing_token, val int);
INSERT INTO fu_locked SELECT g, NULL, 0 FROM generate_series(1, 5) g;
SELECT fencing_protect('fu_locked', lock_name => 'fu-lock');
BEGIN;
SELECT fencing_present('fu-lock', '50');
SELECT * FROM pg_temp.calls_of('UPDATE fu_locked SET tok = 50, val = 1 WHERE id <= 3');
-- Not setting the column, the rows get the presented token: the trigger.
SELECT * FROM pg_temp.calls_of('UPDATE fu_locked SET val = 2 WHERE id > 3');
SELECT tok, val, count(*) FROM fu_locked GROUP BY tok, val ORDER BY val;
COMMIT;
-- A higher token raises the mark for the whole lock ...
UPDATE fu_locked SET tok = 60 WHERE id = 1;
-- ... so the holder of 50 is refused on the other rows.
SELECT pg_temp.refusal('UPDATE fu_locked SET tok = 50 WHERE id = 2');
UPDATE fu_locked SET tok = NULL WHERE id = 2;
SELECT high_water FROM fencing_fences WHERE lock_name = 'fu-lock';

-- A trigger that does not fire does not judge, nor does its check.
SET session_replication_role = replica;
UPDATE fu_rows SET tok = 1 WHERE id = 4;
RESET session_replication_role;
SELECT tok FROM fu_rows WHERE id = 4;

-- What a role can do with fencing_guard_check by hand.
SELECT oid AS fu_rows_guard FROM pg_trigger WHERE tgrelid = 'fu_rows'::regclass \gset
SELECT oid AS fu_other_lower FROM pg_trigger WHERE tgname = 'a_lower' \gset
CREATE ROLE fu_intruder;
GRANT CREATE ON SCHEMA public TO fu_intruder;
SET ROLE fu_intruder;
-- Without UPDATE on the trigger's table: refused, nothing judged or counted.
SELECT fencing_guard_check('5', '1', :fu_rows_guard, 'fu_rows'::regclass);
-- Its own guarded table.
CREATE TABLE fu_mine (id int PRIMARY KEY, tok fencing_token, tok2 fencing_token);
INSERT INTO fu_mine VALUES (1, 10, 10);
SELECT fencing_protect('fu_mine', 'tok');
SELECT oid AS fu_mine_guard FROM pg_trigger WHERE tgrelid = 'fu_mine'::regclass \gset
-- A call by hand judges only what the caller's UPDATE would, as the caller.
SELECT fencing_guard_check('11', '10', :fu_mine_guard, 'fu_mine'::regclass) AS judged;
SELECT fencing_guard_check('9', '10', :fu_mine_guard, 'fu_mine'::regclass) AS judged;
-- A call by hand in another column does not stand in for the trigger: the
-- UPDATE still does not set tok, and the trigger says so.
UPDATE fu_mine SET tok2 = fencing_guard_check('99', '0', :fu_mine_guard, 'fu_mine'::regclass);
-- A call by hand with a made-up old token is wrapped in the planner's own.
UPDATE fu_mine SET tok = fencing_guard_check('5', '0', :fu_mine_guard, 'fu_mine'::regclass);
-- ... and one in a plan made while the setting was off, so not wrapped,
-- and run while it is on, is still not the planner's: the trigger judges.
SET pg_fencing.fast_update = off;
PREPARE fu_forged AS UPDATE fu_mine SET tok = fencing_guard_check('5', NULL, :fu_mine_guard, 'fu_mine'::regclass) WHERE id = 1;
EXECUTE fu_forged;
RESET pg_fencing.fast_update;
EXECUTE fu_forged;
DEALLOCATE fu_forged;
SELECT tok FROM fu_mine;
RESET ROLE;
-- Triggers that are not a guard's, and ones that do not exist.
\set VERBOSITY sqlstate
SELECT fencing_guard_check('5', '1', :fu_other_lower, 'fu_other'::regclass);
-- A guard's trigger named with another table.
SELECT fencing_guard_check('5', '1', :fu_rows_guard, 'fu_other'::regclass);
\set VERBOSITY default
SELECT fencing_guard_check('5', '1', 0, 'fu_rows'::regclass);
SELECT fencing_guard_check('5', '1', NULL, 'fu_rows'::regclass);
SELECT fencing_guard_check('5', '1', :fu_rows_guard, NULL);

-- A role granted UPDATE on the token column (not the table) writes through
-- the check; one granted only another column may not call it.
CREATE ROLE fu_columns;
CREATE ROLE fu_val_only;
GRANT SELECT, UPDATE (tok, val) ON fu_rows TO fu_columns;
GRANT SELECT, UPDATE (val) ON fu_rows TO fu_val_only;
SET ROLE fu_columns;
SELECT * FROM pg_temp.calls_of($$UPDATE fu_rows SET tok = '30', val = 1 WHERE id = 6$$);
UPDATE fu_rows SET tok = '29' WHERE id = 6;
SET ROLE fu_val_only;
SELECT fencing_guard_check('31', '30', :fu_rows_guard, 'fu_rows'::regclass);
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_fast_update_probe;
DROP ROLE fu_intruder, fu_columns, fu_val_only;
