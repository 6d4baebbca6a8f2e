-- pg_fencing 1.0: fencing tokens enforced by the database.
\echo Use "CREATE EXTENSION pg_fencing" to load this file. \quit

-------------------------------------------------------------------------------
-- The fencing_token type
-------------------------------------------------------------------------------
-- An int8 in disguise: same size, alignment and Datum, so comparison, hashing
-- and min/max reuse PostgreSQL's int8 functions (LANGUAGE internal).  Only
-- input and the casts differ: a token is never negative and never computed.

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

-- Comparison support: PostgreSQL's int8 implementations.
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

CREATE OPERATOR CLASS @extschema@.fencing_token_btree_ops
  DEFAULT FOR TYPE @extschema@.fencing_token USING btree AS
    OPERATOR 1 @extschema@.<,
    OPERATOR 2 @extschema@.<=,
    OPERATOR 3 @extschema@.=,
    OPERATOR 4 @extschema@.>=,
    OPERATOR 5 @extschema@.>,
    FUNCTION 1 @extschema@.fencing_token_cmp(@extschema@.fencing_token, @extschema@.fencing_token),
    FUNCTION 2 @extschema@.fencing_token_sortsupport(internal);

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

-- Casts.  Integers become tokens on assignment, so "SET token = $1" works
-- with a bigint parameter from any driver; a negative value is refused.
-- Tokens become int8 on assignment or explicitly, never implicitly, so
-- "token + 1" stays an error: tokens are compared, never computed.
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
-- Granting tokens
-------------------------------------------------------------------------------
-- CACHE 1: with a per-session cache, values are unique but not ordered
-- across sessions, and a token must be above every token granted before it.
CREATE SEQUENCE @extschema@.fencing_token_seq
  AS bigint MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.fencing_token_seq FROM PUBLIC;
-- Dumped with its current value, so a restored database keeps granting
-- above every token granted before the dump.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_token_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_token_seq IS
  'source of fencing_grant(); use fencing_grant(), not nextval(), which is not crash-safe for tokens';

CREATE FUNCTION @extschema@.fencing_grant() RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_grant' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_grant() IS
  'a new fencing token, above every token granted before, durable before it is returned';

-------------------------------------------------------------------------------
-- The guard
-------------------------------------------------------------------------------
CREATE FUNCTION @extschema@.fencing_guard() RETURNS trigger
  AS 'MODULE_PATHNAME', 'fencing_guard' LANGUAGE C;
COMMENT ON FUNCTION @extschema@.fencing_guard() IS
  'BEFORE UPDATE row trigger: refuses a fencing token lower than the row has seen (55Z01) or a missing one (55Z02); arguments: column name, then options allow_unset, skip';

CREATE FUNCTION @extschema@.fencing_resolve_token_column(tbl regclass, token_column name, options text[])
  RETURNS name AS 'MODULE_PATHNAME', 'fencing_resolve_token_column' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_resolve_token_column(regclass, name, text[]) IS
  'the token column fencing_protect() would guard, after checking it and the options';

CREATE FUNCTION @extschema@.fencing_protect(
    tbl regclass, token_column name DEFAULT NULL, options text[] DEFAULT '{}',
    lock_name text DEFAULT NULL)
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  all_options text[] := coalesce(options, '{}');
  col name;
  trigger_args text;
  part regclass;
BEGIN
  IF lock_name IS NOT NULL THEN
    IF lock_name = '' THEN
      RAISE EXCEPTION 'lock name must not be empty' USING ERRCODE = '22023';
    END IF;
    all_options := all_options OPERATOR(pg_catalog.||) ('lock=' OPERATOR(pg_catalog.||) lock_name);
  END IF;
  col := @extschema@.fencing_resolve_token_column(tbl, token_column, all_options);
  SELECT pg_catalog.string_agg(pg_catalog.quote_literal(arg), ', ' ORDER BY ord)
    INTO trigger_args
    FROM pg_catalog.unnest(ARRAY[col::text] OPERATOR(pg_catalog.||) all_options)
         WITH ORDINALITY AS a(arg, ord);
  -- OR REPLACE: protecting again changes the column, options or lock in place.
  IF lock_name IS NULL THEN
    -- A per-row fence guards UPDATE.
    EXECUTE pg_catalog.format(
      'CREATE OR REPLACE TRIGGER fencing_guard BEFORE UPDATE ON %s '
      'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)', tbl, trigger_args);
  ELSE
    -- A lock-wide fence guards every way of changing the table's rows.
    EXECUTE pg_catalog.format(
      'CREATE OR REPLACE TRIGGER fencing_guard BEFORE INSERT OR UPDATE OR DELETE ON %s '
      'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)', tbl, trigger_args);
  END IF;
  -- TRUNCATE fires no row triggers, and a statement trigger on a partitioned
  -- table does not fire for a TRUNCATE of one of its partitions: under a
  -- lock, every table of the partition tree gets its own (partitions
  -- attached later need fencing_protect again).  Without a lock, none.
  -- (pg_partition_tree lists nothing for a table that is not partitioned.)
  FOR part IN SELECT tbl UNION SELECT t.relid FROM pg_catalog.pg_partition_tree(tbl) t LOOP
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
COMMENT ON FUNCTION @extschema@.fencing_protect(regclass, name, text[], text) IS
  'installs the fencing_guard trigger on a table (its only fencing_token column unless named); with lock_name, a lock-wide fence that also guards INSERT, DELETE and TRUNCATE';

-------------------------------------------------------------------------------
-- Lock-wide fences
-------------------------------------------------------------------------------
-- One row per lock: the highest token seen under it, by a lease grant, a
-- fencing_present() or a write to a table protected under the lock.  Read
-- and moved only by fencing_fence_advance(), which keeps the row locked to
-- the end of the transaction: writers under one lock are serialised on it.
CREATE TABLE @extschema@.fencing_fence (
  lock_name text PRIMARY KEY,
  high_water @extschema@.fencing_token NOT NULL
);
REVOKE ALL ON @extschema@.fencing_fence FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_fence', '');
COMMENT ON TABLE @extschema@.fencing_fence IS
  'highest fencing token seen per lock; written only through fencing_fence_advance()';

-- Locks the lock's mark (creating it) and moves it up to token if token is
-- higher.  Returns the mark as it was before (NULL: none); the caller
-- judges a token below it stale.  The guard calls it once per lock per
-- transaction, and again only when a higher token comes along.
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
  'locks a lock''s high-water mark and raises it to token; internal to the guard, fencing_present and the lease functions';

-- Locks the lock's mark (creating it at 0) without moving it, and returns
-- it.  fencing_present() uses it: a presentation is checked against the
-- mark and takes the fence, but only a write (or a grant) moves the mark --
-- so a role that may call fencing_present() but write nothing cannot push
-- a lock's mark up and lock its holders out.
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

CREATE VIEW @extschema@.fencing_fences AS
  SELECT f.lock_name, f.high_water FROM @extschema@.fencing_fence f;
GRANT SELECT ON @extschema@.fencing_fences TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_fences IS 'the highest fencing token seen per lock';

-------------------------------------------------------------------------------
-- Leases
-------------------------------------------------------------------------------
-- A lease is a row, not a session lock: it survives connection recycling and
-- works through transaction-pooling PgBouncer.  Expiry is judged by the
-- server's clock_timestamp() alone.  A row stays after release or expiry:
-- its token is the lock's latest grant.
CREATE TABLE @extschema@.fencing_lease (
  -- No CHECK constraints here or in fencing_fence: the functions that write
  -- them check their arguments, and a CHECK is re-read for every statement
  -- that writes the table (a fifth of a lease cycle's cost, measured).
  lock_name text PRIMARY KEY,
  holder text NOT NULL,
  -- The login role that acquired the lease: renew and release must come
  -- from the same role, an identity the server has verified.
  holder_role name NOT NULL,
  token @extschema@.fencing_token NOT NULL,
  granted_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
REVOKE ALL ON @extschema@.fencing_lease FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_lease', '');
COMMENT ON TABLE @extschema@.fencing_lease IS
  'one row per lock: its latest grant; written only through the fencing_ lease functions';

-- The lock's "waiting room": a transaction-level advisory lock that
-- acquirers who wait queue on, in arrival order (PostgreSQL's lock manager
-- grants a contended lock first come, first served).  Its holder is the one
-- waiter that polls the lease; a caller who does not wait takes a free lock
-- only when the room is empty, so waiters are never starved by newcomers.
-- Key: 'FENC' in the high half, the lock name's hash in the low half.
-- A SQL-standard body is bound to its objects when created, so it needs no
-- pinned search_path -- and without one it is inlined into its callers.
CREATE FUNCTION @extschema@.fencing_waiting_room(lock_name text) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (x'46454e43'::bigint << 32) | (pg_catalog.hashtext(lock_name)::bigint & 4294967295);
COMMENT ON FUNCTION @extschema@.fencing_waiting_room(text) IS
  'advisory lock key (pg_locks: classid 1178947139) of the queue of acquirers waiting for a lock';

-- Argument checks shared by every lease function, so all fail alike: true,
-- or an error (22023) that says what is wrong.  Called as an expression
-- (checked := ...), which PL/pgSQL evaluates without starting a query.
CREATE FUNCTION @extschema@.fencing_check_lease_args(
    lock_name text, holder text, ttl interval, check_holder boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_check_lease_args'
  LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_check_lease_args(text, text, interval, boolean) IS
  'argument checks shared by the lease functions; not for direct use';

-- One attempt to take the lock: free, expired, or already the caller's.
-- On failure no row lock is kept (the attempt runs in a subtransaction), so
-- a caller that lingers in its transaction never blocks the holder's renew.
-- Called only from the two fencing_acquire functions and runs in their
-- context (their owner, their pinned search_path): it is not SECURITY
-- DEFINER itself, which would pay for switching both again, and PUBLIC may
-- not execute it.
CREATE FUNCTION @extschema@.fencing_try_acquire(p_lock text, p_holder text, p_ttl interval)
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

  BEGIN
    SELECT * INTO cur FROM @extschema@.fencing_lease l WHERE l.lock_name = p_lock FOR UPDATE;
    found_row := FOUND;
    -- Judge liveness once the row lock is ours: a lease that expired while
    -- we waited for it is free; one granted meanwhile is not.
    now := clock_timestamp();
    IF found_row AND cur.expires_at > now THEN
      IF cur.holder = p_holder AND cur.holder_role = session_user THEN
        -- The live holder again (say, a retry after a lost reply).
        UPDATE @extschema@.fencing_lease l SET expires_at = now + p_ttl WHERE l.lock_name = p_lock;
        RETURN cur.token;
      END IF;
      RAISE SQLSTATE 'PFBSY';
    END IF;
    IF NOT pg_catalog.pg_try_advisory_xact_lock(@extschema@.fencing_waiting_room(p_lock)) THEN
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
             granted_at = now, expires_at = now + p_ttl
       WHERE l.lock_name = p_lock;
    ELSE
      -- First grant of this lock.  The waiting-room lock serialises first
      -- grants, so a conflict here means another caller just took it.
      INSERT INTO @extschema@.fencing_lease
        VALUES (p_lock, p_holder, session_user, granted, now, now + p_ttl)
        ON CONFLICT (lock_name) DO NOTHING;
      IF NOT FOUND THEN
        RAISE SQLSTATE 'PFBSY';
      END IF;
    END IF;
    RETURN granted;
  EXCEPTION WHEN SQLSTATE 'PFBSY' THEN
    RETURN NULL;  -- the subtransaction's rollback drops the row lock
  END;
END $$;
REVOKE ALL ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_try_acquire(text, text, interval) IS
  'one acquire attempt, shared by both forms of fencing_acquire; not for direct use';

CREATE FUNCTION @extschema@.fencing_acquire(lock_name text, holder text, ttl interval)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  RETURN @extschema@.fencing_try_acquire(lock_name, holder, ttl);
END $$;
COMMENT ON FUNCTION @extschema@.fencing_acquire(text, text, interval) IS
  'takes the lock for ttl and returns a new fencing token, or NULL if another holder has a live lease; the live holder gets its own token back with the lease extended';

CREATE FUNCTION @extschema@.fencing_acquire(lock_name text, holder text, ttl interval, wait interval)
  RETURNS @extschema@.fencing_token LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  deadline timestamptz;
  granted @extschema@.fencing_token;
  pause double precision := 0.001;  -- seconds; doubles up to max_pause
  max_pause CONSTANT double precision := 0.02;
  saved_lock_timeout CONSTANT text := current_setting('lock_timeout');
  checked boolean;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, holder, ttl, true);
  IF wait IS NULL OR wait < interval '0' THEN
    RAISE EXCEPTION 'wait must not be NULL or negative, got % (lock "%")',
      coalesce(wait::text, 'NULL'), lock_name USING ERRCODE = '22023';
  END IF;
  -- Waiting means seeing other transactions' commits while we loop.
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'fencing_acquire with a wait needs READ COMMITTED, not %',
      upper(current_setting('transaction_isolation'))
      USING ERRCODE = '25000',
            HINT = 'Call it in its own transaction, or use the form without wait.';
  END IF;
  deadline := clock_timestamp() + wait;

  -- Queue in the waiting room, first come first served, for at most wait.
  BEGIN
    PERFORM set_config('lock_timeout',
      greatest(1, ceil(extract(epoch FROM wait) * 1000))::bigint::text, true);
    PERFORM pg_catalog.pg_advisory_xact_lock(@extschema@.fencing_waiting_room(lock_name));
    PERFORM set_config('lock_timeout', saved_lock_timeout, true);
  EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;  -- still queued behind others at the deadline
  END;

  -- First in line: poll the lease until it is free or the wait is over.
  LOOP
    granted := @extschema@.fencing_try_acquire(lock_name, holder, ttl);
    IF granted IS NOT NULL THEN
      RETURN granted;
    END IF;
    EXIT WHEN clock_timestamp() >= deadline;
    PERFORM pg_catalog.pg_sleep(least(pause, extract(epoch FROM deadline - clock_timestamp())));
    pause := least(pause * 2, max_pause);
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_acquire(text, text, interval, interval) IS
  'like fencing_acquire(lock_name, holder, ttl), but waits up to wait for the lock, in arrival order; NULL on timeout';

CREATE FUNCTION @extschema@.fencing_renew(lock_name text, token @extschema@.fencing_token, ttl interval)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  checked boolean;
BEGIN
  checked := @extschema@.fencing_check_lease_args(lock_name, NULL, ttl, false);
  UPDATE @extschema@.fencing_lease l SET expires_at = clock_timestamp() + ttl
   WHERE l.lock_name = fencing_renew.lock_name
     AND l.token OPERATOR(@extschema@.=) fencing_renew.token
     AND l.holder_role = session_user
     AND l.expires_at > clock_timestamp();
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_renew(text, @extschema@.fencing_token, interval) IS
  'extends a live lease to now + ttl; false if token is not the lock''s current token, the lease expired (never revived), or the caller''s role did not acquire it';

CREATE FUNCTION @extschema@.fencing_release(lock_name text, token @extschema@.fencing_token)
  RETURNS boolean LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF lock_name IS NULL OR lock_name = '' THEN
    RAISE EXCEPTION 'lock name must not be NULL or empty' USING ERRCODE = '22023';
  END IF;
  UPDATE @extschema@.fencing_lease l SET expires_at = clock_timestamp()
   WHERE l.lock_name = fencing_release.lock_name
     AND l.token OPERATOR(@extschema@.=) fencing_release.token
     AND l.holder_role = session_user
     AND l.expires_at > clock_timestamp();
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION @extschema@.fencing_release(text, @extschema@.fencing_token) IS
  'ends a live lease at once; false if token is not the current token of a live lease acquired by the caller''s role';

CREATE FUNCTION @extschema@.fencing_leader(lock_name text) RETURNS text
  LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  BEGIN ATOMIC
    SELECT l.holder FROM @extschema@.fencing_lease l
     WHERE l.lock_name = fencing_leader.lock_name AND l.expires_at > clock_timestamp();
  END;
COMMENT ON FUNCTION @extschema@.fencing_leader(text) IS 'the live holder of the lock, or NULL';

CREATE VIEW @extschema@.fencing_leases AS
  SELECT l.lock_name, l.holder, l.token, l.granted_at, l.expires_at,
         l.expires_at > clock_timestamp() AS live
    FROM @extschema@.fencing_lease l;
GRANT SELECT ON @extschema@.fencing_leases TO PUBLIC;
COMMENT ON VIEW @extschema@.fencing_leases IS
  'every lock with its latest grant; live is judged by the server clock now';
