-- pg_fencing 1.8 -> 1.9: sessions against hostile tenants, and a COMMIT
-- check that no transaction can talk its way past.

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.9'" to load this file. \quit
-- The session's hold is keyed by a random hold_key (pg_locks, which every
-- role reads, showed the id), and a role's sessions are found by role.
-- A volatile default: every existing session gets a key of its own.
ALTER TABLE @extschema@.fencing_session ADD COLUMN hold_key bigint NOT NULL
  DEFAULT ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()), 9, 8), 'hex'))::bit(64)::bigint;
CREATE INDEX fencing_session_role ON @extschema@.fencing_session (holder_role);

-- Every ttl and wait is judged as a duration from now on the server's clock.
ALTER FUNCTION @extschema@.fencing_check_lease_args(text, text, interval, boolean) STABLE;
COMMENT ON FUNCTION @extschema@.fencing_check_lease_args(text, text, interval, boolean) IS
  'the argument checks the lease functions share: true, or 22023 naming what is wrong with the lock name, the holder (when asked) or the ttl (counted from now on the server''s clock); reads and changes nothing';
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

-- The wait is checked by fencing_check_wait.
CREATE OR REPLACE FUNCTION @extschema@.fencing_queue_for(lock_name text, lock_id bigint, wait interval)
  RETURNS timestamptz LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  saved_lock_timeout CONSTANT text := current_setting('lock_timeout');
  checked boolean := @extschema@.fencing_check_wait(wait, lock_name);
  deadline timestamptz;
BEGIN
  deadline := clock_timestamp() + wait;
  BEGIN
    -- The time to the deadline, as the clock counts it (an interval's own
    -- epoch counts a month as 30 days).
    PERFORM set_config('lock_timeout',
      greatest(1, ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000))::bigint::text, true);
    PERFORM @extschema@.fencing_enter_waiting_room(lock_id);
    PERFORM set_config('lock_timeout', saved_lock_timeout, true);
  EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;
  END;
  RETURN deadline;
END $$;
-- The session checks in C, with the lease functions' (one rule for a ttl).
DROP FUNCTION @extschema@.fencing_check_session_args(text, interval, boolean);
-- The argument checks of the session functions (22023, as the lease
-- functions' own), in C with them (src/backend/lease_arguments.cpp): the
-- ttl counted from now on the server's clock.
CREATE FUNCTION @extschema@.fencing_check_session_args(holder text, ttl interval, check_holder boolean)
  RETURNS boolean AS 'MODULE_PATHNAME', 'fencing_check_session_args'
  LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_check_session_args(text, interval, boolean) IS
  'the argument checks of the session functions: true, or 22023; internal';

-- Another role's session answers as one that does not exist: no 42501.
DROP FUNCTION @extschema@.fencing_session_check_role(oid, @extschema@.fencing_session, text);

-- The hold is keyed by the session's hold_key.
DROP FUNCTION @extschema@.fencing_session_hold(bigint, boolean, boolean);
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

-- The caller is checked before the hold, and another role's session answers
-- as one that does not exist.
-- The session's row, held against a close and against the sweep of
-- expired sessions (fencing_session_hold, shared; a renew does not wait
-- for it), if the caller may act in it: the role that opened it, a role
-- with its privileges, or a superuser.  55Z05 when there is no such
-- session, it has ended, or it is another role's: such a session answers
-- as one that does not exist, and the caller takes no hold on it that the
-- session's own acquires would queue behind.
CREATE OR REPLACE FUNCTION @extschema@.fencing_session_for(caller oid, session bigint, what text)
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

-- The sweep in bounded batches, and of one role's sessions for an open.
DROP FUNCTION @extschema@.fencing_end_expired_sessions();
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

-- A role's sessions are bounded, the open sweeps the caller's own only,
-- and each session gets its random hold key.
-- A role may have pg_fencing.max_sessions_per_role sessions at once
-- (ended ones count until they are swept), so that no role can fill the
-- table every role's sessions live in.  The count is read in the caller's
-- snapshot: transactions open at the same moment each see only what has
-- committed, so together they can pass the limit by what they open before
-- they commit (at worst the limit times the role's connections).  Exact
-- counting would make a role's opens wait for each other's durable commits.
-- The session's hold_key is its column's default, a random number.
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
  -- The caller's own ended sessions are swept here, a batch at a time,
  -- for a server without the expiry worker; only at READ COMMITTED, where
  -- each of the sweep's statements sees what committed before it.  Never
  -- another role's: this transaction is the caller's, and would hold that
  -- role's rows until it ends.
  IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
    PERFORM @extschema@.fencing_end_expired_sessions(caller::regrole, 100);
  END IF;
  SELECT pg_catalog.count(*) INTO held
    FROM (SELECT FROM @extschema@.fencing_session x
           WHERE x.holder_role = caller::regrole LIMIT most) mine;
  IF held >= most THEN
    RAISE EXCEPTION 'role "%" has % fencing sessions, the most pg_fencing.max_sessions_per_role allows',
      pg_catalog.pg_get_userbyid(caller), held
      USING ERRCODE = '53400',
            DETAIL = 'Sessions that have ended count until they are swept: by the expiry worker, or by the role''s next fencing_session_open() at READ COMMITTED.',
            HINT = 'Close the sessions the role no longer uses (fencing_session_close), or have a superuser raise the limit for the role with ALTER ROLE ... SET pg_fencing.max_sessions_per_role.';
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

-- The caller is checked before the hold; another role's session answers 0.
CREATE OR REPLACE FUNCTION @extschema@.fencing_session_close_as(caller oid, session bigint)
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

-- The wait is checked as every wait is.
CREATE OR REPLACE FUNCTION @extschema@.fencing_session_acquire_all_as(
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

COMMENT ON FUNCTION @extschema@.fencing_session_renew(bigint, interval) IS
  'extends the session, and with it every lease in it, to now + ttl (the ttl it was opened with if NULL), writing one row; false once the session has ended, or for a session of a role whose privileges the caller lacks';

-- A revoke tells the COMMIT check which live leases the transaction ended.
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
