-- pg_fencing 1.3 -> 1.4: see leadership and fencing happen.
--
--   announcements  NOTIFY fencing_events for each grant, release, expiry
--                  and revoke of a lease, from the transaction that makes
--                  it, for the locks whose owner asked for it
--   statistics     fencing_lock_stats, fencing_table_stats and the record
--                  of refused writes fencing_rejections, kept in shared
--                  memory (shared_preload_libraries = 'pg_fencing')
--   history        fencing_history: the last grants of each lock and how
--                  each ended, in a table
--
-- The C side is src/backend/lease_events.cpp (announcements, history,
-- counts at commit), shared_stats.cpp (the counters and the record) and
-- expiry_worker.cpp (the background worker that announces expiries).

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.4'" to load this file. \quit

-- Who may read a lock's lease, history and statistics: the roles that may
-- use it, and the monitoring roles (pg_read_all_stats, as pg_monitor
-- has), which PostgreSQL lets read every session in pg_stat_activity too.
CREATE FUNCTION @extschema@.fencing_role_may_read(role oid, owner regrole, users regrole[])
  RETURNS boolean LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN @extschema@.fencing_role_may_use(role, owner, users)
      OR pg_catalog.pg_has_role(role, 'pg_read_all_stats', 'USAGE');
COMMENT ON FUNCTION @extschema@.fencing_role_may_read(oid, regrole, regrole[]) IS
  'whether a role may read the leases, history and statistics of a lock with this owner and these users: those who may use it, and pg_read_all_stats';

-------------------------------------------------------------------------------
-- Announcements
-------------------------------------------------------------------------------
-- PostgreSQL has no privilege on LISTEN: every role connected to the
-- database can read every payload on every channel.  A lock's name, holder
-- and token are visible only to the roles that may use the lock
-- (fencing_locks), so a lock is announced only once its owner says so.
ALTER TABLE @extschema@.fencing_lock
  ADD COLUMN announce boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW @extschema@.fencing_locks WITH (security_barrier) AS
  SELECT k.lock_name, k.owner, k.users, k.lock_id, k.lock_delay, k.announce
    FROM @extschema@.fencing_lock k
   WHERE @extschema@.fencing_role_may_use(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);

CREATE FUNCTION @extschema@.fencing_set_announce_as(caller oid, lock_name text, announce boolean)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF announce IS NULL THEN
    RAISE EXCEPTION 'announce must be true or false, got NULL (lock "%")', lock_name
      USING ERRCODE = '22004';
  END IF;
  UPDATE @extschema@.fencing_lock k SET announce = fencing_set_announce_as.announce
   WHERE k.lock_name = l.lock_name;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_set_announce_as(oid, text, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_set_announce_as(oid, text, boolean) IS
  'fencing_set_announce() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_set_announce(lock_name text, announce boolean)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_set_announce(text, boolean) IS
  'whether the lock''s grants, releases, expiries and revokes are announced on channel fencing_events, which every role of the database can LISTEN to; the lock''s owner or a superuser only';

-- One event of a lease, for the SQL that makes one (the revoke, below):
-- announced if the lock is, and counted in fencing_lock_stats at commit.
CREATE FUNCTION @extschema@.fencing_lease_event(
    lock_name text, event text, holder text, token @extschema@.fencing_token)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_lease_event'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lease_event(text, text, text, @extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lease_event(text, text, text, @extschema@.fencing_token) IS
  'announces and counts one event of a lease; internal';

-- The revoke announces what it ended.
CREATE OR REPLACE FUNCTION @extschema@.fencing_revoke_as(caller oid, lock_name text, reason text)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
  new_mark @extschema@.fencing_token;
  ended_holder text;
  ended_token @extschema@.fencing_token;
BEGIN
  UPDATE @extschema@.fencing_lease e
     SET expires_at = clock_timestamp(), ended = 'revoked', end_reason = reason
   WHERE e.lock_name = l.lock_name AND e.expires_at > clock_timestamp()
  RETURNING e.holder, e.token INTO ended_holder, ended_token;
  -- The fence gate first: the revoke waits for every transaction writing
  -- under the current mark (they hold the gate shared).
  PERFORM @extschema@.fencing_lock_fence_gate(l.lock_id);
  new_mark := @extschema@.fencing_grant();
  INSERT INTO @extschema@.fencing_fence AS f VALUES (l.lock_name, new_mark)
    ON CONFLICT ON CONSTRAINT fencing_fence_pkey
    DO UPDATE SET high_water = GREATEST(f.high_water, EXCLUDED.high_water);
  PERFORM @extschema@.fencing_commit_durably();
  PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
  -- A revoke that found no live lease raised the mark all the same, but
  -- ended no lease: nothing to announce or count.
  IF ended_token IS NOT NULL THEN
    PERFORM @extschema@.fencing_lease_event(l.lock_name, 'revoked', ended_holder, ended_token);
  END IF;
  RETURN new_mark;
END $$;

-------------------------------------------------------------------------------
-- The fence gate (issue 15): writers of one holder in parallel
-------------------------------------------------------------------------------
-- Every writer under a lock used to lock the lock's mark row to its commit,
-- so that a raise of the mark (a grant, a revoke) waited for the writes in
-- flight: the holder's own writers took turns.  From 1.4 a writer whose
-- token is the mark holds the lock's fence gate shared instead (a lock in
-- the lock manager, src/backend/fences.cpp), and whatever raises the mark
-- takes the gate exclusively first: it still waits for every write in
-- flight, and the writes after it wait for its commit, then are judged
-- against the new mark.  The lease engine takes it in C; the revoke, below,
-- through this function.  PUBLIC may not call it: holding a gate stops
-- every writer under the lock.
CREATE FUNCTION @extschema@.fencing_lock_fence_gate(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_lock_fence_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_fence_gate(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_fence_gate(bigint) IS
  'takes a lock''s fence gate exclusively until the end of the transaction, before its mark is raised; internal';

-------------------------------------------------------------------------------
-- Waiting rooms out of SQL's reach
-------------------------------------------------------------------------------
-- A lock's waiting room was the advisory lock
-- pg_advisory_xact_lock(fencing_waiting_room(lock_id)): any role could take
-- it with pg_advisory_lock() and hold it, and every acquire of the lock
-- without a wait (which gives way to whoever is in the room) answered NULL
-- for as long as it did.  From 1.4 the room is a lock-manager lock in a
-- field SQL's advisory locks cannot name (src/backend/lease_wakeup.cpp):
-- pg_locks shows it as an advisory lock with classid 1178947139, objid the
-- lock's lock_id and objsubid 3.  The waiting acquire queues in it through
-- this function.
CREATE FUNCTION @extschema@.fencing_enter_waiting_room(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_enter_waiting_room' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_enter_waiting_room(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_enter_waiting_room(bigint) IS
  'queues in a lock''s waiting room until the end of the transaction, for at most lock_timeout; internal to the waiting fencing_acquire';

COMMENT ON FUNCTION @extschema@.fencing_waiting_room(bigint) IS
  'the numbers of a lock''s waiting room (pg_locks: classid 1178947139, objid the lock''s lock_id, objsubid 3 from 1.4: no SQL advisory lock can take it)';

-- The waiting acquire of 1.2, queueing in the room above.
CREATE OR REPLACE FUNCTION @extschema@.fencing_acquire_as(
    caller oid, lock_name text, holder text, ttl interval, wait interval, payload jsonb)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  deadline timestamptz;
  granted @extschema@.fencing_token;
  max_wait CONSTANT interval := interval '2147483.647 seconds';
  saved_lock_timeout CONSTANT text := current_setting('lock_timeout');
  checked boolean;
  lock_id bigint;
BEGIN
  -- No wait (the argument left out, or NULL): one attempt.
  IF wait IS NULL THEN
    RETURN @extschema@.fencing_acquire_as(caller, lock_name, holder, ttl, payload);
  END IF;
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  IF wait < interval '0' THEN
    RAISE EXCEPTION 'wait must not be negative, got % (lock "%")', wait, lock_name
      USING ERRCODE = '22023';
  END IF;
  IF wait > max_wait THEN
    RAISE EXCEPTION 'wait must be at most 2147483.647 seconds (24.8 days), got % (lock "%")',
      wait, lock_name
      USING ERRCODE = '22023', HINT = 'Wait longer than that with repeated calls.';
  END IF;
  -- Waiting means seeing other transactions' commits while we loop.
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'fencing_acquire with a wait needs READ COMMITTED, not %',
      upper(current_setting('transaction_isolation'))
      USING ERRCODE = '25000',
            HINT = 'Call it in its own transaction, or use the form without wait.';
  END IF;
  lock_id := @extschema@.fencing_lock_authorize(lock_name, caller, true);
  deadline := clock_timestamp() + wait;

  -- Queue in the waiting room, first come first served, for at most wait.
  BEGIN
    PERFORM set_config('lock_timeout',
      greatest(1, ceil(extract(epoch FROM wait) * 1000))::bigint::text, true);
    PERFORM @extschema@.fencing_enter_waiting_room(lock_id);
    PERFORM set_config('lock_timeout', saved_lock_timeout, true);
  EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;  -- still queued behind others at the deadline
  END;

  -- First in line: look at the lease until it is free or the wait is over.
  LOOP
    granted := @extschema@.fencing_try_acquire(lock_name, holder, ttl, lock_id, payload);
    IF granted IS NOT NULL THEN
      RETURN granted;
    END IF;
    EXIT WHEN clock_timestamp() >= deadline;
    -- Sleep until the commit of a release wakes us (fencing_wake_waiters_at_commit), the lock
    -- becomes available (the lease's end, plus its lock-delay) or the wait is over.
    PERFORM @extschema@.fencing_wait_for_wakeup(
      least(deadline, @extschema@.fencing_available_at(lock_name)));
  END LOOP;
  RETURN NULL;
END $$;

-- Expiries: a lease that ran out is marked ended = 'expired' once it has
-- been announced, so that it is announced once.  Until a grant replaces
-- it, an expired lease still starts the lock-delay, marked or not.
CREATE FUNCTION @extschema@.fencing_announce_expiries() RETURNS timestamptz
  AS 'MODULE_PATHNAME', 'fencing_announce_expiries' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_announce_expiries() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_announce_expiries() IS
  'announces (and counts) every lease that has run out and was not yet announced, marks it ended = ''expired'', and returns the end of the next live lease (NULL: none); the background worker calls it, or a scheduled job where the library is not preloaded; superuser only';

-- Readable by the monitoring roles too (fencing_role_may_read).
CREATE OR REPLACE VIEW @extschema@.fencing_leases WITH (security_barrier) AS
  SELECT l.lock_name, l.holder, l.token, l.granted_at, l.expires_at,
         l.expires_at > clock_timestamp() AS live,
         l.payload, k.lock_delay,
         CASE WHEN l.ended IS NULL OR l.ended = 'expired' THEN l.expires_at + k.lock_delay
              ELSE l.expires_at END
           AS available_at,
         CASE WHEN l.expires_at > clock_timestamp() THEN 'live'
              ELSE coalesce(l.ended, 'expired') END AS state,
         l.end_reason
    FROM @extschema@.fencing_lease l
    JOIN @extschema@.fencing_lock k ON k.lock_name = l.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
COMMENT ON VIEW @extschema@.fencing_leases IS
  'every lock the current role may use (every lock for pg_read_all_stats) with its latest grant; live is judged by the server clock now';

-------------------------------------------------------------------------------
-- Grant history
-------------------------------------------------------------------------------
-- grant_count: how many leases the lock has been granted; the lease row's
-- own number.  The history keeps the last pg_fencing.history_size leases of
-- each lock in slots grant_count % history_size, so it stays bounded without
-- anything pruning it.  A lease goes into the history when a grant replaces
-- it; until then the lease row itself is its entry (the view).  The lease
-- engine writes the table directly, as it writes fencing_lease
-- (src/backend/lease_tables.cpp): the columns below are its contract.
ALTER TABLE @extschema@.fencing_lease
  ADD COLUMN grant_count bigint NOT NULL DEFAULT 1;

CREATE TABLE @extschema@.fencing_grant_history (
  -- The lock's slot: lock_id * 2^20 + grant_count % history_size (the
  -- setting stays below 2^20), the key the grant finds the slot by.
  entry bigint PRIMARY KEY,
  lock_name text NOT NULL,
  grant_count bigint NOT NULL,
  token @extschema@.fencing_token NOT NULL,
  holder text NOT NULL,
  holder_role name NOT NULL,
  granted_at timestamptz NOT NULL,
  ended_at timestamptz NOT NULL,
  end_reason text NOT NULL
) WITH (fillfactor = 50);  -- room for a slot's next version on its page (HOT)
-- A lock's history, for the view.
CREATE INDEX fencing_grant_history_lock ON @extschema@.fencing_grant_history (lock_name);
REVOKE ALL ON @extschema@.fencing_grant_history FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_grant_history', '');
COMMENT ON TABLE @extschema@.fencing_grant_history IS
  'the last pg_fencing.history_size leases of each lock that a grant replaced; read through fencing_history';

-- end_reason: released, revoked, expired (ran out; the lock has not been
-- granted to another holder since), taken_over (ran out, and another
-- holder was granted the lock); NULL while live.
CREATE VIEW @extschema@.fencing_history WITH (security_barrier) AS
  SELECT e.lock_name, e.token, e.holder, e.holder_role, e.granted_at, e.ended_at, e.end_reason
    FROM (SELECT h.lock_name, h.token, h.holder, h.holder_role, h.granted_at, h.ended_at,
                 h.end_reason
            FROM @extschema@.fencing_grant_history h
          UNION ALL
          SELECT l.lock_name, l.token, l.holder, l.holder_role, l.granted_at,
                 CASE WHEN l.expires_at > clock_timestamp() THEN NULL ELSE l.expires_at END,
                 CASE WHEN l.expires_at > clock_timestamp() THEN NULL
                      ELSE coalesce(l.ended, 'expired') END
            FROM @extschema@.fencing_lease l) e
    JOIN @extschema@.fencing_lock k ON k.lock_name = e.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
GRANT SELECT ON @extschema@.fencing_history TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_history IS
  'every lease of the locks the current role may use (every lock for pg_read_all_stats), as far back as pg_fencing.history_size grants per lock, with when and how it ended';

-------------------------------------------------------------------------------
-- Statistics (shared memory: shared_preload_libraries = 'pg_fencing')
-------------------------------------------------------------------------------
-- The C functions return only the rows the calling role may see: every row
-- to superusers and members of pg_read_all_stats, otherwise a lock's
-- counters to the roles that may use the lock, a table's to the roles that
-- may SELECT from it, and a refused write's role, application and address
-- to the roles that have that role's privileges (as pg_stat_activity).
-- Without the library preloaded they raise 55000.
CREATE FUNCTION @extschema@.fencing_lock_counters(
    OUT lock_name text, OUT grants bigint, OUT renewals bigint, OUT releases bigint,
    OUT expiries bigint, OUT takeovers bigint, OUT revokes bigint,
    OUT stale_rejections bigint, OUT missing_rejections bigint)
  RETURNS SETOF record AS 'MODULE_PATHNAME', 'fencing_lock_counters'
  LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.fencing_lock_counters() IS
  'the counters of fencing_lock_stats that the calling role may see';

CREATE FUNCTION @extschema@.fencing_table_counters(
    OUT relid regclass, OUT stale_rejections bigint, OUT missing_rejections bigint)
  RETURNS SETOF record AS 'MODULE_PATHNAME', 'fencing_table_counters'
  LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.fencing_table_counters() IS
  'the counters of fencing_table_stats that the calling role may see';

CREATE FUNCTION @extschema@.fencing_rejection_log(
    OUT at timestamptz, OUT relid regclass, OUT lock_name text, OUT token @extschema@.fencing_token,
    OUT mark @extschema@.fencing_token, OUT sqlstate text, OUT role regrole,
    OUT application_name text, OUT client_addr inet)
  RETURNS SETOF record AS 'MODULE_PATHNAME', 'fencing_rejection_log'
  LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.fencing_rejection_log() IS
  'the refused writes of fencing_rejections that the calling role may see';

-- Every lock the role may use (all of them for pg_read_all_stats), with
-- zeros where nothing happened since the last reset.  waiting: sessions in
-- the lock's waiting room (fencing_waiting_room), from pg_locks.
CREATE VIEW @extschema@.fencing_lock_stats WITH (security_barrier) AS
  SELECT k.lock_name,
         coalesce(c.grants, 0) AS grants, coalesce(c.renewals, 0) AS renewals,
         coalesce(c.releases, 0) AS releases, coalesce(c.expiries, 0) AS expiries,
         coalesce(c.takeovers, 0) AS takeovers, coalesce(c.revokes, 0) AS revokes,
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks p
           WHERE p.locktype = 'advisory' AND p.classid = 1178947139 AND p.objid = k.lock_id::oid
             AND p.objsubid = 3
             AND p.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                WHERE d.datname = pg_catalog.current_database())) AS waiting,
         coalesce(c.stale_rejections, 0) AS stale_rejections,
         coalesce(c.missing_rejections, 0) AS missing_rejections
    FROM @extschema@.fencing_lock k
    LEFT JOIN @extschema@.fencing_lock_counters() c ON c.lock_name = k.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
GRANT SELECT ON @extschema@.fencing_lock_stats TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_lock_stats IS
  'per lock: grants, renewals, releases, expiries, takeovers and revokes committed, sessions waiting, and writes refused under it, since fencing_stats_reset(); needs shared_preload_libraries = ''pg_fencing''';

CREATE VIEW @extschema@.fencing_table_stats AS
  SELECT c.relid, c.stale_rejections, c.missing_rejections
    FROM @extschema@.fencing_table_counters() c;
GRANT SELECT ON @extschema@.fencing_table_stats TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_table_stats IS
  'per protected table: writes refused with a stale token (55Z01) or without one (55Z02) since fencing_stats_reset(); needs shared_preload_libraries = ''pg_fencing''';

CREATE VIEW @extschema@.fencing_rejections AS
  SELECT r.at, r.relid, r.lock_name, r.token, r.mark, r.sqlstate, r.role,
         r.application_name, r.client_addr
    FROM @extschema@.fencing_rejection_log() r;
GRANT SELECT ON @extschema@.fencing_rejections TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_rejections IS
  'the last pg_fencing.rejections_kept refused writes, kept although their transactions rolled back; needs shared_preload_libraries = ''pg_fencing''';

CREATE FUNCTION @extschema@.fencing_stats_reset() RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_stats_reset' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_stats_reset() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_stats_reset() IS
  'sets every counter of fencing_lock_stats and fencing_table_stats of the current database to zero and empties its fencing_rejections; superuser unless granted';

-- Plain UPDATEs judged in their own projection (src/backend/update_check.cpp):
-- with pg_fencing.fast_update on, the planner puts this call around the SET
-- expression of a guarded token column and the statement runs without the
-- guard's UPDATE trigger.  EXECUTE stays with PUBLIC: every role's UPDATE of
-- a guarded table calls it.  Called by hand it judges only for a role that
-- may UPDATE the trigger's table, and does nothing that role's own UPDATE
-- would not do.
CREATE FUNCTION @extschema@.fencing_guard_check(
    new_token @extschema@.fencing_token, old_token @extschema@.fencing_token,
    guard_trigger oid, guarded_table oid)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_guard_check'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_guard_check(@extschema@.fencing_token, @extschema@.fencing_token, oid, oid) IS
  'judges one row of a plain UPDATE of a guarded table as its fencing_guard trigger would, in the UPDATE''s projection, and returns the token to store; put there by the planner (pg_fencing.fast_update); internal';

-- Reads under a lock-wide fence (src/backend/fences.cpp): for a row-level
-- security policy that lets only the transactions of the lock's current
-- holder read a table (README, "Reads under a lock-wide fence").
CREATE FUNCTION @extschema@.fencing_reads_allowed(lock_name text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_reads_allowed' LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.fencing_reads_allowed(text) IS
  'whether this transaction has presented a token for the lock (fencing_present) that is still in force: the lock''s mark cannot pass it before the transaction ends; for a row-level security policy';
