-- Infinite intervals as a lease's ttl or wait.  15 and 16 cannot read
-- 'infinity' as an interval (22007, expected/infinite_interval.out); 17 and
-- later can, and the lease functions refuse it (22023,
-- expected/infinite_interval_1.out): a lease that never expires is no lease.
\set SHOW_CONTEXT never
\set VERBOSITY terse
BEGIN;
SELECT fencing_acquire('inf', 'h', 'infinity');
ROLLBACK;
BEGIN;
SELECT fencing_acquire('inf', 'h', '-infinity');
ROLLBACK;
BEGIN;
SELECT fencing_acquire('inf', 'h', '1 s', 'infinity');
ROLLBACK;
-- Nor renewed forever (the ttl is checked before the lease is looked up).
SELECT fencing_renew('inf', '1', 'infinity');
