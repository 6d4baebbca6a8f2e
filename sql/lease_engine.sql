-- The lease engine (1.3) reads the lease tables by primary key and
-- replaces rows in place, as an UPDATE would (src/backend/lease_tables.cpp).
-- What an UPDATE does beyond that must still happen: index entries for a
-- version that could not be a HOT update, and triggers a DBA put on the
-- tables.  In a database of its own, so that the 300 tokens it takes do
-- not move the tokens the other tests print.
CREATE DATABASE fencing_engine_probe;
\c fencing_engine_probe
CREATE EXTENSION pg_fencing;
CREATE EXTENSION amcheck;

-- One transaction that takes and releases a lock 300 times writes 600
-- versions of its lease row and 300 of its mark, which no pruning may
-- remove while it runs: the page fills, and later versions go to other
-- pages with new index entries.
DO $$
DECLARE
  t fencing_token;
BEGIN
  FOR i IN 1 .. 300 LOOP
    t := fencing_acquire('engine-many', 'h', '1 minute');
    IF t IS NULL OR NOT fencing_release('engine-many', t) THEN
      RAISE EXCEPTION 'cycle % failed', i;
    END IF;
  END LOOP;
END $$;
SELECT pg_relation_size('fencing_lease') > 2 * current_setting('block_size')::int
       AS lease_versions_on_several_pages;
-- The primary keys pass amcheck, and a probe through the lease table's
-- finds the live version (without the index entries of the versions on
-- later pages, it finds nothing).
SELECT i AS index_checked, bt_index_check(i, true)
  FROM unnest('{fencing_lease_pkey, fencing_fence_pkey, fencing_lock_pkey}'::regclass[]) i;
SET enable_seqscan = off;
SELECT count(*) AS lease_rows, bool_and(state = 'released') AS released
  FROM fencing_leases WHERE lock_name = 'engine-many';
RESET enable_seqscan;
SELECT fencing_acquire('engine-many', 'h', '1 minute') IS NOT NULL AS granted_again;

-- A DBA's audit trigger on the lease table fires for every grant, renewal
-- and release (the engine writes such a table with an UPDATE).
CREATE TABLE lease_audit (op text, lock_name text, holder text, token fencing_token, ended text);
CREATE FUNCTION audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO lease_audit VALUES (TG_OP, NEW.lock_name, NEW.holder, NEW.token, NEW.ended);
  RETURN NULL;
END $$;
CREATE TRIGGER audit_lease AFTER INSERT OR UPDATE ON fencing_lease
  FOR EACH ROW EXECUTE FUNCTION audit_lease();
SELECT fencing_acquire('engine-audited', 'a', '1 minute') AS audited_1 \gset
SELECT fencing_renew('engine-audited', :'audited_1', '2 minutes') AS renewed;
SELECT fencing_release('engine-audited', :'audited_1') AS released;
SELECT fencing_acquire('engine-audited', 'b', '1 minute') AS audited_2 \gset
SELECT op, lock_name, holder, token = :'audited_1' AS first_token, ended
  FROM lease_audit ORDER BY ctid;
DROP TRIGGER audit_lease ON fencing_lease;
DROP FUNCTION audit_lease();
DROP TABLE lease_audit;

-- fencing_session has triggers of its own from 1.10 on: those of the
-- foreign key fencing_line has into it, which fire only when a session's
-- id changes, so a renewal writes the row directly.  A DBA's trigger on
-- the table still fires for every renewal; after a close, the session's
-- places in line are gone with it (the foreign key's cascade).
CREATE TABLE session_audit (op text, holder text, extended boolean);
CREATE FUNCTION audit_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO session_audit VALUES (TG_OP, NEW.holder, NEW.expires_at > OLD.expires_at);
  RETURN NULL;
END $$;
SELECT fencing_session_open('engine-session', '1 minute') AS es \gset
SELECT fencing_session_renew(:es) AS renewed_without_audit;
CREATE TRIGGER audit_session AFTER UPDATE ON fencing_session
  FOR EACH ROW EXECUTE FUNCTION audit_session();
SELECT fencing_session_renew(:es) AS renewed, fencing_session_renew(:es, '2 minutes') AS renewed_longer;
SELECT op, holder, extended FROM session_audit ORDER BY ctid;
DROP TRIGGER audit_session ON fencing_session;
DROP FUNCTION audit_session();
DROP TABLE session_audit;
SELECT fencing_acquire('engine-in-line', 'holder', '1 minute') IS NOT NULL AS held;
SELECT token IS NULL AS waits FROM fencing_line_join(:es, 'engine-in-line');
SELECT count(*) AS places FROM fencing_lines WHERE lock_name = 'engine-in-line';
SELECT fencing_session_close(:es) AS released;
SELECT count(*) AS places FROM fencing_line l JOIN fencing_lock k USING (lock_id)
 WHERE k.lock_name = 'engine-in-line';

-- Grants, renewals and releases of permits (1.7) write fencing_permit the
-- same way: 300 renewals and 100 grants of the other permit in one
-- transaction fill its pages, the indexes stay sound, the token index
-- finds the live version, and a trigger on the table fires for each grant
-- (an INSERT for a slot's first, an UPDATE after), renewal and release.
SELECT fencing_acquire_permit('engine-sem', 'h', 2, '1 minute') AS permit \gset
DO $$
DECLARE
  t fencing_token := (SELECT token FROM fencing_permits WHERE lock_name = 'engine-sem');
  g fencing_token;
BEGIN
  FOR i IN 1 .. 300 LOOP
    IF NOT fencing_renew('engine-sem', t, '1 minute') THEN
      RAISE EXCEPTION 'renewal % failed', i;
    END IF;
  END LOOP;
  FOR i IN 1 .. 100 LOOP
    g := fencing_acquire_permit('engine-sem', 'cycler', 2, '1 minute');
    IF g IS NULL OR NOT fencing_release('engine-sem', g) THEN
      RAISE EXCEPTION 'grant % failed', i;
    END IF;
  END LOOP;
END $$;
SELECT pg_relation_size('fencing_permit') > 2 * current_setting('block_size')::int
       AS permit_versions_on_several_pages;
SELECT i AS index_checked, bt_index_check(i, true)
  FROM unnest('{fencing_permit_pkey, fencing_permit_token}'::regclass[]) i;
SET enable_seqscan = off;
SELECT count(*) AS permit_rows, bool_and(state = 'live') AS live
  FROM fencing_permits WHERE token = :'permit';
SELECT count(*) AS cycler_rows, bool_and(state = 'released') AS released
  FROM fencing_permits WHERE holder = 'cycler';
RESET enable_seqscan;
CREATE TABLE permit_audit (op text, slot integer, holder text, token fencing_token, ended text);
CREATE FUNCTION audit_permit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Qualified: a lock's first permit is granted under the SQL's pinned search_path.
  INSERT INTO public.permit_audit VALUES (TG_OP, NEW.slot, NEW.holder, NEW.token, NEW.ended);
  RETURN NULL;
END $$;
CREATE TRIGGER audit_permit AFTER INSERT OR UPDATE ON fencing_permit
  FOR EACH ROW EXECUTE FUNCTION audit_permit();
SELECT fencing_renew('engine-sem', :'permit', '2 minutes') AS renewed;
SELECT fencing_release('engine-sem', :'permit') AS released;
SELECT fencing_acquire_permit('engine-sem', 'again', 2, '1 minute') AS again \gset
SELECT fencing_acquire_permit('engine-sem-new', 'first', 2, '1 minute') AS first \gset
SELECT op, slot, holder, token = :'permit' AS its_token, token IN (:'again', :'first') AS new_token,
       ended
  FROM permit_audit ORDER BY ctid;
DROP TRIGGER audit_permit ON fencing_permit;
DROP FUNCTION audit_permit();
DROP TABLE permit_audit;
\c contrib_regression
DROP DATABASE fencing_engine_probe;
