-- pg_fencing 1.9 -> 1.10: waits that hold no connection (the line).

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.10'" to load this file. \quit
-- A wait as a place in the lock's line, kept in a table, instead of a
-- statement that runs for the whole wait (src/backend/lease_line.cpp).  A
-- candidate joins with its session and goes away: between its short
-- round trips it holds no server connection, no snapshot and no
-- transaction id, and costs one row.  A place waits for an exclusive
-- lease, a shared lease or a permit.  The first exclusive place whose
-- session lives and whose wait has not run out is the only one an
-- exclusive lease of the lock may go to, besides a waiter of the lock's
-- waiting room (the waiting functions and fencing_await, served first),
-- and it holds off new shared leases; a semaphore's free permits go to
-- its permit places in order.  An acquire of anyone else's answers as for
-- a busy lock.  The place's candidate takes the lease itself, in its own
-- transaction, when it joins or polls (fencing_line_join,
-- fencing_line_poll); every change that may free the lock NOTIFYs
-- fencing_line with the numbers of the places that may be in their turn,
-- so that a candidate with a connection that can LISTEN polls at once,
-- and one without polls on a timer.  A place ends with its session (its
-- row is deleted with the session's), when its wait runs out, or when its
-- candidate leaves.  Written only by the line's functions, as the
-- tables' owner.
-- A place has joined the lock's line: only then does a grant look at the
-- line, so that the locks nobody lines up for pay nothing for it.
ALTER TABLE @extschema@.fencing_lock ADD COLUMN has_line boolean NOT NULL DEFAULT false;
CREATE SEQUENCE @extschema@.fencing_line_place_seq;
CREATE TABLE @extschema@.fencing_line (
  -- Arrival order: a place keeps its number for the whole wait.
  place bigint PRIMARY KEY,
  lock_id bigint NOT NULL REFERENCES @extschema@.fencing_lock (lock_id) ON DELETE CASCADE,
  session_id bigint NOT NULL
    REFERENCES @extschema@.fencing_session (session_id) ON DELETE CASCADE,
  payload jsonb,
  joined_at timestamptz NOT NULL,
  -- NULL: the place waits as long as its session lives.
  wait_until timestamptz,
  -- The lease's token once the place's candidate has taken it; NULL while
  -- it waits.
  token @extschema@.fencing_token,
  -- What the place waits for, as fencing_session_acquire's kind and
  -- permits: an exclusive lease, a shared lease, or one permit of a
  -- semaphore of `permits` permits.  In C collation: the grants look the
  -- places of one kind up by the index below.
  kind text COLLATE "C" NOT NULL DEFAULT 'exclusive'
    CHECK (kind IN ('exclusive', 'shared', 'permit')),
  permits integer CHECK ((kind = 'permit') = (permits IS NOT NULL)),
  -- Kept by a waiting statement (CALL fencing_await with a session), which
  -- holds the place's lock-manager tag while it waits and is woken through
  -- it: a place whose tag nobody holds (the CALL ended, was cancelled, its
  -- backend died) waits no more.
  by_call boolean NOT NULL DEFAULT false,
  -- One place per session and lock: a join repeated after a lost answer
  -- keeps the place it had.
  CONSTRAINT fencing_line_once UNIQUE (session_id, lock_id)
);
CREATE INDEX fencing_line_order ON @extschema@.fencing_line (lock_id, kind, place);
REVOKE ALL ON @extschema@.fencing_line FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.fencing_line_place_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_line', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_line_place_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_line_place_seq IS
  'the numbers of places in line, in order of arrival';
COMMENT ON TABLE @extschema@.fencing_line IS
  'one row per place in a lock''s line: a candidate waiting, in its session, for an exclusive lease, a shared lease or a permit; written only through the fencing_line_ functions';

CREATE FUNCTION @extschema@.fencing_line_join(
    session bigint, lock_name text, wait interval DEFAULT NULL, payload jsonb DEFAULT NULL,
    kind text DEFAULT 'exclusive', permits integer DEFAULT NULL,
    OUT place bigint, OUT token @extschema@.fencing_token)
  AS 'MODULE_PATHNAME', 'fencing_line_join' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_line_join(bigint, text, interval, jsonb, text, integer) IS
  'joins the line of the lock in the session for a lease of kind (''exclusive'', ''shared'', or ''permit'' with the semaphore''s permits), waiting at most wait (NULL: while the session lives), and returns the place; token is the lease''s when the place took it at once; joined again, the same place';

CREATE FUNCTION @extschema@.fencing_line_poll(places bigint[])
  RETURNS TABLE (place bigint, lock_name text, state text, token @extschema@.fencing_token)
  AS 'MODULE_PATHNAME', 'fencing_line_poll' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_line_poll(bigint[]) IS
  'for each place, its state: waiting, granted (with the lease''s token; a place first in line takes the lease here) or gone (its wait ran out, its session ended, its lease ended, or no such place of the caller''s)';

CREATE FUNCTION @extschema@.fencing_line_leave(place bigint) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_line_leave' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_line_leave(bigint) IS
  'leaves the line, giving back a lease the place had taken; false when the caller has no such place';

-- Who waits for what, in order: the places that wait (not those that have
-- taken their lease), for the locks the querying role may read, as
-- fencing_leases shows their leases (every lock for pg_read_all_stats).
-- position: 1 for the first place that waits, among the places shown.
CREATE VIEW @extschema@.fencing_lines WITH (security_barrier) AS
  SELECT k.lock_name, l.place,
         pg_catalog.row_number() OVER (PARTITION BY l.lock_id ORDER BY l.place) AS position,
         l.kind,
         s.holder, s.holder_role AS role, l.session_id, l.joined_at, l.wait_until,
         s.expires_at > pg_catalog.clock_timestamp()
           AND (l.wait_until IS NULL OR l.wait_until > pg_catalog.clock_timestamp()) AS live
    FROM @extschema@.fencing_line l
    JOIN @extschema@.fencing_lock k ON k.lock_id = l.lock_id
    JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
   WHERE l.token IS NULL
     AND @extschema@.fencing_role_may_read((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
                                           k.owner, k.users);
GRANT SELECT ON @extschema@.fencing_lines TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_lines IS
  'the places waiting in the lines of the locks the current role may use (every lock for pg_read_all_stats), in order, with their candidates; live: its session lives and its wait has not run out, judged now';

-- The waiting room exists once, in C: the waiting loop of the function
-- forms (fencing_acquire, fencing_acquire_permit and fencing_acquire_shared
-- with a wait) is C beside fencing_await's (src/backend/lease_await.cpp),
-- and the SQL pieces it was made of go.  Their C symbols stay, for
-- databases not yet updated.
DROP FUNCTION @extschema@.fencing_queue_for(text, bigint, interval);
DROP FUNCTION @extschema@.fencing_enter_waiting_room(bigint);
DROP FUNCTION @extschema@.fencing_try_waiting_room(bigint);
DROP FUNCTION @extschema@.fencing_leave_waiting_room(bigint, boolean);
DROP FUNCTION @extschema@.fencing_wait_for_wakeup(timestamptz);
CREATE OR REPLACE FUNCTION @extschema@.fencing_wait_to_acquire(
    lock_name text, lock_id bigint, holder text, permits integer, ttl interval, wait interval,
    payload jsonb, exclusive boolean)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_wait_to_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_wait_to_acquire(text, bigint, text, integer, interval, interval, jsonb, boolean) IS
  'queues for a lock and makes attempts until one succeeds or the wait is over; internal to the waiting acquires';

-- A lock's waiters are the sessions in its waiting room and the live
-- places in its line.
CREATE OR REPLACE VIEW @extschema@.fencing_lock_stats WITH (security_barrier) AS
  SELECT k.lock_name,
         coalesce(c.grants, 0) AS grants, coalesce(c.renewals, 0) AS renewals,
         coalesce(c.releases, 0) AS releases, coalesce(c.expiries, 0) AS expiries,
         coalesce(c.takeovers, 0) AS takeovers, coalesce(c.revokes, 0) AS revokes,
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks p
           WHERE p.locktype = 'advisory' AND p.classid = 1178947139 AND p.objid = k.lock_id::oid
             AND p.objsubid = 3
             AND p.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                WHERE d.datname = pg_catalog.current_database()))
         + (SELECT pg_catalog.count(*) FROM @extschema@.fencing_line l
              JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
             WHERE l.lock_id = k.lock_id AND l.token IS NULL
               AND s.expires_at > pg_catalog.clock_timestamp()
               AND (l.wait_until IS NULL OR l.wait_until > pg_catalog.clock_timestamp())) AS waiting,
         coalesce(c.stale_rejections, 0) AS stale_rejections,
         coalesce(c.missing_rejections, 0) AS missing_rejections
    FROM @extschema@.fencing_lock k
    LEFT JOIN @extschema@.fencing_lock_counters() c ON c.lock_name = k.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
COMMENT ON VIEW @extschema@.fencing_lock_stats IS
  'per lock: grants, renewals, releases, expiries, takeovers and revokes committed, waiters (sessions in its waiting room and live places in its line), and writes refused under it, since fencing_stats_reset(); needs shared_preload_libraries = ''pg_fencing''';

-- A session's open counts its role's sessions, and sweeps the role's
-- ended ones, only near the role's limit (see the install script).
--
-- How many entries fencing_session_role has for a role, up to most: at
-- least as many as the role has sessions, read from the index alone
-- (src/backend/lease_engine.cpp).
CREATE FUNCTION @extschema@.fencing_session_entries(role oid, most integer) RETURNS integer
  AS 'MODULE_PATHNAME', 'fencing_session_entries' LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_entries(oid, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_entries(oid, integer) IS
  'how many index entries the role''s sessions have, counting at most most (at least its sessions); internal';

CREATE OR REPLACE FUNCTION @extschema@.fencing_session_open_as(caller oid, holder text, ttl interval)
  RETURNS bigint LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
  most CONSTANT integer := pg_catalog.current_setting('pg_fencing.max_sessions_per_role')::integer;
  held bigint;
  id bigint;
BEGIN
  checked := @extschema@.fencing_check_session_args(holder, ttl, true);
  IF @extschema@.fencing_session_entries(caller, most) >= most THEN
    -- The caller's own ended sessions are swept here, a batch at a time,
    -- for a server without the expiry worker; only at READ COMMITTED,
    -- where each of the sweep's statements sees what committed before it.
    -- Never another role's: this transaction is the caller's, and would
    -- hold that role's rows until it ends.
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
      PERFORM @extschema@.fencing_end_expired_sessions(caller::regrole, 100);
    END IF;
    SELECT pg_catalog.count(*) INTO held
      FROM (SELECT FROM @extschema@.fencing_session x
             WHERE x.holder_role OPERATOR(pg_catalog.=) caller::regrole LIMIT most) mine;
    IF held >= most THEN
      RAISE EXCEPTION 'role "%" has % fencing sessions, the most pg_fencing.max_sessions_per_role allows',
        pg_catalog.pg_get_userbyid(caller), held
        USING ERRCODE = '53400',
              DETAIL = 'Sessions that have ended count until they are swept: by the expiry worker, or by the role''s next fencing_session_open() at READ COMMITTED.',
              HINT = 'Close the sessions the role no longer uses (fencing_session_close), or have a superuser raise the limit for the role with ALTER ROLE ... SET pg_fencing.max_sessions_per_role.';
    END IF;
  END IF;
  id := @extschema@.fencing_grant()::bigint;
  INSERT INTO @extschema@.fencing_session (session_id, holder, holder_role, ttl, opened_at, expires_at)
    VALUES (id, holder, caller::regrole, ttl, pg_catalog.clock_timestamp(),
            pg_catalog.clock_timestamp() + ttl);
  PERFORM @extschema@.fencing_commit_durably();
  RETURN id;
END $$;
