-- Bad input to every function PUBLIC may call: a clear error with a
-- SQLSTATE of its class, never an internal error (XX000) or a crash.
\set SHOW_CONTEXT never

-- Each public function of the extension, called with every argument NULL
-- and then with odd values; the SQLSTATE of each outcome is listed.
CREATE FUNCTION pg_temp.outcome(call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE call;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;

SELECT p.oid::regprocedure AS function,
       pg_temp.outcome(format('SELECT %s(%s)', p.oid::regproc,
         (SELECT string_agg(format('NULL::%s', t::regtype), ', ' ORDER BY o)
            FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, o)))) AS all_null
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
WHERE has_function_privilege('public', p.oid, 'EXECUTE')
  AND p.prokind = 'f' AND p.prorettype <> 'trigger'::regtype
  AND p.proname NOT LIKE 'fencing_token\_%'  -- the type's own support functions
  AND p.proname <> 'fencing_grant'  -- takes no argument (and would use up a token)
ORDER BY p.oid::regprocedure::text COLLATE "C";  -- by name: OIDs follow the install script's order

-- Odd values (in a transaction rolled back: the locks they create go too).
BEGIN;
SELECT pg_temp.outcome($$SELECT fencing_protect(424242)$$) AS protect_missing_table;
SELECT pg_temp.outcome($$SELECT fencing_protect('pg_class')$$) AS protect_catalog;
SELECT pg_temp.outcome($$SELECT fencing_unprotect(424242)$$) AS unprotect_missing_table;
SELECT pg_temp.outcome($$SELECT fencing_protect('pg_class', 'relname')$$) AS protect_wrong_type;
SELECT pg_temp.outcome($$SELECT fencing_present(repeat('x', 10000), fencing_grant())$$) AS long_lock_name;
SELECT pg_temp.outcome($$SELECT fencing_present(string_agg(md5(g::text), ''), '1') FROM generate_series(1, 300) g$$) AS incompressible_long_lock_name;
SELECT pg_temp.outcome($$SELECT fencing_present('x', '-1')$$) AS negative_token;
SELECT pg_temp.outcome($$SELECT fencing_waiting_room(-1)$$) AS negative_lock_id;
ROLLBACK;
