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

-- The same against every extension function that runs SQL: look-alikes of
-- what they call, in a schema put first on the path (ahead of pg_catalog),
-- and of the extension's own operators.  Each raises if it is ever called.
CREATE SCHEMA evil;
CREATE FUNCTION evil.raise_hijack(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked: %', what; END $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('clock_timestamp'); RETURN NULL; END $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('now'); RETURN NULL; END $$;
CREATE FUNCTION evil.hashtext(text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('hashtext'); RETURN 0; END $$;
CREATE FUNCTION evil.pg_try_advisory_xact_lock(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('pg_try_advisory_xact_lock'); RETURN true; END $$;
CREATE FUNCTION evil.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('pg_advisory_xact_lock'); END $$;
CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('set_config'); RETURN NULL; END $$;
CREATE FUNCTION evil.current_setting(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('current_setting'); RETURN NULL; END $$;
CREATE FUNCTION evil.pg_sleep(double precision) RETURNS void LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('pg_sleep'); END $$;
CREATE FUNCTION evil.fencing_grant() RETURNS fencing_token LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('fencing_grant'); RETURN NULL; END $$;
CREATE FUNCTION evil.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('text ='); RETURN true; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
CREATE FUNCTION evil.token_cmp(fencing_token, fencing_token) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('fencing_token comparison'); RETURN true; END $$;
CREATE OPERATOR evil.= (LEFTARG = fencing_token, RIGHTARG = fencing_token, FUNCTION = evil.token_cmp);
CREATE OPERATOR evil.> (LEFTARG = fencing_token, RIGHTARG = fencing_token, FUNCTION = evil.token_cmp);
CREATE FUNCTION evil.ts_gt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('timestamptz >'); RETURN true; END $$;
CREATE OPERATOR evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.ts_gt);
CREATE FUNCTION evil.ts_plus(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('timestamptz + interval'); RETURN NULL; END $$;
CREATE OPERATOR evil.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.ts_plus);
GRANT USAGE ON SCHEMA evil TO PUBLIC;

CREATE TABLE hijack_target (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO hijack_target VALUES (1, NULL, 'a');
SET search_path = evil, pg_catalog, public;
SELECT fencing_protect('hijack_target', lock_name => 'hijack-lock') IS NOT NULL AS protected;
SELECT fencing_acquire('hijack-lock', 'h', '1 minute') AS hijack_token \gset
SELECT fencing_acquire('hijack-lock', 'other', '1 minute', '10 ms') IS NULL AS waited;
SELECT fencing_renew('hijack-lock', :'hijack_token', '1 minute') AS renewed;
SELECT fencing_leader('hijack-lock') AS leader;
BEGIN;
SELECT fencing_present('hijack-lock', :'hijack_token') IS NOT NULL AS presented;
UPDATE hijack_target SET val = 'b';
COMMIT;
SELECT fencing_release('hijack-lock', :'hijack_token') AS released;
-- The lock model's functions, with look-alikes of what they call.
CREATE FUNCTION evil.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('pg_has_role'); RETURN true; END $$;
CREATE FUNCTION evil.starts_with(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('starts_with'); RETURN true; END $$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('nextval'); RETURN 1; END $$;
CREATE FUNCTION evil.array_remove(regrole[], regrole) RETURNS regrole[] LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.raise_hijack('array_remove'); RETURN NULL; END $$;
SELECT fencing_create_lock('hijack-lock-2');
SELECT fencing_grant_lock('hijack-lock-2', 'fencing_writer');
SELECT fencing_revoke_lock('hijack-lock-2', 'fencing_writer') AS revoked;
SELECT fencing_alter_lock_owner('hijack-lock-2', current_user::regrole);
SELECT fencing_allow_create('fencing_writer', 'hijack/');
SELECT fencing_disallow_create('fencing_writer', 'hijack/') AS disallowed;
-- (Unpinned SQL is hijacked: this very query calls evil.= for text.)
SELECT count(*) FROM fencing_leases WHERE lock_name = 'hijack-lock';
RESET search_path;
SELECT count(*) AS lease_rows FROM fencing_leases WHERE lock_name = 'hijack-lock';
SELECT high_water = :'hijack_token' AS fence_at_token FROM fencing_fences WHERE lock_name = 'hijack-lock';
SELECT val, token = :'hijack_token' AS by_holder FROM hijack_target;
DROP SCHEMA evil CASCADE;

-- The role with UPDATE cannot write the extension's tables either.
SET ROLE fencing_writer;
UPDATE fencing_lease SET expires_at = 'infinity';
UPDATE fencing_fence SET high_water = '0';
SELECT setval('fencing_token_seq', 1);
RESET ROLE;

-- Every SQL-language or PL/pgSQL function of the extension pins search_path,
-- except those that cannot be hijacked through it: SQL-standard bodies
-- (bound to their objects at creation).  The lease engine is C since 1.3
-- and names every object it uses with its schema.
SELECT p.proname, l.lanname, p.prosqlbody IS NOT NULL AS sql_standard_body,
       p.proconfig IS NOT NULL AND
       EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%') AS pins_search_path,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
WHERE l.lanname IN ('sql', 'plpgsql') ORDER BY p.proname;

-- CREATE EXTENSION needs a superuser: the extension loads C code.
SELECT extname, extrelocatable FROM pg_extension WHERE extname = 'pg_fencing';
SELECT name, version, trusted, superuser FROM pg_available_extension_versions
WHERE name = 'pg_fencing' ORDER BY version;
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
