-- pg_fencing 1.2 -> 1.3: the lease engine in C.
--
-- fencing_acquire (without a wait), fencing_renew and fencing_release run
-- in C (src/backend/lease_engine.cpp) with statements prepared once per
-- backend, instead of PL/pgSQL over SECURITY DEFINER functions: the same
-- rules, at a fraction of the cost.  Each runs as its caller, checks who
-- that is with the lock model's rule (fencing_role_may_use, or
-- fencing_lock_authorize to create a lock or refuse one), and acts on the
-- extension's tables as their owner, as the SECURITY DEFINER functions did.
--
-- The waiting acquire stays SQL (fencing_acquire_as with a wait): it
-- queues in the waiting room and repeats fencing_try_acquire, which is now
-- the C attempt that fencing_acquire makes.

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.3'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.fencing_acquire(
    lock_name text, holder text, ttl interval, wait interval DEFAULT NULL,
    payload jsonb DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE FUNCTION @extschema@.fencing_renew(
    lock_name text, token @extschema@.fencing_token, ttl interval)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_renew' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE FUNCTION @extschema@.fencing_release(lock_name text, token @extschema@.fencing_token)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The attempt the waiting acquire repeats.  PUBLIC may not call it: it
-- takes the lock for whoever calls it, without the permission check the
-- waiting acquire has made.
CREATE OR REPLACE FUNCTION @extschema@.fencing_try_acquire(
    p_lock text, p_holder text, p_ttl interval, p_lock_id bigint, p_payload jsonb)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_try_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval, bigint, jsonb) FROM PUBLIC;

-- Renew and release no longer go through SQL.
DROP FUNCTION @extschema@.fencing_renew_as(oid, text, @extschema@.fencing_token, interval);
DROP FUNCTION @extschema@.fencing_release_as(oid, text, @extschema@.fencing_token);
DROP FUNCTION @extschema@.fencing_move_lease_end(oid, text, @extschema@.fencing_token, interval, text);

-- The lease functions find a lock's rows by name through a hash index:
-- the cost of a probe does not grow with the number of locks, where a
-- B-tree's grows with its depth (measured: +23 % per acquire+release from
-- 10 to 100,000 live locks).  The primary keys stay, for uniqueness.
CREATE INDEX fencing_lock_name_hash ON @extschema@.fencing_lock USING hash (lock_name);
CREATE INDEX fencing_lease_name_hash ON @extschema@.fencing_lease USING hash (lock_name);
CREATE INDEX fencing_fence_name_hash ON @extschema@.fencing_fence USING hash (lock_name);

-- A lease row is rewritten twice per acquire and release, and a lock's mark
-- once per grant: each such row is a chain of versions that every look
-- walks until pruning shortens it, and PostgreSQL prunes a page only once
-- its free space falls below what the fillfactor keeps free.  With 20 %
-- the pages are pruned early and the chains stay short (measured: 9 % fewer
-- instructions per acquire+release than at 100 %), for five times the
-- space: with 100,000 locks, 71 MB of fencing_lease and 22 MB of
-- fencing_fence instead of about 14 and 4.
ALTER TABLE @extschema@.fencing_lease SET (fillfactor = 20);
ALTER TABLE @extschema@.fencing_fence SET (fillfactor = 20);
