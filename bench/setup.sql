-- Tables and guards for bench/measure.sh.  :rows rows per table; one table
-- per variant so that each variant's rounds see the same table state.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_fencing;
-- A grant first: the hand-written tokens below are then below the highest
-- token the database has granted, which 1.5's guards require.
SELECT fencing_grant() IS NOT NULL AS granted;

-- The best hand-written PL/pgSQL guard: static column name, no dynamic SQL.
CREATE OR REPLACE FUNCTION bench_guard_static() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tok IS NULL THEN
    RAISE EXCEPTION 'missing token' USING ERRCODE = '55Z02';
  END IF;
  IF OLD.tok IS NOT NULL AND NEW.tok < OLD.tok THEN
    RAISE EXCEPTION 'stale token' USING ERRCODE = '55Z01';
  END IF;
  RETURN NEW;
END $$;

-- A reusable PL/pgSQL guard must take the column name as an argument, and
-- PL/pgSQL can read a column by name only through dynamic SQL.
CREATE OR REPLACE FUNCTION bench_guard_generic() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  new_tok fencing_token;
  old_tok fencing_token;
BEGIN
  EXECUTE format('SELECT ($1).%1$I, ($2).%1$I', TG_ARGV[0]) INTO new_tok, old_tok USING NEW, OLD;
  IF new_tok IS NULL THEN
    RAISE EXCEPTION 'missing token' USING ERRCODE = '55Z02';
  END IF;
  IF old_tok IS NOT NULL AND new_tok < old_tok THEN
    RAISE EXCEPTION 'stale token' USING ERRCODE = '55Z01';
  END IF;
  RETURN NEW;
END $$;

DO $$
DECLARE
  variant text;
BEGIN
  FOREACH variant IN ARRAY ARRAY['none', 'guard', 'lockwide', 'plpgsql', 'generic', 'cas'] LOOP
    EXECUTE format('DROP TABLE IF EXISTS bench_%s', variant);
    EXECUTE format('CREATE TABLE bench_%s (id int PRIMARY KEY, tok fencing_token NOT NULL, val int NOT NULL)', variant);
    EXECUTE format('INSERT INTO bench_%s SELECT g, 0, 0 FROM generate_series(1, %s) g', variant, current_setting('bench.rows'));
  END LOOP;
END $$;
SELECT fencing_protect('bench_guard');
SELECT fencing_protect('bench_lockwide', lock_name => 'bench');
CREATE TRIGGER guard BEFORE UPDATE ON bench_plpgsql FOR EACH ROW EXECUTE FUNCTION bench_guard_static();
CREATE TRIGGER guard BEFORE UPDATE ON bench_generic FOR EACH ROW EXECUTE FUNCTION bench_guard_generic('tok');
VACUUM ANALYZE;
