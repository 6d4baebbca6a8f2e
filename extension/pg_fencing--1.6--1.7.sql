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
           pg_catalog.format('Wait with CALL fencing_await(...) instead of fencing_acquire(..., wait) (README, "Waiting"). To end this wait now: SELECT pg_cancel_backend(%s);',
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

-- One attempt at a permit or a shared lease, as in 1.4 but for the slot's
-- last lease, now read under a row lock: the expiry worker marks permits
-- too (1.7), and a grant that read the slot while the worker was marking it
-- announced and counted its expiry a second time.
CREATE OR REPLACE FUNCTION @extschema@.fencing_try_permit(
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

    -- The slot's last lease, for the announcements below, locked as it
    -- stands: the expiry worker may be marking it expired (and announcing
    -- that) at this instant; then this waits for it and sees the mark,
    -- and announces the expiry no second time.
    SELECT * INTO previous FROM @extschema@.fencing_permit p
     WHERE p.lock_id = p_lock_id AND p.slot = free_slot
       FOR NO KEY UPDATE;
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
