-- Trigger tampering and fencing_audit().
\set SHOW_CONTEXT never

CREATE ROLE tamper_owner;
CREATE ROLE tamper_app;
GRANT CREATE ON SCHEMA public TO tamper_owner;
SET ROLE tamper_owner;
CREATE TABLE tampered (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO tampered VALUES (1, '34', 'by 34');
SELECT fencing_protect('tampered');
-- GRANT ALL includes TRIGGER.
GRANT ALL ON tampered TO tamper_app;
RESET ROLE;
CREATE FUNCTION app_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

-- The role with TRIGGER cannot replace the guard (1.1 let it) ...
SET ROLE tamper_app;
CREATE OR REPLACE TRIGGER fencing_guard BEFORE UPDATE ON tampered
  FOR EACH ROW EXECUTE FUNCTION app_noop();
UPDATE tampered SET tok = '33', v = 'stale' WHERE id = 1;
-- ... nor add a guard-named one, nor a trigger calling fencing_guard ...
CREATE TRIGGER fencing_guard_truncate BEFORE TRUNCATE ON tampered
  FOR EACH STATEMENT EXECUTE FUNCTION app_noop();
CREATE TRIGGER my_guard BEFORE UPDATE ON tampered
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('tok', 'skip');
-- ... nor drop, rename or disable it (these need ownership in PostgreSQL).
DROP TRIGGER fencing_guard ON tampered;
ALTER TRIGGER fencing_guard ON tampered RENAME TO gone;
ALTER TABLE tampered DISABLE TRIGGER fencing_guard;
-- It may add triggers of its own, which fencing_audit() reports.
CREATE TRIGGER app_trigger BEFORE UPDATE ON tampered FOR EACH ROW EXECUTE FUNCTION app_noop();
RESET ROLE;
SELECT v, tok FROM tampered;

-- The owner can replace or disable its own guard (and a superuser can);
-- fencing_audit() says what that leaves open.
SET ROLE tamper_owner;
ALTER TABLE tampered DISABLE TRIGGER fencing_guard;
SELECT table_name, lock_name, severity, problem, fix FROM fencing_audit();
-- Another role sees only its own tables.
SET ROLE tamper_app;
SELECT count(*) AS findings_for_another_role FROM fencing_audit();
SET ROLE tamper_owner;
ALTER TABLE tampered ENABLE REPLICA TRIGGER fencing_guard;
SELECT severity, problem FROM fencing_audit();
ALTER TABLE tampered ENABLE ALWAYS TRIGGER fencing_guard;
SELECT severity, problem FROM fencing_audit();
ALTER TABLE tampered ENABLE TRIGGER fencing_guard;
REVOKE TRIGGER ON tampered FROM tamper_app;
SELECT count(*) AS findings FROM fencing_audit();
RESET ROLE;

-- Inheritance: a child of a guarded table must be guarded too.
SET ROLE tamper_owner;
CREATE TABLE tampered_child () INHERITS (tampered);
CREATE TABLE tampered_child (id int PRIMARY KEY, tok fencing_token, v text);
ALTER TABLE tampered_child INHERIT tampered;
SELECT fencing_protect('tampered_child');
ALTER TABLE tampered_child INHERIT tampered;
-- A child whose guard its owner dropped is reported.
DROP TRIGGER fencing_guard ON tampered_child;
SELECT table_name, severity, problem, fix FROM fencing_audit();
SELECT fencing_protect('tampered');
SELECT count(*) AS findings FROM fencing_audit();
RESET ROLE;

-- Under a lock: a partition attached later has no TRUNCATE guard; a token
-- column with a default; a lock the owner may not use; a lock whose owner
-- was dropped.
CREATE TABLE audit_parted (id int, tok fencing_token DEFAULT '0', v text) PARTITION BY RANGE (id);
CREATE TABLE audit_parted_1 PARTITION OF audit_parted FOR VALUES FROM (0) TO (10);
SELECT fencing_protect('audit_parted', lock_name => 'audit-lock');
CREATE TABLE audit_parted_2 PARTITION OF audit_parted FOR VALUES FROM (10) TO (20);
CREATE ROLE audit_gone;
SELECT fencing_alter_lock_owner('audit-lock', 'audit_gone');
DROP ROLE audit_gone;
SELECT table_name, lock_name, severity, problem,
       replace(fix, quote_literal(current_user), '<me>') AS fix FROM fencing_audit()
 WHERE table_name::text LIKE 'audit_%' OR lock_name = 'audit-lock';
-- Each fix mends what it names.
SELECT fencing_alter_lock_owner('audit-lock', current_user::regrole);
ALTER TABLE audit_parted ALTER COLUMN tok DROP DEFAULT;
SELECT fencing_protect('audit_parted', lock_name => 'audit-lock');
SELECT count(*) AS findings FROM fencing_audit()
 WHERE table_name::text LIKE 'audit_%' OR lock_name = 'audit-lock';

-- The event trigger disabled by a superuser is reported.
ALTER EVENT TRIGGER fencing_refuse_tampering DISABLE;
SELECT severity, problem, fix FROM fencing_audit() WHERE table_name IS NULL;
ALTER EVENT TRIGGER fencing_refuse_tampering ENABLE;

DROP TABLE audit_parted;
DROP TABLE tampered CASCADE;
DROP FUNCTION app_noop();
REVOKE CREATE ON SCHEMA public FROM tamper_owner;
DROP OWNED BY tamper_owner, tamper_app;
DROP ROLE tamper_owner, tamper_app;
