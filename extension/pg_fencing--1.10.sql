-- pg_fencing 1.10: the full install script.
--
-- This file is the current interface of pg_fencing in one place: every
-- object a fresh CREATE EXTENSION pg_fencing makes, each defined once, in
-- the form it has at 1.10, grouped by what it is for:
--
--   1. the fencing_token type and its operators
--   2. granting tokens
--   3. locks and privileges
--   4. guards and fencing_protect()
--   5. lock-wide fences and read fences
--   6. leases
--   7. semaphores and shared leases
--   8. waiting (the waiting room, the waiting acquires, fencing_await)
--   9. observability: events, statistics, rejections, history
--  10. administration: the token floor, mark resets, fencing_audit()
--  11. sessions: one keepalive for many leases, many locks at once
--  12. the line: waits that hold no connection
--
-- The script pg_fencing--1.0.sql and the upgrade scripts
-- pg_fencing--1.0--1.1.sql ... pg_fencing--1.9--1.10.sql are kept for
-- databases created at an older version: ALTER EXTENSION pg_fencing UPDATE
-- runs them, and they also move such a database's data along.  This file
-- does none of that: it is for a fresh install only.
--
-- Any change to the interface goes into this file AND into a new upgrade
-- script (pg_fencing--1.10--1.11.sql, say, with default_version moved on in
-- pg_fencing.control and this file becoming the new version's full
-- script).
-- test/t/005_upgrade.pl builds one database with this file and one from
-- 1.0 through every upgrade script, and fails when their catalogs disagree
-- in any object, property, privilege or comment.
--
-- Schema-qualified throughout (@extschema@): the extension is not
-- relocatable, and its SQL bodies and its C code find its objects in the
-- schema it was created in.  Functions that must not run with the caller's
-- search_path pin it to pg_catalog, pg_temp.
\echo Use "CREATE EXTENSION pg_fencing" to load this file. \quit

-------------------------------------------------------------------------------
-- 1. The fencing_token type and its operators
-------------------------------------------------------------------------------
-- A token is an int8 underneath: the same length, alignment and Datum, so
-- that comparing, hashing, sorting and min/max are PostgreSQL's own int8
-- functions (LANGUAGE internal).  What differs is the input and the casts:
-- a token is never negative, and it has no arithmetic.

CREATE TYPE @extschema@.fencing_token;

CREATE FUNCTION @extschema@.fencing_token_in(cstring) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_out(@extschema@.fencing_token) RETURNS cstring
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_recv(internal) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_send(@extschema@.fencing_token) RETURNS bytea
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE TYPE @extschema@.fencing_token (
  INPUT = @extschema@.fencing_token_in,
  OUTPUT = @extschema@.fencing_token_out,
  RECEIVE = @extschema@.fencing_token_recv,
  SEND = @extschema@.fencing_token_send,
  INTERNALLENGTH = 8,
  PASSEDBYVALUE,
  ALIGNMENT = double,
  STORAGE = plain
);
COMMENT ON TYPE @extschema@.fencing_token IS
  'fencing token: a non-negative 64-bit integer, ordered, without arithmetic';

-- Comparison, hashing and min/max support, all int8's.
CREATE FUNCTION @extschema@.fencing_token_eq(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8eq' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_ne(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8ne' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_lt(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8lt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_le(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8le' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_gt(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8gt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_ge(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8ge' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_cmp(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS integer AS 'btint8cmp' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_sortsupport(internal)
  RETURNS void AS 'btint8sortsupport' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_hash(@extschema@.fencing_token)
  RETURNS integer AS 'hashint8' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_hash_extended(@extschema@.fencing_token, bigint)
  RETURNS bigint AS 'hashint8extended' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_larger(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token AS 'int8larger' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_smaller(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token AS 'int8smaller' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR @extschema@.= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_eq, COMMUTATOR = OPERATOR(@extschema@.=),
  NEGATOR = OPERATOR(@extschema@.<>), RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR @extschema@.<> (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_ne, COMMUTATOR = OPERATOR(@extschema@.<>),
  NEGATOR = OPERATOR(@extschema@.=), RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR @extschema@.< (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_lt, COMMUTATOR = OPERATOR(@extschema@.>),
  NEGATOR = OPERATOR(@extschema@.>=), RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR @extschema@.<= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_le, COMMUTATOR = OPERATOR(@extschema@.>=),
  NEGATOR = OPERATOR(@extschema@.>), RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR @extschema@.> (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_gt, COMMUTATOR = OPERATOR(@extschema@.<),
  NEGATOR = OPERATOR(@extschema@.<=), RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR @extschema@.>= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_ge, COMMUTATOR = OPERATOR(@extschema@.<=),
  NEGATOR = OPERATOR(@extschema@.<), RESTRICT = scalargesel, JOIN = scalargejoinsel
);

-- The default B-tree and hash operator classes, so that token columns can
-- be indexed, sorted, grouped and joined.  Support function 4
-- (btequalimage) lets B-tree indexes on tokens deduplicate: two equal
-- tokens are the same bytes, as for int8.
CREATE OPERATOR CLASS @extschema@.fencing_token_btree_ops
  DEFAULT FOR TYPE @extschema@.fencing_token USING btree AS
    OPERATOR 1 @extschema@.<,
    OPERATOR 2 @extschema@.<=,
    OPERATOR 3 @extschema@.=,
    OPERATOR 4 @extschema@.>=,
    OPERATOR 5 @extschema@.>,
    FUNCTION 1 @extschema@.fencing_token_cmp(@extschema@.fencing_token, @extschema@.fencing_token),
    FUNCTION 2 @extschema@.fencing_token_sortsupport(internal),
    FUNCTION 4 pg_catalog.btequalimage(oid);

CREATE OPERATOR CLASS @extschema@.fencing_token_hash_ops
  DEFAULT FOR TYPE @extschema@.fencing_token USING hash AS
    OPERATOR 1 @extschema@.=,
    FUNCTION 1 @extschema@.fencing_token_hash(@extschema@.fencing_token),
    FUNCTION 2 @extschema@.fencing_token_hash_extended(@extschema@.fencing_token, bigint);

CREATE AGGREGATE @extschema@.max(@extschema@.fencing_token) (
  SFUNC = @extschema@.fencing_token_larger, STYPE = @extschema@.fencing_token,
  COMBINEFUNC = @extschema@.fencing_token_larger, SORTOP = OPERATOR(@extschema@.>),
  PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.min(@extschema@.fencing_token) (
  SFUNC = @extschema@.fencing_token_smaller, STYPE = @extschema@.fencing_token,
  COMBINEFUNC = @extschema@.fencing_token_smaller, SORTOP = OPERATOR(@extschema@.<),
  PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.max(@extschema@.fencing_token) IS 'highest fencing token';
COMMENT ON AGGREGATE @extschema@.min(@extschema@.fencing_token) IS 'lowest fencing token';

-- Casts.  A bigint or integer becomes a token on assignment, so that
-- "SET token = $1" works with an integer parameter from any driver (a
-- negative value is an error).  A token becomes a bigint on assignment or
-- explicitly, never implicitly: "token + 1" stays an error, since tokens
-- are only ever compared.
CREATE FUNCTION @extschema@.fencing_token(bigint) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_token_from_int8' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token(integer) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_token_from_int4' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE CAST (bigint AS @extschema@.fencing_token)
  WITH FUNCTION @extschema@.fencing_token(bigint) AS ASSIGNMENT;
CREATE CAST (integer AS @extschema@.fencing_token)
  WITH FUNCTION @extschema@.fencing_token(integer) AS ASSIGNMENT;
CREATE CAST (@extschema@.fencing_token AS bigint) WITHOUT FUNCTION AS ASSIGNMENT;
COMMENT ON FUNCTION @extschema@.fencing_token(bigint) IS
  'cast bigint to fencing_token; negative values are out of range';
COMMENT ON FUNCTION @extschema@.fencing_token(integer) IS
  'cast integer to fencing_token; negative values are out of range';

-------------------------------------------------------------------------------
-- 2. Granting tokens
-------------------------------------------------------------------------------
-- The sequence behind fencing_grant().  CACHE 1: with a cache per session,
-- values would be unique but not ordered across sessions, and every token
-- must be above every token granted before it.  It is dumped with its
-- current value (pg_extension_config_dump), so that a restored database
-- goes on granting above every token granted before the dump.  Tokens are
-- anchored to the clock (src/backend/grant.cpp): every range of the
-- sequence that grants reserve (with the library preloaded), and without
-- ranges every backend's first grant, starts at least at the clock's
-- microseconds since 1970, so that a database that went back in time (a
-- restored base backup, point-in-time recovery, a promoted asynchronous
-- standby, an older dump, pg_upgrade) still grants above every token it
-- handed out before.
CREATE SEQUENCE @extschema@.fencing_token_seq
  AS bigint MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.fencing_token_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_token_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_token_seq IS
  'source of fencing_grant(); use fencing_grant(), not nextval(), which is not crash-safe for tokens';

CREATE FUNCTION @extschema@.fencing_grant() RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_grant' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_grant() IS
  'a new fencing token, above every token granted before, durable before it is returned';

-- The highest token actually handed out: with ranges reserved, not the
-- sequence's last value, which is the unused end of the range.  PUBLIC may
-- not call it; fencing_reset_mark() does.
CREATE FUNCTION @extschema@.fencing_highest_granted() RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_highest_granted' LANGUAGE C VOLATILE PARALLEL SAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_highest_granted() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_highest_granted() IS
  'the highest token the database has handed out, NULL before the first; internal';

-- How far the tokens run ahead of the server's clock (fencing_audit()
-- warns of a lead of more than a second).  PUBLIC may call it: it tells no
-- more than fencing_grant() does.
CREATE FUNCTION @extschema@.fencing_lead_over_clock() RETURNS interval
  AS 'MODULE_PATHNAME', 'fencing_lead_over_clock' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_lead_over_clock() IS
  'how far the highest token reserved runs ahead of the server''s clock (tokens are microseconds since 1970 at most); NULL before the first grant';

-- Whatever grants, renews, releases or revokes a lease, or raises a lock's
-- mark, commits as with synchronous_commit = on, whatever the session set:
-- if a crash lost the raise of a mark that came with a grant, the previous
-- holder's older token could write again.
CREATE FUNCTION @extschema@.fencing_commit_durably() RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_commit_durably' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_commit_durably() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_commit_durably() IS
  'makes the current transaction commit durably (locally and to synchronous standbys); internal';

-------------------------------------------------------------------------------
-- 3. Locks and privileges
-------------------------------------------------------------------------------
-- Every lock name is a row of fencing_lock, with an owner.  A role may use
-- a lock -- present a token under it, write to a table guarded under it
-- (which raises its mark), take, renew or release its leases, protect a
-- table under it -- if it has the privileges of the lock's owner or of one
-- of the roles the owner granted the lock's use to (pg_has_role(...,
-- 'USAGE'), the "has privileges of" rule).  Superusers may use every lock.
--
-- A lock is created on first use, owned by the role of the creator rule
-- that lets the caller create the name (fencing_lock_creator: a role and a
-- name prefix, set by a superuser), or by the caller if it is a superuser;
-- or explicitly with fencing_create_lock().  Nobody else can create lock
-- names, so no role can squat on a name another application will use.
--
-- Roles are kept as regrole: pg_dump writes them by name and a restore
-- looks them up by name again.  A lock whose owner role is dropped is owned
-- by nobody (fencing_audit() says so): only a superuser can then use it or
-- give it a new owner.

-- lock_id: the number of a lock's waiting room and fence gate, one per
-- lock and never shared.  It must fit in 32 bits beside the 'FENC' tag of
-- the lock-manager tag (fencing_waiting_room), hence MAXVALUE.
CREATE SEQUENCE @extschema@.fencing_lock_id_seq
  AS bigint MINVALUE 1 MAXVALUE 4294967295 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.fencing_lock_id_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock_id_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_lock_id_seq IS
  'source of each lock''s lock_id, the key of its waiting room';

-- A lock and its settings:
--   lock_delay    after a lease of the lock expires (not after a release
--                 or a revoke), the lock is not granted again for this
--                 long, so that what the lost holder set going outside the
--                 database (mail sent, calls to other services), which no
--                 guard sees, can drain (fencing_set_lock_delay)
--   announce      whether its grants, releases, expiries and revokes are
--                 announced on channel fencing_events (fencing_set_announce)
--   kind, permits exclusive, semaphore (with its number of permits) or
--                 shared: see section 7
--   token_source  where the tokens written under it come from: 'granted'
--                 (this database's grants), 'external' (another service's)
--                 or 'unknown' (a lock from before 1.5, which an update
--                 could not judge; fencing_audit() lists it).  New locks
--                 are 'granted'.  The guard reads it when a token is new to
--                 the lock (src/backend/fences.cpp).
-- The lease functions find a lock's row by name through a hash index: a
-- probe costs the same however many locks there are, where a B-tree's
-- grows with its depth (measured: +23 % per acquire and release from 10 to
-- 100,000 live locks).  The primary key stays, for uniqueness.
CREATE TABLE @extschema@.fencing_lock (
  lock_name text PRIMARY KEY,
  lock_id bigint NOT NULL UNIQUE,
  owner regrole NOT NULL,
  users regrole[] NOT NULL DEFAULT '{}',
  lock_delay interval NOT NULL DEFAULT '0',
  announce boolean NOT NULL DEFAULT false,
  kind text NOT NULL DEFAULT 'exclusive',
  permits integer,
  token_source text NOT NULL DEFAULT 'granted'
    CONSTRAINT fencing_lock_token_source_check CHECK (token_source IN ('granted', 'external', 'unknown')),
  -- A place has joined the lock's line (1.10): only then does a grant look
  -- at the line, so that the locks nobody lines up for pay nothing for it.
  has_line boolean NOT NULL DEFAULT false,
  CONSTRAINT fencing_lock_kind CHECK (kind IN ('exclusive', 'semaphore', 'shared')),
  CONSTRAINT fencing_lock_permits CHECK ((kind = 'semaphore') = (permits IS NOT NULL))
);
CREATE INDEX fencing_lock_name_hash ON @extschema@.fencing_lock USING hash (lock_name);
REVOKE ALL ON @extschema@.fencing_lock FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock', '');
COMMENT ON TABLE @extschema@.fencing_lock IS
  'every lock name with its owner and the roles granted its use; written only through the fencing_ lock functions';
COMMENT ON COLUMN @extschema@.fencing_lock.token_source IS
  'where the lock''s tokens come from: granted (this database; others refused with 55Z03), external (another service), unknown (a lock from before 1.5: any token)';

-- Who may create lock names: a role (and every role with its privileges)
-- may create the names that start with prefix ('' for any name).  The
-- locks created under a rule belong to the rule's role, so that every
-- member of an application's group role can use the locks any of them
-- created.
CREATE TABLE @extschema@.fencing_lock_creator (
  creator regrole NOT NULL,
  prefix text NOT NULL,
  PRIMARY KEY (creator, prefix)
);
REVOKE ALL ON @extschema@.fencing_lock_creator FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lock_creator', '');
COMMENT ON TABLE @extschema@.fencing_lock_creator IS
  'which roles may create lock names, and with which prefix; set by fencing_allow_create()';

-- Whether role may use a lock with this owner and these users.
-- pg_has_role() is false for a role that no longer exists and true for a
-- superuser.  PUBLIC may call it (the views do, as the querying role): it
-- tells no more than pg_has_role() does.
CREATE FUNCTION @extschema@.fencing_role_may_use(role oid, owner regrole, users regrole[])
  RETURNS boolean LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN pg_catalog.pg_has_role(role, owner::oid, 'USAGE')
      OR EXISTS (SELECT FROM pg_catalog.unnest(users) u
                  WHERE pg_catalog.pg_has_role(role, u::oid, 'USAGE'));
COMMENT ON FUNCTION @extschema@.fencing_role_may_use(oid, regrole, regrole[]) IS
  'whether a role may use a lock with this owner and these users';

-- Whether role may read a lock's lease, history and statistics: the roles
-- that may use it, and the monitoring roles (pg_read_all_stats, which
-- pg_monitor has), which PostgreSQL lets read every session of
-- pg_stat_activity too.
CREATE FUNCTION @extschema@.fencing_role_may_read(role oid, owner regrole, users regrole[])
  RETURNS boolean LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN @extschema@.fencing_role_may_use(role, owner, users)
      OR pg_catalog.pg_has_role(role, 'pg_read_all_stats', 'USAGE');
COMMENT ON FUNCTION @extschema@.fencing_role_may_read(oid, regrole, regrole[]) IS
  'whether a role may read the leases, history and statistics of a lock with this owner and these users: those who may use it, and pg_read_all_stats';

-- The owner a lock created by role would get, or NULL if role may not
-- create it.  A name belongs to the role of the creator rule with the
-- longest prefix that covers it, whoever creates it; role may create it if
-- it has that role's privileges (a superuser has every role's), so no role
-- can take a name inside another's prefix.  A name that no rule covers can
-- be created only by a superuser, and belongs to it.
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

-- The check behind every use of a lock: returns the lock's id if role may
-- use it, after creating the lock if it does not exist, may_create is true
-- and role may create it; raises 42501 otherwise.  for_table, if given, is
-- the table being guarded under the lock, and role its owner: the error
-- then names the table.
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
-- that takes one, before any of the SQL below runs: the SQL takes them as
-- given.
--
-- Public functions that act for their caller are C "gates" (fencing_gate,
-- src/backend/locks.cpp).  A gate runs as its caller, so GetUserId() is the
-- role every PostgreSQL privilege check would use, and calls the function
-- of the same name with the suffix _as, passing that role first.  The _as
-- functions are SECURITY DEFINER (or need no privilege), and PUBLIC may not
-- call them, so that nobody can pass them a role other than their own.

-- A lock's row, locked for a change by its owner (a role with the owner's
-- privileges) or a superuser, the only ones who manage a lock.
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

-- fencing_set_token_source(lock_name, source): by the lock's owner or a
-- superuser, like the lock's other settings.
CREATE FUNCTION @extschema@.fencing_set_token_source_as(caller oid, lock_name text, source text)
  RETURNS void LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
BEGIN
  IF source IS NULL OR source NOT IN ('granted', 'external') THEN
    RAISE EXCEPTION 'token source must be ''granted'' or ''external'', got % (lock "%")',
      coalesce(pg_catalog.quote_literal(source), 'NULL'), lock_name USING ERRCODE = '22023';
  END IF;
  UPDATE @extschema@.fencing_lock k SET token_source = fencing_set_token_source_as.source
   WHERE k.lock_name = l.lock_name;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_set_token_source_as(oid, text, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_set_token_source_as(oid, text, text) IS
  'fencing_set_token_source() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_set_token_source(lock_name text, source text)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_set_token_source(text, text) IS
  'where the lock''s tokens come from: ''granted'' (this database''s grants; a token it never granted is refused with 55Z03) or ''external'' (another service''s; any token); the lock''s owner or a superuser only';

-- Creator rules are for superusers: PUBLIC may not call these, and they
-- check it themselves too, in case EXECUTE is granted carelessly.  They run
-- as their caller (no SECURITY DEFINER), so that the check is of the caller.
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

CREATE FUNCTION @extschema@.fencing_allow_create(creator regrole, prefix text DEFAULT '')
  RETURNS void LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @extschema@.fencing_require_superuser('let a role create fencing locks');
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
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM @extschema@.fencing_require_superuser('change which roles create fencing locks');
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
  SELECT k.lock_name, k.owner, k.users, k.lock_id, k.lock_delay, k.announce, k.kind, k.permits,
         k.token_source
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
-- 4. Guards and fencing_protect()
-------------------------------------------------------------------------------
-- The guard is a row trigger (and, under a lock, a TRUNCATE statement
-- trigger) that fencing_protect() puts on a table.  A per-row fence judges
-- each row's new token against the row's old one; a lock-wide fence
-- (option lock=NAME) judges it against the lock's mark (section 5).
CREATE FUNCTION @extschema@.fencing_guard() RETURNS trigger
  AS 'MODULE_PATHNAME', 'fencing_guard' LANGUAGE C;
COMMENT ON FUNCTION @extschema@.fencing_guard() IS
  'the guard trigger: refuses a write whose token is below the row''s (per-row fence) or the lock''s mark (lock-wide fence, option lock=NAME) with 55Z01, one without a token with 55Z02, and one this database never granted with 55Z03; fencing_protect() installs it BEFORE UPDATE, and INSERT with granted_tokens, FOR EACH ROW for a per-row fence, and BEFORE INSERT, UPDATE or DELETE FOR EACH ROW and BEFORE TRUNCATE under a lock; arguments: the token column, then option words allow_unset, skip, lock=NAME, granted_tokens or external_tokens, fence_reads';

-- Plain UPDATEs judged in their own projection (src/backend/
-- update_check.cpp): with pg_fencing.fast_update on, the planner wraps the
-- SET expression of a guarded token column in this call, and the statement
-- runs without the guard's UPDATE trigger.  EXECUTE stays with PUBLIC, since
-- every role's UPDATE of a guarded table calls it; called by hand, it
-- judges only for a role that may UPDATE the trigger's table, and does
-- nothing that role's own UPDATE would not do.
CREATE FUNCTION @extschema@.fencing_guard_check(
    new_token @extschema@.fencing_token, old_token @extschema@.fencing_token,
    guard_trigger oid, guarded_table oid)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_guard_check'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_guard_check(@extschema@.fencing_token, @extschema@.fencing_token, oid, oid) IS
  'judges one row of a plain UPDATE of a guarded table as its fencing_guard trigger would, in the UPDATE''s projection, and returns the token to store; put there by the planner (pg_fencing.fast_update); internal';

-- A table with its partitions and inheritance children, at any depth.
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

-- fencing_protect() is C (src/backend/guard.cpp): it checks the table, the
-- token column, the options and the lock's permissions, then calls
-- fencing_protect_as, which creates the triggers as the caller, so that
-- CREATE TRIGGER checks the caller's rights on each table.  A per-row fence
-- guards UPDATE, and INSERT too when its tokens are this database's grants
-- (option word granted_tokens, which fencing_protect() adds unless told
-- external_tokens): an INSERT's token is the row's first, and one that
-- nobody granted would refuse every holder after it.  A lock-wide fence
-- guards INSERT, UPDATE, DELETE and TRUNCATE.
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
      -- A per-row fence guards UPDATE, and from 1.5, when its tokens are
      -- this database's grants, INSERT too: an INSERT's token is the row's
      -- first, and one nobody granted would refuse every holder after it.
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER fencing_guard BEFORE %s ON %s '
        'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)',
        CASE WHEN 'granted_tokens' OPERATOR(pg_catalog.=) ANY (all_options)
             THEN 'INSERT OR UPDATE' ELSE 'UPDATE' END,
        part, trigger_args);
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

CREATE FUNCTION @extschema@.fencing_protect(
    tbl regclass, token_column name DEFAULT NULL, options text[] DEFAULT '{}',
    lock_name text DEFAULT NULL)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_protect' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_protect(regclass, name, text[], text) IS
  'installs the fencing_guard trigger on a table, its partitions and inheritance children (its only fencing_token column unless named): a per-row fence on UPDATE, and on INSERT when its tokens are this database''s grants (the default; option external_tokens for another service''s); with lock_name (or option lock=NAME) a lock-wide fence on INSERT, UPDATE, DELETE and TRUNCATE, if the caller and the tables'' owners may use the lock, and with option fence_reads a read fence too';

-- Drops only the triggers fencing_protect() creates, by their names and
-- only when they call this extension's fencing_guard() (a trigger of the
-- user's own that happens to be called fencing_guard stays), on the table
-- and on the tables below it, and takes the read fence down with what was
-- changed for it.  Not SECURITY DEFINER: DROP TRIGGER checks that the
-- caller owns the table, as for fencing_protect().
CREATE FUNCTION @extschema@.fencing_unprotect(tbl regclass)
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
COMMENT ON FUNCTION @extschema@.fencing_unprotect(regclass) IS
  'removes what fencing_protect() installed on a table, its partitions and inheritance children: the triggers fencing_guard and fencing_guard_truncate, and the read fence; 55000 if the table has no guard';

-- Trigger tampering.  DROP TRIGGER, ALTER TRIGGER and ALTER TABLE ...
-- DISABLE TRIGGER need the table's owner, but CREATE OR REPLACE TRIGGER
-- needs only the TRIGGER privilege, which GRANT ALL includes: a role with
-- it could replace a guard with a trigger of its own.  This event trigger
-- refuses, at the end of the command (which then rolls back), a trigger
-- named like a guard or calling fencing_guard() that a role without the
-- table owner's privileges created or replaced; and a table that would
-- inherit from a guarded table without a guard of its own (an inheritance
-- parent's triggers do not fire for its children's rows).  A superuser can
-- disable it (ALTER EVENT TRIGGER); fencing_audit() reports that.
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
-- 5. Lock-wide fences and read fences
-------------------------------------------------------------------------------
-- One row per lock: its mark, the highest token seen under it, raised by
-- a lease grant, a revoke or a write to a table guarded under the lock (a
-- fencing_present() is judged against it and takes the fence, but does not
-- move it); fencing_reset_mark() sets it.  Only the extension's functions
-- write it.  Found by name through a hash index, as fencing_lock is.
-- fillfactor 20: a lock's mark is rewritten at every grant, and PostgreSQL
-- prunes a page only once its free space falls below what the fillfactor
-- keeps free; at 20 % pages are pruned early and the chains of row
-- versions that every look walks stay short (measured: 9 % fewer
-- instructions per acquire and release than at 100 %, for about five
-- times the space: with 100,000 locks, 22 MB of fencing_fence and 71 MB of
-- fencing_lease instead of about 4 and 14).
CREATE TABLE @extschema@.fencing_fence (
  lock_name text PRIMARY KEY,
  high_water @extschema@.fencing_token NOT NULL
) WITH (fillfactor = 20);
CREATE INDEX fencing_fence_name_hash ON @extschema@.fencing_fence USING hash (lock_name);
REVOKE ALL ON @extschema@.fencing_fence FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_fence', '');
COMMENT ON TABLE @extschema@.fencing_fence IS
  'highest fencing token seen per lock; written only by the extension: a write under a lock-wide fence that raises the mark (fencing_fence_advance()), a presentation (fencing_fence_lock()), lease and shared-lease grants, fencing_revoke() and fencing_reset_mark()';

-- Locks the lock's mark (creating it) and raises it to token if token is
-- higher; returns the mark as it was (NULL: none), below which the caller
-- judges a token stale.  The guard calls it once per lock per transaction,
-- and again only when a higher token comes along.
CREATE FUNCTION @extschema@.fencing_fence_advance(lock_name text, token @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  previous @extschema@.fencing_token;
BEGIN
  SELECT f.high_water INTO previous FROM @extschema@.fencing_fence f
   WHERE f.lock_name = fencing_fence_advance.lock_name FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO @extschema@.fencing_fence VALUES (fencing_fence_advance.lock_name, token)
      ON CONFLICT DO NOTHING;
    IF FOUND THEN
      RETURN NULL;
    END IF;
    -- Someone created it meanwhile (and has committed): lock theirs.
    SELECT f.high_water INTO previous FROM @extschema@.fencing_fence f
     WHERE f.lock_name = fencing_fence_advance.lock_name FOR NO KEY UPDATE;
  END IF;
  IF token OPERATOR(@extschema@.>) previous THEN
    UPDATE @extschema@.fencing_fence f SET high_water = token
     WHERE f.lock_name = fencing_fence_advance.lock_name;
  END IF;
  RETURN previous;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_fence_advance(text, @extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_fence_advance(text, @extschema@.fencing_token) IS
  'locks a lock''s high-water mark (making it) and raises it to token if token is higher; returns the mark before; called by the lock-wide guard; internal';

-- Locks the lock's mark (creating it at 0) without moving it, and returns
-- it: a presentation (fencing_present()) is judged against the mark and
-- takes the fence, but only a write or a grant moves the mark -- so a role
-- that may present but writes nothing cannot push a lock's mark up and
-- lock its holders out.
CREATE FUNCTION @extschema@.fencing_fence_lock(lock_name text)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  mark @extschema@.fencing_token;
BEGIN
  INSERT INTO @extschema@.fencing_fence VALUES (fencing_fence_lock.lock_name, '0')
    ON CONFLICT DO NOTHING;
  SELECT f.high_water INTO mark FROM @extschema@.fencing_fence f
   WHERE f.lock_name = fencing_fence_lock.lock_name FOR NO KEY UPDATE;
  RETURN mark;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_fence_lock(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_fence_lock(text) IS
  'locks a lock''s high-water mark without moving it; internal to fencing_present';

CREATE FUNCTION @extschema@.fencing_present(lock_name text, token @extschema@.fencing_token)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_present' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_present(text, @extschema@.fencing_token) IS
  'declares the token the current transaction writes under for a lock (until commit or rollback); 55Z01 if the lock has seen a higher one; takes the lock''s fence but does not move its mark';

-- The fence gate, so that the writers of one holder run in parallel: a
-- writer whose token is the mark holds the lock's fence gate shared (a lock
-- in the lock manager, src/backend/fences.cpp), and whatever raises the
-- mark (a grant, a revoke) takes it exclusively first, so it waits for
-- every write in flight, and the writes after it wait for its commit and
-- are judged against the new mark.  The lease engine takes it in C, the SQL
-- here through this function.  PUBLIC may not call it: holding the gate
-- stops every writer under the lock.
CREATE FUNCTION @extschema@.fencing_lock_fence_gate(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_lock_fence_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_fence_gate(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_fence_gate(bigint) IS
  'takes a lock''s fence gate exclusively until the end of the transaction, before its mark is raised; internal';

-- After a grant or a revoke, the transaction that made it judges its own
-- next write under the lock afresh.
CREATE FUNCTION @extschema@.fencing_forget_fence(lock_name text) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_forget_fence' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_forget_fence(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_forget_fence(text) IS
  'makes the current transaction read the lock''s mark again at its next write under it; internal';

-- The marks of the locks the current role may use.  A security barrier:
-- without it, a condition of the caller's own could run on fencing_fence's
-- rows before the join to fencing_locks filters them.
CREATE VIEW @extschema@.fencing_fences WITH (security_barrier) AS
  SELECT f.lock_name, f.high_water
    FROM @extschema@.fencing_fence f
    JOIN @extschema@.fencing_locks k ON k.lock_name = f.lock_name;
GRANT SELECT ON @extschema@.fencing_fences TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_fences IS
  'the highest fencing token seen per lock, for the locks the current role may use';

-- Reads under a lock-wide fence (src/backend/fences.cpp): for a row-level
-- security policy that lets only the transactions of the lock's current
-- holder read a table (docs/functions.md, "Reads under a lock-wide fence").
CREATE FUNCTION @extschema@.fencing_reads_allowed(lock_name text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_reads_allowed' LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.fencing_reads_allowed(text) IS
  'whether this transaction has presented a token for the lock (fencing_present) that is still in force: the lock''s mark cannot pass it before the transaction ends; for a row-level security policy';

-- Option fence_reads of fencing_protect(): the recipe of "Reads under a
-- lock-wide fence" made on the table and every table below it.  A
-- RESTRICTIVE FOR SELECT policy fencing_read_fence lets a transaction read
-- rows only while it has presented the lock's current token.  Row-level
-- security is enabled (with a permissive policy fencing_read_fence_rows
-- that lets every row through, as a table without row-level security does)
-- and forced (so that the table's owner is fenced too) only where it was
-- not already; the policy's comment records which, and
-- fencing_remove_read_fence() -- called by fencing_unprotect(), and by
-- fencing_protect() again without the option -- undoes exactly that.  Both
-- run as the caller: only a table's owner may change its policies.
-- fencing_protect() calls this one after checking the lock; PUBLIC may not
-- call it directly.
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

-------------------------------------------------------------------------------
-- 6. Leases
-------------------------------------------------------------------------------
-- A lease is a row, not a session lock: it survives connection recycling
-- and works through transaction-pooling PgBouncer.  Its expiry is judged by
-- the server's clock_timestamp() alone.  The row of a lock stays after a
-- release or an expiry: its token is the lock's latest grant.  The lease
-- engine (src/backend/lease_engine.cpp, lease_tables.cpp) reads and writes
-- the table directly: its columns are the engine's contract.
--   holder_role  the login role that acquired the lease, an identity the
--                server has verified: only that role renews or releases it
--   payload      what the holder publishes with the lease
--   ended        NULL while the lease is live and after it ran out,
--                'released' or 'revoked' when it was ended before its time
--                (only an expiry starts the lock-delay), 'expired' once the
--                expiry has been announced, so that it is announced once
--                (an expired lease starts the lock-delay, marked or not)
--   end_reason   the reason a revoke gave
--   grant_count  the lease's number among the lock's grants; the history
--                keeps a lock's leases in slots grant_count % history_size
--                (section 9)
-- No CHECK constraints: the functions that write the table check their
-- arguments, and a CHECK is evaluated for every statement that writes it
-- (a fifth of a lease cycle's cost, measured).  fillfactor 20 and a hash
-- index on the name, as for fencing_fence: a lease row is rewritten twice
-- per acquire and release.  fencing_lease_token finds which exclusive lease
-- a token written under belongs to (a per-row fence knows only the token):
-- a transaction cannot commit a write under a lease that has ended (55Z04),
-- and with the library preloaded it is ended once the lease ends
-- (src/backend/lease_writers.cpp).  It is not unique: a restore could bring
-- back rows that share a token.
CREATE TABLE @extschema@.fencing_lease (
  lock_name text PRIMARY KEY,
  holder text NOT NULL,
  holder_role name NOT NULL,
  token @extschema@.fencing_token NOT NULL,
  granted_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  payload jsonb,
  ended text,
  end_reason text,
  grant_count bigint NOT NULL DEFAULT 1,
  -- The session the lease was taken in (1.8; NULL: none).  Its end is the
  -- session's while it has not ended early: a release leaves the id, so
  -- that it stays a HOT update (the views show it only while in it).
  session_id bigint
) WITH (fillfactor = 20);
CREATE INDEX fencing_lease_name_hash ON @extschema@.fencing_lease USING hash (lock_name);
CREATE INDEX fencing_lease_token ON @extschema@.fencing_lease (token);
-- A session's leases, for its close and its sweep; partial, so that a plain
-- grant (session_id NULL before and after) stays a HOT update.
CREATE INDEX fencing_lease_session ON @extschema@.fencing_lease (session_id)
  WHERE session_id IS NOT NULL;
REVOKE ALL ON @extschema@.fencing_lease FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lease', '');
COMMENT ON TABLE @extschema@.fencing_lease IS
  'one row per lock: its latest grant; written only through the fencing_ lease functions';

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
  expires_at timestamptz NOT NULL,
  -- The key of the session's hold (fencing_session_hold): random, so that
  -- pg_locks, which every role reads, shows nothing that acts in the
  -- session or tells its id.  A default, so that the rows of a dump made
  -- before 1.9, which have none, load.
  hold_key bigint NOT NULL
    DEFAULT ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()), 9, 8), 'hex'))::bit(64)::bigint
) WITH (fillfactor = 20);
-- A role's sessions, for its limit and its own sweep.  Not on expires_at:
-- a renewal writes that, and stays a HOT update.
CREATE INDEX fencing_session_role ON @extschema@.fencing_session (holder_role);
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

-- Argument checks shared by every lease function, so that all fail alike:
-- true, or an error (22023) that says what is wrong.  Called as an
-- expression (checked := ...), which PL/pgSQL evaluates without starting a
-- query.
-- A ttl is judged as the time from now to now plus it on the server's
-- clock (hence STABLE): '-1 year 360 days 1 sec' is no positive ttl.
CREATE FUNCTION @extschema@.fencing_check_lease_args(
    lock_name text, holder text, ttl interval, check_holder boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_check_lease_args'
  LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_check_lease_args(text, text, interval, boolean) IS
  'the argument checks the lease functions share: true, or 22023 naming what is wrong with the lock name, the holder (when asked) or the ttl (counted from now on the server''s clock); reads and changes nothing';

-- The check of every wait (22023 when negative, counted from now on the
-- server's clock, or longer than the longest), shared by the waiting
-- acquires, fencing_await and fencing_session_acquire_all.  NULL: no wait.
CREATE FUNCTION @extschema@.fencing_check_wait(wait interval, lock_name text)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_check_wait'
  LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_check_wait(interval, text) IS
  'the check of a wait: true, or 22023 when it is negative (counted from now on the server''s clock) or longer than 2147483.647 seconds; reads and changes nothing';

-- The COMMIT check (src/backend/lease_writers.cpp) takes a lease that the
-- transaction itself ended early, while it lived, as ended by the commit:
-- the SQL that ends live leases (a session's close, a revoke) tells it so,
-- token by token, as the C release does.  Not PUBLIC's: a role that could
-- call it would declare any lease ended by its own transaction.
CREATE FUNCTION @extschema@.fencing_note_ended_here(token @extschema@.fencing_token)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_note_ended_here' LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION @extschema@.fencing_note_ended_here(@extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_note_ended_here(@extschema@.fencing_token) IS
  'tells the COMMIT check that this transaction has just ended the live lease under token early; internal';

-- One attempt to take the lock (free, expired, or the caller's already),
-- in C (src/backend/lease_engine.cpp): fencing_acquire() without a wait
-- makes it itself, and the waiting acquire repeats it through this
-- function.  PUBLIC may not call it: it takes the lock for whoever calls
-- it, without the permission check the waiting acquire has made.
CREATE FUNCTION @extschema@.fencing_try_acquire(
    p_lock text, p_holder text, p_ttl interval, p_lock_id bigint, p_payload jsonb)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_try_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval, bigint, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval, bigint, jsonb) IS
  'one acquire attempt, shared by both forms of fencing_acquire; internal';

-- fencing_acquire() for its caller: one attempt (without a wait), or,
-- with a wait, checked, then queued in the lock's waiting room
-- (fencing_wait_to_acquire, section 8).  The C fencing_acquire() makes the
-- attempt without a wait itself, and calls the second form for a wait.
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

CREATE FUNCTION @extschema@.fencing_acquire_as(
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
REVOKE ALL ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, interval, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_acquire_as(oid, text, text, interval, interval, jsonb) IS
  'fencing_acquire for the role that called it; internal';

-- One function for both forms, with and without a wait (a NULL wait is no
-- wait): a payload (payload => jsonb, in named notation) could not be
-- added to two separate forms without making fencing_acquire('l', 'h',
-- '30 s', '10 s') ambiguous.  fencing_acquire, fencing_renew and
-- fencing_release are the C lease engine (src/backend/lease_engine.cpp),
-- with statements prepared once per backend: each runs as its caller,
-- checks it with the lock model's rule (fencing_role_may_use, or
-- fencing_lock_authorize to create a lock or refuse one), and acts on the
-- extension's tables as their owner.  Renew and release also serve
-- permits and shared leases (section 7).
CREATE FUNCTION @extschema@.fencing_acquire(
    lock_name text, holder text, ttl interval, wait interval DEFAULT NULL,
    payload jsonb DEFAULT NULL)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_acquire(text, text, interval, interval, jsonb) IS
  'takes the lock for ttl and returns a new fencing token; with wait, waits up to that long in arrival order; NULL if another holder has a live lease (or an expired one is within its lock-delay); the live holder gets its own token back with the lease extended and its payload replaced; 42501 unless the caller may use (or create) the lock';

CREATE FUNCTION @extschema@.fencing_renew(
    lock_name text, token @extschema@.fencing_token, ttl interval)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_renew' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_renew(text, @extschema@.fencing_token, interval) IS
  'extends a live lease, permit or shared lease to now + ttl; false if token is not the current token of one on the lock, it expired (never revived), or the caller''s role did not acquire it';

CREATE FUNCTION @extschema@.fencing_release(lock_name text, token @extschema@.fencing_token)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_release(text, @extschema@.fencing_token) IS
  'ends a live lease, permit or shared lease at once; false if token is not the current token of a live one acquired by the caller''s role';

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
    LEFT JOIN @extschema@.fencing_session s ON s.session_id = l.session_id
   WHERE l.lock_name = fencing_leader_as.lock_name
     AND @extschema@.fencing_lease_end(l.expires_at, l.ended, s.expires_at) > clock_timestamp();
  RETURN leader;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_leader_as(oid, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_leader_as(oid, text) IS
  'fencing_leader() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_leader(lock_name text) RETURNS text
  AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_leader(text) IS
  'the live holder of the lock, or NULL; 42501 if the caller may not use the lock';

-- Every lock the current role may use (every lock for pg_read_all_stats)
-- with its latest lease.  available_at is the one place the rule of when a
-- lock can next be granted is written: the end of a live lease plus the
-- lock-delay (it may expire), the end of an expired one plus the delay, or
-- the moment a released or revoked lease ended; NULL: no lease yet.
CREATE VIEW @extschema@.fencing_leases WITH (security_barrier) AS
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
GRANT SELECT ON @extschema@.fencing_leases TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_leases IS
  'every lock the current role may use (every lock for pg_read_all_stats) with its latest grant; live is judged by the server clock now';

-- Revoke: an operator ends a lease during an incident; the lock's owner (a
-- role with its privileges) or a superuser only.  Behind the fence gate
-- (it waits for every transaction writing under the current mark, and for
-- a shared grant in flight, whose lease it then ends too), it ends the live
-- lease, the permits and the shared leases, and raises the mark to a new
-- token above every holder's, so that each holder's writes under the lock
-- are refused from its commit on and the next grant is above it.  A
-- semaphore's permits are fenced each by a new token in its slot (behind
-- the slot's gate, so writes in flight under the old one finish first);
-- shared holders by the mark.  What it ended is announced and counted.
CREATE FUNCTION @extschema@.fencing_revoke_as(caller oid, lock_name text, reason text)
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
      PERFORM @extschema@.fencing_note_ended_here(p.token);
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
    PERFORM @extschema@.fencing_note_ended_here(ended_token);
  END IF;
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
-- 7. Semaphores and shared leases
-------------------------------------------------------------------------------
-- How a lock is leased (fencing_lock.kind):
--   exclusive  one holder at a time (fencing_acquire); every lock starts so
--   semaphore  up to permits holders at a time (fencing_acquire_permit),
--              each on a permit (a slot) fenced on its own: a token is
--              accepted while it is its slot's latest grant
--   shared     any number of shared holders (fencing_acquire_shared) or one
--              exclusive holder (fencing_acquire); the lock's mark fences
--              the shared holders only when an exclusive grant passes them
-- A lock becomes a semaphore at its first permit if fencing_acquire never
-- granted it, and shared at its first shared grant; neither changes back.

-- The live and past leases of semaphores and shared locks, one row per
-- slot: a semaphore's slots are 1..permits, a shared lock's are numbered as
-- its holders come and reused once free.  A slot's row is its latest grant,
-- so a token is current for its slot while a row carries it (the guard
-- looks a written token up in fencing_permit_token: src/backend/
-- fences.cpp).  ended: 'released' or 'revoked' (the slot is free at once),
-- 'expired' (marked by the expiry worker, or by the exclusive grant that
-- passed a shared holder), NULL while live and after an expiry (the slot
-- is free after the lock's lock-delay).  grant_count: the slot grant's
-- number among the lock's slot grants, which the history keeps in a ring
-- of their own (section 9).
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
  grant_count bigint NOT NULL DEFAULT 1,
  PRIMARY KEY (lock_id, slot),
  session_id bigint  -- the session it was taken in (1.8), as fencing_lease's
);
CREATE UNIQUE INDEX fencing_permit_token ON @extschema@.fencing_permit (token);
-- A session's permits and shared leases, for its close and its sweep.
CREATE INDEX fencing_permit_session ON @extschema@.fencing_permit (session_id)
  WHERE session_id IS NOT NULL;
REVOKE ALL ON @extschema@.fencing_permit FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_permit', '');
COMMENT ON TABLE @extschema@.fencing_permit IS
  'the latest grant of each permit of a semaphore and of each shared holder slot of a shared lock; read through fencing_permits';

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

-- When a slot can be granted again, as fencing_leases.available_at says for
-- a lease: at once after a release or a revoke, after the lock-delay after
-- an expiry.
CREATE FUNCTION @extschema@.fencing_permit_free_at(
    expires_at timestamptz, ended text, lock_delay interval)
  RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN ended IS NULL OR ended = 'expired' THEN expires_at + lock_delay
              ELSE expires_at END;
COMMENT ON FUNCTION @extschema@.fencing_permit_free_at(timestamptz, text, interval) IS
  'when a permit''s slot can be granted again; internal';

CREATE VIEW @extschema@.fencing_permits WITH (security_barrier) AS
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
GRANT SELECT ON @extschema@.fencing_permits TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_permits IS
  'the permits of the semaphores and the shared holders of the shared locks the current role may use (every lock for pg_read_all_stats), one row per slot with its latest grant';

-- A permit's fence gate (src/backend/fences.cpp): the writers under the
-- slot's current token hold it shared, and a new grant of the slot takes
-- it exclusively first, so it waits for the old holder's writes in flight.
-- pg_locks shows it as an advisory lock with classid the slot, objid the
-- lock's lock_id and objsubid 4.  PUBLIC may not call it: holding a gate
-- stops every writer of the slot.
CREATE FUNCTION @extschema@.fencing_lock_permit_gate(lock_id bigint, slot integer) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_lock_permit_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lock_permit_gate(bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lock_permit_gate(bigint, integer) IS
  'takes the fence gate of a permit exclusively until the end of the transaction, before the permit is granted again; internal';

-- The same without waiting: a grant prefers a free slot whose old holder
-- has no write in flight.
CREATE FUNCTION @extschema@.fencing_try_permit_gate(lock_id bigint, slot integer) RETURNS boolean
  AS 'MODULE_PATHNAME', 'fencing_try_permit_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_permit_gate(bigint, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_permit_gate(bigint, integer) IS
  'takes the fence gate of a permit exclusively if no writer holds it; internal';

-- A shared grant holds the lock's fence gate shared, so that a revoke (which
-- takes it exclusively) waits for the grant and then ends its lease too.
CREATE FUNCTION @extschema@.fencing_share_fence_gate(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_share_fence_gate' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_share_fence_gate(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_share_fence_gate(bigint) IS
  'takes a lock''s fence gate shared until the end of the transaction; internal';

-- The lock of the kind an acquire wants, or the error that says why not.
-- want: 'semaphore' (with permits) or 'shared'.  A lock that is still
-- exclusive becomes what is wanted, unless fencing_acquire granted it (for
-- a semaphore) or its mark is above its last grant (for a shared lock).
-- Called before the attempt (so that a conflict is an error even while
-- others wait) and again inside it, in the waiting room, where alone the
-- kind changes.
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

-- One attempt at a permit (p_permits given) or a shared lease (NULL), in C
-- (src/backend/lease_engine.cpp, AttemptSlot); NULL when none can be
-- granted now.  Grants of a lock, of every kind, take turns in its waiting
-- room, so that nobody takes one from under the first waiter in line, and
-- a waiting exclusive acquirer, which sits in the room, holds off every
-- new shared grant.  The caller's own live permit taken again counts as a
-- renewal.  fencing_acquire_permit and fencing_acquire_shared without a
-- wait make the attempt themselves when the lock is already of the kind
-- they ask for; otherwise through fencing_acquire_permits_as.
CREATE FUNCTION @extschema@.fencing_try_permit(
    p_lock_id bigint, p_holder text, p_permits integer, p_ttl interval)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_try_permit'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_permit(bigint, text, integer, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_permit(bigint, text, integer, interval) IS
  'one attempt at a permit of a semaphore or a shared lease; internal';

-- Both acquires for their caller: one attempt, or with a wait, queued in
-- arrival order and woken by releases.  Making an exclusive lock a
-- semaphore or a shared lock changes how every table under it is fenced:
-- the lock's owner decides that, not its users.
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
-- fencing_release when the token is not the lock's exclusive lease; only
-- the login role that was granted it may move it.  The lease engine does
-- this in C now (src/backend/lease_engine.cpp, MovePermitEnd); the SQL
-- stays for a backend that loaded a library older than 1.7.
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
  'renews or releases the caller''s live permit or shared lease, for the libraries before 1.7 (which do it in C); internal';

-- The exclusive grant of a shared lock (src/backend/lease_engine.cpp), in
-- the waiting room and judged as committed now: false while a shared holder
-- is live or within its lock-delay; otherwise the shared holders' rows are
-- marked ended (their expiries announced and counted with the grant), so
-- that a renew racing the grant finds them changed, and true.
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
REVOKE ALL ON FUNCTION @extschema@.fencing_end_shared_holders(bigint, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_end_shared_holders(bigint, interval) IS
  'before an exclusive grant of a shared lock: whether every shared holder is gone; internal';

-------------------------------------------------------------------------------
-- 8. Waiting
-------------------------------------------------------------------------------
-- A lock's waiting room is where its acquirers that wait queue, in arrival
-- order (the lock manager grants a contended lock first come, first
-- served): the one in the room is the one waiter that makes attempts, and
-- an acquirer that does not wait takes a free lock only while the room is
-- empty, so waiters are never starved by newcomers.  The room is a
-- lock-manager lock in a field that SQL's advisory locks cannot name
-- (src/backend/lease_wakeup.cpp), so that no role can take it with
-- pg_advisory_lock() and hold every acquire off: pg_locks shows it as an
-- advisory lock with classid 1178947139 ('FENC'), objid the lock's lock_id
-- and objsubid 3.
CREATE FUNCTION @extschema@.fencing_waiting_room(lock_id bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (x'46454e43'::bigint << 32) | lock_id;
COMMENT ON FUNCTION @extschema@.fencing_waiting_room(bigint) IS
  'the numbers of a lock''s waiting room (pg_locks: classid 1178947139, objid the lock''s lock_id, objsubid 3 from 1.4: no SQL advisory lock can take it)';

-- Hand-over without polling (src/backend/lease_wakeup.cpp): the first
-- waiter of a lock, the one in its room, sleeps on its latch, and the
-- commit of a transaction that frees the lease or moves its end sets it.
-- Nothing session-scoped and nothing preloaded: both sides act within one
-- call or one transaction.
CREATE FUNCTION @extschema@.fencing_wake_waiters_at_commit(lock_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'fencing_wake_waiters_at_commit' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_wake_waiters_at_commit(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_wake_waiters_at_commit(bigint) IS
  'when the current transaction commits, wakes the first acquirer waiting for the lock to look at its lease again; for every change that frees a lease or moves its end; internal';

-- When an exclusive grant can next be made, as things stand: after the
-- lease (fencing_leases.available_at), and on a shared lock after its
-- shared holders too.  NULL: no lease yet.  Its callers run as the
-- extension's owner, which sees every lock in the view.
CREATE FUNCTION @extschema@.fencing_available_at(p_lock text) RETURNS timestamptz
  LANGUAGE sql STABLE STRICT
  BEGIN ATOMIC
    SELECT greatest(
      (SELECT v.available_at FROM @extschema@.fencing_leases v WHERE v.lock_name = p_lock),
      (SELECT max(@extschema@.fencing_permit_free_at(p.ends_at, p.ended, k.lock_delay))
         FROM @extschema@.fencing_permit_ends p
         JOIN @extschema@.fencing_lock k ON k.lock_id = p.lock_id
        WHERE k.lock_name = p_lock AND k.kind = 'shared'));
  END;
REVOKE ALL ON FUNCTION @extschema@.fencing_available_at(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_available_at(text) IS
  'when a lock can next be granted, as things stand (its lease''s end, plus the lock-delay after an expiry); internal';

-- When the next attempt at a permit or a shared lease may succeed: a
-- semaphore's first slot to come free, a shared lock's exclusive lease's
-- end (plus its lock-delay).
CREATE FUNCTION @extschema@.fencing_permit_available_at(p_lock_id bigint)
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
REVOKE ALL ON FUNCTION @extschema@.fencing_permit_available_at(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_permit_available_at(bigint) IS
  'when a permit or a shared lease of the lock may next be granted, as things stand; internal';

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

-- The waiting loop of every acquire function, in C beside fencing_await's
-- (src/backend/lease_await.cpp): queues in the lock's waiting room until
-- the end of the transaction, then, first in line, makes an attempt
-- (fencing_try_acquire for an exclusive lease, fencing_try_permit for a
-- permit or a shared one) whenever it is woken by a release's commit, the
-- lock may have become available (fencing_available_at,
-- fencing_permit_available_at) or the wait is over.  The whole wait is one
-- statement, so it holds its snapshot.
CREATE FUNCTION @extschema@.fencing_wait_to_acquire(
    lock_name text, lock_id bigint, holder text, permits integer, ttl interval, wait interval,
    payload jsonb, exclusive boolean)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_wait_to_acquire'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_wait_to_acquire(text, bigint, text, integer, interval, interval, jsonb, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_wait_to_acquire(text, bigint, text, integer, interval, interval, jsonb, boolean) IS
  'queues for a lock and makes attempts until one succeeds or the wait is over; internal to the waiting acquires';

-- CALL fencing_await(...) waits as the waiting acquires do, in arrival
-- order and woken by a release's commit, but commits each attempt before
-- it sleeps: while it waits its backend holds no snapshot and no
-- transaction id, so VACUUM removes what died meanwhile anywhere in the
-- database (src/backend/lease_await.cpp).  INOUT token, not OUT: a
-- procedure's OUT argument could not follow the ones with defaults, and
-- CALL would need a placeholder for it; whatever is passed for it is
-- ignored.  Not SECURITY DEFINER (a procedure that is cannot commit): it
-- runs as its caller, and its attempts are the acquire functions, with
-- their permission checks.  With session => (1.8) its attempts are
-- fencing_session_acquire, with no holder and no ttl of their own, and a
-- sleep ends at the session's end too, where the next attempt fails with
-- 55Z05 and leaves the lock's room to the next in line.  One procedure,
-- not an overload: a second fencing_await would make the plain form's
-- calls with literals ambiguous.  holder, ttl and wait have defaults only
-- so that session => can leave the first two out; a plain call without
-- them is refused as before.
CREATE PROCEDURE @extschema@.fencing_await(
    lock_name text, holder text DEFAULT NULL, ttl interval DEFAULT NULL,
    wait interval DEFAULT NULL,
    kind text DEFAULT 'exclusive', permits integer DEFAULT NULL, payload jsonb DEFAULT NULL,
    session bigint DEFAULT NULL,
    INOUT token @extschema@.fencing_token DEFAULT NULL)
  AS 'MODULE_PATHNAME', 'fencing_await' LANGUAGE C;
COMMENT ON PROCEDURE @extschema@.fencing_await(text, text, interval, interval, text, integer, jsonb, bigint, @extschema@.fencing_token) IS
  'waits up to wait, in arrival order, for the lock (kind exclusive, shared, or permit with permits; in the session with session =>) and returns its new token, NULL if the wait ran out; commits between attempts, so that it holds no snapshot while it waits; not inside a transaction block';

-------------------------------------------------------------------------------
-- 9. Observability: events, statistics, rejections, history
-------------------------------------------------------------------------------
-- Announcements: NOTIFY fencing_events for each grant, release, expiry and
-- revoke of a lease, permit or shared lease, from the transaction that
-- makes it (src/backend/lease_events.cpp).  PostgreSQL has no privilege on
-- LISTEN: every role connected to the database can read every payload on
-- every channel, while a lock's name, holder and token are for the roles
-- that may use the lock.  So a lock is announced only once its owner says
-- so (fencing_lock.announce).
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

-- One event of a lease, for the SQL that makes one (the revoke, the permit
-- functions): announced if the lock is, and counted in fencing_lock_stats
-- at commit.
CREATE FUNCTION @extschema@.fencing_lease_event(
    lock_name text, event text, holder text, token @extschema@.fencing_token)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_lease_event'
  LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_lease_event(text, text, text, @extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_lease_event(text, text, text, @extschema@.fencing_token) IS
  'announces and counts one event of a lease; internal';

-- Expiries: a lease, permit or shared lease that ran out is marked ended =
-- 'expired' once it has been announced, so that it is announced once.  The
-- background worker calls this (src/backend/expiry_worker.cpp).
CREATE FUNCTION @extschema@.fencing_announce_expiries() RETURNS timestamptz
  AS 'MODULE_PATHNAME', 'fencing_announce_expiries' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_announce_expiries() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_announce_expiries() IS
  'announces (and counts) every lease, permit and shared lease that has run out and was not yet announced, marks it ended = ''expired'', and returns the end of the next live one (NULL: none); the background worker calls it, or a scheduled job where the library is not preloaded; superuser only';

-- Statistics, kept in shared memory (shared_preload_libraries =
-- 'pg_fencing'; without it these raise 55000; src/backend/
-- shared_stats.cpp).  The C functions return only the rows the calling
-- role may see: every row to superusers and members of pg_read_all_stats;
-- otherwise a lock's counters to the roles that may use the lock, a
-- table's to the roles that may SELECT from it, and a refused write's
-- role, application and address to the roles that have that role's
-- privileges (as pg_stat_activity does).
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

-- Every lock the role may use (every lock for pg_read_all_stats), with
-- zeros where nothing happened since the last reset.  waiting: the
-- sessions in the lock's waiting room, from pg_locks.
-- fencing_lock_stats comes after the line (section 12), whose places its
-- waiting counts.

CREATE VIEW @extschema@.fencing_table_stats AS
  SELECT c.relid, c.stale_rejections, c.missing_rejections
    FROM @extschema@.fencing_table_counters() c;
GRANT SELECT ON @extschema@.fencing_table_stats TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_table_stats IS
  'per protected table: writes refused with a stale token (55Z01) or without one (55Z02) since fencing_stats_reset(); needs shared_preload_libraries = ''pg_fencing''';

-- Refused writes, kept although their transactions rolled back.
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

-- The history: the last pg_fencing.history_size leases of each lock, kept
-- in slots so that it stays bounded without anything pruning it.  A lock's
-- exclusive leases go into entry lock_id * 2^20 + grant_count %
-- history_size (the setting stays below 2^20); its permits and shared
-- leases, numbered apart (fencing_permit.grant_count), into a ring of
-- their own, entry -(lock_id * 2^20 + grant_count % history_size), with
-- their slot.  A lease goes into the history when a grant replaces it
-- (for a slot: when the slot is granted again, src/backend/
-- lease_engine.cpp, RecordEndedSlot); until then its own row is its entry
-- (the view).  The lease engine writes the table directly
-- (src/backend/lease_tables.cpp): its columns are the engine's contract.
-- fillfactor 50: room on its page for a slot's next version (HOT).
-- end_reason: released, revoked, expired (ran out, and the lock has not
-- been granted to another holder since), taken_over (ran out, and another
-- holder was granted the lock).
CREATE TABLE @extschema@.fencing_grant_history (
  entry bigint PRIMARY KEY,
  lock_name text NOT NULL,
  grant_count bigint NOT NULL,
  token @extschema@.fencing_token NOT NULL,
  holder text NOT NULL,
  holder_role name NOT NULL,
  granted_at timestamptz NOT NULL,
  ended_at timestamptz NOT NULL,
  end_reason text NOT NULL,
  slot integer
) WITH (fillfactor = 50);
CREATE INDEX fencing_grant_history_lock ON @extschema@.fencing_grant_history (lock_name);
REVOKE ALL ON @extschema@.fencing_grant_history FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_grant_history', '');
COMMENT ON TABLE @extschema@.fencing_grant_history IS
  'the last pg_fencing.history_size leases of each lock that a grant replaced; read through fencing_history';
COMMENT ON COLUMN @extschema@.fencing_grant_history.slot IS
  'the permit''s or shared lease''s slot (fencing_permits.slot); NULL for an exclusive lease';

-- end_reason is NULL while a lease is live; slot is NULL for an exclusive
-- lease.
CREATE VIEW @extschema@.fencing_history WITH (security_barrier) AS
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
GRANT SELECT ON @extschema@.fencing_history TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_history IS
  'every lease, permit and shared lease of the locks the current role may use (every lock for pg_read_all_stats), as far back as pg_fencing.history_size grants per lock and kind (exclusive leases, slots), with when and how it ended; slot: a permit''s or shared lease''s, NULL for an exclusive lease';

-------------------------------------------------------------------------------
-- 10. Administration
-------------------------------------------------------------------------------
-- A floor for every later grant, for what the clock cannot cover (a
-- restore onto a server whose clock is behind, a clock set back).
-- Superusers only: PUBLIC may not execute it, and the C function checks
-- superuser() as well, so that a GRANT of EXECUTE by mistake moves nothing.
CREATE FUNCTION @extschema@.fencing_bump_tokens("by" bigint) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_bump_tokens' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_bump_tokens(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_bump_tokens(bigint) IS
  'superusers: every later grant of the database is above its highest token plus by; returns that floor, durable and replicated to synchronous standbys like a grant (after a restore onto a server whose clock is behind)';

-- fencing_reset_mark(lock_name, token): for the incident where a mark is
-- already wrong (a made-up token accepted before 1.5, or under a lock whose
-- tokens are external).  Behind the fence gate (it waits for the writers
-- in flight), it revokes the live lease (announced and recorded with the
-- reset as its reason: the holder is fenced and learns it at its next
-- renewal), then sets the mark to token.  token must be above the token of
-- the lock's latest lease, live or not (else its holder would pass again),
-- at most the highest token the database has handed out (else every later
-- grant would be below the mark again), and, unless the mark is above every
-- grant, not below the mark (a mark that a grant reached is not wrong).
-- fencing_reset_mark('L', fencing_grant()) is the usual call.  The lock's
-- owner or a superuser only.
CREATE FUNCTION @extschema@.fencing_reset_mark_as(caller oid, lock_name text, token @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  l @extschema@.fencing_lock := @extschema@.fencing_lock_for_owner(lock_name, caller);
  highest bigint := @extschema@.fencing_highest_granted()::bigint;
  holder_token @extschema@.fencing_token;
  old_mark @extschema@.fencing_token;
BEGIN
  IF token IS NULL THEN
    RAISE EXCEPTION 'fencing_reset_mark() needs a token (lock "%")', lock_name USING ERRCODE = '22004';
  END IF;
  IF token::bigint OPERATOR(pg_catalog.>) coalesce(highest, 0) THEN
    RAISE EXCEPTION 'cannot reset the mark of fencing lock "%" to %: no token above % was ever granted',
      lock_name, token, coalesce(highest, 0)
      USING ERRCODE = '55Z03',
            HINT = pg_catalog.format('Reset it to a fresh grant: SELECT fencing_reset_mark(%L, fencing_grant());', lock_name);
  END IF;
  -- The lock's latest lease, live or not: every grant of the lock is at
  -- most its token, so a mark above it fences them all.
  SELECT e.token INTO holder_token FROM @extschema@.fencing_lease e WHERE e.lock_name = l.lock_name;
  IF holder_token IS NOT NULL AND token OPERATOR(@extschema@.<=) holder_token THEN
    RAISE EXCEPTION 'cannot reset the mark of fencing lock "%" to %: the token % of its latest lease would pass again',
      lock_name, token, holder_token
      USING ERRCODE = '22023',
            HINT = pg_catalog.format('Reset it to a fresh grant: SELECT fencing_reset_mark(%L, fencing_grant());', lock_name);
  END IF;
  -- A mark that some grant reached is not wrong: lowering it would let
  -- the holders it fenced pass again.  Only a mark above every grant (the
  -- incident this is for) may go down.
  SELECT f.high_water INTO old_mark FROM @extschema@.fencing_fence f WHERE f.lock_name = l.lock_name;
  IF old_mark IS NOT NULL AND old_mark::bigint OPERATOR(pg_catalog.<=) coalesce(highest, 0)
     AND token OPERATOR(@extschema@.<) old_mark THEN
    RAISE EXCEPTION 'cannot lower the mark of fencing lock "%" from % to %: the mark is a token this database granted',
      lock_name, old_mark, token
      USING ERRCODE = '22023',
            HINT = 'To fence the holder, use fencing_revoke().';
  END IF;
  -- The revoke takes the gate, ends the lease and the permits (announced,
  -- recorded) and raises the mark above the holder's; then the mark is set.
  PERFORM @extschema@.fencing_revoke_as(caller, l.lock_name,
    pg_catalog.format('mark reset from %s to %s', coalesce(old_mark::text, 'none'), token));
  UPDATE @extschema@.fencing_fence f SET high_water = token WHERE f.lock_name = l.lock_name;
  PERFORM @extschema@.fencing_forget_fence(l.lock_name);
  RAISE LOG 'pg_fencing: mark of lock "%" reset from % to % by role %',
    l.lock_name, coalesce(old_mark::text, 'none'), token, caller::regrole;
  RETURN token;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_reset_mark_as(oid, text, @extschema@.fencing_token) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_reset_mark_as(oid, text, @extschema@.fencing_token) IS
  'fencing_reset_mark() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_reset_mark(lock_name text, token @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token AS 'MODULE_PATHNAME', 'fencing_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_reset_mark(text, @extschema@.fencing_token) IS
  'for a mark that is already wrong: revokes the live lease and sets the lock''s mark to token (above the holder''s, at most the highest grant), behind the fence gate; the lock''s owner or a superuser only';

-- The audit of guarded tables: every table guarded by pg_fencing that the
-- caller owns (a superuser: every one), partitions and inheritance children
-- included, with each thing that weakens its guard.  severity: 'critical'
-- (a stale or token-less write can pass, or every write is refused) or
-- 'warning' (a role could weaken the guard); fix: the command that mends
-- it.  SECURITY INVOKER: it reads the catalogs, and the locks through
-- fencing_locks, as the caller.
CREATE FUNCTION @extschema@.fencing_audit_guards()
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
COMMENT ON FUNCTION @extschema@.fencing_audit_guards() IS
  'the part of fencing_audit() about guarded tables: every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard';

-- fencing_audit(): the guards' audit, and what is about the database
-- rather than a table -- per-row guards and locks that accept tokens this
-- database never granted (made before 1.5), tokens that run ahead of the
-- server's clock, and sessions that have waited for a lock in a function
-- form, holding their snapshot (and so VACUUM everywhere), for longer than
-- pg_fencing.audit_long_wait.
CREATE FUNCTION @extschema@.fencing_audit()
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

-------------------------------------------------------------------------------
-- 11. Sessions (1.8): one keepalive for many leases, many locks at once
-------------------------------------------------------------------------------

-- The argument checks of the session functions (22023, as the lease
-- functions' own), in C with them (src/backend/lease_arguments.cpp): the
-- ttl counted from now on the server's clock.
CREATE FUNCTION @extschema@.fencing_check_session_args(holder text, ttl interval, check_holder boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_check_session_args'
  LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_check_session_args(text, interval, boolean) IS
  'the argument checks of the session functions: true, or 22023; internal';

-- The public functions are gates (fencing_session_gate, src/backend/locks.cpp)
-- that call the _as function with the caller's role, as the lock functions
-- do: PUBLIC may not call the _as functions, so a role cannot claim to be
-- another.

-- The session's hold (src/backend/lease_engine.cpp, HoldSession): a
-- lock-manager lock on its hold_key until the transaction ends, shared by
-- what puts a lease into the session, exclusive for its close and its
-- sweep, which so wait for (the sweep: skip) an acquire in flight and then
-- end the lease it granted too.  Not a row lock: it writes nothing.
CREATE FUNCTION @extschema@.fencing_session_hold(hold_key bigint, exclusive boolean, nowait boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_session_hold' LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_hold(bigint, boolean, boolean) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_hold(bigint, boolean, boolean) IS
  'takes the hold of the session with hold_key until the transaction ends (exclusive or shared; false when nowait and it is held); internal';
CREATE FUNCTION @extschema@.fencing_session_unhold(hold_key bigint)
  RETURNS void AS 'MODULE_PATHNAME', 'fencing_session_unhold' LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_unhold(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_unhold(bigint) IS
  'gives back the exclusive hold of the session with hold_key that the sweep took and could not use; internal';

-- The session's row, held against a close and against the sweep of
-- expired sessions (fencing_session_hold, shared; a renew does not wait
-- for it), if the caller may act in it: the role that opened it, a role
-- with its privileges, or a superuser.  55Z05 when there is no such
-- session, it has ended, or it is another role's: such a session answers
-- as one that does not exist, and the caller takes no hold on it that the
-- session's own acquires would queue behind.
CREATE FUNCTION @extschema@.fencing_session_for(caller oid, session bigint, what text)
  RETURNS @extschema@.fencing_session LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s @extschema@.fencing_session;
BEGIN
  IF session IS NULL THEN
    RAISE EXCEPTION '% needs a session, got NULL', what USING ERRCODE = '22004';
  END IF;
  -- The caller first, then the hold, then the look again.  FOR KEY SHARE
  -- too: at REPEATABLE READ the look is in the transaction's snapshot,
  -- which may predate a close that committed while the hold was waited
  -- for; locking the row the close deleted then fails (40001) instead of
  -- granting a lease into a session that no longer exists.  (The C acquire
  -- reads the latest snapshot instead, and takes no row lock.)
  SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session;
  IF FOUND AND s.expires_at > clock_timestamp()
     AND pg_catalog.pg_has_role(caller, s.holder_role::oid, 'USAGE') THEN
    PERFORM @extschema@.fencing_session_hold(s.hold_key, false, false);
    SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session FOR KEY SHARE;
  END IF;
  IF NOT FOUND OR s.expires_at <= clock_timestamp()
     OR NOT pg_catalog.pg_has_role(caller, s.holder_role::oid, 'USAGE') THEN
    RAISE EXCEPTION 'fencing session % does not exist or has ended', session
      USING ERRCODE = '55Z05',
            HINT = 'Open a new session with fencing_session_open(holder, ttl); the leases of an ended session have ended with it.';
  END IF;
  RETURN s;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_for(oid, bigint, text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_for(oid, bigint, text) IS
  'the live session the caller may act in, locked against its close; 55Z05 otherwise, for another role''s session too; internal';

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

-- Writes the end of at most `most` expired sessions (of the role of_role;
-- every role's when NULL) into their leases (which then are plain leases
-- that have expired: announced, counted and replaced as any) and deletes
-- them.  In bounded batches: the transaction holds each session it ends
-- (fencing_session_hold) until it commits, and however many sessions have
-- piled up, a batch fits in the lock table.  Sessions locked by a
-- transaction still running (an acquire in it) are left for the next
-- sweep.  Made by the expiry worker for every role, one batch per pass,
-- and by fencing_session_open for its caller's own sessions only: a
-- caller's transaction never holds another role's rows.
CREATE FUNCTION @extschema@.fencing_end_expired_sessions(of_role regrole, most integer)
  RETURNS integer
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  s record;
  ended_at timestamptz;
  locked bigint;
  all_locked boolean;
  ended integer := 0;
BEGIN
  -- One session at a time, each in statements of their own (so that each
  -- sees what committed before it), and nothing waited for: a session
  -- held by an acquire in it, or one whose rows a transaction is writing,
  -- is left for the next sweep.  The candidates are read without a lock,
  -- and each is locked and held only when its turn comes.  A session passed over (its row or its
  -- leases' rows locked by a transaction in flight, its hold taken by an
  -- acquire in it) keeps no hold and does not count against the batch: a
  -- pass holds only the sessions it ends, and sessions that one role keeps
  -- busy can neither fill the lock table nor keep other roles' sessions
  -- from being swept.  No ORDER BY: a pass reads only as far as it needs.
  FOR s IN SELECT x.session_id, x.hold_key FROM @extschema@.fencing_session x
            WHERE x.expires_at <= pg_catalog.clock_timestamp()
              AND (of_role IS NULL OR x.holder_role = of_role) LOOP
    EXIT WHEN ended >= most;
    SELECT x.expires_at INTO ended_at FROM @extschema@.fencing_session x
     WHERE x.session_id = s.session_id AND x.expires_at <= pg_catalog.clock_timestamp()
       FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- An acquire in the session in flight: next time.
    CONTINUE WHEN NOT @extschema@.fencing_session_hold(s.hold_key, true, true);
    PERFORM FROM @extschema@.fencing_lease e WHERE e.session_id = s.session_id
      FOR NO KEY UPDATE SKIP LOCKED;
    GET DIAGNOSTICS locked = ROW_COUNT;
    IF locked = (SELECT pg_catalog.count(*) FROM @extschema@.fencing_lease e
                  WHERE e.session_id = s.session_id) THEN
      PERFORM FROM @extschema@.fencing_permit p WHERE p.session_id = s.session_id
        FOR NO KEY UPDATE SKIP LOCKED;
      GET DIAGNOSTICS locked = ROW_COUNT;
      all_locked := locked = (SELECT pg_catalog.count(*) FROM @extschema@.fencing_permit p
                               WHERE p.session_id = s.session_id);
    ELSE
      all_locked := false;
    END IF;
    IF NOT all_locked THEN
      PERFORM @extschema@.fencing_session_unhold(s.hold_key);
      CONTINUE;
    END IF;
    PERFORM @extschema@.fencing_end_session_leases(s.session_id, ended_at);
    DELETE FROM @extschema@.fencing_session x WHERE x.session_id = s.session_id;
    ended := ended + 1;
  END LOOP;
  RETURN ended;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_end_expired_sessions(regrole, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_end_expired_sessions(regrole, integer) IS
  'writes the end of at most most expired sessions (of_role''s, or every role''s when NULL) into their leases and deletes them; returns how many; internal';

-- How many entries fencing_session_role has for a role, up to most: at
-- least as many as the role has sessions, read from the index alone
-- (src/backend/lease_engine.cpp).
CREATE FUNCTION @extschema@.fencing_session_entries(role oid, most integer) RETURNS integer
  AS 'MODULE_PATHNAME', 'fencing_session_entries' LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.fencing_session_entries(oid, integer) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_entries(oid, integer) IS
  'how many index entries the role''s sessions have, counting at most most (at least its sessions); internal';

-- A role may have pg_fencing.max_sessions_per_role sessions at once
-- (ended ones count until they are swept), so that no role can fill the
-- table every role's sessions live in.  The count is read in the caller's
-- snapshot: transactions open at the same moment each see only what has
-- committed, so together they can pass the limit by what they open before
-- they commit (at worst the limit times the role's connections).  Exact
-- counting would make a role's opens wait for each other's durable commits.
-- The session's hold_key is its column's default, a random number.
--
-- An open pays for the count and the sweep only near the limit: first the
-- index's entries for the role are counted (fencing_session_entries, which
-- reads no row: at least the role's sessions), and only when they reach
-- the limit are the role's ended sessions swept and its sessions counted
-- in the snapshot.  Both of those visit every one of the role's rows,
-- which made a fleet of 10,000 candidates of one role, opening at once,
-- quadratic in its size.
CREATE FUNCTION @extschema@.fencing_session_open_as(caller oid, holder text, ttl interval)
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
REVOKE ALL ON FUNCTION @extschema@.fencing_session_open_as(oid, text, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_session_open_as(oid, text, interval) IS
  'fencing_session_open() for the role that called it; internal';
CREATE FUNCTION @extschema@.fencing_session_open(holder text, ttl interval) RETURNS bigint
  AS 'MODULE_PATHNAME', 'fencing_session_gate' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_open(text, interval) IS
  'opens a session of the calling role that lives ttl unless renewed, and returns its id; its leases end when it does';

-- In C (lease_engine.cpp, RenewSession), as a lease's renewal is: it
-- writes the session's row only, as the owner of the tables, and checks
-- the caller (another role's session answers false, as one that does not
-- exist).  fencing_renew on a lease in a session calls the same code.
CREATE FUNCTION @extschema@.fencing_session_renew(session bigint, ttl interval DEFAULT NULL)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_session_renew' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_session_renew(bigint, interval) IS
  'extends the session, and with it every lease in it, to now + ttl (the ttl it was opened with if NULL), writing one row; false once the session has ended, or for a session of a role whose privileges the caller lacks';

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
  -- The caller first: another role's session answers as one that does
  -- not exist, and is not held (its own acquires would queue behind this
  -- call).  A superuser may close any session during an incident.
  SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session;
  IF NOT FOUND OR NOT pg_catalog.pg_has_role(caller, s.holder_role::oid, 'USAGE') THEN
    RETURN 0;
  END IF;
  -- The hold, exclusively: an acquire in the session (which holds it
  -- shared) finishes first, so that the lease it grants is among those
  -- released here.
  PERFORM @extschema@.fencing_session_hold(s.hold_key, true, false);
  SELECT * INTO s FROM @extschema@.fencing_session x WHERE x.session_id = session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
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
    PERFORM @extschema@.fencing_note_ended_here(l.token);
    PERFORM @extschema@.fencing_wake_waiters_at_commit(l.lock_id);
  END LOOP;
  FOR l IN UPDATE @extschema@.fencing_permit p
              SET expires_at = clock_timestamp(), ended = 'released', session_id = NULL
            WHERE p.session_id = session AND p.ended IS NULL
           RETURNING p.lock_name, p.holder, p.token, p.lock_id
  LOOP
    released := released + 1;
    PERFORM @extschema@.fencing_lease_event(l.lock_name, 'released', l.holder, l.token);
    PERFORM @extschema@.fencing_note_ended_here(l.token);
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
  checked boolean := @extschema@.fencing_check_wait(wait, pg_catalog.array_to_string(lock_names, ', '));
  deadline CONSTANT timestamptz := pg_catalog.clock_timestamp() + coalesce(wait, interval '0');
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

-------------------------------------------------------------------------------
-- 12. The line (1.10): waits that hold no connection
-------------------------------------------------------------------------------
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

-- Per lock, the statistics of section 9; waiting counts the sessions in
-- its waiting room and the live places in its line.
CREATE VIEW @extschema@.fencing_lock_stats WITH (security_barrier) AS
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
GRANT SELECT ON @extschema@.fencing_lock_stats TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_lock_stats IS
  'per lock: grants, renewals, releases, expiries, takeovers and revokes committed, waiters (sessions in its waiting room and live places in its line), and writes refused under it, since fencing_stats_reset(); needs shared_preload_libraries = ''pg_fencing''';
