-- The engine keeps the plans of its SQL statements for the backend's life
-- (src/backend/kept_statements.cpp).  A kept plan must follow the objects
-- it reads: here the extension is dropped and created again in the same
-- session, which gives every table, index and the token type new OIDs,
-- and the same statements (a session's open, the line's join, poll and
-- leave, a grant, a release) must then work on the new tables.  In a
-- database of its own, so that the other tests keep theirs.
\set SHOW_CONTEXT never
CREATE DATABASE pg_fencing_kept;
\c pg_fencing_kept
CREATE EXTENSION pg_fencing;
CREATE FUNCTION pg_temp.round(lock_name text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  a bigint := fencing_session_open('a', '1 hour');
  b bigint := fencing_session_open('b', '1 hour');
  pa bigint;
  pb bigint;
  states text;
BEGIN
  SELECT place INTO pa FROM fencing_line_join(a, lock_name);
  SELECT place INTO pb FROM fencing_line_join(b, lock_name);
  PERFORM fencing_line_leave(pa);
  SELECT string_agg(state, ', ' ORDER BY place) INTO states FROM fencing_line_poll(ARRAY[pa, pb]);
  PERFORM fencing_line_leave(pb);
  RETURN states || '; plain released: '
         || fencing_release(lock_name || '-plain', fencing_acquire(lock_name || '-plain', 'h', '1 hour'))::text
         || '; leases the sessions held at their close: '
         || (fencing_session_close(a) + fencing_session_close(b))::text;
END $$;
SELECT pg_temp.round('k1');
DROP EXTENSION pg_fencing CASCADE;
CREATE EXTENSION pg_fencing;
-- The same statements, on the new objects.
SELECT pg_temp.round('k1');
SELECT lock_name, kind FROM fencing_locks ORDER BY lock_name;
\c contrib_regression
DROP DATABASE pg_fencing_kept;
