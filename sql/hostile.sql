-- The hostile tenant: attacks by roles that do not trust each other, each
-- of which worked against release 1.1.
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE ROLE fencing_app;                 -- the application that owns tenant-7
CREATE ROLE fencing_app_worker LOGIN IN ROLE fencing_app;
CREATE ROLE fencing_mallory LOGIN;       -- another tenant: LOGIN and TEMP only
CREATE ROLE fencing_helper;              -- granted the use of one lock
GRANT CREATE ON SCHEMA public TO fencing_app;

-- One line of set-up: the application may create lock names.
SELECT fencing_allow_create('fencing_app');
SELECT * FROM fencing_lock_creators;

-- The application's worker uses a lock without a further step; the lock
-- is created on first use, owned by the application's role.
SET ROLE fencing_app_worker;
CREATE TABLE app_rows (id int PRIMARY KEY, tok fencing_token, v text);
SELECT fencing_protect('app_rows', lock_name => 'h-tenant-7');
SELECT fencing_acquire('h-tenant-7', 'worker-1', '1 minute') AS t7 \gset
INSERT INTO app_rows VALUES (1, :'t7', 'by the holder');
SELECT lock_name, owner, users FROM fencing_locks WHERE lock_name LIKE 'h-%';
RESET ROLE;

-- Attack 1: squat on the lock with a temporary table of one's own.
SET ROLE fencing_mallory;
CREATE TEMP TABLE mine (tok fencing_token);
SELECT fencing_protect('mine', lock_name => 'h-tenant-7');
-- ... or with a trigger made by hand, which the guard checks at write time.
CREATE TRIGGER fencing_guard BEFORE INSERT OR UPDATE OR DELETE ON mine
  FOR EACH ROW EXECUTE FUNCTION fencing_guard('tok', 'lock=h-tenant-7');
INSERT INTO mine VALUES ('9223372036854775807');
-- ... or take the lease for a century.
SELECT fencing_acquire('h-tenant-7', 'x', '100 years');
SELECT fencing_acquire('h-tenant-7', 'x', '100 years', '1 second');
-- ... or create a name another application will use.
SELECT fencing_acquire('h-tenant-8', 'x', '100 years');
SELECT fencing_create_lock('h-tenant-8');
-- Attack 2: stall every writer under the lock by presenting a token.
BEGIN;
SELECT fencing_present('h-tenant-7', '1');
ROLLBACK;
-- Nor renew, release, or read its holder; the views show none of it.
SELECT fencing_renew('h-tenant-7', :'t7', '1 minute');
SELECT fencing_release('h-tenant-7', :'t7');
SELECT fencing_leader('h-tenant-7');
SELECT count(*) FROM fencing_leases;
SELECT count(*) FROM fencing_fences;
SELECT count(*) FROM fencing_locks;
-- Nor manage the lock, nor let itself create names.
SELECT fencing_grant_lock('h-tenant-7', 'fencing_mallory');
SELECT fencing_alter_lock_owner('h-tenant-7', 'fencing_mallory');
SELECT fencing_allow_create('fencing_mallory');
-- Nor read or write the extension's tables, nor unprotect the table.
SELECT count(*) FROM fencing_lock;
UPDATE fencing_lock SET users = '{fencing_mallory}';
INSERT INTO fencing_lock_creator VALUES ('fencing_mallory', '');
SELECT fencing_unprotect('app_rows');
-- Nor call the internal functions with a role of its choosing.
SELECT fencing_acquire_as('fencing_app'::regrole, 'h-tenant-7', 'x', '1 minute', NULL::interval, NULL::jsonb);
SELECT fencing_lock_authorize('h-tenant-7', 'fencing_app'::regrole, true);
SELECT fencing_protect_as('fencing_app'::regrole, 'mine', 'tok', '{}', 'h-tenant-7');
-- Nor wake another lock's waiter, sleep in the waiting machinery, revoke a
-- lease or set a lock's delay.
SELECT fencing_wake_waiters_at_commit(1);
SELECT fencing_wait_to_acquire('h-tenant-7', 1, 'x', NULL, '1 minute', '1 s', NULL, true);
SELECT fencing_revoke('h-tenant-7');
SELECT fencing_set_lock_delay('h-tenant-7', '1 hour');
-- Nor take the lock through the waiting acquire's attempt, even if a DBA
-- granted it EXECUTE by mistake: it acts only inside that function.
SELECT fencing_try_acquire('h-tenant-7', 'x', '1 minute', 1, NULL);
RESET ROLE;
GRANT EXECUTE ON FUNCTION fencing_try_acquire(text, text, interval, bigint, jsonb) TO fencing_mallory;
SET ROLE fencing_mallory;
SELECT fencing_try_acquire('h-tenant-7', 'x', '1 minute', 1, NULL);
SELECT fencing_try_acquire('h-mallory-new', 'x', '1 minute', 1, NULL);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION fencing_try_acquire(text, text, interval, bigint, jsonb) FROM fencing_mallory;
-- The same for the attempt at a permit or a shared lease (in C from 1.7):
-- granted EXECUTE, it still takes no permit of a lock the role may not use.
SET ROLE fencing_mallory;
SELECT fencing_try_permit(1, 'x', 2, '1 minute');
RESET ROLE;
GRANT EXECUTE ON FUNCTION fencing_try_permit(bigint, text, integer, interval) TO fencing_mallory;
SET ROLE fencing_mallory;
SELECT fencing_try_permit(1, 'x', 2, '1 minute');
SELECT fencing_try_permit(1, 'x', NULL, '1 minute');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION fencing_try_permit(bigint, text, integer, interval) FROM fencing_mallory;
-- Its caller checks the permits; it refuses a number out of range all the
-- same, before it looks at any slot (a negative one would size a buffer).
SELECT fencing_try_permit(1, 'x', -5, '1 minute');
SELECT fencing_try_permit(1, 'x', 1001, '1 minute');

-- The holder's writes are untouched by all that: the mark is the holder's
-- token, the lease the holder's.
SELECT high_water = :'t7' AS mark_is_holders FROM fencing_fences WHERE lock_name = 'h-tenant-7';
SET ROLE fencing_app_worker;
UPDATE app_rows SET tok = :'t7', v = 'still the holder' WHERE id = 1;
SELECT fencing_leader('h-tenant-7');
RESET ROLE;

-- The owner grants the use of the lock to another role, and takes it back.
SET ROLE fencing_app_worker;
SELECT fencing_grant_lock('h-tenant-7', 'fencing_helper');
RESET ROLE;
SET ROLE fencing_helper;
SELECT lock_name, owner, users FROM fencing_locks WHERE lock_name LIKE 'h-%';
BEGIN;
SELECT fencing_present('h-tenant-7', :'t7');
ROLLBACK;
RESET ROLE;
SET ROLE fencing_app_worker;
SELECT fencing_revoke_lock('h-tenant-7', 'fencing_helper');
SELECT fencing_revoke_lock('h-tenant-7', 'fencing_helper');
RESET ROLE;
SET ROLE fencing_helper;
SELECT fencing_present('h-tenant-7', :'t7');
RESET ROLE;

-- A superuser may use every lock and create any name; a name a creator
-- rule covers belongs to the rule's role whoever creates it (here the
-- application's rule covers every name), so the DBA's migrations create
-- the application's locks.
SELECT fencing_acquire('h-ops', 'admin', '1 second') IS NOT NULL AS granted;
SELECT lock_name, owner FROM fencing_locks WHERE lock_name = 'h-ops';

-- A prefix rule: a tenant may create only names under its prefix.
SELECT fencing_allow_create('fencing_mallory', 'mallory/');
SET ROLE fencing_mallory;
SELECT fencing_acquire('mallory/jobs', 'm', '1 second') IS NOT NULL AS granted;
SELECT fencing_acquire('h-tenant-9', 'm', '1 second');
SELECT lock_name, owner FROM fencing_locks ORDER BY 1;
RESET ROLE;
-- The application's rule covers every name, but the longest prefix wins:
-- the application may not take a name inside the tenant's prefix.
SET ROLE fencing_app_worker;
SELECT fencing_acquire('mallory/other', 'w', '1 second');
RESET ROLE;
SELECT fencing_disallow_create('fencing_mallory', 'mallory/');

-- A lock whose owner was dropped belongs to nobody: only a superuser can
-- use it, or give it a new owner.
CREATE ROLE fencing_gone;
SELECT fencing_create_lock('h-orphan', 'fencing_gone');
DROP ROLE fencing_gone;
SELECT lock_name, owner::text ~ '^[0-9]+$' AS owner_dropped
  FROM fencing_lock WHERE lock_name = 'h-orphan';
SELECT fencing_alter_lock_owner('h-orphan', 'fencing_app');
SELECT lock_name, owner FROM fencing_locks WHERE lock_name = 'h-orphan';

-- Bad input to the management functions.
SELECT fencing_create_lock('');
SELECT fencing_create_lock(NULL);
SELECT fencing_create_lock('h-ops');
SELECT fencing_grant_lock('no-such-lock', 'fencing_helper');
SELECT fencing_grant_lock('h-ops', NULL);
SELECT fencing_grant_lock('h-ops', 'no_such_role');

-- Peek at the marks of other tenants' locks with a condition of one's own
-- that prints what it is shown (1.7: fencing_fences is a security barrier;
-- before, this printed h-tenant-7 and its mark).
SET ROLE fencing_mallory;
CREATE FUNCTION pg_temp.peek(lock_name text, mark fencing_token) RETURNS boolean
  LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN RAISE NOTICE 'peeked at % (mark %)', lock_name, CASE WHEN mark IS NULL THEN 'none' ELSE 'seen' END; RETURN true; END $$;
SELECT count(*) AS marks_seen FROM fencing_fences WHERE pg_temp.peek(lock_name, high_water);
RESET ROLE;

-- A DBA grants EXECUTE on the creator rules carelessly: the functions
-- check for a superuser themselves (1.7; before, they ran as the
-- extension's owner and wrote the rule), and the rules stay as they were.
GRANT EXECUTE ON FUNCTION fencing_allow_create(regrole, text),
  fencing_disallow_create(regrole, text) TO fencing_mallory;
SET ROLE fencing_mallory;
SELECT fencing_allow_create('fencing_mallory');
SELECT fencing_disallow_create('fencing_app');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION fencing_allow_create(regrole, text),
  fencing_disallow_create(regrole, text) FROM fencing_mallory;
SELECT * FROM fencing_lock_creators ORDER BY 1, 2;

-- An operator of one's own in front of pg_catalog's, on one's
-- search_path: the statements the lease engine runs as the tables' owner
-- name theirs with its schema, so that the caller's never runs with the
-- owner's privileges (before 1.10, a grant over a lease whose session had
-- ended, and a CALL fencing_await's look at its session's end, ran the
-- caller's = on bigint as the owner).
CREATE SCHEMA mallory_ops AUTHORIZATION fencing_mallory;
SELECT fencing_allow_create('fencing_mallory', 'hm-');
SET ROLE fencing_mallory;
CREATE FUNCTION mallory_ops.int8eq(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF current_user <> 'fencing_mallory' THEN
    RAISE EXCEPTION 'hijacked: mallory''s = ran as another role';
  END IF;
  RETURN a OPERATOR(pg_catalog.=) b;
END $$;
CREATE OPERATOR mallory_ops.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = mallory_ops.int8eq);
SET search_path = mallory_ops, pg_catalog, public;
SELECT fencing_session_open('brief', '1 s') AS hm_brief \gset
SELECT fencing_session_open('next', '1 hour') AS hm_next \gset
SELECT fencing_session_acquire(:hm_brief, 'hm-lock') IS NOT NULL AS brief_holds;
SELECT pg_sleep(1.1);
-- The lease's session has ended: the grant locks that session's row.
SELECT fencing_session_acquire(:hm_next, 'hm-lock') IS NOT NULL AS next_holds;
-- A CALL in the session that waits in the room (its session has a place
-- in the line already) reads its session's end as the owner.
SELECT fencing_session_open('again', '1 hour') AS hm_again \gset
SELECT fencing_session_acquire(:hm_again, 'hm-lock2') IS NOT NULL AS again_holds_the_second;
SELECT fencing_session_open('waiter', '1 hour') AS hm_waiter \gset
SELECT place IS NOT NULL AS waiter_has_a_place FROM fencing_line_join(:hm_waiter, 'hm-lock2');
CALL fencing_await('hm-lock2', session => :hm_waiter, wait => '10 ms');
RESET search_path;
RESET ROLE;
DROP SCHEMA mallory_ops CASCADE;

DROP TABLE app_rows;
DROP OWNED BY fencing_app, fencing_app_worker, fencing_mallory, fencing_helper;
DROP ROLE fencing_app_worker, fencing_app, fencing_mallory, fencing_helper;
