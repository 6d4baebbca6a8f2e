-- fencing_guard(): the BEFORE UPDATE row trigger.

CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO resource VALUES (1, NULL, 'initial'), (2, NULL, 'initial'), (3, NULL, 'initial');
CREATE TRIGGER guard BEFORE UPDATE ON resource
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('token');

-- A never-fenced row accepts any token.
UPDATE resource SET token = 34, val = 'B' WHERE id = 1;
-- The pause scenario: token 33 arrives after 34 and is rejected (55Z01).
UPDATE resource SET token = 33, val = 'A (stale)' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- The error names the table and column in its fields, for clients.
DO $$
DECLARE tbl text; col text; msg text;
BEGIN
  UPDATE resource SET token = 33 WHERE id = 1;
EXCEPTION WHEN SQLSTATE '55Z01' THEN
  GET STACKED DIAGNOSTICS tbl = TABLE_NAME, col = COLUMN_NAME, msg = MESSAGE_TEXT;
  RAISE NOTICE 'caught 55Z01 on %.%: %', tbl, col, msg;
END $$;
-- Equal and higher tokens pass.
UPDATE resource SET token = 34, val = 'B again' WHERE id = 1;
UPDATE resource SET token = 35, val = 'C' WHERE id = 1;
SELECT * FROM resource ORDER BY id;

-- A missing token is refused (55Z02): NULL, or not assigned at all.
UPDATE resource SET token = NULL, val = 'null token' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE resource SET val = 'forgot the token' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- Even on a never-fenced row.
UPDATE resource SET val = 'forgot the token' WHERE id = 2;
-- Assigning the column to itself counts as assigning it.
UPDATE resource SET token = token, val = 'self-assigned' WHERE id = 1;
SELECT * FROM resource ORDER BY id;

-- One stale row fails the whole statement: nothing changes.
UPDATE resource SET token = 10, val = 'bulk' WHERE id = 2;
UPDATE resource SET token = 20, val = 'bulk 20';
SELECT * FROM resource ORDER BY id;
UPDATE resource SET token = 40, val = 'bulk 40';
SELECT * FROM resource ORDER BY id;

-- Option 'skip': stale rows are left alone and not counted.
CREATE TABLE skipping (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO skipping VALUES (1, 10, 'a'), (2, 30, 'b'), (3, NULL, 'c');
CREATE TRIGGER guard BEFORE UPDATE ON skipping
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'skip');
WITH updated AS (UPDATE skipping SET token = 20, val = 'x' RETURNING id)
SELECT array_agg(id ORDER BY id) AS updated_rows FROM updated;
SELECT * FROM skipping ORDER BY id;
-- 'skip' does not excuse a missing token.
UPDATE skipping SET val = 'y';

-- Option 'allow_unset': an UPDATE that leaves the column alone passes and
-- keeps the token; an explicit stale or NULL token is still refused.
CREATE TABLE unset_ok (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO unset_ok VALUES (1, 10, 'a'), (2, NULL, 'b');
CREATE TRIGGER guard BEFORE UPDATE ON unset_ok
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'allow_unset');
UPDATE unset_ok SET val = 'no token given';
SELECT * FROM unset_ok ORDER BY id;
UPDATE unset_ok SET token = 5 WHERE id = 1;
UPDATE unset_ok SET token = NULL WHERE id = 1;
-- Both options together.
CREATE OR REPLACE TRIGGER guard BEFORE UPDATE ON unset_ok
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'allow_unset', 'skip');
UPDATE unset_ok SET token = 5, val = 'skipped' WHERE id = 1;
UPDATE unset_ok SET val = 'unset passes';
SELECT * FROM unset_ok ORDER BY id;

-- INSERT ... ON CONFLICT DO UPDATE goes through the guard.
INSERT INTO resource VALUES (1, 39, 'upsert stale')
  ON CONFLICT (id) DO UPDATE SET token = excluded.token, val = excluded.val;
INSERT INTO resource VALUES (1, 41, 'upsert fresh')
  ON CONFLICT (id) DO UPDATE SET token = excluded.token, val = excluded.val;
INSERT INTO resource VALUES (1, 42, 'upsert without token')
  ON CONFLICT (id) DO UPDATE SET val = excluded.val;
SELECT * FROM resource WHERE id = 1;

-- Partitioned tables: one trigger on the parent guards every partition,
-- including one whose columns are in a different order.
CREATE TABLE parted (id int, token fencing_token, val text) PARTITION BY RANGE (id);
CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100);
CREATE TABLE parted_high (val text, id int, token fencing_token);
ALTER TABLE parted ATTACH PARTITION parted_high FOR VALUES FROM (100) TO (200);
INSERT INTO parted VALUES (1, 10, 'low'), (150, 10, 'high');
SELECT fencing_protect('parted');
UPDATE parted SET token = 9, val = 'stale low' WHERE id = 1;
UPDATE parted SET token = 9, val = 'stale high' WHERE id = 150;
UPDATE parted SET val = 'no token high' WHERE id = 150;
UPDATE parted SET token = 11, val = 'fresh' ;
-- Moving a row across partitions is an UPDATE of the parent too.
UPDATE parted SET id = 151, token = 5 WHERE id = 1;
UPDATE parted SET id = 151, token = 12 WHERE id = 1;
SELECT tableoid::regclass, * FROM parted ORDER BY id;

-- Misuse is a clear error, never a crash.
SELECT fencing_guard();
CREATE TABLE misuse (id int, token fencing_token, other int);
INSERT INTO misuse VALUES (1, 1, 1);
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard();
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('nope');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('other');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'bogus');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('ctid');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t AFTER UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('token');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE UPDATE ON misuse FOR EACH STATEMENT EXECUTE FUNCTION fencing_guard('token');
UPDATE misuse SET token = 2;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('token');
INSERT INTO misuse VALUES (2, 2, 2);
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE DELETE ON misuse FOR EACH ROW EXECUTE FUNCTION fencing_guard('token');
DELETE FROM misuse;
DROP TRIGGER t ON misuse;
CREATE TRIGGER t BEFORE TRUNCATE ON misuse FOR EACH STATEMENT EXECUTE FUNCTION fencing_guard('token');
TRUNCATE misuse;
DROP TRIGGER t ON misuse;
CREATE VIEW misuse_view AS SELECT * FROM misuse;
CREATE TRIGGER t INSTEAD OF UPDATE ON misuse_view FOR EACH ROW EXECUTE FUNCTION fencing_guard('token');
UPDATE misuse_view SET token = 2;
DROP VIEW misuse_view;
-- Nothing was changed by any of the misuses.
SELECT * FROM misuse;

-- A column dropped after the trigger was made.
CREATE TABLE dropped (id int, token fencing_token);
INSERT INTO dropped VALUES (1, 1);
SELECT fencing_protect('dropped');
ALTER TABLE dropped DROP COLUMN token;
UPDATE dropped SET id = 2;

-- Domains over fencing_token are token columns too.
CREATE DOMAIN lease_token AS fencing_token;
CREATE TABLE domained (id int, token lease_token);
INSERT INTO domained VALUES (1, 10);
SELECT fencing_protect('domained');
UPDATE domained SET token = 9;
UPDATE domained SET token = 11;
SELECT * FROM domained;
