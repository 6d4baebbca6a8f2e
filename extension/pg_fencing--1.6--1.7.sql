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

-- fencing_audit() as in 1.5, and the sessions that hold the horizon while
-- they wait in a function form.
CREATE OR REPLACE FUNCTION @extschema@.fencing_audit()
  RETURNS TABLE (table_name regclass, lock_name text, severity text, problem text, fix text)
  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
  BEGIN ATOMIC
    SELECT g.table_name, g.lock_name, g.severity, g.problem, g.fix
      FROM @extschema@.fencing_audit_guards() g
    UNION ALL
    -- Per-row guards that do not say where their tokens come from: made
    -- before 1.5 (or by hand), they accept tokens this database never
    -- granted.  Root tables only: protecting one again covers its tree.
    SELECT t.tgrelid::pg_catalog.regclass, NULL, 'warning',
           'the guard accepts tokens this database never granted: it dates from before 1.5, or was made without option granted_tokens',
           pg_catalog.format('SELECT fencing_protect(%L, %L%s);  -- or with option external_tokens if its tokens come from another service',
                             t.tgrelid::pg_catalog.regclass::text, a.args[1],
                             CASE WHEN pg_catalog.cardinality(a.options) = 0 THEN ''
                                  ELSE pg_catalog.format(', options => %L', a.options::text) END)
      FROM pg_catalog.pg_trigger t
      JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
      CROSS JOIN LATERAL (
        SELECT w.args, pg_catalog.array_remove(w.args[2:], '') AS options
          FROM (SELECT pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000') AS args) w) a
     WHERE t.tgfoid = '@extschema@.fencing_guard()'::pg_catalog.regprocedure
       AND t.tgname = 'fencing_guard' AND t.tgparentid = 0
       AND pg_catalog.pg_has_role(c.relowner, 'USAGE')
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits i WHERE i.inhrelid = t.tgrelid)
       AND NOT EXISTS (SELECT FROM pg_catalog.unnest(a.args) o
                        WHERE o LIKE 'lock=%' OR o IN ('granted_tokens', 'external_tokens'))
    UNION ALL
    -- Locks from before 1.5: the update could not tell where their tokens
    -- come from, so they accept any token, as they did.
    SELECT NULL, k.lock_name, 'warning',
           'the lock accepts tokens this database never granted: it dates from before 1.5, and the update could not tell where its tokens come from',
           pg_catalog.format('SELECT fencing_set_token_source(%L, ''granted'');  -- or ''external'' if its tokens come from another service',
                             k.lock_name)
      FROM @extschema@.fencing_locks k
     WHERE k.token_source = 'unknown'
    UNION ALL
    -- A lead of more than a second: not a reserved range (1,024 tokens),
    -- nor any grant rate a server reaches.
    SELECT NULL, NULL, 'warning',
           pg_catalog.format('tokens run %s ahead of the server''s clock: the clock was set back, or fencing_bump_tokens() moved them on; until the clock catches up, a restored backup or a promoted asynchronous standby can grant again tokens granted in that span',
                             pg_catalog.justify_hours(a.lead)),
           pg_catalog.format('Check the server''s clock. After restoring a backup or promoting a standby before %s: SELECT fencing_bump_tokens(%s);',
                             pg_catalog.clock_timestamp() + a.lead,
                             pg_catalog.ceil(EXTRACT(epoch FROM a.lead) * 1000000)::bigint)
      FROM (SELECT @extschema@.fencing_lead_over_clock() AS lead) a
     WHERE a.lead > interval '1 second'
    UNION ALL
    -- Sessions waiting in a function form (fencing_acquire and the shared
    -- and permit forms with a wait) for longer than
    -- pg_fencing.audit_long_wait: the statement runs in one transaction, so
    -- its snapshot holds back VACUUM everywhere for the whole wait.  A
    -- CALL fencing_await commits as it goes: queued or asleep it has no
    -- xmin.  Only the sessions pg_stat_activity shows the caller in full
    -- (its own roles', or all with pg_read_all_stats), and the locks it
    -- may use.
    SELECT NULL, k.lock_name, 'warning',
           pg_catalog.format('session %s has waited %s for the lock in a function form: its snapshot (xmin %s) keeps VACUUM from removing any row deleted or updated since, in every table of the database',
                             a.pid, pg_catalog.date_trunc('second', pg_catalog.clock_timestamp() - a.query_start),
                             a.backend_xmin),
           pg_catalog.format('Wait with CALL fencing_await(...) instead of fencing_acquire(..., wait) (docs/leases.md, "Waiting for a lock"). To end this wait now: SELECT pg_cancel_backend(%s);',
                             a.pid)
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
      JOIN @extschema@.fencing_locks k ON k.lock_id = l.objid::bigint
     WHERE l.locktype = 'advisory' AND l.objsubid = 3
       AND l.classid = 1178947139  -- 'FENC': WaitingRoomKey in src/core/lease_wait.hpp
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND a.pid <> pg_catalog.pg_backend_pid()
       -- Waiting: queued for the room, or first in line asleep on its
       -- latch; not a holder granted the lock inside a longer transaction
       -- (a grant keeps the room until its transaction ends).
       AND (NOT l.granted OR a.wait_event_type = 'Extension')
       AND a.state = 'active' AND a.backend_xmin IS NOT NULL
       AND a.query_start < pg_catalog.clock_timestamp()
             - COALESCE(pg_catalog.current_setting('pg_fencing.audit_long_wait', true), '1min')::interval
    ORDER BY 1, 3, 4;
  END;
COMMENT ON FUNCTION @extschema@.fencing_audit() IS
  'every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard, a severity and the command that mends it; the locks it may use that accept tokens nobody granted; tokens that run ahead of the server''s clock; and sessions that have waited for a lock in a function form, holding their snapshot, for longer than pg_fencing.audit_long_wait';

-- The expiry worker looks at permits and shared leases too (the library's
-- change; this is its description).
COMMENT ON FUNCTION @extschema@.fencing_announce_expiries() IS
  'announces (and counts) every lease, permit and shared lease that has run out and was not yet announced, marks it ended = ''expired'', and returns the end of the next live one (NULL: none); the background worker calls it, or a scheduled job where the library is not preloaded; superuser only';

-- Renewing and releasing a permit or a shared lease moved into the C lease
-- engine (src/backend/lease_engine.cpp, MovePermitEnd).  The SQL of 1.4
-- stays: a backend that loaded an older library before the update still
-- calls it.
COMMENT ON FUNCTION @extschema@.fencing_move_permit_end(bigint, @extschema@.fencing_token, interval, text) IS
  'renews or releases the caller''s live permit or shared lease, for the libraries before 1.7 (which do it in C); internal';

-- One attempt at a permit or a shared lease moved into the C lease engine
-- (src/backend/lease_engine.cpp, AttemptSlot), which fencing_acquire_permit
-- and fencing_acquire_shared without a wait now make themselves for a lock
-- that is of the kind they ask for.  Its rules are 1.4's, but for the slot's
-- last grant, now read under a row lock: the expiry worker marks permits
-- too (1.7), and a grant that read the slot while the worker was marking it
-- announced and counted its expiry a second time.  The caller's own live
-- permit taken again counts as a renewal, as for an exclusive lease.
CREATE OR REPLACE FUNCTION @extschema@.fencing_try_permit(
    p_lock_id bigint, p_holder text, p_permits integer, p_ttl interval)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_try_permit'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The history keeps permits and shared leases too, each with its slot
-- (issue 25).  A lock's slot grants are numbered apart from its exclusive
-- grants (fencing_permit.grant_count: the slot's grant among them) and kept
-- in a ring of their own, of pg_fencing.history_size entries too: entry is
-- -(lock_id * 2^20 + grant_count % history_size) for them.  A slot's lease
-- goes into the ring when its slot is granted again (src/backend/
-- lease_engine.cpp, RecordEndedSlot); until then its row is its entry.
ALTER TABLE @extschema@.fencing_permit ADD COLUMN grant_count bigint NOT NULL DEFAULT 1;
-- The slots a lock has already are numbered in the order of their grants,
-- so that their leases go into distinct entries of the ring when their
-- slots are granted again (with one number for all, each would take the
-- entry of the one before).
UPDATE @extschema@.fencing_permit p SET grant_count = n.grant_count
  FROM (SELECT x.lock_id, x.slot,
               row_number() OVER (PARTITION BY x.lock_id ORDER BY x.granted_at, x.slot) AS grant_count
          FROM @extschema@.fencing_permit x) n
 WHERE p.lock_id = n.lock_id AND p.slot = n.slot;
ALTER TABLE @extschema@.fencing_grant_history ADD COLUMN slot integer;
COMMENT ON COLUMN @extschema@.fencing_grant_history.slot IS
  'the permit''s or shared lease''s slot (fencing_permits.slot); NULL for an exclusive lease';

CREATE OR REPLACE VIEW @extschema@.fencing_history WITH (security_barrier) AS
  SELECT e.lock_name, e.token, e.holder, e.holder_role, e.granted_at, e.ended_at, e.end_reason,
         e.slot
    FROM (SELECT h.lock_name, h.token, h.holder, h.holder_role, h.granted_at, h.ended_at,
                 h.end_reason, h.slot
            FROM @extschema@.fencing_grant_history h
          UNION ALL
          SELECT l.lock_name, l.token, l.holder, l.holder_role, l.granted_at,
                 CASE WHEN l.expires_at > clock_timestamp() THEN NULL ELSE l.expires_at END,
                 CASE WHEN l.expires_at > clock_timestamp() THEN NULL
                      ELSE coalesce(l.ended, 'expired') END,
                 NULL::integer
            FROM @extschema@.fencing_lease l
          UNION ALL
          SELECT p.lock_name, p.token, p.holder, p.holder_role, p.granted_at,
                 CASE WHEN p.expires_at > clock_timestamp() THEN NULL ELSE p.expires_at END,
                 CASE WHEN p.expires_at > clock_timestamp() THEN NULL
                      ELSE coalesce(p.ended, 'expired') END,
                 p.slot
            FROM @extschema@.fencing_permit p) e
    JOIN @extschema@.fencing_lock k ON k.lock_name = e.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
COMMENT ON VIEW @extschema@.fencing_history IS
  'every lease, permit and shared lease of the locks the current role may use (every lock for pg_read_all_stats), as far back as pg_fencing.history_size grants per lock and kind (exclusive leases, slots), with when and how it ended; slot: a permit''s or shared lease''s, NULL for an exclusive lease';

-- B-tree deduplication for token columns: fencing_token is int8 inside,
-- so two equal tokens are the same bytes and an index may keep them as
-- one entry (support function 4, btequalimage).  Indexes built before the
-- update keep deduplication off until they are rebuilt (REINDEX): whether
-- an index deduplicates is decided when it is built.
ALTER OPERATOR FAMILY @extschema@.fencing_token_btree_ops USING btree
  ADD FUNCTION 4 (@extschema@.fencing_token, @extschema@.fencing_token) pg_catalog.btequalimage(oid);
-- The extension's own indexes on token columns, rebuilt so that they
-- deduplicate as a fresh install's do (the lease tables are small: one row
-- per lock or slot).
REINDEX INDEX @extschema@.fencing_lease_token;
REINDEX INDEX @extschema@.fencing_permit_token;

-- The marks of the locks the current role may use.  A security barrier
-- (until 1.7 it was not): without it, a condition of the caller's own --
-- a function that prints its arguments -- could run on fencing_fence's
-- rows before the join to fencing_locks filters them, and see the name
-- and mark of every lock.
CREATE OR REPLACE VIEW @extschema@.fencing_fences WITH (security_barrier) AS
  SELECT f.lock_name, f.high_water
    FROM @extschema@.fencing_fence f
    JOIN @extschema@.fencing_locks k ON k.lock_name = f.lock_name;

-- Creator rules are a superuser's business.  PUBLIC may not call these;
-- from 1.7 they also check it themselves, since a DBA may grant EXECUTE
-- carelessly (until 1.7 they ran as the extension's owner, so such a grant
-- let any role write rules).  They run as the caller (no SECURITY
-- DEFINER), so that the check is of the caller.
CREATE FUNCTION @extschema@.fencing_require_superuser(action text) RETURNS void
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false) THEN
    RAISE EXCEPTION 'only a superuser may %', action
      USING ERRCODE = '42501',
            DETAIL = pg_catalog.format('Role %I is not a superuser.', current_user);
  END IF;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_require_superuser(text) IS
  'raises 42501 unless the current role is a superuser; for the functions that only a superuser may run, which run as their caller; internal';
CREATE OR REPLACE FUNCTION @extschema@.fencing_allow_create(creator regrole, prefix text DEFAULT '')
  RETURNS void LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @extschema@.fencing_require_superuser('let a role create fencing locks');
  IF creator IS NULL OR prefix IS NULL THEN
    RAISE EXCEPTION 'creator and prefix must not be NULL' USING ERRCODE = '22023';
  END IF;
  INSERT INTO @extschema@.fencing_lock_creator VALUES (creator, prefix) ON CONFLICT DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION @extschema@.fencing_disallow_create(creator regrole, prefix text DEFAULT '')
  RETURNS boolean LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @extschema@.fencing_require_superuser('change which roles create fencing locks');
  DELETE FROM @extschema@.fencing_lock_creator c
   WHERE c.creator OPERATOR(pg_catalog.=) fencing_disallow_create.creator
     AND c.prefix = fencing_disallow_create.prefix;
  RETURN FOUND;
END $$;

-- Comments that had fallen behind the code: the guard's and fencing_protect's
-- write paths and option words (INSERT under a per-row fence, granted and
-- external tokens, read fences: 1.4, 1.5), what fencing_unprotect removes,
-- who writes a mark, what fencing_fences shows (1.2), renew and release of
-- permits and shared leases (1.4).
COMMENT ON FUNCTION @extschema@.fencing_guard() IS
  'the guard trigger: refuses a write whose token is below the row''s (per-row fence) or the lock''s mark (lock-wide fence, option lock=NAME) with 55Z01, one without a token with 55Z02, and one this database never granted with 55Z03; fencing_protect() installs it BEFORE UPDATE, and INSERT with granted_tokens, FOR EACH ROW for a per-row fence, and BEFORE INSERT, UPDATE or DELETE FOR EACH ROW and BEFORE TRUNCATE under a lock; arguments: the token column, then option words allow_unset, skip, lock=NAME, granted_tokens or external_tokens, fence_reads';
COMMENT ON FUNCTION @extschema@.fencing_protect(regclass, name, text[], text) IS
  'installs the fencing_guard trigger on a table, its partitions and inheritance children (its only fencing_token column unless named): a per-row fence on UPDATE, and on INSERT when its tokens are this database''s grants (the default; option external_tokens for another service''s); with lock_name (or option lock=NAME) a lock-wide fence on INSERT, UPDATE, DELETE and TRUNCATE, if the caller and the tables'' owners may use the lock, and with option fence_reads a read fence too';
COMMENT ON FUNCTION @extschema@.fencing_unprotect(regclass) IS
  'removes what fencing_protect() installed on a table, its partitions and inheritance children: the triggers fencing_guard and fencing_guard_truncate, and the read fence; 55000 if the table has no guard';
COMMENT ON TABLE @extschema@.fencing_fence IS
  'highest fencing token seen per lock; written only by the extension: a write under a lock-wide fence that raises the mark (fencing_fence_advance()), a presentation (fencing_fence_lock()), lease and shared-lease grants, fencing_revoke() and fencing_reset_mark()';
COMMENT ON FUNCTION @extschema@.fencing_fence_advance(text, @extschema@.fencing_token) IS
  'locks a lock''s high-water mark (making it) and raises it to token if token is higher; returns the mark before; called by the lock-wide guard; internal';
COMMENT ON VIEW @extschema@.fencing_fences IS
  'the highest fencing token seen per lock, for the locks the current role may use';
COMMENT ON FUNCTION @extschema@.fencing_check_lease_args(text, text, interval, boolean) IS
  'the argument checks the lease functions share: true, or 22023 naming what is wrong with the lock name, the holder (when asked) or the ttl; reads and changes nothing';
COMMENT ON FUNCTION @extschema@.fencing_renew(text, @extschema@.fencing_token, interval) IS
  'extends a live lease, permit or shared lease to now + ttl; false if token is not the current token of one on the lock, it expired (never revived), or the caller''s role did not acquire it';
COMMENT ON FUNCTION @extschema@.fencing_release(text, @extschema@.fencing_token) IS
  'ends a live lease, permit or shared lease at once; false if token is not the current token of a live one acquired by the caller''s role';
