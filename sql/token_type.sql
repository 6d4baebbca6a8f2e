-- The fencing_token type: input, output, binary form, operators, indexes,
-- aggregates and casts.

-- Valid text input, with PostgreSQL's usual tolerance of surrounding spaces.
SELECT '0'::fencing_token, '42'::fencing_token, '  7  '::fencing_token,
       '007'::fencing_token, '9223372036854775807'::fencing_token;

-- Invalid text input: 22P02, naming the input.
SELECT 'abc'::fencing_token;
SELECT '1.5'::fencing_token;
SELECT '-1'::fencing_token;
SELECT '+1'::fencing_token;
SELECT ''::fencing_token;
SELECT '0x10'::fencing_token;
SELECT '1e3'::fencing_token;
SELECT '1 2'::fencing_token;
-- Too large: 22003.
SELECT '9223372036854775808'::fencing_token;
SELECT '123456789012345678901234567890'::fencing_token;
-- Soft errors are not supported on PostgreSQL 15; these go through the
-- same input function from a table.
CREATE TABLE token_inputs (t text);
INSERT INTO token_inputs VALUES ('5'), ('x5');
SELECT t::fencing_token FROM token_inputs;

-- Comparison operators.
SELECT a, b, a = b AS eq, a <> b AS ne, a < b AS lt, a <= b AS le, a > b AS gt, a >= b AS ge
FROM (VALUES ('33'::fencing_token, '34'::fencing_token),
             ('34', '34'),
             ('35', '34'),
             ('0', '9223372036854775807')) v(a, b);

-- No arithmetic: tokens are compared, never computed.
SELECT '1'::fencing_token + '1'::fencing_token;
SELECT '1'::fencing_token + 1;
SELECT -'1'::fencing_token;

-- Operator metadata: commutators, negators, estimators, hash and merge.
SELECT o.oprname, c.oprname AS commutator, n.oprname AS negator,
       o.oprrest, o.oprjoin, o.oprcanhash, o.oprcanmerge
FROM pg_operator o
LEFT JOIN pg_operator c ON c.oid = o.oprcom
LEFT JOIN pg_operator n ON n.oid = o.oprnegate
WHERE o.oprleft = 'fencing_token'::regtype AND o.oprright = 'fencing_token'::regtype
ORDER BY o.oprname;

-- Default operator classes for btree and hash.
SELECT am.amname, opc.opcname, opc.opcdefault
FROM pg_opclass opc JOIN pg_am am ON am.oid = opc.opcmethod
WHERE opc.opcintype = 'fencing_token'::regtype ORDER BY am.amname;

-- Indexes, ORDER BY, DISTINCT, GROUP BY, min/max.
CREATE TABLE tokens (id int, t fencing_token);
INSERT INTO tokens SELECT g, (g % 50)::bigint FROM generate_series(1, 1000) g;
INSERT INTO tokens VALUES (1001, NULL);
CREATE INDEX tokens_btree ON tokens (t);
CREATE INDEX tokens_hash ON tokens USING hash (t);
ANALYZE tokens;
SELECT min(t), max(t), count(DISTINCT t) FROM tokens;
SELECT t, count(*) FROM tokens WHERE t < '3' GROUP BY t ORDER BY t;
SELECT t FROM tokens ORDER BY t DESC NULLS LAST LIMIT 3;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM tokens WHERE t = '49';
SELECT count(*) FROM tokens WHERE t = '49';
SET enable_indexscan = off;
SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT count(*) FROM tokens WHERE t >= '48';
SELECT count(*) FROM tokens WHERE t >= '48';
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;
-- B-tree deduplication (1.7): the operator class says equal tokens are
-- equal images (btequalimage, support function 4), so an index on a token
-- column, where a holder writes many rows with one token, keeps one entry
-- per token and page: with 1,000 rows per token it is a fraction of the
-- same index with deduplication off.
SELECT p.amprocnum, p.amproc
FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
WHERE f.opfname = 'fencing_token_btree_ops' ORDER BY p.amprocnum;
CREATE TABLE token_runs (t fencing_token);
INSERT INTO token_runs SELECT (g / 1000)::bigint FROM generate_series(0, 19999) g;
CREATE INDEX token_runs_dedup ON token_runs (t);
CREATE INDEX token_runs_plain ON token_runs (t) WITH (deduplicate_items = off);
SELECT pg_relation_size('token_runs_dedup') * 2 < pg_relation_size('token_runs_plain')
       AS deduplicated;
DROP TABLE token_runs;
-- Selectivity estimators use the statistics: 20 of 1001 rows per value.
CREATE FUNCTION estimated_rows(query text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON) ' || query INTO plan;
  RETURN (plan->0->'Plan'->>'Plan Rows')::int;
END $$;
SELECT estimated_rows($$SELECT * FROM tokens WHERE t = '7'$$) BETWEEN 10 AND 40 AS eq_estimate,
       estimated_rows($$SELECT * FROM tokens WHERE t < '5'$$) BETWEEN 50 AND 150 AS lt_estimate,
       estimated_rows($$SELECT * FROM tokens WHERE t >= '45'$$) BETWEEN 50 AND 150 AS ge_estimate,
       estimated_rows($$SELECT * FROM tokens WHERE t <> '7'$$) > 900 AS ne_estimate;

-- Hash join and merge join.
CREATE TABLE tokens2 AS SELECT t FROM tokens WHERE t < '5';
ANALYZE tokens2;
SET enable_mergejoin = off; SET enable_nestloop = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM tokens a JOIN tokens2 b ON a.t = b.t;
SELECT count(*) FROM tokens a JOIN tokens2 b ON a.t = b.t;
SET enable_hashjoin = off; SET enable_mergejoin = on;
EXPLAIN (COSTS OFF) SELECT count(*) FROM tokens a JOIN tokens2 b ON a.t = b.t;
SELECT count(*) FROM tokens a JOIN tokens2 b ON a.t = b.t;
RESET enable_mergejoin; RESET enable_nestloop; RESET enable_hashjoin;
-- Hash aggregation.
SET enable_sort = off;
EXPLAIN (COSTS OFF) SELECT t, count(*) FROM tokens GROUP BY t;
RESET enable_sort;

-- Unique index: equal tokens collide.
CREATE TABLE unique_tokens (t fencing_token UNIQUE);
INSERT INTO unique_tokens VALUES ('5'), ('6');
INSERT INTO unique_tokens VALUES ('5');

-- Casts: int4 and int8 become tokens on assignment; negative is 22003.
CREATE TABLE cast_target (t fencing_token);
INSERT INTO cast_target VALUES (5::int4), (6::int8);
INSERT INTO cast_target VALUES (-1::int4);
INSERT INTO cast_target VALUES ((-9223372036854775808)::int8);
UPDATE cast_target SET t = 7::bigint WHERE t = '6';
PREPARE set_token(bigint) AS UPDATE cast_target SET t = $1 WHERE t = '7';
EXECUTE set_token(8);
SELECT t FROM cast_target ORDER BY t;
SELECT 5::fencing_token, (-5)::fencing_token;
-- Tokens become bigint explicitly or on assignment, never implicitly.
SELECT '42'::fencing_token::bigint;
CREATE TABLE bigint_target (b bigint);
INSERT INTO bigint_target SELECT t FROM cast_target;
SELECT b FROM bigint_target ORDER BY b;
SELECT '42'::fencing_token = 42::bigint;
SELECT castsource::regtype, casttarget::regtype, castcontext, castmethod
FROM pg_cast WHERE castsource = 'fencing_token'::regtype OR casttarget = 'fencing_token'::regtype
ORDER BY 1::text, 2::text;

-- Binary form: 8 bytes, network order.
SELECT fencing_token_send('42'), fencing_token_send('9223372036854775807');
-- Binary input through COPY BINARY, via files in the data directory.
SELECT setting AS datadir FROM pg_settings WHERE name = 'data_directory' \gset
\set ok_file :datadir '/pg_fencing_ok.bin'
\set negative_file :datadir '/pg_fencing_negative.bin'
\set short_file :datadir '/pg_fencing_short.bin'
\set long_file :datadir '/pg_fencing_long.bin'
COPY (SELECT '1234567890123'::fencing_token UNION ALL SELECT '0') TO :'ok_file' (FORMAT binary);
CREATE TABLE binary_in (t fencing_token);
COPY binary_in FROM :'ok_file' (FORMAT binary);
SELECT t FROM binary_in ORDER BY t;
-- A negative 8-byte value is refused, not stored.
COPY (SELECT (-5)::bigint) TO :'negative_file' (FORMAT binary);
COPY binary_in FROM :'negative_file' (FORMAT binary);
-- A short value (4 bytes) is refused with a clear error, not read past.
COPY (SELECT 5::int4) TO :'short_file' (FORMAT binary);
COPY binary_in FROM :'short_file' (FORMAT binary);
-- Too long (16 bytes).
COPY (SELECT '00000000-0000-0000-0000-000000000005'::uuid) TO :'long_file' (FORMAT binary);
COPY binary_in FROM :'long_file' (FORMAT binary);
SELECT count(*) FROM binary_in;

-- Declared properties of the C functions.
SELECT p.proname, p.provolatile, p.proisstrict, p.proparallel
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
WHERE p.proname LIKE 'fencing_token%'
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid);
