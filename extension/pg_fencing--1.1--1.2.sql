-- pg_fencing 1.1 -> 1.2: locks that belong to someone.
--
-- CREATE EXTENSION pg_fencing (1.2) runs pg_fencing--1.0.sql, then
-- pg_fencing--1.0--1.1.sql, then this script: a fresh install and an
-- upgraded one are built by the same statements.
\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.2'" to load this file. \quit

-------------------------------------------------------------------------------
-- The lock model
-------------------------------------------------------------------------------
-- Every lock name used with pg_fencing is a row of fencing_lock with an
-- owner.  A role may use a lock -- present a token for it, write to a table
-- guarded under it (which raises its mark), take, renew or release its
-- lease, protect a table under it -- if it has the privileges of the lock's
-- owner or of one of the roles the owner granted its use to (the same
-- "has privileges of" rule as pg_has_role(..., 'USAGE')).  Superusers may
-- use every lock.
--
-- A lock comes into being on first use, owned by the role of the creator
-- rule that lets the caller create that name (fencing_lock_creator: a role
-- and a name prefix, set by a superuser), or by the caller if it is a
-- superuser; or explicitly, with fencing_create_lock().  Nobody else may
-- create lock names, so no role can squat on a name that another
-- application will use.
--
-- Roles are stored as regrole: pg_dump writes them by name, and a restore
-- looks them up again by name.  A role dropped while it owns a lock leaves
-- the lock owned by nobody (fencing_audit() reports it); only a superuser
-- can use it or give it a new owner.

-- lock_id: the key of the lock's waiting room (fencing_waiting_room), one
-- per lock, never shared: an advisory lock key must fit 32 bits beside the
-- 'FENC' tag, hence the MAXVALUE.
CREATE SEQUENCE @extschema@.fencing_lock_id_seq
  AS bigint MINVALUE 1 MAXVALUE 4294967295 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.fencing_lock_id_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock_id_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_lock_id_seq IS
  'source of each lock''s lock_id, the key of its waiting room';

CREATE TABLE @extschema@.fencing_lock (
  lock_name text PRIMARY KEY,
  lock_id bigint NOT NULL UNIQUE,
  owner regrole NOT NULL,
  users regrole[] NOT NULL DEFAULT '{}',
  -- After a lease of this lock *expires* (not after a release or a revoke),
  -- it is not granted again for this long: side effects of the lost holder
  -- that no guard sees (mail sent, calls to other services) can drain.
  lock_delay interval NOT NULL DEFAULT '0'
);
REVOKE ALL ON @extschema@.fencing_lock FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock', '');
COMMENT ON TABLE @extschema@.fencing_lock IS
  'every lock name with its owner and the roles granted its use; written only through the fencing_ lock functions';

-- Who may create lock names: a role (and whoever has its privileges) may
-- create names that start with prefix ('' for any name).  A lock created
-- under a rule is owned by the rule's role, so that every member of an
-- application's group role can use the locks any of them created.
CREATE TABLE @extschema@.fencing_lock_creator (
  creator regrole NOT NULL,
  prefix text NOT NULL,
  PRIMARY KEY (creator, prefix)
);
REVOKE ALL ON @extschema@.fencing_lock_creator FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock_creator', '');
COMMENT ON TABLE @extschema@.fencing_lock_creator IS
  'which roles may create lock names, and with which prefix; set by fencing_allow_create()';

-- Whether role may use a lock owned by owner and granted to users.
-- pg_has_role() is false for a role that no longer exists, and true for a
-- superuser.
CREATE FUNCTION @extschema@.fencing_role_may_use(role oid, owner regrole, users regrole[])
  RETURNS boolean LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN pg_catalog.pg_has_role(role, owner::oid, 'USAGE')
      OR EXISTS (SELECT FROM pg_catalog.unnest(users) u
                  WHERE pg_catalog.pg_has_role(role, u::oid, 'USAGE'));
-- PUBLIC may call it (the views do, as the querying role): it tells no more
-- than pg_has_role() does.
COMMENT ON FUNCTION @extschema@.fencing_role_may_use(oid, regrole, regrole[]) IS
  'whether a role may use a lock with this owner and these users';

-- The owner a lock created by role gets, or NULL if role may not create
-- it.  A name belongs to the role of the creator rule with the longest
-- prefix that covers it, whoever creates it: role may create it if it has
-- that role's privileges (a superuser has every role's), so that no role
-- can take a name inside another's prefix.  A name no rule covers may be
-- created only by a superuser, and belongs to it.
CREATE FUNCTION @extschema@.fencing_creator_for(lock_name text, role oid)
  RETURNS regrole LANGUAGE sql STABLE STRICT
  SET search_path = pg_catalog, pg_temp
  BEGIN ATOMIC
    WITH covering AS (
      SELECT c.creator, pg_catalog.length(c.prefix) AS len
        FROM @extschema@.fencing_lock_creator c
       WHERE pg_catalog.starts_with(fencing_creator_for.lock_name, c.prefix))
    SELECT CASE
      WHEN EXISTS (SELECT FROM covering) THEN
        (SELECT c.creator FROM covering c
          WHERE c.len = (SELECT pg_catalog.max(m.len) FROM covering m)
            AND pg_catalog.pg_has_role(fencing_creator_for.role, c.creator::oid, 'USAGE')
          ORDER BY c.creator::oid LIMIT 1)
      ELSE
        (SELECT r.oid::regrole FROM pg_catalog.pg_roles r
          WHERE r.oid = fencing_creator_for.role AND r.rolsuper)
      END;
  END;
REVOKE ALL ON FUNCTION @extschema@.fencing_creator_for(text, oid) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_creator_for(text, oid) IS
  'the owner a lock created by role would get, or NULL if role may not create it; internal';

-- The one check behind every use of a lock.  Returns the lock's id when
-- role may use it; creates it first when it does not exist and may_create
-- is true and role may create it; raises 42501 otherwise.  for_table, if
-- given, is the table being guarded under the lock, and role its owner:
-- the error then names the table.
CREATE FUNCTION @extschema@.fencing_lock_authorize(
    lock_name text, role oid, may_create boolean, for_table regclass DEFAULT NULL)
  RETURNS bigint LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock;
  creator regrole;
BEGIN
  SELECT * INTO l FROM @extschema@.fencing_lock k WHERE k.lock_name = fencing_lock_authorize.lock_name;
  IF NOT FOUND AND may_create THEN
    creator := @extschema@.fencing_creator_for(lock_name, role);
    IF creator IS NOT NULL THEN
      INSERT INTO @extschema@.fencing_lock (lock_name, lock_id, owner)
        VALUES (lock_name, pg_catalog.nextval('@extschema@.fencing_lock_id_seq'), creator)
        ON CONFLICT DO NOTHING;
      SELECT * INTO l FROM @extschema@.fencing_lock k
       WHERE k.lock_name = fencing_lock_authorize.lock_name;
    END IF;
  END IF;
  IF l.lock_name IS NOT NULL AND @extschema@.fencing_role_may_use(role, l.owner, l.users) THEN
    RETURN l.lock_id;
  END IF;
  IF for_table IS NOT NULL THEN
    RAISE EXCEPTION 'table % may not be guarded under fencing lock "%"', for_table, lock_name
      USING ERRCODE = '42501',
            DETAIL = pg_catalog.format('Its owner, role %s, may not use the lock.',
                                       pg_catalog.quote_ident(role::regrole::text)),
            HINT = 'The lock''s owner grants its use with fencing_grant_lock().';
  END IF;
  RAISE EXCEPTION 'permission denied for fencing lock "%"', lock_name
    USING ERRCODE = '42501',
          DETAIL = CASE WHEN l.lock_name IS NULL
            THEN pg_catalog.format('The lock does not exist, and role %s may not create it.',
                                   pg_catalog.quote_ident(role::regrole::text))
            ELSE pg_catalog.format('Role %s is not the lock''s owner and has not been granted its use.',
                                   pg_catalog.quote_ident(role::regrole::text)) END,
          HINT = CASE WHEN l.lock_name IS NULL
            THEN 'A superuser lets a role create locks with fencing_allow_create(), or creates the lock with fencing_create_lock().'
            ELSE 'The lock''s owner grants its use with fencing_grant_lock().' END;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_authorize(text, oid, boolean, regclass) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_authorize(text, oid, boolean, regclass) IS
  'checks that a role may use a lock (creating it if allowed) and returns its id; internal';

-- Lock names are checked (not NULL, not empty) in one place, the C
-- function CheckLockName (src/backend/locks.cpp), by every public function
-- that takes one before anything below runs; the SQL here takes them as
-- given.
--
-- The calling role for the functions below.  Public functions that act for
-- the caller are C "gates" (fencing_gate in src/backend/locks.cpp): a gate
-- runs as the caller, so GetUserId() is the role every PostgreSQL privilege
-- check would use, and calls the function of the same name with the suffix
-- _as, passing that role first.  The _as functions are SECURITY DEFINER (or
-- need no privilege) and PUBLIC may not call them, so nobody can pass them
-- a role that is not their own.

-- Only the lock's owner (a role with the owner's privileges) or a
-- superuser manages a lock.
CREATE FUNCTION @extschema@.fencing_lock_for_owner(lock_name text, caller oid)
  RETURNS @extschema@.fencing_lock LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock;
BEGIN
  SELECT * INTO l FROM @extschema@.fencing_lock k
   WHERE k.lock_name = fencing_lock_for_owner.lock_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'must be owner of fencing lock "%"', lock_name
      USING ERRCODE = '42501', DETAIL = 'The lock does not exist.';
  ELSIF NOT pg_catalog.pg_has_role(caller, l.owner::oid, 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of fencing lock "%"', lock_name USING ERRCODE = '42501';
  END IF;
  RETURN l;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_for_owner(text, oid) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_for_owner(text, oid) IS
  'locks a lock''s row for a change by its owner; internal';

CREATE FUNCTION @extschema@.fencing_create_lock_as(caller oid, lock_name text, owner regrole)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  creator regrole;
BEGIN
  creator := @extschema@.fencing_creator_for(lock_name, caller);
  IF creator IS NULL THEN
    RAISE EXCEPTION 'permission denied to create fencing lock "%"', lock_name
      USING ERRCODE = '42501',
            DETAIL = pg_catalog.format('No creator rule lets role %s create this name.',
                                       pg_catalog.quote_ident(caller::regrole::text)),
            HINT = 'A superuser lets a role create locks with fencing_allow_create().';
  END IF;
  -- As for ALTER ... OWNER: a role can give a lock only to a role whose
  -- privileges it has.
  IF owner IS NOT NULL AND NOT pg_catalog.pg_has_role(caller, owner::oid, 'USAGE') THEN
    RAISE EXCEPTION 'must be able to act as role % to make it the owner of fencing lock "%"',
      owner, lock_name USING ERRCODE = '42501';
  END IF;
  INSERT INTO @extschema@.fencing_lock (lock_name, lock_id, owner)
    VALUES (lock_name, pg_catalog.nextval('@extschema@.fencing_lock_id_seq'),
            coalesce(owner, creator))
    ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'fencing lock "%" already exists', lock_name USING ERRCODE = '42710';
  END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_create_lock_as(oid, text, regrole) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_create_lock_as(oid, text, regrole) IS
  'fencing_create_lock() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_create_lock(lock_name text, owner regrole DEFAULT NULL)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_create_lock(text, regrole) IS
  'creates a lock name, owned by owner (default: the role of the creator rule that allows it); 42501 unless the caller may create it';

CREATE FUNCTION @extschema@.fencing_grant_lock_as(caller oid, lock_name text, grantee regrole)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF grantee IS NULL THEN
    RAISE EXCEPTION 'grantee must not be NULL (lock "%")', lock_name USING ERRCODE = '22023';
  END IF;
  IF grantee OPERATOR(pg_catalog.<>) ALL (l.users) THEN
    UPDATE @extschema@.fencing_lock k SET users = k.users OPERATOR(pg_catalog.||) grantee
     WHERE k.lock_name = l.lock_name;
  END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_grant_lock_as(oid, text, regrole) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_grant_lock_as(oid, text, regrole) IS
  'fencing_grant_lock() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_grant_lock(lock_name text, grantee regrole)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_grant_lock(text, regrole) IS
  'lets grantee (and every role with its privileges) use the lock; owner or superuser only';

CREATE FUNCTION @extschema@.fencing_revoke_lock_as(caller oid, lock_name text, grantee regrole)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF grantee IS NULL THEN
    RAISE EXCEPTION 'grantee must not be NULL (lock "%")', lock_name USING ERRCODE = '22023';
  END IF;
  UPDATE @extschema@.fencing_lock k SET users = pg_catalog.array_remove(k.users, grantee)
   WHERE k.lock_name = l.lock_name AND grantee OPERATOR(pg_catalog.=) ANY (k.users);
  RETURN FOUND;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_revoke_lock_as(oid, text, regrole) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_revoke_lock_as(oid, text, regrole) IS
  'fencing_revoke_lock() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_revoke_lock(lock_name text, grantee regrole)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_revoke_lock(text, regrole) IS
  'takes back a grant of fencing_grant_lock(); false if grantee had none; owner or superuser only';

CREATE FUNCTION @extschema@.fencing_alter_lock_owner_as(caller oid, lock_name text, new_owner regrole)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF new_owner IS NULL THEN
    RAISE EXCEPTION 'new owner must not be NULL (lock "%")', lock_name USING ERRCODE = '22023';
  END IF;
  IF NOT pg_catalog.pg_has_role(caller, new_owner::oid, 'USAGE') THEN
    RAISE EXCEPTION 'must be able to act as role % to make it the owner of fencing lock "%"',
      new_owner, lock_name USING ERRCODE = '42501';
  END IF;
  UPDATE @extschema@.fencing_lock k SET owner = new_owner WHERE k.lock_name = l.lock_name;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_alter_lock_owner_as(oid, text, regrole) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_alter_lock_owner_as(oid, text, regrole) IS
  'fencing_alter_lock_owner() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_alter_lock_owner(lock_name text, new_owner regrole)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_alter_lock_owner(text, regrole) IS
  'gives the lock to another owner; by its owner (who must have the new owner''s privileges) or a superuser';

-- Creator rules are a superuser's business: PUBLIC may not call these, and
-- they check it themselves too, since a DBA may grant EXECUTE carelessly.
CREATE FUNCTION @extschema@.fencing_allow_create(creator regrole, prefix text DEFAULT '')
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF creator IS NULL OR prefix IS NULL THEN
    RAISE EXCEPTION 'creator and prefix must not be NULL' USING ERRCODE = '22023';
  END IF;
  INSERT INTO @extschema@.fencing_lock_creator VALUES (creator, prefix) ON CONFLICT DO NOTHING;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_allow_create(regrole, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_allow_create(regrole, text) IS
  'lets creator (and the roles with its privileges) create lock names starting with prefix; the locks belong to creator; superuser only';

CREATE FUNCTION @extschema@.fencing_disallow_create(creator regrole, prefix text DEFAULT '')
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  DELETE FROM @extschema@.fencing_lock_creator c
   WHERE c.creator OPERATOR(pg_catalog.=) fencing_disallow_create.creator
     AND c.prefix = fencing_disallow_create.prefix;
  RETURN FOUND;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_disallow_create(regrole, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_disallow_create(regrole, text) IS
  'removes a rule of fencing_allow_create(); locks already created keep their owner; superuser only';

-- A lock is visible in the views to the roles that may use it.
CREATE VIEW @extschema@.fencing_locks WITH (security_barrier) AS
  SELECT k.lock_name, k.owner, k.users, k.lock_id, k.lock_delay
    FROM @extschema@.fencing_lock k
   WHERE @extschema@.fencing_role_may_use(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);
GRANT SELECT ON @extschema@.fencing_locks TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_locks IS
  'the locks the current role may use, with their owners and the roles granted their use';

CREATE VIEW @extschema@.fencing_lock_creators AS
  SELECT c.creator, c.prefix FROM @extschema@.fencing_lock_creator c;
GRANT SELECT ON @extschema@.fencing_lock_creators TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_lock_creators IS
  'who may create lock names, and with which prefix';

-------------------------------------------------------------------------------
-- Durable state changes
-------------------------------------------------------------------------------
-- A transaction that grants, renews or releases a lease, or raises a lock's
-- mark, commits as with synchronous_commit = on whatever the session set:
-- a lease grant whose mark raise was lost in a crash would let the previous
-- holder's older token write again.
CREATE FUNCTION @extschema@.fencing_commit_durably() RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_commit_durably' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_commit_durably() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_commit_durably() IS
  'makes the current transaction commit durably (locally and to synchronous standbys); internal';

-------------------------------------------------------------------------------
-- Leases, through the lock model
-------------------------------------------------------------------------------
-- The waiting room is keyed by the lock's id, which no other lock shares
-- (1.1 keyed it by a 32-bit hash of the name, and two names could collide).
DROP FUNCTION @extschema@.fencing_try_acquire(text, text, interval);
DROP FUNCTION @extschema@.fencing_waiting_room(text);
CREATE FUNCTION @extschema@.fencing_waiting_room(lock_id bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (x'46454e43'::bigint << 32) | lock_id;
COMMENT ON FUNCTION @extschema@.fencing_waiting_room(bigint) IS
  'advisory lock key (pg_locks: classid 1178947139, objid the lock''s lock_id) of the queue of acquirers waiting for a lock';

-- How each lease ended, and what its holder publishes.  ended: NULL while
-- the lease is live or once it ran out (expired), 'released' or 'revoked'
-- when it was ended before its time; only an expiry starts the lock-delay.
ALTER TABLE @extschema@.fencing_lease
  ADD COLUMN payload jsonb,
  ADD COLUMN ended text,
  ADD COLUMN end_reason text;

-- One attempt to take the lock: free, expired, or already the caller's.
-- On failure no row lock is kept (the attempt runs in a subtransaction), so
-- a caller that lingers in its transaction never blocks the holder's renew.
-- Called only from the fencing_acquire_as functions and runs in their
-- context (their owner, their pinned search_path); PUBLIC may not call it.
CREATE FUNCTION @extschema@.fencing_try_acquire(
    p_lock text, p_holder text, p_ttl interval, p_lock_id bigint, p_payload jsonb)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql AS $$
DECLARE
  cur @extschema@.fencing_lease;
  found_row boolean;
  now timestamptz;
  granted @extschema@.fencing_token;
BEGIN
  -- Cheap look without locks: a lease that is live and not ours is busy.
  SELECT * INTO cur FROM @extschema@.fencing_lease l WHERE l.lock_name = p_lock;
  IF FOUND AND cur.expires_at > clock_timestamp()
     AND NOT (cur.holder = p_holder AND cur.holder_role = session_user) THEN
    RETURN NULL;
  END IF;
  -- An expired lease keeps the lock for its lock-delay.
  IF FOUND AND cur.ended IS NULL AND cur.expires_at <= clock_timestamp()
     AND @extschema@.fencing_available_at(p_lock) > clock_timestamp() THEN
    RETURN NULL;
  END IF;

  BEGIN
    SELECT * INTO cur FROM @extschema@.fencing_lease l WHERE l.lock_name = p_lock FOR UPDATE;
    found_row := FOUND;
    -- Judge liveness once the row lock is ours: a lease that expired while
    -- we waited for it is free; one granted meanwhile is not.
    now := clock_timestamp();
    IF found_row AND cur.expires_at > now THEN
      IF cur.holder = p_holder AND cur.holder_role = session_user THEN
        -- The live holder again (say, a retry after a lost reply): the same
        -- token, the lease extended, the payload replaced.
        UPDATE @extschema@.fencing_lease l SET expires_at = now + p_ttl, payload = p_payload
         WHERE l.lock_name = p_lock;
        PERFORM @extschema@.fencing_commit_durably();
        RETURN cur.token;
      END IF;
      RAISE SQLSTATE 'PFBSY';
    END IF;
    IF found_row AND cur.ended IS NULL
       AND @extschema@.fencing_available_at(p_lock) > now THEN
      RAISE SQLSTATE 'PFBSY';  -- expired, and still within its lock-delay
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(@extschema@.fencing_waiting_room(p_lock_id)) THEN
      RAISE SQLSTATE 'PFBSY';  -- a waiter is first in line
    END IF;
    granted := @extschema@.fencing_grant();
    -- A grant fences out every older token under the lock at once, even
    -- before the new holder writes anything.  (The same as
    -- fencing_fence_advance, in one statement: no reply is needed here.)
    INSERT INTO @extschema@.fencing_fence AS f VALUES (p_lock, granted)
      ON CONFLICT (lock_name) DO UPDATE SET high_water = GREATEST(f.high_water, EXCLUDED.high_water);
    IF found_row THEN
      UPDATE @extschema@.fencing_lease l
         SET holder = p_holder, holder_role = session_user, token = granted,
             granted_at = now, expires_at = now + p_ttl, payload = p_payload,
             ended = NULL, end_reason = NULL
       WHERE l.lock_name = p_lock;
    ELSE
      -- First grant of this lock.  The waiting-room lock serialises first
      -- grants, so a conflict here means another caller just took it.
      INSERT INTO @extschema@.fencing_lease
          (lock_name, holder, holder_role, token, granted_at, expires_at, payload)
        VALUES (p_lock, p_holder, session_user, granted, now, now + p_ttl, p_payload)
        ON CONFLICT (lock_name) DO NOTHING;
      IF NOT FOUND THEN
        RAISE SQLSTATE 'PFBSY';
      END IF;
    END IF;
    PERFORM @extschema@.fencing_commit_durably();
    RETURN granted;
  EXCEPTION WHEN SQLSTATE 'PFBSY' THEN
    RETURN NULL;  -- the subtransaction's rollback drops the row lock
  END;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval, bigint, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval, bigint, jsonb) IS
  'one acquire attempt, shared by both forms of fencing_acquire; internal';

CREATE FUNCTION @extschema@.fencing_acquire_as(
    caller oid, lock_name text, holder text, ttl interval, payload jsonb)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
  lock_id bigint;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  lock_id := @extschema@.fencing_lock_authorize(lock_name, caller, true);
  RETURN @extschema@.fencing_try_acquire(lock_name, holder, ttl, lock_id, payload);
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, jsonb) IS
  'fencing_acquire without a wait, for the role that called it; internal';

-- The longest wait: the waiting room is queued with lock_timeout, whose
-- largest value is INT_MAX milliseconds.
CREATE FUNCTION @extschema@.fencing_acquire_as(
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
    PERFORM pg_catalog.pg_advisory_xact_lock(@extschema@.fencing_waiting_room(lock_id));
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
REVOKE ALL ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, interval, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, interval, jsonb) IS
  'fencing_acquire for the role that called it; internal';

-- Renew and release both move the end of a live lease the caller's role
-- holds under token: to now + remaining; a release also marks it 'released'
-- (ended), which spares the lock its lock-delay.  A lock that does not exist has no
-- lease: false, as for any lease that is not the caller's.  Called only from
-- the _as functions below, in their context; PUBLIC may not call it.
CREATE FUNCTION @extschema@.fencing_move_lease_end(
    caller oid, p_lock text, p_token @extschema@.fencing_token, remaining interval,
    p_ended text)
  RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT FROM @extschema@.fencing_lock k WHERE k.lock_name = p_lock) THEN
    RETURN false;
  END IF;
  PERFORM @extschema@.fencing_lock_authorize(p_lock, caller, false);
  UPDATE @extschema@.fencing_lease l
     SET expires_at = clock_timestamp() + remaining, ended = p_ended
   WHERE l.lock_name = p_lock
     AND l.token OPERATOR(@extschema@.=) p_token
     AND l.holder_role = session_user
     AND l.expires_at > clock_timestamp();
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM @extschema@.fencing_commit_durably();
  -- A release frees the lock, a renew may bring its end closer: the first waiter looks again.
  PERFORM @extschema@.fencing_wake_waiters_at_commit(k.lock_id) FROM @extschema@.fencing_lock k WHERE k.lock_name = p_lock;
  RETURN true;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_move_lease_end(oid, text, @extschema@.fencing_token, interval, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_move_lease_end(oid, text, @extschema@.fencing_token, interval, text) IS
  'moves the end of the caller''s live lease, for fencing_renew and fencing_release; internal';

CREATE FUNCTION @extschema@.fencing_renew_as(
    caller oid, lock_name text, token @extschema@.fencing_token, ttl interval)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, NULL, ttl, false);
  RETURN @extschema@.fencing_move_lease_end(caller, lock_name, token, ttl, NULL);
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_renew_as(oid, text, @extschema@.fencing_token, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_renew_as(oid, text, @extschema@.fencing_token, interval) IS
  'fencing_renew() for the role that called it; internal';

CREATE FUNCTION @extschema@.fencing_release_as(
    caller oid, lock_name text, token @extschema@.fencing_token)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN @extschema@.fencing_move_lease_end(caller, lock_name, token, interval '0', 'released');
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_release_as(oid, text, @extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_release_as(oid, text, @extschema@.fencing_token) IS
  'fencing_release() for the role that called it; internal';

CREATE FUNCTION @extschema@.fencing_leader_as(caller oid, lock_name text) RETURNS text
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  leader text;
BEGIN
  IF NOT EXISTS (SELECT FROM @extschema@.fencing_lock k WHERE k.lock_name = fencing_leader_as.lock_name) THEN
    RETURN NULL;
  END IF;
  PERFORM @extschema@.fencing_lock_authorize(lock_name, caller, false);
  SELECT l.holder INTO leader FROM @extschema@.fencing_lease l
   WHERE l.lock_name = fencing_leader_as.lock_name AND l.expires_at > clock_timestamp();
  RETURN leader;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_leader_as(oid, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_leader_as(oid, text) IS
  'fencing_leader() for the role that called it; internal';

-- The public lease functions become gates (see fencing_gate above).
-- fencing_acquire's two forms, with and without a wait, become one function
-- whose wait defaults to none: a payload (payload => jsonb, in named
-- notation) could not be added to both forms as separate functions without
-- making fencing_acquire('l', 'h', '30 s', '10 s') ambiguous.  A NULL wait
-- now means no wait (1.1 refused it).
DROP FUNCTION @extschema@.fencing_acquire(text, text, interval);
DROP FUNCTION @extschema@.fencing_acquire(text, text, interval, interval);
CREATE FUNCTION @extschema@.fencing_acquire(
    lock_name text, holder text, ttl interval, wait interval DEFAULT NULL,
    payload jsonb DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_gate'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE FUNCTION @extschema@.fencing_renew(
    lock_name text, token @extschema@.fencing_token, ttl interval)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE FUNCTION @extschema@.fencing_release(lock_name text, token @extschema@.fencing_token)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
-- fencing_leader was a SQL function with a body; a C one replaces it.
DROP FUNCTION @extschema@.fencing_leader(text);
CREATE FUNCTION @extschema@.fencing_leader(lock_name text) RETURNS text
  AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_leader(text) IS
  'the live holder of the lock, or NULL; 42501 if the caller may not use the lock';
COMMENT ON FUNCTION @extschema@.fencing_acquire(text, text, interval, interval, jsonb) IS
  'takes the lock for ttl and returns a new fencing token; with wait, waits up to that long in arrival order; NULL if another holder has a live lease (or an expired one is within its lock-delay); the live holder gets its own token back with the lease extended and its payload replaced; 42501 unless the caller may use (or create) the lock';

-- Views: a lock's rows are visible to the roles that may use it.
CREATE OR REPLACE VIEW @extschema@.fencing_leases AS
  SELECT l.lock_name, l.holder, l.token, l.granted_at, l.expires_at,
         l.expires_at > clock_timestamp() AS live,
         l.payload, k.lock_delay,
         CASE WHEN l.ended IS NULL THEN l.expires_at + k.lock_delay ELSE l.expires_at END
           AS available_at,
         CASE WHEN l.expires_at > clock_timestamp() THEN 'live'
              ELSE coalesce(l.ended, 'expired') END AS state,
         l.end_reason
    FROM @extschema@.fencing_lease l
    JOIN @extschema@.fencing_locks k ON k.lock_name = l.lock_name;
CREATE OR REPLACE VIEW @extschema@.fencing_fences AS
  SELECT f.lock_name, f.high_water
    FROM @extschema@.fencing_fence f
    JOIN @extschema@.fencing_locks k ON k.lock_name = f.lock_name;

-- When the lock can next be granted as things stand (the view's
-- available_at, the one place the rule is written): the end of a live
-- lease plus the lock-delay (it may expire), the end of an expired one plus
-- the delay, or the moment a released or revoked lease ended.  NULL: no
-- lease yet.  fencing_try_acquire runs as the extension's owner, which sees
-- every lock in the view.
CREATE FUNCTION @extschema@.fencing_available_at(p_lock text) RETURNS timestamptz
  LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = p_lock;
  END;
REVOKE ALL ON FUNCTION @extschema@.fencing_available_at(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_available_at(text) IS
  'when a lock can next be granted, as things stand (its lease''s end, plus the lock-delay after an expiry); internal';

-- Revoke: an operator ends a lease during an incident.  Only the lock's
-- owner (a role with its privileges) or a superuser.  The mark is raised
-- to a new token, above the holder's, so every write of the holder under
-- the lock is refused from the commit on, and the next grant is above it.
-- It waits for a transaction writing under the lock to end (that
-- transaction holds the mark's row): a write in flight is not cut in half.
CREATE FUNCTION @extschema@.fencing_revoke_as(caller oid, lock_name text, reason text)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
  new_mark @extschema@.fencing_token;
BEGIN
  UPDATE @extschema@.fencing_lease e
     SET expires_at = clock_timestamp(), ended = 'revoked', end_reason = reason
   WHERE e.lock_name = l.lock_name AND e.expires_at > clock_timestamp();
  new_mark := @extschema@.fencing_grant();
  INSERT INTO @extschema@.fencing_fence AS f VALUES (l.lock_name, new_mark)
    ON CONFLICT ON CONSTRAINT fencing_fence_pkey
    DO UPDATE SET high_water = GREATEST(f.high_water, EXCLUDED.high_water);
  PERFORM @extschema@.fencing_commit_durably();
  PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
  RETURN new_mark;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_revoke_as(oid, text, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_revoke_as(oid, text, text) IS
  'fencing_revoke() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_revoke(lock_name text, reason text DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_gate'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_revoke(text, text) IS
  'ends the live lease at once (no lock-delay) and raises the lock''s mark to a new token above the holder''s, which it returns; the lock''s owner or a superuser only';

CREATE FUNCTION @extschema@.fencing_set_lock_delay_as(caller oid, lock_name text, lock_delay interval)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF lock_delay IS NULL OR lock_delay < interval '0' THEN
    RAISE EXCEPTION 'lock delay must not be NULL or negative, got % (lock "%")',
      coalesce(lock_delay::text, 'NULL'), lock_name USING ERRCODE = '22023';
  END IF;
  UPDATE @extschema@.fencing_lock k SET lock_delay = fencing_set_lock_delay_as.lock_delay
   WHERE k.lock_name = l.lock_name;
  -- A shorter delay may make the lock available sooner: the first waiter looks again.
  PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_set_lock_delay_as(oid, text, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_set_lock_delay_as(oid, text, interval) IS
  'fencing_set_lock_delay() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_set_lock_delay(lock_name text, lock_delay interval)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_set_lock_delay(text, interval) IS
  'after a lease of the lock expires (not after a release or revoke), it is not granted again for lock_delay; the lock''s owner or a superuser only';

-------------------------------------------------------------------------------
-- Protecting tables, through the lock model
-------------------------------------------------------------------------------
-- fencing_protect is a C function now (src/backend/guard.cpp): it checks the
-- table, column, options and the lock's permissions, then calls
-- fencing_protect_as, which creates the triggers as the caller (so CREATE
-- TRIGGER checks the caller's rights on each table).
DROP FUNCTION @extschema@.fencing_protect(regclass, name, text[], text);
DROP FUNCTION @extschema@.fencing_resolve_token_column(regclass, name, text[]);

CREATE FUNCTION @extschema@.fencing_protect_as(
    caller oid, tbl regclass, token_column name, options text[], lock_name text)
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  all_options text[] := coalesce(options, '{}');
  trigger_args text;
  part regclass;
  is_partitioned boolean;
BEGIN
  IF lock_name IS NOT NULL THEN
    all_options := all_options OPERATOR(pg_catalog.||) ('lock=' OPERATOR(pg_catalog.||) lock_name);
  END IF;
  SELECT pg_catalog.string_agg(pg_catalog.quote_literal(arg), ', ' ORDER BY ord)
    INTO trigger_args
    FROM pg_catalog.unnest(ARRAY[token_column::text] OPERATOR(pg_catalog.||) all_options)
         WITH ORDINALITY AS a(arg, ord);
  SELECT c.relkind OPERATOR(pg_catalog.=) 'p' INTO is_partitioned
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl;
  -- Row triggers on a partitioned table are cloned to its partitions.  An
  -- inheritance parent's triggers fire only for its own rows: each child
  -- gets the triggers too (children added later: fencing_audit() reports
  -- them, and the event trigger refuses to add one unguarded).
  -- OR REPLACE: protecting again changes the column, options or lock in place.
  FOR part IN
    SELECT t.relid FROM @extschema@.fencing_inheritance_tree(tbl) t
     WHERE NOT is_partitioned OR t.relid OPERATOR(pg_catalog.=) tbl
  LOOP
    IF lock_name IS NULL THEN
      -- A per-row fence guards UPDATE.
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER fencing_guard BEFORE UPDATE ON %s '
        'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)', part, trigger_args);
    ELSE
      -- A lock-wide fence guards every way of changing the table's rows.
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER fencing_guard BEFORE INSERT OR UPDATE OR DELETE ON %s '
        'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)', part, trigger_args);
    END IF;
  END LOOP;
  -- TRUNCATE fires no row triggers, and a statement trigger on a partitioned
  -- table does not fire for a TRUNCATE of one of its partitions: under a
  -- lock, every table of the tree gets its own (partitions attached later
  -- need fencing_protect again).  Without a lock, none.
  FOR part IN SELECT t.relid FROM @extschema@.fencing_inheritance_tree(tbl) t LOOP
    IF lock_name IS NOT NULL THEN
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER fencing_guard_truncate BEFORE TRUNCATE ON %s '
        'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.fencing_guard(%s)', part, trigger_args);
    ELSIF EXISTS (SELECT FROM pg_catalog.pg_trigger t
                   WHERE t.tgrelid OPERATOR(pg_catalog.=) part
                     AND t.tgname OPERATOR(pg_catalog.=) 'fencing_guard_truncate') THEN
      EXECUTE pg_catalog.format('DROP TRIGGER fencing_guard_truncate ON %s', part);
    END IF;
  END LOOP;
END
$$;
REVOKE ALL ON FUNCTION @extschema@.fencing_protect_as(oid, regclass, name, text[], text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_protect_as(oid, regclass, name, text[], text) IS
  'creates the triggers for fencing_protect(), as the caller; internal';

-- The table and every table below it: partitions and inheritance children,
-- at any depth.
CREATE FUNCTION @extschema@.fencing_inheritance_tree(tbl regclass)
  RETURNS TABLE (relid regclass) LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    WITH RECURSIVE tree(relid) AS (
      SELECT tbl::oid
      UNION
      SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.relid)
    SELECT tree.relid::regclass FROM tree;
  END;
COMMENT ON FUNCTION @extschema@.fencing_inheritance_tree(regclass) IS
  'a table with its partitions and inheritance children at any depth';

CREATE FUNCTION @extschema@.fencing_protect(
    tbl regclass, token_column name DEFAULT NULL, options text[] DEFAULT '{}',
    lock_name text DEFAULT NULL)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_protect' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_protect(regclass, name, text[], text) IS
  'installs the fencing_guard trigger on a table and its inheritance children (its only fencing_token column unless named); with lock_name, a lock-wide fence that also guards INSERT, DELETE and TRUNCATE, if the caller and the tables'' owners may use the lock';

-- fencing_unprotect also removes the triggers fencing_protect() gave a
-- table's inheritance children.
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
END
$$;

-------------------------------------------------------------------------------
-- The locks of a 1.1 database
-------------------------------------------------------------------------------
-- In 1.1 lock names were an open namespace.  Each name in use -- in a
-- lock-wide guard's trigger, a lease or a mark -- becomes a lock here, so
-- that every role that used it keeps working without a new step: the owner
-- is the owner of a table guarded under it (else the role that acquired its
-- lease, else the role running the upgrade), and every other such role, and
-- every role granted a write privilege on a table guarded under it, is
-- granted its use.  (Roles that only called fencing_present() left no trace:
-- the lock's owner grants them with fencing_grant_lock().)
WITH guard_args AS (
  SELECT c.oid AS relid, c.relowner, c.relacl,
         pg_catalog.replace(arg, '\\', '\') AS arg
    FROM pg_catalog.pg_trigger t
    JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
    JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
   CROSS JOIN LATERAL pg_catalog.unnest(
           pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), '\000')) AS arg
   WHERE p.proname = 'fencing_guard'
     AND p.pronamespace = '@extschema@'::regnamespace
),
candidates(lock_name, role, rank) AS (
  SELECT pg_catalog.substr(g.arg, 6), g.relowner, 1 FROM guard_args g WHERE g.arg LIKE 'lock=%'
  UNION ALL
  SELECT l.lock_name, r.oid, 2 FROM @extschema@.fencing_lease l
    JOIN pg_catalog.pg_roles r ON r.rolname = l.holder_role
  UNION ALL
  SELECT pg_catalog.substr(g.arg, 6), a.grantee, 3 FROM guard_args g
   CROSS JOIN LATERAL pg_catalog.aclexplode(g.relacl) a
   WHERE g.arg LIKE 'lock=%' AND a.grantee <> 0
     AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
  UNION ALL
  SELECT f.lock_name, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), 4
    FROM @extschema@.fencing_fence f
),
owners AS (
  SELECT DISTINCT ON (c.lock_name) c.lock_name, c.role
    FROM candidates c WHERE c.lock_name <> ''
   ORDER BY c.lock_name, c.rank, c.role
)
INSERT INTO @extschema@.fencing_lock (lock_name, lock_id, owner, users)
SELECT o.lock_name, pg_catalog.nextval('@extschema@.fencing_lock_id_seq'), o.role::regrole,
       coalesce((SELECT pg_catalog.array_agg(DISTINCT c.role::regrole)
                   FROM candidates c
                  WHERE c.lock_name = o.lock_name AND c.role <> o.role AND c.rank < 4), '{}')
  FROM owners o;

-------------------------------------------------------------------------------
-- Trigger tampering
-------------------------------------------------------------------------------
-- DROP TRIGGER, ALTER TRIGGER and ALTER TABLE ... DISABLE TRIGGER need the
-- table's owner, but CREATE OR REPLACE TRIGGER needs only the TRIGGER
-- privilege, which GRANT ALL includes: a role holding it could replace a
-- guard with a trigger of its own.  This event trigger refuses, at the end
-- of the command (so the command rolls back), a trigger named like a guard
-- or calling fencing_guard() created or replaced by a role that does not
-- have the table owner's privileges; and a table that would inherit from a
-- table guarded by pg_fencing without being guarded itself (an
-- inheritance parent's triggers do not fire for its children's rows).
-- A superuser can disable it (ALTER EVENT TRIGGER); fencing_audit() says so.
CREATE FUNCTION @extschema@.fencing_refuse_tampering() RETURNS event_trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cmd record;
  trg record;
  parent regclass;
BEGIN
  FOR cmd IN SELECT * FROM pg_catalog.pg_event_trigger_ddl_commands() LOOP
    IF cmd.object_type = 'trigger' THEN
      SELECT t.tgname, t.tgrelid::regclass AS tbl, c.relowner INTO trg
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
       WHERE t.oid = cmd.objid
         AND (t.tgname IN ('fencing_guard', 'fencing_guard_truncate')
              OR t.tgfoid = '@extschema@.fencing_guard()'::pg_catalog.regprocedure);
      IF FOUND AND NOT pg_catalog.pg_has_role(trg.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'only the owner of table % may create or replace its trigger "%"',
          trg.tbl, trg.tgname
          USING ERRCODE = '42501',
                DETAIL = 'Triggers named fencing_guard or fencing_guard_truncate, or calling fencing_guard(), are pg_fencing''s guards.';
      END IF;
    ELSIF cmd.object_type = 'table' THEN
      -- The nearest guarded ancestor through plain inheritance, if this
      -- table is not guarded itself.
      SELECT i.inhparent::regclass INTO parent
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
       WHERE i.inhrelid = cmd.objid AND NOT c.relispartition
         AND EXISTS (SELECT FROM pg_catalog.pg_trigger t
                      WHERE t.tgrelid = i.inhparent
                        AND t.tgfoid = '@extschema@.fencing_guard()'::pg_catalog.regprocedure
                        AND t.tgname = 'fencing_guard')
         AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid = i.inhrelid
                            AND t.tgfoid = '@extschema@.fencing_guard()'::pg_catalog.regprocedure
                            AND t.tgname = 'fencing_guard')
       LIMIT 1;
      IF FOUND THEN
        RAISE EXCEPTION 'table % cannot inherit from %, which pg_fencing guards, without a guard of its own',
          cmd.objid::regclass, parent
          USING ERRCODE = '55000',
                DETAIL = 'An inheritance parent''s triggers do not fire for its children''s rows.',
                HINT = pg_catalog.format('Create the table without INHERITS, protect it with fencing_protect() as %s is protected, then ALTER TABLE %s INHERIT %s.',
                                         parent, cmd.objid::regclass, parent);
      END IF;
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_refuse_tampering() IS
  'event trigger: refuses guard triggers created or replaced by a non-owner, and unguarded inheritance children of guarded tables';
CREATE EVENT TRIGGER fencing_refuse_tampering ON ddl_command_end
  WHEN TAG IN ('CREATE TRIGGER', 'CREATE TABLE', 'ALTER TABLE')
  EXECUTE FUNCTION @extschema@.fencing_refuse_tampering();
COMMENT ON EVENT TRIGGER fencing_refuse_tampering IS
  'refuses pg_fencing guard triggers created or replaced by a non-owner, and unguarded inheritance children of guarded tables';

-------------------------------------------------------------------------------
-- fencing_audit()
-------------------------------------------------------------------------------
-- Every table guarded by pg_fencing that the caller owns (a superuser: every
-- one), partitions and inheritance children included, with each thing that
-- weakens its guard.  severity: 'critical' -- a stale or token-less write
-- can pass, or every write is refused; 'warning' -- a role could weaken the
-- guard.  fix: the command that mends it.  SECURITY INVOKER: it reads the
-- catalogs, and the locks through fencing_locks, as the caller.
CREATE FUNCTION @extschema@.fencing_audit()
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
    SELECT NULL, NULL, 'critical',
           'the event trigger fencing_refuse_tampering is disabled: a role with TRIGGER privilege can replace a guard',
           'ALTER EVENT TRIGGER fencing_refuse_tampering ENABLE;'
      FROM pg_catalog.pg_event_trigger e
     WHERE e.evtname = 'fencing_refuse_tampering' AND e.evtenabled = 'D'
    ORDER BY 1, 3, 4;
  END;
COMMENT ON FUNCTION @extschema@.fencing_audit() IS
  'every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard, a severity and the command that mends it';

-------------------------------------------------------------------------------
-- Catalog comments that no longer said what the objects do
-------------------------------------------------------------------------------
COMMENT ON FUNCTION @extschema@.fencing_guard() IS
  'the guard trigger: BEFORE UPDATE FOR EACH ROW for a per-row fence; with option lock=NAME, BEFORE INSERT, UPDATE or DELETE FOR EACH ROW and BEFORE TRUNCATE; refuses a lower token (55Z01) or a missing one (55Z02); arguments: column name, then options allow_unset, skip, lock=NAME';
COMMENT ON TABLE @extschema@.fencing_fence IS
  'highest fencing token seen per lock; written only by the extension''s functions: fencing_fence_advance() (writes), fencing_fence_lock() (presentations) and lease grants';

-------------------------------------------------------------------------------
-- Hand-over without polling (src/backend/lease_wakeup.cpp)
-------------------------------------------------------------------------------
-- The first waiter of a lock (the holder of its waiting room) sleeps on its
-- latch; the commit of a transaction that frees the lease or moves its end
-- sets that latch.  Nothing session-scoped and nothing preloaded: both sides
-- act within one call or one transaction.
CREATE FUNCTION @extschema@.fencing_wake_waiters_at_commit(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_wake_waiters_at_commit' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_wake_waiters_at_commit(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_wake_waiters_at_commit(bigint) IS
  'when the current transaction commits, wakes the first acquirer waiting for the lock to look at its lease again; for every change that frees a lease or moves its end; internal';

CREATE FUNCTION @extschema@.fencing_wait_for_wakeup(until timestamptz) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_wait_for_wakeup' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_wait_for_wakeup(timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_wait_for_wakeup(timestamptz) IS
  'sleeps until woken by fencing_wake_waiters_at_commit, until the given time (NULL: none) or for pg_fencing.wait_recheck, whichever comes first; internal';
