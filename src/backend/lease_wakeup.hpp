// Hand-over without polling: a waiter for a lease sleeps on its latch, and
// the commit of a transaction that frees (or moves the end of) a lease sets
// the latch of the backend first in the lock's waiting room.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "access/xact.h"
#include "datatype/timestamp.h"
#include "storage/lock.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

#include <cstdio>

namespace pg_fencing {

// Registers the transaction callback; called from _PG_init.  Needs no
// shared_preload_libraries: the releasing backend loads the module when it
// calls fencing_wake_waiters_at_commit(), the waiting one when it calls
// fencing_wait_for_wakeup().
void RegisterLeaseWakeup();

// When the current transaction commits, wake the first waiter of the lock
// lock_id (of the extension in schema), which then looks at the lease
// again, and, when the lock may have a line (has_line: a place has joined
// it, or the caller does not know), tell its first place
// (TellLineAtCommit).  For every transaction that frees a lease or moves
// its end; harmless when nobody waits.
void WakeWaitersAtCommit(Oid schema, int64 lock_id, bool has_line);

// The lock manager's tag of a lock's waiting room.  From 1.4 it is an
// advisory tag in a field SQL's advisory locks cannot name (kRoomField), so
// that no role can hold a room from SQL (and stop every acquire of the lock:
// an acquire without a wait gives way to whoever is in the room); before,
// the room was pg_advisory_xact_lock(fencing_waiting_room(lock_id)).
constexpr uint16 kRoomField = 3;
LOCKTAG WaitingRoomTag(Oid schema, int64 lock_id);

// Sleeps on the latch until it is set (WakeWaitersAtCommit's commit, or
// any signal), until `until` (has_until false: no end known), or for
// pg_fencing.wait_recheck, whichever comes first; then serves interrupts
// (cancel, statement_timeout, terminate).
void SleepUntilWoken(bool has_until, TimestampTz until);

// Whether this backend holds the room as its waiter (a waiting function's,
// or CALL fencing_await's), not because a grant of its transaction took it:
// such a waiter is served before the lock's line.
bool WaitsInRoom(const LOCKTAG &room);

// The waiting room held across transactions, for fencing_await, which
// commits between its attempts: queues for *room in arrival order, as a
// session lock, and returns true once it is first in line; false when the
// deadline came first.  Holds no snapshot and no transaction id while it
// queues.  The caller's transaction must not hold the room itself (a
// fresh one after a commit).  The caller must leave the room on every way
// out, errors included: a session lock outlives the transaction.
bool QueueForRoomAcrossTransactions(const LOCKTAG &room, TimestampTz deadline);
void LeaveRoomAcrossTransactions(const LOCKTAG &room);

// The waiting room held until the end of the transaction, for the waiting
// functions, which wait inside one statement: queues for *room in arrival
// order and returns true once it is first in line; false when the deadline
// came first.  Leave it, when nothing was granted, so that the caller's
// transaction holds up nobody after the wait.
bool QueueForRoomInTransaction(const LOCKTAG &room, TimestampTz deadline);
void LeaveRoomInTransaction(const LOCKTAG &room);

// Runs body() in an internal subtransaction.  Returns true when body() ran
// to its end (what it took, locks included, then belongs to the current
// transaction); false when one of its lock waits ran out (55P03: the
// lock_timeout in force), after the subtransaction was rolled back.  Any
// other error is thrown again.  Either way after_rollback(timed_out) runs
// first, when the subtransaction has been rolled back: what a rollback does
// not undo (a session lock) is the caller's to look at.  body must leave
// nothing with a destructor on the stack when it throws (an ereport is a
// longjmp).
template <typename Body, typename AfterRollback>
bool UnlessLockTimeout(Body &&body, AfterRollback &&after_rollback) {
  const MemoryContext context = CurrentMemoryContext;
  const ResourceOwner owner = CurrentResourceOwner;
  volatile bool finished = false;
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(context);
  PG_TRY();
  {
    body();
    finished = true;
    ReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(context);
    ErrorData *error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    const bool timed_out = error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
    after_rollback(timed_out);
    if (!timed_out) ReThrowError(error);
    FreeErrorData(error);
  }
  PG_END_TRY();
  return finished;
}

// UnlessLockTimeout() with lock_timeout set to timeout_ms, whatever the
// session set, so that body()'s lock waits end where a wait must
// (fencing_await's deadline).
template <typename Body, typename AfterRollback>
bool WithLockTimeout(long long timeout_ms, Body &&body, AfterRollback &&after_rollback) {
  char timeout[32];
  snprintf(timeout, sizeof timeout, "%lld", timeout_ms);
  const int guc_level = NewGUCNestLevel();
  (void)set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                          true, 0, false);
  const bool finished = UnlessLockTimeout(body, after_rollback);
  AtEOXact_GUC(true, guc_level);
  return finished;
}

}  // namespace pg_fencing
