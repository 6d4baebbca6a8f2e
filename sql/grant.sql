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

-- Tokens are anchored to the clock (1.5): a backend's first grant is at
-- least the clock's microseconds since 1970, so that a database that went
-- back in time (a restored backup, a promoted standby, an older dump)
-- grants above every token it handed out before.
\c
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS clock_before \gset
SELECT fencing_grant() AS anchored \gset
SELECT :'anchored'::bigint >= :'clock_before' AS first_grant_at_least_the_clock,
       :'anchored'::bigint <= (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
         AS first_grant_at_most_the_clock;
-- Later grants of the backend go up by one, as the sequence does.
SELECT fencing_grant()::bigint - :'anchored'::bigint AS next_grant_step;
-- The sequence set back under a live backend (what restoring a dump's data
-- into this database does): that backend's next grant anchors again.
SELECT setval('fencing_token_seq', 1);
SELECT fencing_grant() > :'anchored'::fencing_token AS above_after_going_back;
-- ... and so does a new backend's.
SELECT setval('fencing_token_seq', 1);
\c
SELECT fencing_grant() > :'anchored'::fencing_token AS new_backend_above_after_going_back;
-- The lead of the tokens over the clock, which fencing_audit() watches:
-- none on a running database.
SELECT fencing_lead_over_clock() < interval '1 second' AS no_lead_over_clock;
SELECT count(*) AS audit_rows_about_tokens FROM fencing_audit() WHERE table_name IS NULL AND lock_name IS NULL;

-- fencing_bump_tokens(by), in a database of its own (its floor runs ahead
-- of the clock, which fencing_audit() reports).
CREATE DATABASE fencing_bump;
\c fencing_bump
CREATE EXTENSION pg_fencing;
SELECT fencing_grant() AS before_bump \gset
SELECT fencing_bump_tokens(1000000000) AS floor \gset
SELECT :'floor'::bigint >= :'before_bump'::bigint + 1000000000 AS floor_covers_the_bump;
SELECT fencing_grant() > :'floor'::fencing_token AS next_grant_above_floor;
-- Named notation works with the argument's name.
SELECT fencing_bump_tokens(by => 1) > :'floor'::fencing_token AS bumped_again;
SELECT severity, problem LIKE 'tokens run % ahead of the server''s clock: %' AS names_the_lead,
       fix LIKE 'Check the server''s clock. After restoring a backup or promoting a standby before %: SELECT fencing_bump_tokens(%);' AS says_what_to_do
FROM fencing_audit() WHERE table_name IS NULL AND lock_name IS NULL;
-- Bad values: a clear error, nothing moved (the next grant follows the
-- one before it).  The out-of-range error's detail names the highest token,
-- different in every run: terse.
SELECT fencing_grant() AS before_bad \gset
SELECT fencing_bump_tokens(0);
SELECT fencing_bump_tokens(-5);
\set VERBOSITY terse
SELECT fencing_bump_tokens(9223372036854775000);
\set VERBOSITY default
SELECT fencing_grant()::bigint - :'before_bad'::bigint AS step_over_refused_bumps;
-- Superusers only: PUBLIC may not execute it, and a role granted EXECUTE
-- by mistake is still refused.
CREATE ROLE fencing_bump_user;
SELECT fencing_grant() AS before_role \gset
SET ROLE fencing_bump_user;
SELECT fencing_bump_tokens(1);
RESET ROLE;
GRANT EXECUTE ON FUNCTION fencing_bump_tokens(bigint) TO fencing_bump_user;
SET ROLE fencing_bump_user;
SELECT fencing_bump_tokens(1);
-- It may read how far tokens run ahead of the clock (no more than a grant
-- tells), but not call the internal highest-grant function.
SELECT fencing_lead_over_clock() > interval '0' AS role_sees_the_bumps_lead;
SELECT fencing_highest_granted();
RESET ROLE;
SELECT fencing_grant()::bigint - :'before_role'::bigint AS step_over_the_roles_bumps;
-- A read-only transaction moves nothing either.
BEGIN READ ONLY;
SELECT fencing_bump_tokens(1);
ROLLBACK;
\c contrib_regression
DROP DATABASE fencing_bump;
DROP ROLE fencing_bump_user;
