-- fencing_unprotect() (1.1): removes the triggers fencing_protect() installed.
\set SHOW_CONTEXT never

CREATE TABLE unprot (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO unprot VALUES (1, 34, 'by 34');

-- A per-row fence: its one trigger goes, and a stale token lands again.
SELECT fencing_protect('unprot');
UPDATE unprot SET token = 33, val = 'by 33' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_unprotect('unprot');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;
UPDATE unprot SET token = 33, val = 'by 33' WHERE id = 1;
SELECT * FROM unprot;

-- A table that is not protected (any more): 55000, naming the table, with
-- its schema and name in the error's fields.
SELECT fencing_unprotect('unprot');
\echo :LAST_ERROR_SQLSTATE
DO $$
DECLARE sch text; tbl text; msg text;
BEGIN
  PERFORM fencing_unprotect('unprot');
EXCEPTION WHEN SQLSTATE '55000' THEN
  GET STACKED DIAGNOSTICS sch = SCHEMA_NAME, tbl = TABLE_NAME, msg = MESSAGE_TEXT;
  RAISE NOTICE 'caught 55000 on %.%: %', sch, tbl, msg;
END $$;
SELECT fencing_unprotect(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_unprotect('no_such_table');

-- A lock-wide fence: both triggers go; the lock's mark stays.
SELECT fencing_protect('unprot', lock_name => 'unprotect-lock');
UPDATE unprot SET token = 40 WHERE id = 1;
SELECT tgname FROM pg_trigger WHERE tgrelid = 'unprot'::regclass ORDER BY tgname;
SELECT fencing_unprotect('unprot');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;
SELECT high_water FROM fencing_fences WHERE lock_name = 'unprotect-lock';
-- Only the truncate trigger left (the other dropped by hand) still counts.
SELECT fencing_protect('unprot', lock_name => 'unprotect-lock');
DROP TRIGGER fencing_guard ON unprot;
SELECT fencing_unprotect('unprot');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;

-- A trigger of the user's own called fencing_guard is not ours to drop.
CREATE FUNCTION unprot_own_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NEW; END $$;
CREATE TRIGGER fencing_guard BEFORE UPDATE ON unprot
  FOR EACH ROW EXECUTE FUNCTION unprot_own_trigger();
SELECT fencing_unprotect('unprot');
\echo :LAST_ERROR_SQLSTATE
SELECT tgname, tgfoid::regprocedure FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;
DROP TRIGGER fencing_guard ON unprot;
DROP FUNCTION unprot_own_trigger();

-- Partitions: the guard is unprotected through the partitioned table, which
-- removes it from every partition; a partition alone is refused.
CREATE TABLE unprot_parted (id int, token fencing_token) PARTITION BY RANGE (id);
CREATE TABLE unprot_part1 PARTITION OF unprot_parted FOR VALUES FROM (0) TO (10);
CREATE TABLE unprot_part2 PARTITION OF unprot_parted FOR VALUES FROM (10) TO (20)
  PARTITION BY RANGE (id);
CREATE TABLE unprot_part2a PARTITION OF unprot_part2 FOR VALUES FROM (10) TO (20);
SELECT fencing_protect('unprot_parted');
SELECT fencing_unprotect('unprot_part1');
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_unprotect('unprot_part2');
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_unprotect('unprot_parted');
SELECT count(*) FROM pg_trigger t JOIN pg_partition_tree('unprot_parted') p ON p.relid = t.tgrelid;
-- Under a lock, every table of the tree has a TRUNCATE trigger of its own
-- (statement triggers are not cloned): all of them go too.
SELECT fencing_protect('unprot_parted', lock_name => 'unprotect-lock');
SELECT t.tgrelid::regclass AS tbl, t.tgname, t.tgparentid <> 0 AS clone
FROM pg_trigger t JOIN pg_partition_tree('unprot_parted') p ON p.relid = t.tgrelid
ORDER BY t.tgrelid::regclass::text, t.tgname;
SELECT fencing_unprotect('unprot_part2a');
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_unprotect('unprot_parted');
SELECT count(*) FROM pg_trigger t JOIN pg_partition_tree('unprot_parted') p ON p.relid = t.tgrelid;

-- Quoted names in a schema.
CREATE SCHEMA "Unprot Schema";
CREATE TABLE "Unprot Schema"."Odd ""Table""" (tok fencing_token);
SELECT fencing_protect('"Unprot Schema"."Odd ""Table"""');
SELECT fencing_unprotect('"Unprot Schema"."Odd ""Table"""');
SELECT fencing_unprotect('"Unprot Schema"."Odd ""Table"""');
DROP SCHEMA "Unprot Schema" CASCADE;

-- Only the table's owner can unprotect it (DROP TRIGGER checks).
SELECT fencing_protect('unprot');
CREATE ROLE unprotect_stranger;
GRANT UPDATE ON unprot TO unprotect_stranger;
SET ROLE unprotect_stranger;
SELECT fencing_unprotect('unprot');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT tgname FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;

-- search_path hijack: look-alike operators first on the path are never
-- called (the function pins its path and qualifies every call).
CREATE SCHEMA unprot_evil;
CREATE FUNCTION unprot_evil.raise_hijack(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked: %', what; END $$;
CREATE FUNCTION unprot_evil.name_eq(name, name) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM unprot_evil.raise_hijack('name ='); RETURN true; END $$;
CREATE OPERATOR unprot_evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = unprot_evil.name_eq);
CREATE FUNCTION unprot_evil.oid_eq(oid, oid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM unprot_evil.raise_hijack('oid ='); RETURN true; END $$;
CREATE OPERATOR unprot_evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = unprot_evil.oid_eq);
CREATE OPERATOR unprot_evil.<> (LEFTARG = oid, RIGHTARG = oid, FUNCTION = unprot_evil.oid_eq);
CREATE FUNCTION unprot_evil.format(text, VARIADIC text[]) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM unprot_evil.raise_hijack('format'); RETURN NULL; END $$;
SET search_path = unprot_evil, pg_catalog, public;
SELECT fencing_unprotect('unprot');
RESET search_path;
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'unprot'::regclass;
DROP SCHEMA unprot_evil CASCADE;

-- Declared properties.
SELECT p.oid::regprocedure, p.prosecdef, p.proconfig, p.provolatile,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call
FROM pg_proc p WHERE p.proname = 'fencing_unprotect';

DROP TABLE unprot, unprot_parted;
DROP ROLE unprotect_stranger;
