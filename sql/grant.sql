-- fencing_grant(): strictly increasing tokens from a private sequence.

-- Each call is above the one before, in one statement and across statements.
CREATE TEMP TABLE granted AS SELECT fencing_grant() AS t FROM generate_series(1, 100);
SELECT count(*) AS grants, count(DISTINCT t) AS distinct_tokens FROM granted;
SELECT bool_and(t > prev) AS strictly_increasing
FROM (SELECT t, lag(t) OVER (ORDER BY t) AS prev FROM granted) s WHERE prev IS NOT NULL;
SELECT fencing_grant() > (SELECT max(t) FROM granted) AS above_all_before;

-- A grant in a transaction that rolls back is never handed out again.
BEGIN;
SELECT fencing_grant() AS rolled_back \gset
ROLLBACK;
SELECT fencing_grant() > :'rolled_back'::fencing_token AS above_rolled_back;

-- Also with synchronous_commit off.
SET synchronous_commit = off;
SELECT fencing_grant() > :'rolled_back'::fencing_token AS above_with_async_commit;
RESET synchronous_commit;

-- The sequence is ordered across sessions only with CACHE 1, and never cycles.
SELECT seqcache, seqcycle, seqmax = 9223372036854775807 AS max_is_int8_max
FROM pg_sequence WHERE seqrelid = 'fencing_token_seq'::regclass;

-- It is registered to be dumped with its value.
SELECT c.relname, x.cond AS dump_condition
FROM pg_extension e, LATERAL unnest(e.extconfig, e.extcondition) AS x(cfg, cond)
JOIN pg_class c ON c.oid = x.cfg
WHERE e.extname = 'pg_fencing'
ORDER BY c.relname;

-- A grant needs a writable transaction; it is volatile and parallel unsafe.
BEGIN READ ONLY;
SELECT fencing_grant();
ROLLBACK;
SELECT provolatile, proparallel FROM pg_proc WHERE proname = 'fencing_grant';

-- An ordinary role may call fencing_grant() but cannot touch the sequence.
CREATE ROLE fencing_grant_user;
SET ROLE fencing_grant_user;
SELECT fencing_grant() > :'rolled_back'::fencing_token AS granted_to_plain_role;
SELECT nextval('fencing_token_seq');
SELECT setval('fencing_token_seq', 1);
ALTER SEQUENCE fencing_token_seq RESTART;
RESET ROLE;
DROP ROLE fencing_grant_user;
