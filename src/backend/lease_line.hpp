// The line (1.10): a wait for an exclusive lease kept as a row of
// fencing_line, a place in arrival order, instead of a statement that runs
// for the whole wait.  See lease_line.cpp.
#pragma once

#include "boundary.hpp"

#include "lease_tables.hpp"

namespace pg_fencing {

// Whose turn it is in lock_id's line as committed now (the latest
// snapshot): nobody waits (kFree), or the first place that waits (its
// session live, its wait not run out, its session's role still allowed to
// use the lock) is `session`'s (kYours, its number in *place) or another's
// (kOthers).  An exclusive grant goes to the first place's session only,
// and a permit or a shared lease to nobody while a place waits (exclusive
// first).  The caller holds the lock's waiting room; the room's waiters
// are served before the line (lease_wakeup.hpp, WaitsInRoom).  One probe
// of an empty index when nobody waits; the places of ended sessions or
// waits are stepped over, not written.
enum class LineTurn { kFree, kYours, kOthers };
LineTurn LineTurnOf(const LeaseTableIds &ids, int64 lock_id, int64 session, int64 *place);

// Records on the place that its session has taken the lease under token
// (a grant to the first place's session made by fencing_session_acquire
// rather than by a poll), so that the place waits no more.
void RecordLineGrant(Oid schema, int64 place, int64 token);

// NOTIFY fencing_line with the number of the first place that waits for
// lock_id, at the commit of the current transaction (looked up then, just
// before the commit): for every change that may free the lock.  Nothing on
// a rollback, and nothing for a prepared transaction (PREPARE refuses a
// NOTIFY): its candidates learn by polling.  A candidate listening on the
// channel polls its place at once.  Does nothing in a database without the
// line (before 1.10).
void TellLineAtCommit(Oid schema, int64 lock_id);

// Registers the transaction callback that sends TellLineAtCommit's
// notifications; called from _PG_init.
void RegisterLineCallbacks();

}  // namespace pg_fencing
