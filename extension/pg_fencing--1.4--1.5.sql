-- pg_fencing 1.4 -> 1.5: tokens you can trust after the database goes back
-- in time.
--
--   anchored tokens   every reserved range, and without ranges every
--                     backend's first grant, starts at least at the clock's
--                     microseconds since 1970, so that a restored base
--                     backup, point-in-time recovery, a promoted
--                     asynchronous standby, an older dump or pg_upgrade
--                     grants above every token handed out before (the C
--                     side: src/backend/grant.cpp, src/core/token_clock.hpp;
--                     it needs no SQL and serves 1.4 databases too)
--   a manual floor    fencing_bump_tokens(by), for what the clock cannot
--                     cover (a clock set back)
--   the audit         fencing_audit() reports a token sequence that runs
--                     ahead of the server's clock

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.5'" to load this file. \quit

-- Superusers only: PUBLIC may not execute it, and the C function checks
-- superuser() as well, so a GRANT of EXECUTE by mistake moves nothing.
CREATE FUNCTION @extschema@.fencing_bump_tokens("by" bigint) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_bump_tokens' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_bump_tokens(bigint) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_bump_tokens(bigint) IS
  'superusers: every later grant of the database is above its highest token plus by; returns that floor, durable and replicated to synchronous standbys like a grant (after a restore onto a server whose clock is behind)';

-- How far the sequence's last value runs ahead of the server's clock.  It
-- tells no more than fencing_grant(), which PUBLIC may call, already does.
CREATE FUNCTION @extschema@.fencing_lead_over_clock() RETURNS interval
  AS 'MODULE_PATHNAME', 'fencing_lead_over_clock' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_lead_over_clock() IS
  'how far the highest token reserved runs ahead of the server''s clock (tokens are microseconds since 1970 at most); NULL before the first grant';

-------------------------------------------------------------------------------
-- Tokens nobody handed out (issue 23 item 5)
-------------------------------------------------------------------------------
-- Where a lock's tokens come from: 'granted' (this database's grants: a
-- token it never granted is refused with 55Z03 -- under a lock whose leases
-- it grants, any token above the mark; otherwise one above every grant),
-- 'external' (another service's, an etcd revision: any token), or
-- 'unknown' (a lock from before 1.5, which the update cannot judge: it
-- accepts any token, as it did, and fencing_audit() lists it with the
-- command that tightens it).  New locks are 'granted'.  Read by the guard
-- (src/backend/fences.cpp) only when a token is new to the lock.
ALTER TABLE @extschema@.fencing_lock
  ADD COLUMN token_source text NOT NULL DEFAULT 'granted'
  CONSTRAINT fencing_lock_token_source_check CHECK (token_source IN ('granted', 'external', 'unknown'));
UPDATE @extschema@.fencing_lock SET token_source = 'unknown';
COMMENT ON COLUMN @extschema@.fencing_lock.token_source IS
  'where the lock''s tokens come from: granted (this database; others refused with 55Z03), external (another service), unknown (a lock from before 1.5: any token)';

CREATE OR REPLACE VIEW @extschema@.fencing_locks WITH (security_barrier) AS
  SELECT k.lock_name, k.owner, k.users, k.lock_id, k.lock_delay, k.announce, k.kind, k.permits,
         k.token_source
    FROM @extschema@.fencing_lock k
   WHERE @extschema@.fencing_role_may_use(
           (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), k.owner, k.users);

-- fencing_set_token_source(lock_name, source): the lock's owner or a
-- superuser, as the lock's other settings.
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

-- The highest token handed out (with the library preloaded, not the unused
-- end of the reserved range, which the sequence's last value is).  PUBLIC
-- may not call it: fencing_reset_mark() uses it.
CREATE FUNCTION @extschema@.fencing_highest_granted() RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_highest_granted' LANGUAGE C VOLATILE PARALLEL SAFE;
REVOKE ALL ON FUNCTION @extschema@.fencing_highest_granted() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.fencing_highest_granted() IS
  'the highest token the database has handed out, NULL before the first; internal';

-- fencing_reset_mark(lock_name, token): for the incident where a mark is
-- already wrong (a made-up token accepted before 1.5, or under an
-- external-token lock).  Behind the fence gate (it waits for the writers
-- in flight), it revokes the live lease (announced and recorded, with the
-- reset as its reason: the holder is fenced and learns it at its next
-- renewal), then sets the mark to token.  token must be above the token of
-- the lock's latest lease, live or not (else its holder would pass again),
-- no higher than the highest token the database has handed out (else every
-- later grant would be below the mark again), and, unless the mark is above
-- every grant, not below the mark (a mark a grant reached is not wrong).
-- fencing_reset_mark('L', fencing_grant()) is the usual call.  The lock's
-- owner or a superuser.
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

-------------------------------------------------------------------------------
-- A per-row fence's INSERT (issue 23 item 5): judged too when the fence's
-- tokens are this database's grants (option word granted_tokens, which
-- fencing_protect() adds unless told external_tokens).  The rest is 1.2's
-- fencing_protect_as unchanged.
-------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION @extschema@.fencing_protect_as(
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

-- fencing_audit() = the guards' audit of 1.2 to 1.4, kept under a name of
-- its own, and the check of the token clock, which is about the database,
-- not a table.
ALTER FUNCTION @extschema@.fencing_audit() RENAME TO fencing_audit_guards;
COMMENT ON FUNCTION @extschema@.fencing_audit_guards() IS
  'the part of fencing_audit() about guarded tables: every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard';

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
    ORDER BY 1, 3, 4;
  END;
COMMENT ON FUNCTION @extschema@.fencing_audit() IS
  'every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard, a severity and the command that mends it; the locks it may use that accept tokens nobody granted; and tokens that run ahead of the server''s clock';

