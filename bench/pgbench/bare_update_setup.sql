-- The baseline of the lease benchmarks (bench/lease_tps.sh,
-- bench/permit_tps.sh): a table for a bare one-row UPDATE and its commit,
-- one row per client (bench/pgbench/bare_update.pgb).
CREATE EXTENSION IF NOT EXISTS pg_fencing;
DROP TABLE IF EXISTS bench_lease_bare;
CREATE TABLE bench_lease_bare (id int PRIMARY KEY, val bigint NOT NULL);
INSERT INTO bench_lease_bare SELECT g, 0 FROM generate_series(1, 200) g;
VACUUM ANALYZE bench_lease_bare;
