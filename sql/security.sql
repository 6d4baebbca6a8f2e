-- Security: what an ordinary role can and cannot do around a protected table.
\set SHOW_CONTEXT never

CREATE TABLE guarded (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO guarded VALUES (1, 34, 'by 34');
SELECT fencing_protect('guarded');
CREATE ROLE fencing_writer;
GRANT SELECT, UPDATE ON guarded TO fencing_writer;

SET ROLE fencing_writer;
-- A role with UPDATE cannot lower the token ...
UPDATE guarded SET token = 33, val = 'stale' WHERE id = 1;
-- ... nor switch the guard off, drop or replace it ...
ALTER TABLE guarded DISABLE TRIGGER fencing_guard;
DROP TRIGGER fencing_guard ON guarded;
SELECT fencing_protect('guarded', options => '{skip}');
-- ... nor skip triggers for the session.
SET session_replication_role = replica;
-- It can write with a current token.
UPDATE guarded SET token = 35, val = 'by 35' WHERE id = 1;
RESET ROLE;
SELECT * FROM guarded;

-- Nothing the extension owns is writable by PUBLIC; only the fencing_leases
-- view is readable.
SELECT c.relname, c.relkind,
       (SELECT array_agg(a.privilege_type ORDER BY a.privilege_type)
        FROM aclexplode(coalesce(c.relacl, acldefault(
               CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
        WHERE a.grantee = 0) AS public_privileges
FROM pg_class c JOIN pg_depend d ON d.objid = c.oid AND d.classid = 'pg_class'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
WHERE d.deptype = 'e' ORDER BY c.relname;

-- search_path hijack: a role puts look-alike functions and operators first
-- on the path; fencing_protect must not call them.
CREATE SCHEMA evil;
CREATE FUNCTION evil.quote_literal(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked quote_literal'; END $$;
CREATE FUNCTION evil.format(text, regclass, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked format'; END $$;
CREATE FUNCTION evil.string_agg(text, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked string_agg'; END $$;
CREATE FUNCTION evil.concat_arrays(text[], text[]) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked ||'; END $$;
CREATE OPERATOR evil.|| (LEFTARG = text[], RIGHTARG = text[], FUNCTION = evil.concat_arrays);
SET search_path = evil, public;
SELECT fencing_protect('guarded', 'token', '{allow_unset}');
RESET search_path;
SELECT encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'guarded'::regclass;
DROP SCHEMA evil CASCADE;

-- Every SQL-language or PL/pgSQL function of the extension pins search_path.
SELECT p.proname, l.lanname,
       p.proconfig IS NOT NULL AND
       EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%') AS pins_search_path
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
WHERE l.lanname IN ('sql', 'plpgsql') ORDER BY p.proname;

-- CREATE EXTENSION needs a superuser: the extension loads C code.
SELECT extname, extrelocatable FROM pg_extension WHERE extname = 'pg_fencing';
SELECT name, trusted, superuser FROM pg_available_extension_versions WHERE name = 'pg_fencing';
CREATE ROLE fencing_db_owner CREATEDB;
CREATE DATABASE fencing_security_probe OWNER fencing_db_owner;
\c fencing_security_probe
SET ROLE fencing_db_owner;
CREATE EXTENSION pg_fencing;
RESET ROLE;
\c contrib_regression
DROP DATABASE fencing_security_probe;
DROP ROLE fencing_db_owner;

REVOKE ALL ON guarded FROM fencing_writer;
DROP ROLE fencing_writer;
