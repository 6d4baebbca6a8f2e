-- The pause scenario, scripted: two holders of one lock write one row.
-- Run by scripts/demo.sh until the C++ demo replaces it.
\set ON_ERROR_STOP 0
\pset footer off
CREATE EXTENSION IF NOT EXISTS pg_fencing;
DROP TABLE IF EXISTS resource;
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO resource VALUES (1, NULL, 'initial');
SELECT fencing_protect('resource');

\echo '--- A is granted a token, then pauses past its lease'
SELECT fencing_grant() AS a_token \gset
\echo A holds token :a_token
\echo '--- B is granted the next token and writes'
SELECT fencing_grant() AS b_token \gset
\echo B holds token :b_token
UPDATE resource SET token = :b_token, val = 'written by B' WHERE id = 1;
\echo '--- A wakes up and writes with its stale token: the database refuses'
UPDATE resource SET token = :a_token, val = 'written by A (stale)' WHERE id = 1;
\echo '--- the row still holds B''s write'
SELECT * FROM resource;
SELECT val = 'written by B' AS b_write_survived FROM resource WHERE id = 1 \gset
\if :b_write_survived
\echo 'OK: the stale write was rejected'
\else
\echo 'FAILED: the stale write landed'
\quit 1
\endif
