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
  'every table guarded by pg_fencing that the caller owns, with each thing that weakens its guard, a severity and the command that mends it; and tokens that run ahead of the server''s clock';
