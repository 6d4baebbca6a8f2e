-- Every write path a stale or token-less write could take: generated token
-- columns, inheritance children, row movement between partitions, COPY,
-- INSERT ... ON CONFLICT.  (MERGE: merge.sql.)
\set SHOW_CONTEXT never

-- A generated token column is recomputed after the guard has judged the
-- row: refused by fencing_protect, and by the guard for a trigger made by
-- hand.
CREATE TABLE gen (id int PRIMARY KEY, raw bigint,
                  tok fencing_token GENERATED ALWAYS AS (raw) STORED);
INSERT INTO gen (id, raw) VALUES (1, 34);
SELECT fencing_protect('gen');
SELECT fencing_protect('gen', 'tok');
CREATE TRIGGER fencing_guard BEFORE UPDATE ON gen
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('tok');
UPDATE gen SET raw = 33 WHERE id = 1;
SELECT id, tok FROM gen;
DROP TABLE gen;

-- Inheritance: the parent's triggers fire only for the parent's own rows,
-- so fencing_protect guards each child as well.
CREATE TABLE inh_parent (id int, tok fencing_token, v text);
CREATE TABLE inh_child () INHERITS (inh_parent);
CREATE TABLE inh_grandchild () INHERITS (inh_child);
INSERT INTO inh_child VALUES (1, '34', 'child');
INSERT INTO inh_grandchild VALUES (2, '34', 'grandchild');
SELECT fencing_protect('inh_parent');
SELECT tgrelid::regclass, tgname FROM pg_trigger
 WHERE tgname LIKE 'fencing_guard%' AND tgrelid::regclass::text LIKE 'inh_%' ORDER BY 1, 2;
UPDATE inh_parent SET tok = '33', v = 'stale' WHERE id = 1;
UPDATE inh_parent SET tok = '33', v = 'stale' WHERE id = 2;
UPDATE inh_parent SET tok = '35', v = 'current' WHERE id = 2;
SELECT tableoid::regclass, * FROM inh_parent ORDER BY id;
-- Under a lock, every table of the tree also gets a TRUNCATE trigger.
SELECT fencing_protect('inh_parent', lock_name => 'inh-lock');
SELECT tgrelid::regclass, tgname FROM pg_trigger
 WHERE tgname LIKE 'fencing_guard%' AND tgrelid::regclass::text LIKE 'inh_%' ORDER BY 1, 2;
DELETE FROM inh_parent WHERE id = 1;
TRUNCATE inh_child;
-- fencing_unprotect removes them all.
SELECT fencing_unprotect('inh_parent');
SELECT count(*) AS guard_triggers_left FROM pg_trigger
 WHERE tgname LIKE 'fencing_guard%' AND tgrelid::regclass::text LIKE 'inh_%';
DROP TABLE inh_parent CASCADE;

-- Row movement under a lock-wide fence: an UPDATE that moves a row to
-- another partition is a DELETE from the old partition and an INSERT into
-- the new one, made under the token the UPDATE sets.
CREATE TABLE moving (id int, k int, tok fencing_token, v text) PARTITION BY LIST (k);
CREATE TABLE moving_1 PARTITION OF moving FOR VALUES IN (1);
CREATE TABLE moving_2 PARTITION OF moving FOR VALUES IN (2);
SELECT fencing_protect('moving', lock_name => 'moving-lock');
SELECT fencing_acquire('moving-lock', 'a', '1 minute') AS a_token \gset
INSERT INTO moving VALUES (1, 1, :'a_token', 'a');
SELECT fencing_release('moving-lock', :'a_token');
SELECT fencing_acquire('moving-lock', 'b', '1 minute') AS b_token \gset
-- The holder's move, with its token: accepted.
UPDATE moving SET k = 2, tok = :'b_token', v = 'moved by b' WHERE id = 1;
SELECT tableoid::regclass, id, tok = :'b_token' AS by_b, v FROM moving;
-- The old holder's move: stale.
-- Granted tokens are microseconds since 1970, different in every run: an
-- error that names one is shown by its SQLSTATE, then its message with the
-- token's name in place of the number.
\set VERBOSITY sqlstate
UPDATE moving SET k = 1, tok = :'a_token', v = 'moved by a' WHERE id = 1;
SELECT replace(replace(:'LAST_ERROR_MESSAGE', :'b_token', ':b_token'), :'a_token', ':a_token') AS error;
\set VERBOSITY default
-- A move that sets no token, with none presented: missing.
UPDATE moving SET k = 1, v = 'moved without a token' WHERE id = 1;
-- A plain DELETE still needs a presented token.
DELETE FROM moving WHERE id = 1;
SELECT tableoid::regclass, id, tok = :'b_token' AS by_b, v FROM moving;
-- With the token presented, a move that sets none takes it.
BEGIN;
SELECT fencing_present('moving-lock', :'b_token');
UPDATE moving SET k = 1, v = 'moved back, token presented' WHERE id = 1;
COMMIT;
SELECT tableoid::regclass, id, tok = :'b_token' AS by_b, v FROM moving;

-- COPY fires the row triggers of INSERT: judged like INSERT (the message,
-- which names the mark, is the INSERT's; psql keeps no LAST_ERROR_MESSAGE
-- for COPY, so only the SQLSTATE is shown).
\set VERBOSITY sqlstate
COPY moving (id, k, tok, v) FROM stdin;
2	2	1	stale copy
\.
\set VERBOSITY default
SELECT count(*) AS rows_after_stale_copy FROM moving;

-- INSERT ... ON CONFLICT DO UPDATE: the UPDATE half is judged too.
CREATE TABLE upsert (id int PRIMARY KEY, tok fencing_token, v text);
SELECT fencing_protect('upsert');
INSERT INTO upsert VALUES (1, '34', 'first');
INSERT INTO upsert VALUES (1, '33', 'stale') ON CONFLICT (id) DO UPDATE SET tok = EXCLUDED.tok, v = EXCLUDED.v;
INSERT INTO upsert VALUES (1, '35', 'newer') ON CONFLICT (id) DO UPDATE SET tok = EXCLUDED.tok, v = EXCLUDED.v;
INSERT INTO upsert VALUES (1, '36', 'no token') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
SELECT * FROM upsert;

DROP TABLE moving, upsert;
