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

-- The revoke announces what it ended: see the end of this script (it
-- also ends permits and shared leases).

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

-- The waiting acquire of 1.2 queues in the room above: see "The waiting
-- fencing_acquire" below.

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

-------------------------------------------------------------------------------
-- Semaphores and shared leases (issue 16)
-------------------------------------------------------------------------------
-- How a lock is leased (kind):
--   exclusive  one holder at a time (fencing_acquire); every lock starts so
--   semaphore  up to `permits` holders at a time (fencing_acquire_permit),
--              each on a permit (a slot) fenced on its own: a token is
--              accepted while it is its slot's latest grant
--   shared     any number of shared holders (fencing_acquire_shared) or one
--              exclusive holder (fencing_acquire); the lock's mark fences
--              shared holders only when an exclusive grant passes them
-- A lock becomes a semaphore at its first permit if fencing_acquire never
-- granted it, and shared at its first shared grant; neither changes back.
ALTER TABLE @extschema@.fencing_lock
  ADD COLUMN kind text NOT NULL DEFAULT 'exclusive',
  ADD COLUMN permits integer,
  ADD CONSTRAINT fencing_lock_kind CHECK (kind IN ('exclusive', 'semaphore', 'shared')),
  ADD CONSTRAINT fencing_lock_permits CHECK ((kind = 'semaphore') = (permits IS NOT NULL));

-- The live and past leases of semaphores and shared locks, one row per
-- slot: a semaphore's slots are 1..permits; a shared lock's are numbered as
-- its holders come, and reused once free.  A slot's row is its latest
-- grant, so a token is current for its slot while a row carries it (the
-- guard looks a write's token up in fencing_permit_token:
-- src/backend/fences.cpp).  ended: 'released' or 'revoked' (the slot is
-- free at once), 'expired' (marked by the exclusive grant that passed a
-- shared holder), NULL while live and after an expiry (the slot is free
-- after the lock's lock-delay).
CREATE TABLE @extschema@.fencing_permit (
  lock_id bigint NOT NULL,
  slot integer NOT NULL,
  lock_name text NOT NULL,
  holder text NOT NULL,
  holder_role name NOT NULL,
  token @extschema@.fencing_token NOT NULL,
  granted_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  ended text,
  PRIMARY KEY (lock_id, slot)
);
CREATE UNIQUE INDEX fencing_permit_token ON @extschema@.fencing_permit (token);
REVOKE ALL ON @extschema@.fencing_permit FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_permit', '');
COMMENT ON TABLE @extschema@.fencing_permit IS
  'the latest grant of each permit of a semaphore and of each shared holder slot of a shared lock; read through fencing_permits';

-- When a slot can be granted again, as fencing_leases' available_at says
-- for a lease: at once after a release or a revoke, after the lock-delay
-- after an expiry.
CREATE FUNCTION @extschema@.fencing_permit_free_at(
    expires_at timestamptz, ended text, lock_delay interval)
  RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN ended IS NULL OR ended = 'expired' THEN expires_at + lock_delay
              ELSE expires_at END;
COMMENT ON FUNCTION @extschema@.fencing_permit_free_at(timestamptz, text, interval) IS
  'when a permit''s slot can be granted again; internal';

CREATE VIEW @extschema@.fencing_permits WITH (security_barrier) AS
  SELECT p.lock_name, k.kind, p.slot, p.holder, p.token, p.granted_at, p.expires_at,
         p.expires_at > clock_timestamp() AS live,
         @extschema@.fencing_permit_free_at(p.expires_at, p.ended, k.lock_delay) AS available_at,
         CASE WHEN p.expires_at > clock_timestamp() THEN 'live'
              ELSE coalesce(p.ended, 'expired') END AS state
    FROM @extschema@.fencing_permit p
    JOIN @extschema@.fencing_lock k ON k.lock_id = p.lock_id
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
GRANT SELECT ON @extschema@.fencing_permits TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_permits IS
  'the permits of the semaphores and the shared holders of the shared locks the current role may use (every lock for pg_read_all_stats), one row per slot with its latest grant';

CREATE OR REPLACE VIEW @extschema@.fencing_locks WITH (security_barrier) AS
  SELECT k.lock_name, k.owner, k.users, k.lock_id, k.lock_delay, k.announce, k.kind, k.permits
    FROM @extschema@.fencing_lock k
   WHERE @extschema@.fencing_role_may_use(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);

-- A permit's fence gate (src/backend/fences.cpp): writers under the slot's
-- current token hold it shared, a new grant of the slot takes it
-- exclusively first and so waits for the old holder's writes in flight.
-- pg_locks shows it as an advisory lock with classid the slot, objid the
-- lock's lock_id and objsubid 4.  PUBLIC may not call it: holding a gate
-- stops every writer of the slot.
CREATE FUNCTION @extschema@.fencing_lock_permit_gate(lock_id bigint, slot integer) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_lock_permit_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_permit_gate(bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_permit_gate(bigint, integer) IS
  'takes the fence gate of a permit exclusively until the end of the transaction, before the permit is granted again; internal';

-- The waiting room without waiting: true if this transaction holds it now.
CREATE FUNCTION @extschema@.fencing_try_waiting_room(lock_id bigint) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_try_waiting_room' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_waiting_room(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_waiting_room(bigint) IS
  'takes a lock''s waiting room until the end of the transaction if nobody is in it; internal';
CREATE FUNCTION @extschema@.fencing_leave_waiting_room(lock_id bigint, queued boolean) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_leave_waiting_room' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_leave_waiting_room(bigint, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_leave_waiting_room(bigint, boolean) IS
  'gives back the waiting room an attempt took and granted nothing in (queued: that a waiting acquire queued for); internal';

-- A free slot's gate without waiting: a grant prefers a slot whose old
-- holder has no write in flight.
CREATE FUNCTION @extschema@.fencing_try_permit_gate(lock_id bigint, slot integer) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_try_permit_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_permit_gate(bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_permit_gate(bigint, integer) IS
  'takes the fence gate of a permit exclusively if no writer holds it; internal';

-- A shared grant holds the lock's fence gate shared, so that a revoke (which
-- takes it exclusively) waits for the grant and then ends its lease.
CREATE FUNCTION @extschema@.fencing_share_fence_gate(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_share_fence_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_share_fence_gate(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_share_fence_gate(bigint) IS
  'takes a lock''s fence gate shared until the end of the transaction; internal';

-- After a grant or a revoke, the granting transaction judges its own next
-- write under the lock afresh.
CREATE FUNCTION @extschema@.fencing_forget_fence(lock_name text) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_forget_fence' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_forget_fence(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_forget_fence(text) IS
  'makes the current transaction read the lock''s mark again at its next write under it; internal';

-- The waiting part of every waiting acquire: checks the wait, queues in the
-- lock's room (first come, first served) and returns the deadline; NULL
-- when the caller is still queued behind others at the deadline.
CREATE FUNCTION @extschema@.fencing_queue_for(lock_name text, lock_id bigint, wait interval)
  RETURNS timestamptz LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  max_wait CONSTANT interval := interval '2147483.647 seconds';
  saved_lock_timeout CONSTANT text := current_setting('lock_timeout');
  deadline timestamptz;
BEGIN
  IF wait < interval '0' THEN
    RAISE EXCEPTION 'wait must not be negative, got % (lock "%")', wait, lock_name
      USING ERRCODE = '22023';
  END IF;
  IF wait > max_wait THEN
    RAISE EXCEPTION 'wait must be at most 2147483.647 seconds (24.8 days), got % (lock "%")',
      wait, lock_name
      USING ERRCODE = '22023', HINT = 'Wait longer than that with repeated calls.';
  END IF;
  deadline := clock_timestamp() + wait;
  BEGIN
    PERFORM set_config('lock_timeout',
      greatest(1, ceil(extract(epoch FROM wait) * 1000))::bigint::text, true);
    PERFORM @extschema@.fencing_enter_waiting_room(lock_id);
    PERFORM set_config('lock_timeout', saved_lock_timeout, true);
  EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;
  END;
  RETURN deadline;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_queue_for(text, bigint, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_queue_for(text, bigint, interval) IS
  'checks a wait and queues in the lock''s waiting room for at most that long; internal to the waiting acquires';

-- The waiting loop of every acquire: queues in the room, then, first in
-- line, makes an attempt (fencing_try_acquire for an exclusive lease,
-- fencing_try_permit for a permit or a shared one) each time it is woken
-- (fencing_wake_waiters_at_commit), the lock may have become available (a
-- lease's or slot's end, plus the lock-delay) or the wait is over.
CREATE FUNCTION @extschema@.fencing_wait_to_acquire(
    lock_name text, lock_id bigint, holder text, permits integer, ttl interval, wait interval,
    payload jsonb, exclusive boolean)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  deadline CONSTANT timestamptz := @extschema@.fencing_queue_for(lock_name, lock_id, wait);
  saved_lock_timeout CONSTANT text := current_setting('lock_timeout');
  granted @extschema@.fencing_token;
BEGIN
  IF deadline IS NULL THEN
    RETURN NULL;  -- still queued behind others at the deadline
  END IF;
  LOOP
    -- An attempt may wait for the writes in flight under the lock (a fence
    -- gate) or for a row; never past the deadline.
    PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM
      deadline - clock_timestamp()) * 1000))::bigint::text, true);
    BEGIN
      IF exclusive THEN
        granted := @extschema@.fencing_try_acquire(lock_name, holder, ttl, lock_id, payload);
      ELSE
        granted := @extschema@.fencing_try_permit(lock_id, holder, permits, ttl);
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      granted := NULL;
    END;
    PERFORM set_config('lock_timeout', saved_lock_timeout, true);
    IF granted IS NOT NULL THEN
      RETURN granted;
    END IF;
    EXIT WHEN clock_timestamp() >= deadline;
    PERFORM @extschema@.fencing_wait_for_wakeup(least(deadline,
      CASE WHEN exclusive THEN @extschema@.fencing_available_at(lock_name)
           ELSE @extschema@.fencing_permit_available_at(lock_id) END));
  END LOOP;
  -- Nothing granted: the next in line may try, even while the caller
  -- stays in its transaction.
  PERFORM @extschema@.fencing_leave_waiting_room(lock_id, true);
  RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_wait_to_acquire(text, bigint, text, integer, interval, interval, jsonb, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_wait_to_acquire(text, bigint, text, integer, interval, interval, jsonb, boolean) IS
  'queues for a lock and makes attempts until one succeeds or the wait is over; internal to the waiting acquires';

-- Every acquire that may wait needs to see other transactions' commits
-- while it loops, and the permit attempts judge the slots as committed.
CREATE FUNCTION @extschema@.fencing_require_read_committed(what text, hint text) RETURNS void
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION '% needs READ COMMITTED, not %', what,
      upper(current_setting('transaction_isolation'))
      USING ERRCODE = '25000', HINT = hint;
  END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_require_read_committed(text, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_require_read_committed(text, text) IS
  'raises 25000 outside READ COMMITTED; internal';

-- The waiting fencing_acquire, queueing in the room (fencing_queue_for).
CREATE OR REPLACE FUNCTION @extschema@.fencing_acquire_as(
    caller oid, lock_name text, holder text, ttl interval, wait interval, payload jsonb)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
  lock_id bigint;
BEGIN
  -- No wait (the argument left out, or NULL): one attempt.
  IF wait IS NULL THEN
    RETURN @extschema@.fencing_acquire_as(caller, lock_name, holder, ttl, payload);
  END IF;
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  PERFORM @extschema@.fencing_require_read_committed('fencing_acquire with a wait',
    'Call it in its own transaction, or use the form without wait.');
  lock_id := @extschema@.fencing_lock_authorize(lock_name, caller, true);
  RETURN @extschema@.fencing_wait_to_acquire(lock_name, lock_id, holder, NULL, ttl, wait,
                                              payload, true);
END $$;

-- When an exclusive grant can next be made: after the lease, and on a
-- shared lock after its shared holders too.
CREATE OR REPLACE FUNCTION @extschema@.fencing_available_at(p_lock text) RETURNS timestamptz
  LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT greatest(
      (SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = p_lock),
      (SELECT max(@extschema@.fencing_permit_free_at(p.expires_at, p.ended, k.lock_delay))
         FROM @extschema@.fencing_permit p
         JOIN @extschema@.fencing_lock k ON k.lock_id = p.lock_id
        WHERE k.lock_name = p_lock AND k.kind = 'shared'));
  END;

-- A lock of the kind an acquire wants, or the error that says why not.
-- want: 'semaphore' (with permits) or 'shared'.  A lock still exclusive
-- becomes what is wanted, unless fencing_acquire granted it (a semaphore).
-- Called before the attempt (so that a conflict is an error even when
-- others wait) and again inside it, in the room (kind only changes there).
CREATE FUNCTION @extschema@.fencing_lock_of_kind(
    p_lock_id bigint, want text, p_permits integer, convert boolean)
  RETURNS @extschema@.fencing_lock LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock;
  lease_token bigint;
  mark bigint;
BEGIN
  IF want = 'semaphore' AND (p_permits IS NULL OR p_permits < 1 OR p_permits > 1000) THEN
    RAISE EXCEPTION 'permits must be between 1 and 1000, got %', coalesce(p_permits::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  SELECT * INTO STRICT l FROM @extschema@.fencing_lock k WHERE k.lock_id = p_lock_id;
  IF l.kind = 'exclusive' THEN
    -- Writes in flight under the lock finish first: what they did to its
    -- mark is part of what is judged.
    IF convert THEN
      PERFORM @extschema@.fencing_lock_fence_gate(p_lock_id);
    END IF;
    SELECT e.token::bigint INTO lease_token FROM @extschema@.fencing_lease e
     WHERE e.lock_name = l.lock_name;
    SELECT f.high_water::bigint INTO mark FROM @extschema@.fencing_fence f
     WHERE f.lock_name = l.lock_name;
    IF want = 'semaphore' AND (lease_token IS NOT NULL OR mark IS NOT NULL) THEN
      RAISE EXCEPTION 'fencing lock "%" is an exclusive lock, not a semaphore', l.lock_name
        USING ERRCODE = '55000',
              DETAIL = CASE WHEN lease_token IS NOT NULL
                THEN 'fencing_acquire() has granted it.'
                ELSE 'Tokens have been written or presented under it.' END
                || ' A semaphore is a lock that only fencing_acquire_permit() takes.',
              HINT = 'Use another lock name for the semaphore.';
    END IF;
    -- A shared lock's writes no longer raise its mark: only a mark its own
    -- grants made may become one (not one raised by writes with tokens from
    -- outside its leases, an outside lock service's, which would no longer
    -- be fenced against each other).
    IF want = 'shared' AND mark > coalesce(lease_token, 0) THEN
      RAISE EXCEPTION 'fencing lock "%" cannot be taken shared: its mark is above its last grant', l.lock_name
        USING ERRCODE = '55000',
              DETAIL = pg_catalog.format('The mark, %s, was raised by a revoke or by writes under tokens its leases did not grant (an outside lock service''s, say); under a shared lock writes no longer raise it.', mark),
              HINT = 'Use another lock name for the shared leases.';
    END IF;
    IF convert THEN
      UPDATE @extschema@.fencing_lock k SET kind = want, permits = p_permits
       WHERE k.lock_id = p_lock_id
      RETURNING * INTO l;
    END IF;
    RETURN l;
  END IF;
  IF l.kind <> want THEN
    RAISE EXCEPTION 'fencing lock "%" is %, not %', l.lock_name,
      CASE l.kind WHEN 'semaphore' THEN 'a semaphore' ELSE 'a shared lock' END,
      CASE want WHEN 'semaphore' THEN 'a semaphore' ELSE 'a shared lock' END
      USING ERRCODE = '55000',
            HINT = CASE l.kind
              WHEN 'semaphore' THEN 'Take it with fencing_acquire_permit(lock_name, holder, ' || l.permits || ', ttl).'
              ELSE 'Take it with fencing_acquire_shared() or fencing_acquire().' END;
  END IF;
  IF want = 'semaphore' AND l.permits <> p_permits THEN
    RAISE EXCEPTION 'fencing semaphore "%" has % permits, not %', l.lock_name, l.permits, p_permits
      USING ERRCODE = '55000',
            DETAIL = 'A semaphore''s number of permits is set by its first fencing_acquire_permit().';
  END IF;
  RETURN l;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_of_kind(bigint, text, integer, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_of_kind(bigint, text, integer, boolean) IS
  'checks (and on first use sets) whether a lock is a semaphore or a shared lock; internal';

-- One attempt at a permit (p_permits given) or a shared lease (NULL), as
-- the tables' owner (from the _as functions below); NULL when none can be
-- granted now.  Grants of one lock, of every kind, take turns in its
-- waiting room, so that nobody takes one from under the first waiter in
-- line, and a waiting exclusive acquirer, which sits in the room, holds
-- off every new shared grant.
CREATE FUNCTION @extschema@.fencing_try_permit(
    p_lock_id bigint, p_holder text, p_permits integer, p_ttl interval)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  want CONSTANT text := CASE WHEN p_permits IS NULL THEN 'shared' ELSE 'semaphore' END;
  l @extschema@.fencing_lock;
  now timestamptz;
  own @extschema@.fencing_permit;
  exclusive @extschema@.fencing_lease;
  free_slots integer[];
  free_slot integer;
  candidate integer;
  granted @extschema@.fencing_token;
  mark @extschema@.fencing_token;
  previous @extschema@.fencing_permit;
BEGIN
  IF NOT @extschema@.fencing_try_waiting_room(p_lock_id) THEN
    RETURN NULL;
  END IF;
  -- The errors first; the kind itself changes only with a grant, below.
  l := @extschema@.fencing_lock_of_kind(p_lock_id, want, p_permits, false);
  now := clock_timestamp();

  -- The caller's own live lease (say, a retry after a lost reply): the same
  -- token, its end moved.
  UPDATE @extschema@.fencing_permit p SET expires_at = now + p_ttl
   WHERE p.lock_id = p_lock_id AND p.holder = p_holder AND p.holder_role = session_user
     AND p.expires_at > now AND p.ended IS NULL
  RETURNING * INTO own;
  IF FOUND THEN
    PERFORM @extschema@.fencing_commit_durably();
    RETURN own.token;
  END IF;

  -- The grant runs in a subtransaction: an attempt that grants nothing
  -- gives back what it changed (a kind), locked (rows) or took (gates)
  -- at once, and the room too, so that a caller that stays in its
  -- transaction holds up no renew, no writer and no other acquire.
  BEGIN
    IF l.kind = 'exclusive' THEN
      l := @extschema@.fencing_lock_of_kind(p_lock_id, want, p_permits, true);
    END IF;
    IF want = 'shared' THEN
      -- A revoke waits for this grant (it takes the gate exclusively).
      PERFORM @extschema@.fencing_share_fence_gate(p_lock_id);
      -- Not beside a live exclusive lease, nor in its lock-delay.  A lease
      -- that is free is written (to itself), so that a renew racing this
      -- grant at the instant of expiry finds it changed and looks again
      -- (it then sees the lease expired); a live one is not touched.
      SELECT * INTO exclusive FROM @extschema@.fencing_lease e WHERE e.lock_name = l.lock_name;
      IF FOUND THEN
        IF @extschema@.fencing_permit_free_at(exclusive.expires_at, exclusive.ended,
                                               l.lock_delay) > now THEN
          RAISE SQLSTATE 'PFBSY';
        END IF;
        UPDATE @extschema@.fencing_lease e SET expires_at = e.expires_at
         WHERE e.lock_name = l.lock_name
           AND @extschema@.fencing_permit_free_at(e.expires_at, e.ended, l.lock_delay) <= now
        RETURNING * INTO exclusive;
        IF NOT FOUND THEN
          RAISE SQLSTATE 'PFBSY';  -- renewed or granted meanwhile
        END IF;
      END IF;
      SELECT coalesce(min(p.slot) FILTER (
               WHERE @extschema@.fencing_permit_free_at(p.expires_at, p.ended, l.lock_delay) <= now
                 AND p.expires_at <= now),
             coalesce(max(p.slot), 0) + 1)
        INTO free_slot
        FROM @extschema@.fencing_permit p WHERE p.lock_id = p_lock_id;
    ELSE
      SELECT array_agg(s ORDER BY s) INTO free_slots
        FROM generate_series(1, l.permits) s
       WHERE NOT EXISTS (
         SELECT FROM @extschema@.fencing_permit p
          WHERE p.lock_id = p_lock_id AND p.slot = s
            AND @extschema@.fencing_permit_free_at(p.expires_at, p.ended, l.lock_delay) > now);
      IF free_slots IS NULL THEN
        RAISE SQLSTATE 'PFBSY';
      END IF;
      -- The slot's gate waits for the writes in flight under its old token:
      -- a slot without any is taken first, and only when every free slot
      -- has some does the grant wait (at most lock_timeout: the waiting
      -- acquire sets it to what is left of its wait).
      FOREACH candidate IN ARRAY free_slots LOOP
        IF @extschema@.fencing_try_permit_gate(p_lock_id, candidate) THEN
          free_slot := candidate;
          EXIT;
        END IF;
      END LOOP;
      IF free_slot IS NULL THEN
        free_slot := free_slots[1];
        PERFORM @extschema@.fencing_lock_permit_gate(p_lock_id, free_slot);
      END IF;
    END IF;

    -- The slot's last lease, for the announcements below.
    SELECT * INTO previous FROM @extschema@.fencing_permit p
     WHERE p.lock_id = p_lock_id AND p.slot = free_slot;
    granted := @extschema@.fencing_grant();
    INSERT INTO @extschema@.fencing_permit AS p
        (lock_id, slot, lock_name, holder, holder_role, token, granted_at, expires_at)
      VALUES (p_lock_id, free_slot, l.lock_name, p_holder, session_user, granted, now, now + p_ttl)
      ON CONFLICT (lock_id, slot) DO UPDATE
        SET holder = EXCLUDED.holder, holder_role = EXCLUDED.holder_role, token = EXCLUDED.token,
            granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at, ended = NULL
        -- Judged again on the row as it stands: a renew that committed since
        -- the look keeps the slot.
        WHERE @extschema@.fencing_permit_free_at(p.expires_at, p.ended, l.lock_delay) <= now
          AND p.expires_at <= now;
    IF NOT FOUND THEN
      RAISE SQLSTATE 'PFBSY';
    END IF;

    IF want = 'shared' AND exclusive.token IS NOT NULL THEN
      -- The first shared grant after an exclusive one fences the exclusive
      -- holder: the mark goes just above its token (shared holders' own
      -- tokens are all above it, and no shared grant raises it further).
      SELECT f.high_water INTO mark FROM @extschema@.fencing_fence f
       WHERE f.lock_name = l.lock_name;
      IF mark IS NULL OR mark OPERATOR(@extschema@.<=) exclusive.token THEN
        PERFORM @extschema@.fencing_lock_fence_gate(p_lock_id);
        INSERT INTO @extschema@.fencing_fence AS f
          VALUES (l.lock_name, (exclusive.token::bigint + 1)::@extschema@.fencing_token)
          ON CONFLICT ON CONSTRAINT fencing_fence_pkey
          DO UPDATE SET high_water = GREATEST(f.high_water, EXCLUDED.high_water);
      END IF;
    END IF;
    -- Announced (if the lock is) and counted at commit, as a lease's: a
    -- slot's last lease that ran out is its expiry, then the grant.
    IF previous.token IS NOT NULL AND previous.ended IS NULL THEN
      PERFORM @extschema@.fencing_lease_event(l.lock_name, 'expired', previous.holder,
                                              previous.token);
    END IF;
    PERFORM @extschema@.fencing_lease_event(l.lock_name, 'granted', p_holder, granted);
  EXCEPTION WHEN SQLSTATE 'PFBSY' OR lock_not_available THEN
    PERFORM @extschema@.fencing_leave_waiting_room(p_lock_id, false);
    RETURN NULL;
  END;
  PERFORM @extschema@.fencing_forget_fence(l.lock_name);
  PERFORM @extschema@.fencing_commit_durably();
  RETURN granted;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_permit(bigint, text, integer, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_permit(bigint, text, integer, interval) IS
  'one attempt at a permit of a semaphore or a shared lease; internal';

-- When the next attempt may succeed: a semaphore's first slot to come free,
-- a shared lock's exclusive lease's end (plus its lock-delay).
CREATE FUNCTION @extschema@.fencing_permit_available_at(p_lock_id bigint)
  RETURNS timestamptz LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT CASE k.kind
      WHEN 'semaphore' THEN
        (SELECT CASE WHEN count(*) < k.permits THEN clock_timestamp()
                     ELSE min(@extschema@.fencing_permit_free_at(p.expires_at, p.ended, k.lock_delay)) END
           FROM @extschema@.fencing_permit p WHERE p.lock_id = k.lock_id)
      ELSE (SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = k.lock_name)
      END
      FROM @extschema@.fencing_lock k WHERE k.lock_id = p_lock_id;
  END;
REVOKE ALL ON FUNCTION @extschema@.fencing_permit_available_at(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_permit_available_at(bigint) IS
  'when a permit or a shared lease of the lock may next be granted, as things stand; internal';

-- Both acquires: one attempt, or with a wait, queued in arrival order and
-- woken by releases.
CREATE FUNCTION @extschema@.fencing_acquire_permits_as(
    caller oid, lock_name text, holder text, permits integer, ttl interval, wait interval)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  what CONSTANT text := CASE WHEN permits IS NULL THEN 'fencing_acquire_shared'
                             ELSE 'fencing_acquire_permit' END;
  checked boolean;
  lock_id bigint;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  PERFORM @extschema@.fencing_require_read_committed(what,
    'Call it in its own transaction, or in one at READ COMMITTED.');
  lock_id := @extschema@.fencing_lock_authorize(lock_name, caller, true);
  PERFORM @extschema@.fencing_lock_of_kind(
    lock_id, CASE WHEN permits IS NULL THEN 'shared' ELSE 'semaphore' END, permits, false);
  -- Making an exclusive lock a semaphore or a shared lock changes how every
  -- table under it is fenced: the lock's owner decides it, not its users.
  IF EXISTS (SELECT FROM @extschema@.fencing_lock k
              WHERE k.lock_name = fencing_acquire_permits_as.lock_name AND k.kind = 'exclusive'
                AND NOT pg_catalog.pg_has_role(caller, k.owner::oid, 'USAGE')) THEN
    RAISE EXCEPTION 'only the owner of fencing lock "%" may make it %', lock_name,
      CASE WHEN permits IS NULL THEN 'a shared lock' ELSE 'a semaphore' END
      USING ERRCODE = '42501',
            DETAIL = 'The lock is exclusive; its first permit or shared lease decides its kind for good.',
            HINT = 'The lock''s owner takes the first one.';
  END IF;
  IF wait IS NULL THEN
    RETURN @extschema@.fencing_try_permit(lock_id, holder, permits, ttl);
  END IF;
  RETURN @extschema@.fencing_wait_to_acquire(lock_name, lock_id, holder, permits, ttl, wait,
                                              NULL, false);
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_acquire_permits_as(oid, text, text, integer, interval, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_acquire_permits_as(oid, text, text, integer, interval, interval) IS
  'fencing_acquire_permit() and fencing_acquire_shared() for the role that called them; internal';

CREATE FUNCTION @extschema@.fencing_acquire_permit(
    lock_name text, holder text, permits integer, ttl interval, wait interval DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_acquire_permit'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_acquire_permit(text, text, integer, interval, interval) IS
  'takes one of the semaphore''s permits for ttl and returns a new fencing token, fenced on its own permit; with wait, waits up to that long in arrival order; NULL if every permit is live (or within its lock-delay); the first call sets the number of permits; 42501 unless the caller may use (or create) the lock';

CREATE FUNCTION @extschema@.fencing_acquire_shared(
    lock_name text, holder text, ttl interval, wait interval DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_acquire_shared'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_acquire_shared(text, text, interval, interval) IS
  'takes the lock shared for ttl and returns a new fencing token; not while an exclusive lease is live (or within its lock-delay) or an exclusive acquirer waits; an exclusive grant fences every shared holder before it; with wait, waits up to that long in arrival order; 42501 unless the caller may use (or create) the lock';

-- Renew and release of a permit or a shared lease, for fencing_renew and
-- fencing_release when the token is not the lock's exclusive lease
-- (src/backend/lease_engine.cpp).  Only the login role that was granted it
-- may move it.
CREATE FUNCTION @extschema@.fencing_move_permit_end(
    p_lock_id bigint, p_token @extschema@.fencing_token, remaining interval, how text)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  now CONSTANT timestamptz := clock_timestamp();
  old_end timestamptz;
  moved @extschema@.fencing_permit;
BEGIN
  SELECT p.expires_at INTO old_end FROM @extschema@.fencing_permit p
   WHERE p.lock_id = p_lock_id AND p.token OPERATOR(@extschema@.=) p_token;
  UPDATE @extschema@.fencing_permit p SET expires_at = now + remaining, ended = how
   WHERE p.lock_id = p_lock_id AND p.token OPERATOR(@extschema@.=) p_token AND p.holder_role = session_user
     AND p.expires_at > now AND p.ended IS NULL
  RETURNING * INTO moved;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF how = 'released' THEN
    PERFORM @extschema@.fencing_lease_event(moved.lock_name, 'released', moved.holder, p_token);
  END IF;
  PERFORM @extschema@.fencing_commit_durably();
  IF how IS NOT NULL OR now + remaining < old_end THEN
    PERFORM @extschema@.fencing_wake_waiters_at_commit(p_lock_id);
  END IF;
  RETURN true;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_move_permit_end(bigint, @extschema@.fencing_token, interval, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_move_permit_end(bigint, @extschema@.fencing_token, interval, text) IS
  'renews or releases the caller''s live permit or shared lease; internal to fencing_renew and fencing_release';

-- The exclusive grant of a shared lock (src/backend/lease_engine.cpp), in
-- the room and judged as committed now: false while a shared holder is
-- live or within its lock-delay; otherwise the shared holders' rows are
-- marked ended, so that a renew racing the grant finds them changed, and
-- true.
CREATE FUNCTION @extschema@.fencing_end_shared_holders(p_lock_id bigint, lock_delay interval)
  RETURNS boolean LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  now CONSTANT timestamptz := clock_timestamp();
  passed record;
BEGIN
  -- In a subtransaction: the rows are locked (a renew in flight finishes
  -- first, and none can start), judged as they stand, and given back if a
  -- shared holder is still live.
  BEGIN
    PERFORM FROM @extschema@.fencing_permit p
     WHERE p.lock_id = p_lock_id AND p.ended IS NULL FOR UPDATE;
    IF EXISTS (SELECT FROM @extschema@.fencing_permit p
                WHERE p.lock_id = p_lock_id
                  AND @extschema@.fencing_permit_free_at(p.expires_at, p.ended, lock_delay) > now) THEN
      RAISE SQLSTATE 'PFBSY';
    END IF;
    -- The shared leases that ran out end here: their expiries are announced
    -- and counted with the exclusive grant.
    FOR passed IN
      UPDATE @extschema@.fencing_permit p SET ended = 'expired'
       WHERE p.lock_id = p_lock_id AND p.ended IS NULL
      RETURNING p.lock_name, p.holder, p.token
    LOOP
      PERFORM @extschema@.fencing_lease_event(passed.lock_name, 'expired', passed.holder,
                                              passed.token);
    END LOOP;
  EXCEPTION WHEN SQLSTATE 'PFBSY' THEN
    RETURN false;
  END;
  RETURN true;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_end_shared_holders(bigint, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_end_shared_holders(bigint, interval) IS
  'before an exclusive grant of a shared lock: whether every shared holder is gone; internal';

-- The revoke ends permits and shared leases too.  A semaphore's permits
-- are each fenced by a new token in their slot (taken behind the slot's
-- gate, so writes in flight under the old one finish first); shared
-- holders by the lock's mark, which the revoke raises above them all.
CREATE OR REPLACE FUNCTION @extschema@.fencing_revoke_as(caller oid, lock_name text, reason text)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
  new_mark @extschema@.fencing_token;
  ended_holder text;
  ended_token @extschema@.fencing_token;
  p record;
BEGIN
  -- The fence gate first: the revoke waits for every transaction writing
  -- under the current mark (they hold the gate shared), and for a shared
  -- grant in flight, whose lease it then ends with the others.
  PERFORM @extschema@.fencing_lock_fence_gate(l.lock_id);
  UPDATE @extschema@.fencing_lease e
     SET expires_at = clock_timestamp(), ended = 'revoked', end_reason = reason
   WHERE e.lock_name = l.lock_name AND e.expires_at > clock_timestamp()
  RETURNING e.holder, e.token INTO ended_holder, ended_token;
  FOR p IN SELECT x.slot, x.holder, x.token, x.expires_at > clock_timestamp() AS live
             FROM @extschema@.fencing_permit x WHERE x.lock_id = l.lock_id ORDER BY x.slot LOOP
    IF l.kind = 'semaphore' THEN
      PERFORM @extschema@.fencing_lock_permit_gate(l.lock_id, p.slot);
    END IF;
    UPDATE @extschema@.fencing_permit x
       SET expires_at = least(x.expires_at, clock_timestamp()),
           ended = CASE WHEN p.live THEN 'revoked' ELSE x.ended END,
           token = CASE WHEN l.kind = 'semaphore' THEN @extschema@.fencing_grant() ELSE x.token END
     WHERE x.lock_id = l.lock_id AND x.slot = p.slot;
    IF p.live THEN
      PERFORM @extschema@.fencing_lease_event(l.lock_name, 'revoked', p.holder, p.token);
    END IF;
  END LOOP;
  new_mark := @extschema@.fencing_grant();
  INSERT INTO @extschema@.fencing_fence AS f VALUES (l.lock_name, new_mark)
    ON CONFLICT ON CONSTRAINT fencing_fence_pkey
    DO UPDATE SET high_water = GREATEST(f.high_water, EXCLUDED.high_water);
  PERFORM @extschema@.fencing_forget_fence(l.lock_name);
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
-- Read fences as a table option (issue 16): fencing_protect(..., options =>
-- ARRAY['fence_reads'])
-------------------------------------------------------------------------------
-- The recipe of "Reads under a lock-wide fence" (README), made by
-- fencing_protect() on the table and every table below it: a RESTRICTIVE
-- FOR SELECT policy fencing_read_fence that lets a transaction read rows
-- only while it has presented the lock's current token.  Row-level security
-- is enabled (with a permissive policy fencing_read_fence_rows that lets
-- every row through, as a table without row-level security does) and
-- forced (so that the table's owner is fenced too) only where it was not
-- already; the policy's comment records which, and
-- fencing_remove_read_fence() -- called by fencing_unprotect(), and by
-- fencing_protect() again without the option -- undoes exactly that.
-- Both run as the caller: only a table's owner may change its policies.
-- fencing_protect() calls this one after its checks of the lock; PUBLIC
-- may not call it directly.
CREATE FUNCTION @extschema@.fencing_set_read_fence(tbl regclass, lock_name text)
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  fence CONSTANT text := pg_catalog.format(
    '((SELECT @extschema@.fencing_reads_allowed(%L)))', lock_name);
  part regclass;
  rls boolean;
  forced boolean;
  note text;
BEGIN
  FOR part IN SELECT t.relid FROM @extschema@.fencing_inheritance_tree(tbl) t LOOP
    IF EXISTS (SELECT FROM pg_catalog.pg_policy p
                WHERE p.polrelid OPERATOR(pg_catalog.=) part
                  AND p.polname OPERATOR(pg_catalog.=) 'fencing_read_fence') THEN
      -- Protected again: the lock may have changed, and row-level security
      -- may have been turned off by hand; what was changed for the fence
      -- stays recorded as it was.
      EXECUTE pg_catalog.format('ALTER POLICY fencing_read_fence ON %s USING %s', part, fence);
      EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', part);
      EXECUTE pg_catalog.format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', part);
      CONTINUE;
    END IF;
    EXECUTE pg_catalog.format(
      'CREATE POLICY fencing_read_fence ON %s AS RESTRICTIVE FOR SELECT USING %s', part, fence);
    -- A fence whose policy was dropped by hand and is made again: the
    -- permissive policy, if this function made it, still has the record.
    SELECT pg_catalog.obj_description(p.oid, 'pg_policy') INTO note
      FROM pg_catalog.pg_policy p
     WHERE p.polrelid OPERATOR(pg_catalog.=) part
       AND p.polname OPERATOR(pg_catalog.=) 'fencing_read_fence_rows';
    IF NOT FOUND THEN
      SELECT c.relrowsecurity, c.relforcerowsecurity INTO rls, forced
        FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) part;
      note := 'pg_fencing: rows are read only in a transaction that presented the lock''s current token';
      IF NOT rls THEN
        note := note OPERATOR(pg_catalog.||) ' (enabled row level security)';
      END IF;
      IF NOT forced THEN
        note := note OPERATOR(pg_catalog.||) ' (forced row level security)';
      END IF;
      IF NOT rls THEN
        EXECUTE pg_catalog.format(
          'CREATE POLICY fencing_read_fence_rows ON %s USING (true) WITH CHECK (true)', part);
        EXECUTE pg_catalog.format('COMMENT ON POLICY fencing_read_fence_rows ON %s IS %L',
                                  part, note);
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', part);
    EXECUTE pg_catalog.format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', part);
    EXECUTE pg_catalog.format('COMMENT ON POLICY fencing_read_fence ON %s IS %L', part, note);
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_set_read_fence(regclass, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_set_read_fence(regclass, text) IS
  'sets up the read fence of fencing_protect() option fence_reads, as the caller; internal';

-- PUBLIC may call it: it does only what the table's owner could do with
-- DROP POLICY and ALTER TABLE, and PostgreSQL refuses anyone else (42501).
CREATE FUNCTION @extschema@.fencing_remove_read_fence(tbl regclass)
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  part regclass;
  note text;
BEGIN
  IF tbl IS NULL THEN
    RAISE EXCEPTION 'table must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_class c
                  WHERE c.oid OPERATOR(pg_catalog.=) tbl AND c.relkind IN ('r', 'p')) THEN
    RAISE EXCEPTION 'relation with OID % is not a table', tbl::oid USING ERRCODE = '42809';
  END IF;
  FOR part, note IN
    SELECT t.relid, pg_catalog.obj_description(p.oid, 'pg_policy')
      FROM @extschema@.fencing_inheritance_tree(tbl) t
      JOIN pg_catalog.pg_policy p ON p.polrelid OPERATOR(pg_catalog.=) t.relid
     WHERE p.polname OPERATOR(pg_catalog.=) 'fencing_read_fence'
  LOOP
    EXECUTE pg_catalog.format('DROP POLICY fencing_read_fence ON %s', part);
    IF pg_catalog.strpos(note, ' (enabled row level security)') OPERATOR(pg_catalog.>) 0 THEN
      EXECUTE pg_catalog.format('DROP POLICY IF EXISTS fencing_read_fence_rows ON %s', part);
      EXECUTE pg_catalog.format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', part);
    END IF;
    IF pg_catalog.strpos(note, ' (forced row level security)') OPERATOR(pg_catalog.>) 0 THEN
      EXECUTE pg_catalog.format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', part);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_remove_read_fence(regclass) IS
  'takes down the read fence of fencing_protect() option fence_reads on a table and the tables below it, undoing what was changed for it; as the caller (the tables'' owner)';

-- fencing_unprotect() takes the read fence down too.
CREATE OR REPLACE FUNCTION @extschema@.fencing_unprotect(tbl regclass)
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  guard_fn oid;
  rel_name name;
  rel_schema name;
  parent_trigger oid;
  parent_rel oid;
  parent name;
  trg record;
  trigger_name name;
  part regclass;
  dropped boolean := false;
BEGIN
  IF tbl IS NULL THEN
    RAISE EXCEPTION 'table must not be NULL' USING ERRCODE = '22023';
  END IF;
  SELECT c.relname, n.nspname INTO rel_name, rel_schema
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
   WHERE c.oid OPERATOR(pg_catalog.=) tbl;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'relation with OID % does not exist', tbl::oid USING ERRCODE = '42P01';
  END IF;
  -- This extension's fencing_guard(), found without a string that would
  -- have to quote the schema's name.
  SELECT p.oid INTO guard_fn
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) p.pronamespace
   WHERE e.extname OPERATOR(pg_catalog.=) 'pg_fencing'
     AND p.proname OPERATOR(pg_catalog.=) 'fencing_guard'
     AND p.pronargs OPERATOR(pg_catalog.=) 0;

  -- A partition protected through a partitioned table has clones of that
  -- table's row trigger, which only that table can drop.  The error names
  -- the table at the top of the chain of clones.
  SELECT t.tgparentid INTO parent_trigger
    FROM pg_catalog.pg_trigger t
   WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl
     AND t.tgname OPERATOR(pg_catalog.=) ANY ('{fencing_guard,fencing_guard_truncate}'::name[])
     AND t.tgfoid OPERATOR(pg_catalog.=) guard_fn
     AND t.tgparentid OPERATOR(pg_catalog.<>) 0
   LIMIT 1;
  IF FOUND THEN
    LOOP
      SELECT pt.tgrelid, pt.tgparentid INTO parent_rel, parent_trigger
        FROM pg_catalog.pg_trigger pt WHERE pt.oid OPERATOR(pg_catalog.=) parent_trigger;
      EXIT WHEN NOT FOUND OR parent_trigger OPERATOR(pg_catalog.=) 0;
    END LOOP;
    SELECT c.relname INTO parent FROM pg_catalog.pg_class c
     WHERE c.oid OPERATOR(pg_catalog.=) parent_rel;
    RAISE EXCEPTION 'table "%" is protected through its partitioned table "%"', rel_name, parent
      USING ERRCODE = '55000', SCHEMA = rel_schema, TABLE = rel_name,
            HINT = 'Unprotect the partitioned table; that removes the guard from every partition.';
  END IF;

  FOR trg IN
    SELECT t.tgname FROM pg_catalog.pg_trigger t
     WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl
       AND t.tgname OPERATOR(pg_catalog.=) ANY ('{fencing_guard,fencing_guard_truncate}'::name[])
       AND t.tgfoid OPERATOR(pg_catalog.=) guard_fn
     ORDER BY t.tgname
  LOOP
    -- Dropping the partitioned table's row trigger drops its clones too.
    EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', trg.tgname, tbl);
    dropped := true;
  END LOOP;
  IF NOT dropped THEN
    RAISE EXCEPTION 'table "%" is not protected by pg_fencing', rel_name
      USING ERRCODE = '55000', SCHEMA = rel_schema, TABLE = rel_name,
            DETAIL = 'It has no fencing_guard or fencing_guard_truncate trigger calling fencing_guard().';
  END IF;
  -- Statement triggers are not cloned, and an inheritance child's triggers
  -- are its own: fencing_protect() gave each table below this one its own.
  FOR part, trigger_name IN
    SELECT t.relid, g.tgname FROM @extschema@.fencing_inheritance_tree(tbl) t
      JOIN pg_catalog.pg_trigger g ON g.tgrelid OPERATOR(pg_catalog.=) t.relid
     WHERE t.relid OPERATOR(pg_catalog.<>) tbl
       AND g.tgname OPERATOR(pg_catalog.=) ANY ('{fencing_guard,fencing_guard_truncate}'::name[])
       AND g.tgfoid OPERATOR(pg_catalog.=) guard_fn
       AND g.tgparentid OPERATOR(pg_catalog.=) 0
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', trigger_name, part);
  END LOOP;
  -- And the read fence, with what fencing_protect() changed for it (1.4).
  PERFORM @extschema@.fencing_remove_read_fence(tbl);
END
$$;

-- fencing_audit() also checks the read fences of option fence_reads.
CREATE OR REPLACE FUNCTION @extschema@.fencing_audit()
  RETURNS TABLE (table_name regclass, lock_name text, severity text, problem text, fix text)
  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
  BEGIN ATOMIC
    WITH guards AS (
      -- Every guard trigger with its table and its arguments.
      SELECT t.tgrelid::regclass AS tbl, t.tgname, t.tgenabled, t.tgparentid,
             c.relowner, c.relacl, c.relkind, c.relispartition,
             pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000') AS args
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
       WHERE t.tgfoid = '@extschema@.fencing_guard()'::pg_catalog.regprocedure
         AND pg_catalog.pg_has_role(c.relowner, 'USAGE')),
    row_guards AS (
      SELECT g.*, g.args[1] AS token_column,
             (SELECT pg_catalog.substr(a, 6) FROM pg_catalog.unnest(g.args) a
               WHERE a LIKE 'lock=%' LIMIT 1) AS lock_name
        FROM guards g WHERE g.tgname = 'fencing_guard'),
    below AS (
      -- Tables below a guarded one, and whether they have a row guard and
      -- (under a lock) a TRUNCATE guard of their own.
      SELECT r.tbl AS root, r.lock_name, i.relid AS tbl,
             EXISTS (SELECT FROM guards g WHERE g.tbl = i.relid AND g.tgname = 'fencing_guard') AS has_row_guard,
             EXISTS (SELECT FROM guards g WHERE g.tbl = i.relid AND g.tgname = 'fencing_guard_truncate') AS has_truncate_guard
        FROM row_guards r, @extschema@.fencing_inheritance_tree(r.tbl) i
       WHERE i.relid <> r.tbl AND r.tgparentid = 0)
    SELECT g.tbl, g.lock_name, 'critical',
           pg_catalog.format('trigger "%s" is disabled', g.tgname),
           pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER %I;', g.tbl, g.tgname)
      FROM (SELECT r.tbl, r.tgname, r.tgenabled, r.lock_name FROM row_guards r
            UNION ALL
            SELECT g2.tbl, g2.tgname, g2.tgenabled, NULL FROM guards g2
             WHERE g2.tgname <> 'fencing_guard') g
     WHERE g.tgenabled = 'D'
    UNION ALL
    SELECT g.tbl, NULL, 'critical',
           pg_catalog.format('trigger "%s" fires only when session_replication_role is replica', g.tgname),
           pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER %I;', g.tbl, g.tgname)
      FROM guards g WHERE g.tgenabled = 'R'
    UNION ALL
    SELECT g.tbl, NULL, 'warning',
           pg_catalog.format('trigger "%s" is ENABLE ALWAYS: it also fires when applying replicated changes, which then need tokens', g.tgname),
           pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER %I;', g.tbl, g.tgname)
      FROM guards g WHERE g.tgenabled = 'A'
    UNION ALL
    SELECT g.tbl, NULL, 'warning',
           pg_catalog.format('role %s holds TRIGGER on the table: it can add triggers that change rows after the guard has judged them',
                             CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(a.grantee::regrole::text) END),
           pg_catalog.format('REVOKE TRIGGER ON %s FROM %s;', g.tbl,
                             CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(a.grantee::regrole::text) END)
      FROM row_guards g, pg_catalog.aclexplode(g.relacl) a
     WHERE a.privilege_type = 'TRIGGER' AND a.grantee <> g.relowner
    UNION ALL
    SELECT b.tbl, b.lock_name, 'critical',
           pg_catalog.format('inheritance child of %s without a guard: its rows are not fenced', b.root),
           pg_catalog.format('SELECT fencing_protect(%L%s);', b.root::text,
                             CASE WHEN b.lock_name IS NULL THEN '' ELSE pg_catalog.format(', lock_name => %L', b.lock_name) END)
      FROM below b JOIN pg_catalog.pg_class c ON c.oid = b.tbl
     WHERE NOT c.relispartition AND NOT b.has_row_guard
    UNION ALL
    SELECT b.tbl, b.lock_name, 'critical',
           'no TRUNCATE guard under the lock: a TRUNCATE of this table is not fenced',
           pg_catalog.format('SELECT fencing_protect(%L, lock_name => %L);', b.root::text, b.lock_name)
      FROM below b WHERE b.lock_name IS NOT NULL AND NOT b.has_truncate_guard
    UNION ALL
    SELECT r.tbl, r.lock_name, 'critical',
           pg_catalog.format('token column "%s" is generated: the guard judges the value before it is computed', a.attname),
           pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP EXPRESSION;', r.tbl, a.attname)
      FROM row_guards r JOIN pg_catalog.pg_attribute a
        ON a.attrelid = r.tbl AND a.attname = r.token_column AND a.attgenerated <> ''
    UNION ALL
    SELECT r.tbl, r.lock_name, 'warning',
           pg_catalog.format('token column "%s" has a default: an INSERT that names no token gets one it never held', a.attname),
           pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT;', r.tbl, a.attname)
      FROM row_guards r JOIN pg_catalog.pg_attribute a
        ON a.attrelid = r.tbl AND a.attname = r.token_column AND a.atthasdef AND a.attgenerated = ''
    UNION ALL
    SELECT r.tbl, r.lock_name, 'critical',
           CASE WHEN k.lock_name IS NULL
             THEN 'the lock does not exist or its owner role was dropped, or the table''s owner may not use it: every write under it is refused'
             ELSE 'the lock''s owner role was dropped: only a superuser can use it' END,
           CASE WHEN k.lock_name IS NULL
             THEN pg_catalog.format('SELECT fencing_create_lock(%L, %L);  -- or, as its owner: SELECT fencing_grant_lock(%L, %L);',
                                    r.lock_name, r.relowner::regrole::text, r.lock_name, r.relowner::regrole::text)
             ELSE pg_catalog.format('SELECT fencing_alter_lock_owner(%L, %L);', r.lock_name, r.relowner::regrole::text) END
      FROM row_guards r
      LEFT JOIN @extschema@.fencing_locks k ON k.lock_name = r.lock_name
     WHERE r.lock_name IS NOT NULL AND r.tgparentid = 0
       AND (k.lock_name IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles o WHERE o.oid = k.owner::oid)
            OR NOT @extschema@.fencing_role_may_use(r.relowner, k.owner, k.users))
    UNION ALL
    SELECT r.tbl, r.lock_name, 'critical',
           'the read fence''s policy fencing_read_fence is missing or changed: transactions that presented no current token read the table',
           pg_catalog.format('SELECT fencing_protect(%L, lock_name => %L, options => ARRAY[''fence_reads'']);',
                             pg_catalog.pg_partition_root(r.tbl)::text, r.lock_name)
      FROM row_guards r
     WHERE 'fence_reads' = ANY (r.args)
       -- Restrictive, for SELECT, for every role, over the lock's fencing_reads_allowed().
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy p
                        WHERE p.polrelid = r.tbl AND p.polname = 'fencing_read_fence'
                          AND NOT p.polpermissive AND p.polcmd = 'r' AND p.polroles = '{0}'
                          AND pg_catalog.regexp_replace(pg_catalog.pg_get_expr(p.polqual, p.polrelid), '\s', '', 'g')
                              = pg_catalog.format('(SELECT%s.fencing_reads_allowed(%s::text)ASfencing_reads_allowed)',
                                                  '@extschema@', pg_catalog.regexp_replace(pg_catalog.quote_literal(r.lock_name), '\s', '', 'g')))
    UNION ALL
    SELECT r.tbl, r.lock_name, 'critical',
           'row level security is disabled: the read fence does not apply',
           pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY;', r.tbl)
      FROM row_guards r JOIN pg_catalog.pg_class c ON c.oid = r.tbl
     WHERE 'fence_reads' = ANY (r.args) AND NOT c.relrowsecurity
    UNION ALL
    SELECT r.tbl, r.lock_name, 'warning',
           'row level security is not forced: the table''s owner reads it without the read fence',
           pg_catalog.format('ALTER TABLE %s FORCE ROW LEVEL SECURITY;', r.tbl)
      FROM row_guards r JOIN pg_catalog.pg_class c ON c.oid = r.tbl
     WHERE 'fence_reads' = ANY (r.args) AND c.relrowsecurity AND NOT c.relforcerowsecurity
    UNION ALL
    SELECT NULL, NULL, 'critical',
           'the event trigger fencing_refuse_tampering is disabled: a role with TRIGGER privilege can replace a guard',
           'ALTER EVENT TRIGGER fencing_refuse_tampering ENABLE;'
      FROM pg_catalog.pg_event_trigger e
     WHERE e.evtname = 'fencing_refuse_tampering' AND e.evtenabled = 'D'
    ORDER BY 1, 3, 4;
  END;
