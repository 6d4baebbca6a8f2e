-- pg_fencing 1.6 -> 1.7: waiting that costs the database nothing.
--
-- CALL fencing_await(...) waits for a lock as the waiting acquires do, in
-- arrival order and woken by a release's commit, but commits each attempt
-- before it sleeps: while it waits its backend holds no snapshot and no
-- transaction id, so VACUUM removes what died meanwhile anywhere in the
-- database.  The C side is src/backend/lease_await.cpp.  fencing_audit()
-- now also reports the sessions that have waited in a function form (which
-- holds its snapshot) for longer than a minute.

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.7'" to load this file. \quit

-- INOUT token, not OUT: a procedure's OUT argument could not follow the
-- ones with defaults, and CALL would need a placeholder for it.  Whatever
-- is passed for it is ignored.  Not SECURITY DEFINER (a procedure that is
-- cannot commit): it runs as its caller, and its attempts are the acquire
-- functions, with their permission checks.
CREATE PROCEDURE @extschema@.fencing_await(
    lock_name text, holder text, ttl interval, wait interval,
    kind text DEFAULT 'exclusive', permits integer DEFAULT NULL, payload jsonb DEFAULT NULL,
    INOUT token @extschema@.fencing_token DEFAULT NULL)
  AS 'MODULE_PATHNAME', 'fencing_await' LANGUAGE C;
COMMENT ON PROCEDURE @extschema@.fencing_await(text, text, interval, interval, text, integer, jsonb, @extschema@.fencing_token) IS
  'waits up to wait, in arrival order, for the lock (kind exclusive, shared, or permit with permits) and returns its new token, NULL if the wait ran out; commits between attempts, so that it holds no snapshot while it waits; not inside a transaction block';
