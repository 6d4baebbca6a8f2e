-- pg_fencing 1.5 -> 1.6: a transaction cannot outlive the lease it writes
-- under.
--
-- A transaction that writes, deletes, truncates or presents under a lease's
-- token can commit only while that lease lives (55Z04 at COMMIT), and with
-- the library preloaded it is ended -- cancelled, or terminated when it
-- sits idle in its transaction -- once the lease ends, so that a holder
-- frozen in the middle of a transaction never keeps the next holder
-- waiting.  The C side is src/backend/lease_writers.cpp; the SQL side is
-- the index it finds a token's lease by.

\echo Use "ALTER EXTENSION pg_fencing UPDATE TO '1.6'" to load this file. \quit

-- Which exclusive lease a token written under belongs to: a per-row fence
-- knows only the token.  (A semaphore's and a shared lock's slots are
-- found by fencing_permit_token, from 1.4.)  Not unique: the table is the
-- extension's, but a restore could bring back rows that share a token, and
-- an index that cannot be built would block the update.
CREATE INDEX fencing_lease_token ON @extschema@.fencing_lease (token);
