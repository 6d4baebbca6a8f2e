-- pg_fencing 1.0 -> 1.1: fencing_unprotect().
--
-- There is no pg_fencing--1.1.sql: CREATE EXTENSION pg_fencing (1.1) runs
-- pg_fencing--1.0.sql and then this script, so a fresh install and an
-- upgraded one are built by the same statements and cannot drift apart
-- (test/t/005_upgrade.pl compares their catalogs all the same).
\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.1'" to load this file. \quit

-- Drops only the triggers fencing_protect() creates, by their names, and
-- only when they call this extension's fencing_guard(): a trigger of the
-- user's own that happens to be called fencing_guard is left alone.
-- Not SECURITY DEFINER: DROP TRIGGER checks that the caller owns the table,
-- exactly as for fencing_protect().
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
  -- Statement triggers are not cloned: under a lock, fencing_protect() gave
  -- every table of the partition tree a TRUNCATE trigger of its own.
  -- (pg_partition_tree lists nothing for a table that is not partitioned.)
  FOR part IN
    SELECT t.relid FROM pg_catalog.pg_partition_tree(tbl) t
     WHERE t.relid OPERATOR(pg_catalog.<>) tbl
       AND EXISTS (SELECT FROM pg_catalog.pg_trigger g
                    WHERE g.tgrelid OPERATOR(pg_catalog.=) t.relid
                      AND g.tgname OPERATOR(pg_catalog.=) 'fencing_guard_truncate'
                      AND g.tgfoid OPERATOR(pg_catalog.=) guard_fn)
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER fencing_guard_truncate ON %s', part);
  END LOOP;
END
$$;
COMMENT ON FUNCTION @extschema@.fencing_unprotect(regclass) IS
  'removes the triggers fencing_protect() installed on a table (fencing_guard and, under a lock, fencing_guard_truncate, on each partition too); 55000 if it has neither';
