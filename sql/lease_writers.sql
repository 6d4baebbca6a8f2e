-- A transaction cannot outlive the lease it writes under (1.6): its COMMIT
-- is refused (55Z04) once that lease has ended -- ran out by the server's
-- clock, released or revoked by another transaction, or its lock granted
-- again -- under a lock-wide fence, on a per-row fence, under a semaphore
-- and under a shared lock.  This cluster does not preload the library, so
-- nothing ends the transactions early here: the COMMIT is what refuses
-- (test/t/010_frozen_holder.pl runs the preloaded side: transactions
-- ended at the lease's end, and the next holder never held up).
CREATE DATABASE fencing_lease_writers_probe;
\c fencing_lease_writers_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

CREATE ROLE lw_app;       -- owns the tables and the locks
CREATE ROLE lw_holder;    -- may use the locks
CREATE ROLE lw_stranger;  -- may not
GRANT CREATE ON SCHEMA public TO lw_app, lw_stranger;

SELECT fencing_create_lock(name, 'lw_app') FROM unnest('{orders,pool,readers}'::text[]) name;
SELECT fencing_grant_lock(name, 'lw_holder') FROM unnest('{orders,pool,readers}'::text[]) name;
SET ROLE lw_app;
CREATE TABLE orders (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('orders', lock_name => 'orders');
CREATE TABLE rows_fenced (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('rows_fenced');
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON orders, rows_fenced TO lw_holder;
INSERT INTO rows_fenced VALUES (1, 'first', NULL);
RESET ROLE;

-- 1. Under a lock-wide fence: a write made while the lease lived, then the
-- lease runs out before COMMIT.  Terse: the detail says when it ran out.
SET ROLE lw_holder;
SELECT fencing_acquire('orders', 'a', '100 ms') AS a \gset
BEGIN;
INSERT INTO orders VALUES (1, 'written by a', :'a');
SELECT pg_sleep(0.3);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT count(*) AS rows_of_a FROM orders;

-- Its SQLSTATE and message.
SELECT fencing_acquire('orders', 'a', '100 ms') AS a \gset
BEGIN;
SELECT fencing_present('orders', :'a');
SELECT pg_sleep(0.3);
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate,
       :'LAST_ERROR_MESSAGE' AS message;

-- The same transaction with a lease that lives: it commits.
SELECT fencing_acquire('orders', 'a', '1 hour') AS a \gset
BEGIN;
INSERT INTO orders VALUES (1, 'written by a', :'a');
SELECT pg_sleep(0.3);
COMMIT;
SELECT v FROM orders;

-- The holder's last transaction releases the lease and commits: the lease
-- ends with that commit, not before it.
BEGIN;
UPDATE orders SET v = 'last write of a', tok = :'a' WHERE id = 1;
SELECT fencing_release('orders', :'a') AS released;
COMMIT;
SELECT v FROM orders;

-- (Released, revoked or granted again by another transaction before the
-- COMMIT: test/isolation/specs/lease_writers.spec.)

-- 2. On a per-row fence: the token's own lease.  A token that is no
-- lease's (a plain fencing_grant()) binds nothing.
SET ROLE lw_holder;
SELECT fencing_acquire('orders', 'b', '100 ms') AS b \gset
BEGIN;
UPDATE rows_fenced SET v = 'by b', tok = :'b' WHERE id = 1;
SELECT pg_sleep(0.3);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT v FROM rows_fenced;
SELECT fencing_grant() AS plain \gset
BEGIN;
UPDATE rows_fenced SET v = 'by a plain grant', tok = :'plain' WHERE id = 1;
SELECT pg_sleep(0.2);
COMMIT;
SELECT v FROM rows_fenced;
RESET ROLE;

-- 3. A semaphore's permit and a shared lease, under a lock-wide fence.
-- (Their owner's first permit and shared lease make them what they are.)
SET ROLE lw_app;
SELECT fencing_release('pool', fencing_acquire_permit('pool', 'owner', 2, '1 s'));
SELECT fencing_release('readers', fencing_acquire_shared('readers', 'owner', '1 s'));
CREATE TABLE pooled (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('pooled', lock_name => 'pool');
GRANT SELECT, INSERT, UPDATE ON pooled TO lw_holder;
CREATE TABLE shared_rows (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('shared_rows', lock_name => 'readers');
GRANT SELECT, INSERT, UPDATE ON shared_rows TO lw_holder;
RESET ROLE;
SET ROLE lw_holder;
SELECT fencing_acquire_permit('pool', 'p', 2, '100 ms') AS p \gset
BEGIN;
INSERT INTO pooled VALUES (1, :'p');
SELECT pg_sleep(0.3);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT fencing_acquire_shared('readers', 's', '100 ms') AS s \gset
BEGIN;
INSERT INTO shared_rows VALUES (1, :'s');
SELECT pg_sleep(0.3);
\set VERBOSITY terse
COMMIT;
\set VERBOSITY default
SELECT (SELECT count(*) FROM pooled) AS pooled_rows, (SELECT count(*) FROM shared_rows) AS shared_rows;
RESET ROLE;

-- 4. A prepared transaction could commit after its lease ended: refused.
SET ROLE lw_holder;
SELECT fencing_acquire('orders', 'd', '1 hour') AS d \gset
BEGIN;
INSERT INTO orders VALUES (2, 'to prepare', :'d');
PREPARE TRANSACTION 'lw';
SELECT count(*) AS rows_of_the_prepared FROM orders WHERE id = 2;
SELECT fencing_release('orders', :'d') AS released;
RESET ROLE;

-- 5. A hostile role.  The stranger may not use the lock: writing the
-- holder's token into a table of its own binds it to no lease (it learns
-- nothing of the lease, and its commit stands after the lease ran out).
SET ROLE lw_holder;
SELECT fencing_acquire('orders', 'e', '100 ms') AS e \gset
SET ROLE lw_stranger;
CREATE TABLE own_rows (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('own_rows');
BEGIN;
INSERT INTO own_rows VALUES (1, :'e');
SELECT pg_sleep(0.3);
COMMIT;
SELECT count(*) AS stranger_rows FROM own_rows;
-- It cannot write under the lock at all (42501: no privilege on the table,
-- and the lock would refuse it too), so it cannot be bound through it.
\set VERBOSITY terse
INSERT INTO orders VALUES (3, 'stranger', :'e');
\set VERBOSITY default
RESET ROLE;

\c contrib_regression
DROP DATABASE fencing_lease_writers_probe;
DROP ROLE lw_app, lw_holder, lw_stranger;
