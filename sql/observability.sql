-- What 1.4 lets one see: the grant history, the announce flag, the expiry
-- mark, and the statistics views on a server that does not preload the
-- library.  The announcements themselves, the statistics and the expiry
-- worker need a preloading server and listeners: test/t/008_observability.pl.
-- In a database of its own, so that the tokens it takes do not move the
-- tokens the other tests print.
CREATE DATABASE fencing_observability_probe;
\c fencing_observability_probe
CREATE EXTENSION pg_fencing;
\set SHOW_CONTEXT never

CREATE ROLE obs_tenant_a;
CREATE ROLE obs_tenant_b;
SELECT fencing_create_lock('obs-a', 'obs_tenant_a');
SELECT fencing_create_lock('obs-b', 'obs_tenant_b');

-- ---- History ---------------------------------------------------------------
-- Every way a lease ends, in the order the grants came.
SELECT fencing_acquire('obs-a', 'h1', '1 minute') AS t1 \gset
SELECT fencing_release('obs-a', :'t1');
SELECT fencing_acquire('obs-a', 'h2', '100 ms') AS t2 \gset
SELECT pg_sleep(0.2);
-- h2 ran out and h3 takes over: taken_over.
SELECT fencing_acquire('obs-a', 'h3', '100 ms') AS t3 \gset
SELECT pg_sleep(0.2);
-- h3 ran out and h3 acquires again: expired (nobody else took it).
SELECT fencing_acquire('obs-a', 'h3', '1 minute') AS t4 \gset
SELECT fencing_revoke('obs-a', 'incident') IS NOT NULL AS revoked;
SELECT fencing_acquire('obs-a', 'h4', '1 minute') AS t5 \gset
SELECT holder, holder_role = current_user AS holder_role_is_me, end_reason,
       ended_at IS NOT NULL AS ended, granted_at <= coalesce(ended_at, granted_at) AS in_order
  FROM fencing_history WHERE lock_name = 'obs-a' ORDER BY token;
-- The tokens are the grants' own.
SELECT array_agg(token ORDER BY token) = ARRAY[:'t1', :'t2', :'t3', :'t4', :'t5']::fencing_token[]
       AS history_tokens
  FROM fencing_history WHERE lock_name = 'obs-a';
-- A released lease ended when it was released, an expired one at its end.
SELECT h.token = :'t1' AS released_one, h.ended_at < (SELECT granted_at FROM fencing_history WHERE token = :'t2') AS ended_before_next
  FROM fencing_history h WHERE h.lock_name = 'obs-a' AND h.end_reason = 'released';

-- A grant rolled back leaves nothing in the history (nor a savepoint's).
SELECT count(*) AS entries_before FROM fencing_history WHERE lock_name = 'obs-b' \gset
BEGIN;
SELECT fencing_acquire('obs-b', 'rolled-back', '1 minute') IS NOT NULL AS granted;
ROLLBACK;
BEGIN;
SELECT fencing_acquire('obs-b', 'kept', '1 minute') AS b1 \gset
SAVEPOINT s;
SELECT fencing_release('obs-b', :'b1');
SELECT fencing_acquire('obs-b', 'in-savepoint', '1 minute') IS NOT NULL AS granted;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT :entries_before AS before, holder, end_reason FROM fencing_history WHERE lock_name = 'obs-b';

-- Bounded: the last pg_fencing.history_size leases a grant replaced, plus
-- the current one.  The setting is a superuser's.
SET pg_fencing.history_size = 3;
-- A DBA's trigger on the history table fires for each entry written (the
-- grant writes the table directly, and through SQL when it has triggers).
CREATE TABLE history_audit (op text, holder text);
CREATE FUNCTION audit_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO history_audit VALUES (TG_OP, NEW.holder);
  RETURN NEW;
END $$;
CREATE TRIGGER audit_history AFTER INSERT OR UPDATE ON fencing_grant_history
  FOR EACH ROW EXECUTE FUNCTION audit_history();
DO $$
DECLARE t fencing_token;
BEGIN
  FOR i IN 1..10 LOOP
    t := fencing_acquire('obs-bounded', 'h' || i, '1 minute');
    PERFORM fencing_release('obs-bounded', t);
  END LOOP;
END $$;
SELECT string_agg(holder || ':' || coalesce(end_reason, 'live'), ', ' ORDER BY token) AS kept
  FROM fencing_history WHERE lock_name = 'obs-bounded';
SELECT count(*) AS history_rows FROM fencing_grant_history WHERE lock_name = 'obs-bounded';
SELECT string_agg(op || ' ' || holder, ', ' ORDER BY ctid) AS audited FROM history_audit;
DROP TRIGGER audit_history ON fencing_grant_history;
DROP FUNCTION audit_history();
DROP TABLE history_audit;
SET pg_fencing.history_size = 0;
SELECT fencing_acquire('obs-bounded', 'h11', '1 minute') IS NOT NULL AS granted;
SELECT count(*) AS history_rows_unchanged FROM fencing_grant_history WHERE lock_name = 'obs-bounded';
RESET pg_fencing.history_size;

-- ---- Announce flag ---------------------------------------------------------
SELECT lock_name, announce FROM fencing_locks WHERE lock_name IN ('obs-a', 'obs-b') ORDER BY 1;
SELECT fencing_set_announce('obs-a', true);
SELECT lock_name, announce FROM fencing_locks WHERE lock_name = 'obs-a';
SELECT fencing_set_announce('obs-a', NULL);
SELECT fencing_set_announce('no-such-lock', true);

-- ---- Expiry mark -------------------------------------------------------------
-- fencing_announce_expiries() (the worker's look, or a scheduled job's)
-- marks a lease that ran out, once; it still starts the lock-delay.
SELECT fencing_create_lock('obs-delay');
SELECT fencing_set_lock_delay('obs-delay', '1 hour');
SELECT fencing_acquire('obs-delay', 'd1', '100 ms') AS d1 \gset
SELECT fencing_acquire('obs-later', 'l1', '1 hour') IS NOT NULL AS granted;
SELECT pg_sleep(0.2);
SELECT fencing_announce_expiries() > clock_timestamp() AS next_end_in_future;
SELECT l.ended, v.state, v.available_at - v.expires_at AS delay_still_counts
  FROM fencing_lease l JOIN fencing_leases v USING (lock_name) WHERE lock_name = 'obs-delay';
SELECT fencing_acquire('obs-delay', 'd2', '1 minute') IS NULL AS refused_within_delay;
SELECT fencing_renew('obs-delay', :'d1', '1 minute') AS renew_after_expiry;
-- Marked once: a second look marks nothing more.
SELECT count(*) AS marked FROM fencing_lease WHERE ended = 'expired' AND lock_name = 'obs-delay';
SELECT fencing_announce_expiries() IS NOT NULL AS next_end_known;
SELECT count(*) AS marked_again FROM fencing_lease WHERE ended = 'expired' AND lock_name = 'obs-delay';
-- Once the delay is over, another holder takes over.
SELECT fencing_set_lock_delay('obs-delay', '0');
SELECT fencing_acquire('obs-delay', 'd2', '1 minute') IS NOT NULL AS granted_after_delay;
SELECT holder, end_reason FROM fencing_history WHERE lock_name = 'obs-delay' ORDER BY token;

-- ---- Statistics without the library preloaded --------------------------------
SELECT * FROM fencing_lock_stats;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM fencing_table_stats;
SELECT * FROM fencing_rejections;
SELECT fencing_stats_reset();

-- An event the SQL of the extension does not make is refused.
SELECT fencing_lease_event('obs-b', 'bogus', NULL, NULL);

-- ---- Who may do and see what -------------------------------------------------
SET ROLE obs_tenant_b;
-- Another tenant's history is not shown, and the table behind it is closed.
SELECT count(*) AS foreign_history FROM fencing_history WHERE lock_name = 'obs-a';
SELECT count(*) AS own_history FROM fencing_history WHERE lock_name = 'obs-b';
SELECT * FROM fencing_grant_history;
-- Only a lock's owner says whether it is announced.
SELECT fencing_set_announce('obs-a', false);
SELECT fencing_set_announce('obs-b', true);
-- The internal functions are closed.
SELECT fencing_lease_event('obs-b', 'revoked', 'forged', '1');
SELECT fencing_announce_expiries();
SELECT fencing_stats_reset();
-- Holding a lock's fence gate would stop every writer under it.
SELECT fencing_lock_fence_gate(1);
-- Nor may it queue in a waiting room but through fencing_acquire.
SELECT fencing_wait_to_acquire('obs-b', 1, 'x', NULL, '1 minute', '1 s', NULL, true);
-- The setting is a superuser's.
SET pg_fencing.history_size = 1000000;
RESET ROLE;
SELECT lock_name, announce FROM fencing_locks WHERE lock_name IN ('obs-a', 'obs-b') ORDER BY 1;
-- A monitoring role (pg_read_all_stats, as in pg_monitor) reads every
-- lock's lease and history, and may do nothing with them.
CREATE ROLE obs_monitor IN ROLE pg_read_all_stats;
SET ROLE obs_monitor;
SELECT lock_name, holder FROM fencing_leases WHERE lock_name IN ('obs-a', 'obs-b') ORDER BY 1;
SELECT count(*) > 1 AS reads_history FROM fencing_history WHERE lock_name = 'obs-a';
SELECT count(*) AS uses_no_lock FROM fencing_locks;
SELECT fencing_set_announce('obs-a', false);
SELECT fencing_release('obs-a', token) FROM fencing_leases WHERE lock_name = 'obs-a';
SELECT fencing_revoke('obs-a');
RESET ROLE;
DROP ROLE obs_monitor;

\c contrib_regression
DROP DATABASE fencing_observability_probe;
DROP ROLE obs_tenant_a;
DROP ROLE obs_tenant_b;
