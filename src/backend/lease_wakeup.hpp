// Hand-over without polling: a waiter for a lease sleeps on its latch, and
// the commit of a transaction that frees (or moves the end of) a lease sets
// the latch of the backend first in the lock's waiting room.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "storage/lock.h"
}

namespace pg_fencing {

// Registers the transaction callback and the setting
// pg_fencing.wait_recheck; called from _PG_init.  Needs no
// shared_preload_libraries: the releasing backend loads the module when it
// calls fencing_wake_waiters_at_commit(), the waiting one when it calls
// fencing_wait_for_wakeup().
void RegisterLeaseWakeup();

// When the current transaction commits, wake the first waiter of the lock
// lock_id, which then looks at the lease again.  For every transaction that
// frees a lease or moves its end; harmless when nobody waits.
void WakeWaitersAtCommit(int64 lock_id);

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

// The waiting room held across transactions, for fencing_await, which
// commits between its attempts: queues for *room in arrival order, as a
// session lock, and returns true once it is first in line; false when the
// deadline came first.  Holds no snapshot and no transaction id while it
// queues.  The caller must leave the room on every way out, errors
// included: a session lock outlives the transaction.
bool QueueForRoomAcrossTransactions(const LOCKTAG &room, TimestampTz deadline);
void LeaveRoomAcrossTransactions(const LOCKTAG &room);

}  // namespace pg_fencing
