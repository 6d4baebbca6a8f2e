-- Lock-wide fences: one high-water mark per lock, across rows and tables.
\set SHOW_CONTEXT never
-- The hand-written tokens below (33 ... 37) stand for grants of other lock
-- services; lease grants from fencing_grant() come after them.
SELECT setval('fencing_token_seq', 100);

CREATE TABLE accounts (id int PRIMARY KEY, token fencing_token, balance int);
CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, entry text);
INSERT INTO accounts SELECT g, NULL, 100 FROM generate_series(1, 4) g;
SELECT fencing_protect('accounts', lock_name => 'tenant-7');
SELECT fencing_protect('ledger', lock_name => 'tenant-7');
-- Tokens of another lock service and this database's leases side by side:
-- the lock says its tokens come from elsewhere (1.5), so any token may
-- raise its mark, as every lock's could before.  sql/never_granted.sql
-- shows a lock whose tokens are this database's grants.
SELECT fencing_set_token_source('tenant-7', 'external');
SELECT tgname, tgtype, encode(tgargs, 'escape') AS args
FROM pg_trigger WHERE tgrelid = 'accounts'::regclass ORDER BY tgname;

-- Holder 34 writes row 1; holder 33 (stale) is then refused on row 2,
-- which 34 never touched, and on another table under the same lock.
UPDATE accounts SET token = 34, balance = 90 WHERE id = 1;
UPDATE accounts SET token = 33, balance = 0 WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO ledger VALUES (1, 33, 'stale entry');
SELECT lock_name, high_water FROM fencing_fences;
-- 34 and newer pass anywhere under the lock.
UPDATE accounts SET token = 34, balance = 80 WHERE id = 2;
UPDATE accounts SET token = 34 WHERE id = 3;
INSERT INTO ledger VALUES (1, 35, 'by 35');
-- Once 35 has written anywhere under the lock, 34 is stale everywhere.
UPDATE accounts SET token = 34 WHERE id = 3;
SELECT * FROM accounts ORDER BY id;
SELECT * FROM ledger ORDER BY id;

-- Per-row fences alone let the stale holder through on untouched rows:
-- the hole this closes.
CREATE TABLE per_row_only (id int PRIMARY KEY, token fencing_token, balance int);
INSERT INTO per_row_only SELECT g, NULL, 100 FROM generate_series(1, 2) g;
SELECT fencing_protect('per_row_only');
UPDATE per_row_only SET token = 34, balance = 90 WHERE id = 1;
UPDATE per_row_only SET token = 33, balance = 0 WHERE id = 2;
SELECT * FROM per_row_only ORDER BY id;

-- The transaction's token: fencing_present fills the token column, so a
-- statement need not repeat it, and is checked at once.
BEGIN;
SELECT fencing_present('tenant-7', '36');
UPDATE accounts SET balance = balance - 1 WHERE id = 4;
INSERT INTO ledger (id, entry) VALUES (2, 'filled from the transaction');
COMMIT;
SELECT * FROM accounts WHERE id = 4;
SELECT * FROM ledger ORDER BY id;
-- A stale presentation is refused at once ...
BEGIN;
SELECT fencing_present('tenant-7', '35');
ROLLBACK;
-- ... and the presentation is gone after the transaction: the next one
-- must present again (nothing leaks into the next user of a pooled
-- connection).
UPDATE accounts SET balance = 0 WHERE id = 4;
BEGIN;
SELECT fencing_present('tenant-7', '36');
ROLLBACK;
DELETE FROM ledger WHERE id = 2;
-- An explicit token in the statement wins over the presented one; a
-- presented token still cannot write below a row's own mark.
BEGIN;
SELECT fencing_present('tenant-7', '36');
UPDATE accounts SET token = 37, balance = 70 WHERE id = 1;
UPDATE accounts SET balance = 60 WHERE id = 1;
ROLLBACK;

-- DELETE needs the presented token; stale or missing is refused.
DELETE FROM ledger WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fencing_present('tenant-7', '36');
DELETE FROM ledger WHERE id = 2;
COMMIT;
SELECT * FROM ledger ORDER BY id;
-- INSERT without a token and without a presentation: missing.
INSERT INTO ledger VALUES (3, NULL, 'no token');
\echo :LAST_ERROR_SQLSTATE

-- TRUNCATE needs a presented current token.
TRUNCATE ledger;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT fencing_present('tenant-7', '36');
TRUNCATE ledger;
COMMIT;
SELECT count(*) FROM ledger;

-- A lease grant raises the mark at once: a token granted but never used
-- still fences out every older one.
SELECT fencing_acquire('tenant-7', 'new-holder', '1 minute') AS granted \gset
SELECT high_water = :'granted' AS mark_is_the_grant FROM fencing_fences WHERE lock_name = 'tenant-7';
-- Granted tokens are microseconds since 1970, different in every run: an
-- error that names one is shown by its SQLSTATE, then its message with the
-- token's name in place of the number.
\set VERBOSITY sqlstate
UPDATE accounts SET token = 36, balance = 1 WHERE id = 4;
SELECT replace(:'LAST_ERROR_MESSAGE', :'granted', ':granted') AS error;
BEGIN;
SELECT fencing_present('tenant-7', '36');
ROLLBACK;
SELECT replace(:'LAST_ERROR_MESSAGE', :'granted', ':granted') AS error;
\set VERBOSITY default
UPDATE accounts SET token = :'granted', balance = 50 WHERE id = 4;
SELECT id, token = :'granted' AS by_new_holder, balance FROM accounts WHERE id = 4;

-- Option skip under a lock: stale rows are left alone.
CREATE TABLE skipped (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO skipped SELECT g, NULL, 'a' FROM generate_series(1, 3) g;
SELECT fencing_protect('skipped', options => '{skip}', lock_name => 'skip-lock');
UPDATE skipped SET token = 10, val = 'b' WHERE id = 1;
WITH u AS (UPDATE skipped SET token = 9, val = 'stale' RETURNING id) SELECT count(*) FROM u;
SELECT * FROM skipped ORDER BY id;

-- Subtransactions: a presentation made in a rolled-back savepoint is gone.
BEGIN;
SAVEPOINT s;
SELECT fencing_present('skip-lock', '11');
ROLLBACK TO SAVEPOINT s;
UPDATE skipped SET val = 'after rollback to savepoint' WHERE id = 1;
ROLLBACK;
-- Presenting again inside a savepoint and rolling it back brings the outer
-- presentation back.
BEGIN;
SELECT fencing_present('skip-lock', '11');
SAVEPOINT s;
SELECT fencing_present('skip-lock', '11');
ROLLBACK TO SAVEPOINT s;
UPDATE skipped SET val = 'outer presentation kept' WHERE id = 1;
SELECT token, val FROM skipped WHERE id = 1;
ROLLBACK;
-- One made before the savepoint survives it.
BEGIN;
SELECT fencing_present('skip-lock', '11');
SAVEPOINT s;
UPDATE skipped SET val = 'in savepoint' WHERE id = 2;
ROLLBACK TO SAVEPOINT s;
UPDATE skipped SET val = 'after savepoint' WHERE id = 3;
COMMIT;
SELECT * FROM skipped ORDER BY id;

-- Errors.
SELECT fencing_present(NULL, '1');
SELECT fencing_present('', '1');
SELECT fencing_present('x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT fencing_protect('accounts', lock_name => '');
SELECT fencing_protect('accounts', options => '{allow_unset}', lock_name => 'x');
CREATE TABLE bad_lock (id int, token fencing_token);
INSERT INTO bad_lock VALUES (1, 1);
CREATE TRIGGER t BEFORE UPDATE ON bad_lock FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'lock=');
UPDATE bad_lock SET token = 2;
DROP TRIGGER t ON bad_lock;
CREATE TRIGGER t BEFORE UPDATE ON bad_lock FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'lock=a', 'lock=b');
UPDATE bad_lock SET token = 2;
DROP TRIGGER t ON bad_lock;
CREATE TRIGGER t AFTER UPDATE ON bad_lock FOR EACH ROW EXECUTE FUNCTION fencing_guard('token', 'lock=a');
UPDATE bad_lock SET token = 2;
DROP TRIGGER t ON bad_lock;
-- Partitioned tables: TRUNCATE of a single partition is guarded too.
CREATE TABLE lockparted (id int, token fencing_token) PARTITION BY RANGE (id);
CREATE TABLE lockparted_a PARTITION OF lockparted FOR VALUES FROM (0) TO (10);
CREATE TABLE lockparted_b PARTITION OF lockparted FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (id);
CREATE TABLE lockparted_b1 PARTITION OF lockparted_b FOR VALUES FROM (10) TO (20);
SELECT fencing_protect('lockparted', lock_name => 'lockparted-lock');
INSERT INTO lockparted VALUES (1, 5), (11, 5);
TRUNCATE lockparted_a;
TRUNCATE lockparted_b1;
SELECT count(*) FROM lockparted;
SELECT tgrelid::regclass, tgname FROM pg_trigger
WHERE tgname LIKE 'fencing_guard%' AND tgrelid::regclass::text LIKE 'lockparted%' ORDER BY 1, 2;
-- Back to a per-row fence: the TRUNCATE triggers go.
SELECT fencing_protect('lockparted');
SELECT tgrelid::regclass, tgname FROM pg_trigger
WHERE tgname LIKE 'fencing_guard%' AND tgrelid::regclass::text LIKE 'lockparted%' ORDER BY 1, 2;

-- Re-protecting without a lock drops the TRUNCATE trigger.
SELECT fencing_protect('ledger');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'ledger'::regclass;

-- fencing_present takes the fence and checks the token, but does not move
-- the mark: only writes and grants do.  So a role that may write nothing
-- cannot lock a lock's holders out by presenting a huge token (even one
-- allowed to use the lock: without that, it may not present at all).
CREATE ROLE present_only;
SELECT fencing_grant_lock('tenant-7', 'present_only');
SET ROLE present_only;
BEGIN;
SELECT fencing_present('tenant-7', '9223372036854775807');
COMMIT;
RESET ROLE;
SELECT fencing_revoke_lock('tenant-7', 'present_only');
DROP ROLE present_only;
SELECT high_water = :'granted' AS mark_unmoved FROM fencing_fences WHERE lock_name = 'tenant-7';
-- A presentation for a lock with no mark yet creates it at 0.
BEGIN;
SELECT fencing_present('fresh-lock', '3');
COMMIT;
SELECT high_water FROM fencing_fences WHERE lock_name = 'fresh-lock';

-- Privileges: the mark is readable through the view by the roles that may
-- use the lock, not writable.
CREATE ROLE fence_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON accounts TO fence_user;
SET ROLE fence_user;
SELECT count(*) AS locks_visible_without_grant FROM fencing_fences;
RESET ROLE;
SELECT fencing_grant_lock('tenant-7', 'fence_user');
SET ROLE fence_user;
SELECT count(*) > 0 AS view_readable FROM fencing_fences;
UPDATE fencing_fence SET high_water = '1';
SELECT fencing_fence_advance('tenant-7', '999999');
-- The guard moves the mark for this role even though the role cannot
-- write the table: the trigger's call is SECURITY DEFINER.
UPDATE accounts SET token = :'granted'::bigint + 1, balance = 42 WHERE id = 4;
\set VERBOSITY sqlstate
UPDATE accounts SET token = :'granted', balance = 43 WHERE id = 3;
SELECT replace(replace(:'LAST_ERROR_MESSAGE', (:'granted'::bigint + 1)::text, ':granted + 1'),
               :'granted', ':granted') AS error;
\set VERBOSITY default
RESET ROLE;
SELECT fencing_revoke_lock('tenant-7', 'fence_user');
DROP OWNED BY fence_user;
DROP ROLE fence_user;
SELECT high_water::bigint = :'granted'::bigint + 1 AS mark_moved FROM fencing_fences WHERE lock_name = 'tenant-7';
