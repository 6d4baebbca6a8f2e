-- pg_fencing 1.7 -> 1.8: sessions, one keepalive for many leases.
--
-- fencing_session_open(holder, ttl) opens a session of the calling role;
-- fencing_session_acquire(session, lock_name, ...) takes a lease in it,
-- whose end is the session's from then on; fencing_session_renew(session)
-- renews every lease in it by writing one row; when the session is not
-- renewed, every lease in it ends at once, at the session's end;
-- fencing_session_close(session) releases them all.
-- fencing_session_acquire_all(session, lock_names, wait) takes every lock
-- of a set or none, without deadlocks.  Every judge of a lease's end reads
-- the session's end for a lease in one: fencing_lease_end() here, the same
-- rule in C (LeaseRowEnd, src/backend/lease_tables.cpp).

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.8'" to load this file. \quit

-- The session a lease is in (NULL: none), and a session's leases, for its
-- close and its sweep; partial, so that a plain grant (session_id NULL
-- before and after) stays a HOT update.
ALTER TABLE @extschema@.fencing_lease ADD COLUMN session_id bigint;
CREATE INDEX fencing_lease_session ON @extschema@.fencing_lease (session_id)
  WHERE session_id IS NOT NULL;

-- Sessions (1.8): one keepalive for many leases.  A lease in a session
-- carries its session's id, and while it has not ended early (released or
-- revoked) its end is the session's end: renewing the session is one
-- write, whatever the number of its leases, and when the session is not
-- renewed every lease in it ends at once, at the session's end, judged by
-- the server's clock.  fencing_lease_end() is that rule, used by every
-- view and function that judges a lease; the C engine has the same rule
-- (LeaseRowEnd, src/backend/lease_tables.cpp).  A session's id is a fresh
-- grant (fencing_grant()): never the same twice, not even after a restore
-- of an older backup.  A closed session's row is deleted; an expired one's
-- when its end is written into its leases (fencing_end_expired_sessions).
CREATE TABLE @extschema@.fencing_session (
  session_id bigint PRIMARY KEY,
  holder text NOT NULL,
  -- By oid: a dropped role's session is nobody's, and a new role of the
  -- same name does not inherit it.
  holder_role regrole NOT NULL,
  ttl interval NOT NULL,
  opened_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 20);
REVOKE ALL ON @extschema@.fencing_session FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_session', '');
COMMENT ON TABLE @extschema@.fencing_session IS
  'one row per open session; its leases end at its expires_at; written only through the fencing_session_ functions';

-- The end of a lease as every judge takes it: its own, or its session's
-- while it is in one and has not ended early.  session_end: the session's
-- expires_at, NULL when the lease is in no session (or the session's row
-- is gone).
CREATE FUNCTION @extschema@.fencing_lease_end(
    expires_at timestamptz, ended text, session_end timestamptz)
  RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN ended IS NULL AND session_end IS NOT NULL THEN session_end
              ELSE expires_at END;
COMMENT ON FUNCTION @extschema@.fencing_lease_end(timestamptz, text, timestamptz) IS
  'the end of a lease: its session''s end while it is in a session and has not ended early, its own otherwise; internal';

-- Permits and shared leases in a session too.
ALTER TABLE @extschema@.fencing_permit ADD COLUMN session_id bigint;
CREATE INDEX fencing_permit_session ON @extschema@.fencing_permit (session_id)
  WHERE session_id IS NOT NULL;

-- Every slot's row with its end as every judge takes it: a permit or a
-- shared lease in a session (1.8) ends with the session unless it ended
-- early, as a lease does (fencing_lease_end).  The permit readers below read
-- this, not fencing_permit; src/backend/lease_tables.cpp reads the same in C.
CREATE VIEW @extschema@.fencing_permit_ends AS
  SELECT p.*, @extschema@.fencing_lease_end(p.expires_at, p.ended, s.expires_at) AS ends_at
    FROM @extschema@.fencing_permit p
    LEFT JOIN @extschema@.fencing_session s ON s.session_id = p.session_id;
REVOKE ALL ON @extschema@.fencing_permit_ends FROM PUBLIC;
COMMENT ON VIEW @extschema@.fencing_permit_ends IS
  'fencing_permit with each slot''s end as judged (its session''s while it is in one); internal';

CREATE OR REPLACE FUNCTION @extschema@.fencing_leader_as(caller oid, lock_name text) RETURNS text
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  leader text;
BEGIN
  IF NOT EXISTS (SELECT FROM @extschema@.fencing_lock k WHERE k.lock_name = fencing_leader_as.lock_name) THEN
    RETURN NULL;
  END IF;
  PERFORM @extschema@.fencing_lock_authorize(lock_name, caller, false);
  SELECT l.holder INTO leader FROM @extschema@.fencing_lease l
    LEFT JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
   WHERE l.lock_name = fencing_leader_as.lock_name
     AND @extschema@.fencing_lease_end(l.expires_at, l.ended, s.expires_at) > clock_timestamp();
  RETURN leader;
END $$;

CREATE OR REPLACE VIEW @extschema@.fencing_leases WITH (security_barrier) AS
  SELECT l.lock_name, l.holder, l.token, l.granted_at, e.expires_at,
         e.expires_at > clock_timestamp() AS live,
         l.payload, k.lock_delay,
         CASE WHEN l.ended IS NULL OR l.ended = 'expired' THEN e.expires_at + k.lock_delay
              ELSE e.expires_at END
           AS available_at,
         CASE WHEN e.expires_at > clock_timestamp() THEN 'live'
              ELSE coalesce(l.ended, 'expired') END AS state,
         l.end_reason,
         -- Only while in it: a released lease keeps the id in its row.
         CASE WHEN l.ended IS NULL THEN l.session_id END AS session_id
    FROM @extschema@.fencing_lease l
    JOIN @extschema@.fencing_lock k ON k.lock_name = l.lock_name
    LEFT JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
    CROSS JOIN LATERAL (SELECT @extschema@.fencing_lease_end(l.expires_at, l.ended, s.expires_at)
                          AS expires_at) e
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);

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
  -- A lease in a session: this lease only, taken out of its session; the
  -- session's row held FOR SHARE first, so that a renewal committing now
  -- is waited for and judged.
  PERFORM FROM @extschema@.fencing_session s
   WHERE s.session_id = (SELECT e.session_id FROM @extschema@.fencing_lease e
                          WHERE e.lock_name = l.lock_name)
      OR s.session_id IN (SELECT x.session_id FROM @extschema@.fencing_permit x
                           WHERE x.lock_id = l.lock_id)
     FOR SHARE;
  UPDATE @extschema@.fencing_lease e
     SET expires_at = clock_timestamp(), ended = 'revoked', end_reason = reason, session_id = NULL
   WHERE e.lock_name = l.lock_name
     AND @extschema@.fencing_lease_end(e.expires_at, e.ended,
           (SELECT s.expires_at FROM @extschema@.fencing_session s
             WHERE s.session_id = e.session_id)) > clock_timestamp()
  RETURNING e.holder, e.token INTO ended_holder, ended_token;
  FOR p IN SELECT x.slot, x.holder, x.token, x.ends_at, x.ends_at > clock_timestamp() AS live
             FROM @extschema@.fencing_permit_ends x WHERE x.lock_id = l.lock_id ORDER BY x.slot LOOP
    IF l.kind = 'semaphore' THEN
      PERFORM @extschema@.fencing_lock_permit_gate(l.lock_id, p.slot);
    END IF;
    UPDATE @extschema@.fencing_permit x
       SET expires_at = least(p.ends_at, clock_timestamp()),
           ended = CASE WHEN p.live THEN 'revoked' ELSE x.ended END,
           session_id = NULL,
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

CREATE OR REPLACE VIEW @extschema@.fencing_history WITH (security_barrier) AS
  SELECT e.lock_name, e.token, e.holder, e.holder_role, e.granted_at, e.ended_at, e.end_reason,
         e.slot
    FROM (SELECT h.lock_name, h.token, h.holder, h.holder_role, h.granted_at, h.ended_at,
                 h.end_reason, h.slot
            FROM @extschema@.fencing_grant_history h
          UNION ALL
          SELECT l.lock_name, l.token, l.holder, l.holder_role, l.granted_at,
                 CASE WHEN v.expires_at > clock_timestamp() THEN NULL ELSE v.expires_at END,
                 CASE WHEN v.expires_at > clock_timestamp() THEN NULL
                      ELSE coalesce(l.ended, 'expired') END,
                 NULL::integer
            FROM @extschema@.fencing_lease l
            LEFT JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
            CROSS JOIN LATERAL (SELECT @extschema@.fencing_lease_end(l.expires_at, l.ended, s.expires_at)
                                  AS expires_at) v
          UNION ALL
          SELECT p.lock_name, p.token, p.holder, p.holder_role, p.granted_at,
                 CASE WHEN p.ends_at > clock_timestamp() THEN NULL ELSE p.ends_at END,
                 CASE WHEN p.ends_at > clock_timestamp() THEN NULL
                      ELSE coalesce(p.ended, 'expired') END,
                 p.slot
            FROM @extschema@.fencing_permit_ends p) e
    JOIN @extschema@.fencing_lock k ON k.lock_name = e.lock_name
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);


-- The readers of a slot's end judge it as fencing_permit_ends does.
CREATE OR REPLACE VIEW @extschema@.fencing_permits WITH (security_barrier) AS
  SELECT p.lock_name, k.kind, p.slot, p.holder, p.token, p.granted_at, p.ends_at AS expires_at,
         p.ends_at > clock_timestamp() AS live,
         @extschema@.fencing_permit_free_at(p.ends_at, p.ended, k.lock_delay) AS available_at,
         CASE WHEN p.ends_at > clock_timestamp() THEN 'live'
              ELSE coalesce(p.ended, 'expired') END AS state,
         -- Only while in it: a released slot keeps the id in its row.
         CASE WHEN p.ended IS NULL THEN p.session_id END AS session_id
    FROM @extschema@.fencing_permit_ends p
    JOIN @extschema@.fencing_lock k ON k.lock_id = p.lock_id
   WHERE @extschema@.fencing_role_may_read(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);

CREATE OR REPLACE FUNCTION @extschema@.fencing_available_at(p_lock text) RETURNS timestamptz
  LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT greatest(
      (SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = p_lock),
      (SELECT max(@extschema@.fencing_permit_free_at(p.ends_at, p.ended, k.lock_delay))
         FROM @extschema@.fencing_permit_ends p
         JOIN @extschema@.fencing_lock k ON k.lock_id = p.lock_id
        WHERE k.lock_name = p_lock AND k.kind = 'shared'));
  END;

CREATE OR REPLACE FUNCTION @extschema@.fencing_permit_available_at(p_lock_id bigint)
  RETURNS timestamptz LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT CASE k.kind
      WHEN 'semaphore' THEN
        (SELECT CASE WHEN count(*) < k.permits THEN clock_timestamp()
                     ELSE min(@extschema@.fencing_permit_free_at(p.ends_at, p.ended, k.lock_delay)) END
           FROM @extschema@.fencing_permit_ends p WHERE p.lock_id = k.lock_id)
      ELSE (SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = k.lock_name)
      END
      FROM @extschema@.fencing_lock k WHERE k.lock_id = p_lock_id;
  END;

CREATE OR REPLACE FUNCTION @extschema@.fencing_end_shared_holders(p_lock_id bigint, lock_delay interval)
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
    IF EXISTS (SELECT FROM @extschema@.fencing_permit_ends p
                WHERE p.lock_id = p_lock_id
                  AND @extschema@.fencing_permit_free_at(p.ends_at, p.ended, lock_delay) > now) THEN
      RAISE SQLSTATE 'PFBSY';
    END IF;
    -- The shared leases that ran out end here: their expiries are announced
    -- and counted with the exclusive grant.  One in a session ended with it
    -- (its session is dead: renewing it fails from then on): its end is
    -- written down and it leaves the session.
    FOR passed IN
      UPDATE @extschema@.fencing_permit p
         SET ended = 'expired', session_id = NULL,
             expires_at = coalesce((SELECT s.expires_at FROM @extschema@.fencing_session s
                                     WHERE s.session_id = p.session_id), p.expires_at)
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

-- ---- Sessions (1.8) ----------------------------------------------------------

-- The argument checks of the session functions (22023, as the lease
-- functions' own).
CREATE FUNCTION @extschema@.fencing_check_session_args(holder text, ttl interval, check_holder boolean)
  RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF check_holder AND (holder IS NULL OR holder = '') THEN
    RAISE EXCEPTION 'session holder must not be NULL or empty' USING ERRCODE = '22023';
  END IF;
  IF ttl IS NULL OR NOT pg_catalog.isfinite(ttl) OR ttl <= interval '0' THEN
    RAISE EXCEPTION 'session ttl must be positive and finite, got %', coalesce(ttl::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  RETURN true;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_check_session_args(text, interval, boolean) IS
  'the argument checks of the session functions: true, or 22023; internal';

-- The public functions are gates (fencing_session_gate, src/backend/locks.cpp)
-- that call the _as function with the caller's role, as the lock functions
-- do: PUBLIC may not call the _as functions, so a role cannot claim to be
-- another.

-- 42501 unless the caller may act in the session s (to `verb` it): the
-- role that opened it, a role with its privileges, or a superuser (who has
-- every role's).
CREATE FUNCTION @extschema@.fencing_session_check_role(
    caller oid, s @extschema@.fencing_session, verb text)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT pg_catalog.pg_has_role(caller, s.holder_role::oid, 'USAGE') THEN
    RAISE EXCEPTION 'role "%" may not % fencing session %', pg_catalog.pg_get_userbyid(caller),
      verb, s.session_id
      USING ERRCODE = '42501',
            DETAIL = 'The session belongs to another role: only that role, a role with its privileges, or a superuser acts in it.';
  END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_check_role(oid, @extschema@.fencing_session, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_check_role(oid, @extschema@.fencing_session, text) IS
  'refuses (42501) a caller that may not act in the session; internal';

-- The session's hold (src/backend/lease_engine.cpp, HoldSession): a
-- lock-manager lock on its id until the transaction ends, shared by what
-- puts a lease into the session, exclusive for its close and its sweep,
-- which so wait for (the sweep: skip) an acquire in flight and then end
-- the lease it granted too.  Not a row lock: it writes nothing.
CREATE FUNCTION @extschema@.fencing_session_hold(session bigint, exclusive boolean, nowait boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_session_hold' LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_hold(bigint, boolean, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_hold(bigint, boolean, boolean) IS
  'takes the session''s hold until the transaction ends (exclusive or shared; false when nowait and it is held); internal';

-- The session's row, held against a close and against the sweep of
-- expired sessions (fencing_session_hold, shared; a renew does not wait
-- for it), if the caller may act in it: the role that opened it, a role
-- with its privileges, or a superuser; 42501 otherwise.  55Z05 when there
-- is no such session, or it has ended.
CREATE FUNCTION @extschema@.fencing_session_for(caller oid, session bigint, what text)
  RETURNS @extschema@.fencing_session LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s @extschema@.fencing_session;
BEGIN
  IF session IS NULL THEN
    RAISE EXCEPTION '% needs a session, got NULL', what USING ERRCODE = '22004';
  END IF;
  -- The hold first, the look after.  FOR KEY SHARE too: at REPEATABLE
  -- READ the look is in the transaction's snapshot, which may predate a
  -- close that committed while the hold was waited for; locking the row
  -- the close deleted then fails (40001) instead of granting a lease into
  -- a session that no longer exists.  (The C acquire reads the latest
  -- snapshot instead, and takes no row lock.)
  PERFORM @extschema@.fencing_session_hold(session, false, false);
  SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session FOR KEY SHARE;
  IF NOT FOUND OR s.expires_at <= clock_timestamp() THEN
    RAISE EXCEPTION 'fencing session % does not exist or has ended', session
      USING ERRCODE = '55Z05',
            HINT = 'Open a new session with fencing_session_open(holder, ttl); the leases of an ended session have ended with it.';
  END IF;
  PERFORM @extschema@.fencing_session_check_role(caller, s, 'use');
  RETURN s;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_for(oid, bigint, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_for(oid, bigint, text) IS
  'the live session the caller may act in, locked against its close; 55Z05 or 42501 otherwise; internal';

-- Writes each expired session's end into its leases (which then are plain
-- leases that have expired: announced, counted and replaced as any) and
-- deletes the session.  Sessions locked by a transaction still running
-- (an acquire in it) are left for the next sweep.  Made by the expiry
-- worker and by every fencing_session_open.
-- Writes an expired session's end into the rows of its leases, permits
-- and shared leases (those not ended early) and takes them out of it: from
-- then on they are leases that have expired like any other, which the
-- expiry worker announces and counts.  The caller deletes the session.
CREATE FUNCTION @extschema@.fencing_end_session_leases(session bigint, ended_at timestamptz)
  RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp
  BEGIN ATOMIC
    UPDATE @extschema@.fencing_lease e
       SET expires_at = CASE WHEN e.ended IS NULL THEN ended_at ELSE e.expires_at END,
           session_id = NULL
     WHERE e.session_id = session;
    UPDATE @extschema@.fencing_permit p
       SET expires_at = CASE WHEN p.ended IS NULL THEN ended_at ELSE p.expires_at END,
           session_id = NULL
     WHERE p.session_id = session;
  END;
REVOKE ALL ON FUNCTION @extschema@.fencing_end_session_leases(bigint, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_end_session_leases(bigint, timestamptz) IS
  'writes an expired session''s end into its leases, permits and shared leases; internal';

CREATE FUNCTION @extschema@.fencing_end_expired_sessions() RETURNS integer
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s record;
  locked bigint;
  ended integer := 0;
BEGIN
  -- One session at a time, each in statements of their own (so that each
  -- sees what committed before it), and nothing waited for: a session
  -- held by an acquire in it, or one whose lease rows a transaction is
  -- writing, is left for the next sweep.
  FOR s IN SELECT x.session_id, x.expires_at FROM @extschema@.fencing_session x
            WHERE x.expires_at <= clock_timestamp() FOR UPDATE SKIP LOCKED LOOP
    -- An acquire in the session in flight: next time.
    CONTINUE WHEN NOT @extschema@.fencing_session_hold(s.session_id, true, true);
    PERFORM FROM @extschema@.fencing_lease e WHERE e.session_id = s.session_id
      FOR NO KEY UPDATE SKIP LOCKED;
    GET DIAGNOSTICS locked = ROW_COUNT;
    CONTINUE WHEN locked <> (SELECT pg_catalog.count(*) FROM @extschema@.fencing_lease e
                              WHERE e.session_id = s.session_id);
    PERFORM FROM @extschema@.fencing_permit p WHERE p.session_id = s.session_id
      FOR NO KEY UPDATE SKIP LOCKED;
    GET DIAGNOSTICS locked = ROW_COUNT;
    CONTINUE WHEN locked <> (SELECT pg_catalog.count(*) FROM @extschema@.fencing_permit p
                              WHERE p.session_id = s.session_id);
    PERFORM @extschema@.fencing_end_session_leases(s.session_id, s.expires_at);
    DELETE FROM @extschema@.fencing_session x WHERE x.session_id = s.session_id;
    ended := ended + 1;
  END LOOP;
  RETURN ended;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_end_expired_sessions() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_end_expired_sessions() IS
  'writes each expired session''s end into its leases and deletes it; returns how many; internal';

CREATE FUNCTION @extschema@.fencing_session_open_as(caller oid, holder text, ttl interval)
  RETURNS bigint LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
  id bigint;
BEGIN
  checked := @extschema@.fencing_check_session_args(holder, ttl, true);
  -- Swept here too, for a server without the expiry worker; only at READ
  -- COMMITTED, where each of the sweep's statements sees what committed
  -- before it.
  IF current_setting('transaction_isolation') = 'read committed' THEN
    PERFORM @extschema@.fencing_end_expired_sessions();
  END IF;
  id := @extschema@.fencing_grant()::bigint;
  INSERT INTO @extschema@.fencing_session
    VALUES (id, holder, caller::regrole, ttl, clock_timestamp(), clock_timestamp() + ttl);
  PERFORM @extschema@.fencing_commit_durably();
  RETURN id;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_open_as(oid, text, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_open_as(oid, text, interval) IS
  'fencing_session_open() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_session_open(holder text, ttl interval) RETURNS bigint
  AS 'MODULE_PATHNAME', 'fencing_session_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_open(text, interval) IS
  'opens a session of the calling role that lives ttl unless renewed, and returns its id; its leases end when it does';

-- In C (lease_engine.cpp, RenewSession), as a lease's renewal is: it
-- writes the session's row only, as the owner of the tables, and checks
-- the caller as fencing_session_check_role does (42501).  fencing_renew on
-- a lease in a session calls the same code.
CREATE FUNCTION @extschema@.fencing_session_renew(session bigint, ttl interval DEFAULT NULL)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_session_renew' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_renew(bigint, interval) IS
  'extends the session, and with it every lease in it, to now + ttl (the ttl it was opened with if NULL), writing one row; false once the session has ended';

CREATE FUNCTION @extschema@.fencing_session_close_as(caller oid, session bigint)
  RETURNS integer LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s @extschema@.fencing_session;
  l record;
  released integer := 0;
BEGIN
  IF session IS NULL THEN
    RAISE EXCEPTION 'fencing_session_close() needs a session, got NULL' USING ERRCODE = '22004';
  END IF;
  -- The hold, exclusively: an acquire in the session (which holds it
  -- shared) finishes first, so that the lease it grants is among those
  -- released here.
  PERFORM @extschema@.fencing_session_hold(session, true, false);
  SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  -- A superuser may close any session during an incident.
  PERFORM @extschema@.fencing_session_check_role(caller, s, 'close');
  DELETE FROM @extschema@.fencing_session x WHERE x.session_id = session;
  IF s.expires_at <= clock_timestamp() THEN
    -- Expired already: its leases expired with it (lock-delay included);
    -- written down as the sweep would.
    PERFORM @extschema@.fencing_end_session_leases(session, s.expires_at);
    RETURN 0;
  END IF;
  -- Released, as fencing_release() releases: at once, no lock-delay;
  -- announced, counted, and the first waiter woken.
  FOR l IN UPDATE @extschema@.fencing_lease e
              SET expires_at = clock_timestamp(), ended = 'released', session_id = NULL
            WHERE e.session_id = session AND e.ended IS NULL
           RETURNING e.lock_name, e.holder, e.token,
                     (SELECT k.lock_id FROM @extschema@.fencing_lock k WHERE k.lock_name = e.lock_name) AS lock_id
  LOOP
    released := released + 1;
    PERFORM @extschema@.fencing_lease_event(l.lock_name, 'released', l.holder, l.token);
    PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
  END LOOP;
  FOR l IN UPDATE @extschema@.fencing_permit p
              SET expires_at = clock_timestamp(), ended = 'released', session_id = NULL
            WHERE p.session_id = session AND p.ended IS NULL
           RETURNING p.lock_name, p.holder, p.token, p.lock_id
  LOOP
    released := released + 1;
    PERFORM @extschema@.fencing_lease_event(l.lock_name, 'released', l.holder, l.token);
    PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
  END LOOP;
  PERFORM @extschema@.fencing_commit_durably();
  RETURN released;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_close_as(oid, bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_close_as(oid, bigint) IS
  'fencing_session_close() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_session_close(session bigint) RETURNS integer
  AS 'MODULE_PATHNAME', 'fencing_session_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_close(bigint) IS
  'ends the session and releases every lease in it at once (no lock-delay); returns how many; the session''s role or a superuser';

-- A lease in a session: taken as fencing_acquire takes it for the caller
-- (the lock model's privileges checked per lock, the same waiting room,
-- order and writer priority), with the session's holder, and then tied to
-- the session in the same transaction, so that nobody sees it outside.
-- Its end is the session's from then on.  Every kind: a permit or a shared
-- lease (fencing_acquire_permits_as) is tied as an exclusive lease is, and
-- each acquire in the session takes one more (a permit the session's
-- holder holds outside it is not taken over: the C attempt counts only a
-- slot in no session as the caller's own).
CREATE FUNCTION @extschema@.fencing_session_acquire_as(
    caller oid, session bigint, lock_name text, wait interval, payload jsonb, kind text,
    permits integer)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s @extschema@.fencing_session :=
    @extschema@.fencing_session_for(caller, session, 'fencing_session_acquire()');
  remaining interval;
  granted @extschema@.fencing_token;
BEGIN
  IF kind IS NULL OR kind NOT IN ('exclusive', 'shared', 'permit') THEN
    RAISE EXCEPTION 'kind must be ''exclusive'', ''shared'' or ''permit'', got % (lock "%")',
      coalesce(kind, 'NULL'), lock_name USING ERRCODE = '22023';
  END IF;
  IF kind = 'permit' AND permits IS NULL THEN
    RAISE EXCEPTION 'permits must be between 1 and 1000, got NULL (semaphore "%")', lock_name
      USING ERRCODE = '22023',
            HINT = 'kind => ''permit'' takes permits => N, the semaphore''s number of permits.';
  END IF;
  IF kind <> 'permit' AND permits IS NOT NULL THEN
    RAISE EXCEPTION 'permits are for kind => ''permit'', not ''%'' (lock "%")', kind, lock_name
      USING ERRCODE = '22023';
  END IF;
  remaining := s.expires_at - clock_timestamp();
  IF remaining <= interval '0' THEN
    RAISE EXCEPTION 'fencing session % has ended', session USING ERRCODE = '55Z05';
  END IF;
  -- No wait past the session's end: a lease granted then would be dead.
  IF kind = 'exclusive' THEN
    granted := @extschema@.fencing_acquire_as(caller, lock_name, s.holder, remaining,
                                              CASE WHEN wait IS NULL THEN NULL
                                                   ELSE least(wait, remaining) END,
                                              payload);
  ELSE
    IF payload IS NOT NULL THEN
      RAISE EXCEPTION 'a payload is for an exclusive lease, not kind ''%'' (lock "%")', kind, lock_name
        USING ERRCODE = '22023';
    END IF;
    granted := @extschema@.fencing_acquire_permits_as(caller, lock_name, s.holder, permits,
                                                      remaining,
                                                      CASE WHEN wait IS NULL THEN NULL
                                                           ELSE least(wait, remaining) END);
  END IF;
  IF granted IS NOT NULL AND kind = 'exclusive' THEN
    UPDATE @extschema@.fencing_lease e SET session_id = s.session_id
     WHERE e.lock_name = fencing_session_acquire_as.lock_name
       AND e.token::bigint = granted::bigint;
  ELSIF granted IS NOT NULL THEN
    UPDATE @extschema@.fencing_permit p SET session_id = s.session_id
     WHERE p.token OPERATOR(@extschema@.=) granted;
  END IF;
  IF granted IS NOT NULL THEN
    -- Its end is the session's: one that passed while the grant was made
    -- (not renewed meanwhile) undoes the grant.
    IF (SELECT x.expires_at FROM @extschema@.fencing_session x
         WHERE x.session_id = s.session_id) <= clock_timestamp() THEN
      RAISE EXCEPTION 'fencing session % ended while lock "%" was being taken', session, lock_name
        USING ERRCODE = '55Z05';
    END IF;
  END IF;
  RETURN granted;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_acquire_as(oid, bigint, text, interval, jsonb, text, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_acquire_as(oid, bigint, text, interval, jsonb, text, integer) IS
  'fencing_session_acquire() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_session_acquire(
    session bigint, lock_name text, wait interval DEFAULT NULL, payload jsonb DEFAULT NULL,
    kind text DEFAULT 'exclusive', permits integer DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_session_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_acquire(bigint, text, interval, jsonb, text, integer) IS
  'takes the lock in the session, waiting up to wait, and returns its new token (NULL if busy); the lease ends when the session does, unless released first';

-- Every lock or none.  The locks are taken in one order (by name, each
-- once), whatever order the caller gives: two sessions that ask for
-- overlapping sets wait for each other's locks in the same order, so they
-- cannot deadlock.  Inside a subtransaction: a lock that cannot be had
-- within the wait undoes every grant made before it (none was ever seen
-- outside this transaction), and the answer is NULL.  Tokens in the order
-- of lock_names.
CREATE FUNCTION @extschema@.fencing_session_acquire_all_as(
    caller oid, session bigint, lock_names text[], wait interval)
  RETURNS @extschema@.fencing_token[] LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  deadline CONSTANT timestamptz := clock_timestamp() + coalesce(wait, interval '0');
  name text;
  granted @extschema@.fencing_token;
  tokens @extschema@.fencing_token[];
BEGIN
  PERFORM @extschema@.fencing_session_for(caller, session, 'fencing_session_acquire_all()');
  IF lock_names IS NULL OR pg_catalog.cardinality(lock_names) = 0
     OR pg_catalog.array_position(lock_names, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'fencing_session_acquire_all() needs a non-empty array of lock names without NULLs, got %',
      coalesce(lock_names::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  BEGIN
    FOR name IN SELECT DISTINCT u.n COLLATE "C" FROM pg_catalog.unnest(lock_names) AS u(n) ORDER BY 1 LOOP
      granted := @extschema@.fencing_session_acquire_as(
        caller, session, name,
        CASE WHEN wait IS NULL THEN NULL ELSE greatest(deadline - clock_timestamp(), interval '0') END,
        NULL, 'exclusive', NULL);
      IF granted IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PFA01', MESSAGE = 'pg_fencing: not every lock';  -- caught below
      END IF;
    END LOOP;
  EXCEPTION WHEN SQLSTATE 'PFA01' THEN
    RETURN NULL;
  END;
  SELECT pg_catalog.array_agg(e.token ORDER BY u.i) INTO tokens
    FROM pg_catalog.unnest(lock_names) WITH ORDINALITY AS u(n, i)
    JOIN @extschema@.fencing_lease e ON e.lock_name = u.n;
  RETURN tokens;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_acquire_all_as(oid, bigint, text[], interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_acquire_all_as(oid, bigint, text[], interval) IS
  'fencing_session_acquire_all() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_session_acquire_all(
    session bigint, lock_names text[], wait interval DEFAULT NULL)
  RETURNS @extschema@.fencing_token[] AS 'MODULE_PATHNAME', 'fencing_session_acquire_all'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_acquire_all(bigint, text[], interval) IS
  'takes every lock of lock_names in the session, or none: their tokens in the order of lock_names, NULL if not all could be had within wait; never deadlocks with another acquire_all';

-- The sessions the current role may see: its own roles' (those it has the
-- privileges of), every one for pg_read_all_stats.
CREATE VIEW @extschema@.fencing_sessions WITH (security_barrier) AS
  SELECT s.session_id, s.holder_role AS role, s.holder, s.ttl, s.opened_at, s.expires_at,
         s.expires_at > clock_timestamp() AS live,
         (SELECT pg_catalog.count(*) FROM @extschema@.fencing_lease l
           WHERE l.session_id = s.session_id AND l.ended IS NULL)
         + (SELECT pg_catalog.count(*) FROM @extschema@.fencing_permit p
             WHERE p.session_id = s.session_id AND p.ended IS NULL) AS leases
    FROM @extschema@.fencing_session s
   WHERE pg_catalog.pg_has_role(current_user, s.holder_role::oid, 'USAGE')
      OR pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE');
GRANT SELECT ON @extschema@.fencing_sessions TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_sessions IS
  'the open sessions of the roles whose privileges the current role has (every one for pg_read_all_stats), with their ends and how many leases each holds; live is judged by the server clock now';

-- CALL fencing_await(lock_name, session => id, wait => w) waits for a lease
-- in the session, holding no snapshot while it waits, as the plain form
-- waits for a plain lease: a new last argument (before the INOUT token),
-- and defaults for holder, ttl and wait so that session => can leave the
-- first two out.  Not an overload: a second fencing_await would make the
-- plain form's calls with literals ambiguous.
DROP PROCEDURE @extschema@.fencing_await(text, text, interval, interval, text, integer, jsonb, @extschema@.fencing_token);
CREATE PROCEDURE @extschema@.fencing_await(
    lock_name text, holder text DEFAULT NULL, ttl interval DEFAULT NULL,
    wait interval DEFAULT NULL,
    kind text DEFAULT 'exclusive', permits integer DEFAULT NULL, payload jsonb DEFAULT NULL,
    session bigint DEFAULT NULL,
    INOUT token @extschema@.fencing_token DEFAULT NULL)
  AS 'MODULE_PATHNAME', 'fencing_await' LANGUAGE C;
COMMENT ON PROCEDURE @extschema@.fencing_await(text, text, interval, interval, text, integer, jsonb, bigint, @extschema@.fencing_token) IS
  'waits up to wait, in arrival order, for the lock (kind exclusive, shared, or permit with permits; in the session with session =>) and returns its new token, NULL if the wait ran out; commits between attempts, so that it holds no snapshot while it waits; not inside a transaction block';
