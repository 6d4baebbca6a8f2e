// The line (1.10): a wait for an exclusive lease kept as a row of
// fencing_line, a place in arrival order, instead of a statement that runs
// for the whole wait.  See lease_line.cpp.
#pragma once

#include "boundary.hpp"

#include "lease_tables.hpp"

namespace pg_fencing {

// Whether an exclusive grant of lock_id may go to `session` (0: a grant
// outside any session) as the line stands now (the latest snapshot): when
// no place waits for the lock, or the first place that waits (its session
// live, its wait not run out) is the session's.  Also false for every
// permit and shared lease while a place waits (exclusive first).  One probe
// of an empty index when nobody waits; the places of ended sessions or
// waits are stepped over, not written.
bool LineLetsGrant(const LeaseTableIds &ids, int64 lock_id, int64 session);

// NOTIFY fencing_line with the number of the first place that waits for
// lock_id, if any: for every change that may free the lock (the NOTIFY is
// sent at commit, and not at all on a rollback).  A candidate listening on
// the channel polls its place at once.  Does nothing in a database without
// the line (before 1.10).
void TellLineAtCommit(Oid schema, int64 lock_id);

}  // namespace pg_fencing
