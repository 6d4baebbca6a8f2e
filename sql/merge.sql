-- MERGE and fencing_guard (issue 10, item 3): whether the token column was
-- set is decided by the UPDATE action that fired, not by the union of all
-- UPDATE actions' SET lists.
\set SHOW_CONTEXT never

-- ---- Per-row fence --------------------------------------------------------
CREATE TABLE merge_row (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO merge_row VALUES (1, '34', 'x');
SELECT fencing_protect('merge_row');

-- The firing action does not set the token: refused (55Z02), although
-- another action of the same MERGE does set it.
MERGE INTO merge_row t USING (VALUES (1, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'A (no token)';
\echo :LAST_ERROR_SQLSTATE
-- The firing action sets the token: judged like an UPDATE that sets it.
MERGE INTO merge_row t USING (VALUES (1, true, '33'::fencing_token)) s(id, has_tok, tok)
  ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = s.tok, v = 'A (stale token)'
  WHEN MATCHED THEN UPDATE SET v = 'A (no token)';
\echo :LAST_ERROR_SQLSTATE
MERGE INTO merge_row t USING (VALUES (1, true, '35'::fencing_token)) s(id, has_tok, tok)
  ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = s.tok, v = 'B (35)'
  WHEN MATCHED THEN UPDATE SET v = 'A (no token)';
SELECT * FROM merge_row ORDER BY id;

-- The firing action sets the token to the row's own: accepted on
-- PostgreSQL 17 and later, which say which action fired; refused (55Z02)
-- on 15 and 16, which do not, when another UPDATE action does not set the
-- token (documented in docs/functions.md).
DO $$
DECLARE
  expected text := CASE WHEN current_setting('server_version_num')::int >= 170000
                        THEN 'accepted' ELSE 'refused' END;
  outcome text;
BEGIN
  BEGIN
    MERGE INTO merge_row t USING (VALUES (1, true, '35'::fencing_token)) s(id, has_tok, tok)
      ON t.id = s.id
      WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = s.tok, v = 'B again (35)'
      WHEN MATCHED THEN UPDATE SET v = 'A (no token)';
    outcome := 'accepted';
  EXCEPTION WHEN SQLSTATE '55Z02' THEN
    outcome := 'refused';
  END;
  RAISE NOTICE 'equal token, mixed MERGE: %',
    CASE WHEN outcome = expected THEN 'as documented' ELSE outcome || ', not as documented' END;
END $$;

-- Every UPDATE action sets the token (a DELETE action does not count): an
-- equal token is accepted on every version.
MERGE INTO merge_row t USING (VALUES (1, false, false, '35'::fencing_token)) s(id, flag, del, tok)
  ON t.id = s.id
  WHEN MATCHED AND s.del THEN DELETE
  WHEN MATCHED AND s.flag THEN UPDATE SET tok = s.tok, v = 'flag'
  WHEN MATCHED THEN UPDATE SET tok = s.tok, v = 'all actions set the token (35)';
SELECT * FROM merge_row ORDER BY id;
-- ... and a lower one is stale.
MERGE INTO merge_row t USING (VALUES (1, '34'::fencing_token)) s(id, tok) ON t.id = s.id
  WHEN MATCHED AND s.tok IS NULL THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET tok = s.tok, v = 'stale';
\echo :LAST_ERROR_SQLSTATE

-- Option allow_unset: the no-token action passes and keeps the token, also
-- on a never-fenced row (whose NULL token is not an explicit NULL).
CREATE TABLE merge_unset (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO merge_unset VALUES (1, '34', 'x'), (2, NULL, 'y');
SELECT fencing_protect('merge_unset', options => '{allow_unset}');
MERGE INTO merge_unset t USING (VALUES (1, false), (2, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'no token';
SELECT * FROM merge_unset ORDER BY id;

-- ---- Lock-wide fence ------------------------------------------------------
CREATE TABLE merge_lock (id int PRIMARY KEY, tok fencing_token, v text);
INSERT INTO merge_lock VALUES (1, '34', 'x');
SELECT fencing_protect('merge_lock', lock_name => 'merge-L');
-- Nothing presented and the firing action does not set the token: 55Z02.
MERGE INTO merge_lock t USING (VALUES (1, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'A (no token)';
\echo :LAST_ERROR_SQLSTATE
SELECT lock_name, high_water FROM fencing_fences WHERE lock_name = 'merge-L';
-- With a presented token it is accepted and filled from the presentation.
BEGIN;
SELECT fencing_present('merge-L', '40');
MERGE INTO merge_lock t USING (VALUES (1, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'A (presented 40)';
COMMIT;
SELECT * FROM merge_lock ORDER BY id;
SELECT lock_name, high_water FROM fencing_fences WHERE lock_name = 'merge-L';

-- WHEN NOT MATCHED THEN INSERT under the lock: a row without a token needs
-- a presentation; a stale one is refused; the matched row in the same
-- MERGE is judged by its own action.
MERGE INTO merge_lock t USING (VALUES (2, NULL::fencing_token)) s(id, tok) ON t.id = s.id
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.tok, 'inserted, no token');
\echo :LAST_ERROR_SQLSTATE
MERGE INTO merge_lock t USING (VALUES (1, NULL::fencing_token), (2, NULL)) s(id, tok)
  ON t.id = s.id
  WHEN MATCHED AND s.tok IS NOT NULL THEN UPDATE SET tok = s.tok
  WHEN MATCHED THEN UPDATE SET v = 'no token'
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.tok, 'inserted, no token');
\echo :LAST_ERROR_SQLSTATE
MERGE INTO merge_lock t USING (VALUES (2, '39'::fencing_token)) s(id, tok) ON t.id = s.id
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.tok, 'inserted, stale 39');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fencing_present('merge-L', '41');
MERGE INTO merge_lock t USING (VALUES (1, NULL::fencing_token), (2, NULL)) s(id, tok)
  ON t.id = s.id
  WHEN MATCHED AND s.tok IS NOT NULL THEN UPDATE SET tok = s.tok
  WHEN MATCHED THEN UPDATE SET v = 'updated, presented 41'
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.tok, 'inserted, presented 41');
COMMIT;
MERGE INTO merge_lock t USING (VALUES (3, '42'::fencing_token)) s(id, tok) ON t.id = s.id
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.tok, 'inserted with 42');
SELECT * FROM merge_lock ORDER BY id;
SELECT lock_name, high_water FROM fencing_fences WHERE lock_name = 'merge-L';

-- ---- Partitioned table ----------------------------------------------------
-- merge_part_2 has another column order: the actions' column numbers are
-- the partition's own.
CREATE TABLE merge_part (id int, tok fencing_token, v text) PARTITION BY RANGE (id);
CREATE TABLE merge_part_1 PARTITION OF merge_part FOR VALUES FROM (0) TO (10);
CREATE TABLE merge_part_2 (v text, id int, tok fencing_token);
ALTER TABLE merge_part ATTACH PARTITION merge_part_2 FOR VALUES FROM (10) TO (20);
INSERT INTO merge_part VALUES (1, '34', 'x'), (11, '34', 'y');
SELECT fencing_protect('merge_part');
-- The no-token action is refused in either partition.
MERGE INTO merge_part t USING (VALUES (1, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'no token';
\echo :LAST_ERROR_SQLSTATE
MERGE INTO merge_part t USING (VALUES (11, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '99'
  WHEN MATCHED THEN UPDATE SET v = 'no token';
\echo :LAST_ERROR_SQLSTATE
-- Every UPDATE action sets the token: an equal token passes in both.
MERGE INTO merge_part t USING (VALUES (1, false), (11, false)) s(id, flag) ON t.id = s.id
  WHEN MATCHED AND s.flag THEN UPDATE SET tok = '34'
  WHEN MATCHED THEN UPDATE SET tok = '34';
-- A token-setting action fires in one partition, the other in the other.
MERGE INTO merge_part t USING (VALUES (1, true), (11, false)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '36', v = 'set 36'
  WHEN MATCHED THEN UPDATE SET v = 'no token';
\echo :LAST_ERROR_SQLSTATE
MERGE INTO merge_part t USING (VALUES (1, true), (11, true)) s(id, has_tok) ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = '36', v = 'set 36'
  WHEN MATCHED THEN UPDATE SET v = 'no token';
SELECT tableoid::regclass AS part, * FROM merge_part ORDER BY id;

-- ---- From PL/pgSQL ----------------------------------------------------------
CREATE FUNCTION merge_from_plpgsql(p_id int, p_tok fencing_token, p_v text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  MERGE INTO merge_row t USING (SELECT p_id AS id, p_tok AS tok) s ON t.id = s.id
    WHEN MATCHED AND s.tok IS NOT NULL THEN UPDATE SET tok = s.tok, v = p_v
    WHEN MATCHED THEN UPDATE SET v = p_v;
END $$;
SELECT merge_from_plpgsql(1, NULL, 'plpgsql, no token');
\echo :LAST_ERROR_SQLSTATE
SELECT merge_from_plpgsql(1, '37', 'plpgsql, 37');
SELECT merge_from_plpgsql(1, NULL, 'plpgsql, no token (cached plan)');
\echo :LAST_ERROR_SQLSTATE
SELECT merge_from_plpgsql(1, '36', 'plpgsql, stale 36');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM merge_row ORDER BY id;

-- ---- A MERGE that loads the library ------------------------------------------
-- In a new session nothing has loaded pg_fencing yet.  This MERGE needs
-- none of its functions until the trigger fires, so the library cannot
-- have seen it start: an equal token counts as not set (fail closed),
-- on every version.
CREATE TABLE merge_src (id int, has_tok bool, tok fencing_token);
INSERT INTO merge_src VALUES (1, true, '37');
\c
\set SHOW_CONTEXT never
MERGE INTO merge_row t USING merge_src s ON t.id = s.id
  WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = s.tok, v = 'first statement, 37'
  WHEN MATCHED THEN UPDATE SET v = 'first statement, no token';
\echo :LAST_ERROR_SQLSTATE
-- The same MERGE as the second statement of the session is accepted on 17
-- and later; on 15 and 16 this mixed MERGE is refused as above.
DO $$
DECLARE
  expected text := CASE WHEN current_setting('server_version_num')::int >= 170000
                        THEN 'accepted' ELSE 'refused' END;
  outcome text;
BEGIN
  BEGIN
    MERGE INTO merge_row t USING merge_src s ON t.id = s.id
      WHEN MATCHED AND s.has_tok THEN UPDATE SET tok = s.tok, v = 'second statement, 37'
      WHEN MATCHED THEN UPDATE SET v = 'second statement, no token';
    outcome := 'accepted';
  EXCEPTION WHEN SQLSTATE '55Z02' THEN
    outcome := 'refused';
  END;
  RAISE NOTICE 'equal token, mixed MERGE, library loaded: %',
    CASE WHEN outcome = expected THEN 'as documented' ELSE outcome || ', not as documented' END;
END $$;
-- A plain UPDATE that loads the library only when its trigger fires is
-- refused the same way, for an equal token ...
\c
\set SHOW_CONTEXT never
UPDATE merge_row t SET tok = s.tok, v = 'first statement, UPDATE 37' FROM merge_src s
  WHERE t.id = s.id;
\echo :LAST_ERROR_SQLSTATE
-- ... but one whose token literal loads the library while it is parsed,
-- before it starts, is judged exactly.
\c
\set SHOW_CONTEXT never
UPDATE merge_row SET tok = '37', v = 'first statement, literal 37' WHERE id = 1;
SELECT * FROM merge_row ORDER BY id;
-- The same for INSERT ... ON CONFLICT DO UPDATE.
\c
\set SHOW_CONTEXT never
INSERT INTO merge_row VALUES (1, '37', 'first statement, upsert 37')
  ON CONFLICT (id) DO UPDATE SET tok = EXCLUDED.tok, v = EXCLUDED.v;
SELECT * FROM merge_row ORDER BY id;
