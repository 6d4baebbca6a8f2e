// See lease_wakeup.hpp.
//
// The waiter: the first in a lock's waiting room (a lock-manager lock no
// SQL can take, WaitingRoomTag(); held for the transaction by a waiting
// acquire function, across transactions by CALL fencing_await) makes one
// attempt, then sleeps on its own latch (SleepUntilWoken) until the lease's
// end or its deadline, and tries again.
//
// The waker: a transaction that frees a lease calls
// fencing_wake_waiters_at_commit(lock_id).  At XACT_EVENT_COMMIT -- after
// the commit is durable and visible to the waiter's next snapshot, before
// the transaction's locks are released -- it asks the lock manager who holds
// the waiting room and sets that backend's latch.  Nothing is kept in
// shared memory or in the session: the waiter waits inside one call and the
// waker acts inside one transaction, so both work through a
// transaction-pooling connection pooler.
//
// No wake-up of a waiting function is lost: the waiter makes its attempt
// after its latch was reset, and the release is visible to every snapshot
// taken after the latch is set.  A waiter that is not woken (a lease freed
// by hand, a release committed with COMMIT PREPARED, a set of more than
// PendingWakeups::kCapacity locks in one transaction, a CALL fencing_await
// caught between two of its transactions, when the lock manager finds no
// transaction of its to name) still wakes at the lease's end, or after
// pg_fencing.wait_recheck at the latest.
#include "lease_wakeup.hpp"

#include "lease_line.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/elog.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "extension_objects.hpp"
#include "lease_wait.hpp"
#include "pg_compat.hpp"
#include "post_commit.hpp"
#include "settings.hpp"

namespace pg_fencing {
namespace {

// The waiting rooms to wake when the current transaction commits.
PendingWakeups pending_wakeups;

// Sets the latch of every backend that holds the waiting room `room` in
// this database (at most one: the room is an exclusive lock).
// The room as tagged in field `field` (kRoomField from 1.4; 1, as
// pg_advisory_xact_lock(bigint) tags it, before).
LOCKTAG RoomTag(int64 room, uint16 field) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(room) >> 32),
                       static_cast<uint32>(room), field);
  return tag;
}

void WakeRoomHolder(int64 room) {
  // At commit the extension's version cannot be looked up: both tags.
  for (const uint16 field : {kRoomField, uint16{1}}) {
    LOCKTAG tag = RoomTag(room, field);
    const VirtualTransactionId *holders = GetLockConflicts(&tag, ExclusiveLock, nullptr);
    for (; VirtualTransactionIdIsValid(*holders); ++holders) {
      // A stale entry (the holder has just ended) at worst wakes a backend
      // for nothing: a latch set without cause is a spurious wake-up,
      // which every latch wait tolerates.
      PGPROC *proc = compat::ProcOfVirtualTransaction(*holders);
      if (proc != nullptr) SetLatch(&proc->procLatch);
    }
  }
}

// Wakes the pending rooms' holders, after the commit record (an error --
// out of memory in GetLockConflicts -- is dropped, and the waiters not
// woken fall back to their recheck).
void WakePendingRooms() {
  IgnoringErrorsAfterCommit([] {
    for (int i = 0; i < pending_wakeups.Count(); ++i) WakeRoomHolder(pending_wakeups.At(i));
  });
}

// The rooms this backend waits in as their waiter: queued for by a waiting
// function (fencing_enter_waiting_room, for its transaction) or by CALL
// fencing_await (across its transactions).  Their waiter is served before
// the lock's line (lease_line.hpp: until every wait is a place in line).
// A room that a grant took, which its transaction keeps, is not one.
struct RoomWaited {
  LOCKTAG tag;
  bool across;  // held across transactions (fencing_await)
};
constexpr int kMostRoomsWaited = 8;
RoomWaited rooms_waited[kMostRoomsWaited];
int rooms_waited_count = 0;

bool SameTag(const LOCKTAG &a, const LOCKTAG &b) {
  return a.locktag_field1 == b.locktag_field1 && a.locktag_field2 == b.locktag_field2 &&
         a.locktag_field3 == b.locktag_field3 && a.locktag_field4 == b.locktag_field4 &&
         a.locktag_type == b.locktag_type && a.locktag_lockmethodid == b.locktag_lockmethodid;
}

void NoteRoomWaited(const LOCKTAG &tag, bool across) {
  for (int i = 0; i < rooms_waited_count; ++i) {
    if (SameTag(rooms_waited[i].tag, tag)) return;
  }
  if (rooms_waited_count < kMostRoomsWaited) rooms_waited[rooms_waited_count++] = {tag, across};
}

void ForgetRoomWaited(const LOCKTAG &tag) {
  for (int i = 0; i < rooms_waited_count; ++i) {
    if (SameTag(rooms_waited[i].tag, tag)) {
      rooms_waited[i] = rooms_waited[--rooms_waited_count];
      return;
    }
  }
}

// At the end of a transaction: its rooms go with it.
void ForgetTransactionRooms() {
  int kept = 0;
  for (int i = 0; i < rooms_waited_count; ++i) {
    if (rooms_waited[i].across) rooms_waited[kept++] = rooms_waited[i];
  }
  rooms_waited_count = kept;
}

void OnTransactionEvent(XactEvent event, void *) {
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE) {
    ForgetTransactionRooms();
  }
  switch (event) {
    case XACT_EVENT_COMMIT:
      WakePendingRooms();
      pending_wakeups.Clear();
      break;
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      pending_wakeups.Clear();
      break;
    default:
      break;
  }
}

}  // namespace

LOCKTAG WaitingRoomTag(Oid schema, int64 lock_id) {
  // The room has its own field from 1.4 on, which made fencing_permit.
  const bool own_field = OidIsValid(get_relname_relid("fencing_permit", schema));
  return RoomTag(PGF_CORE(WaitingRoomKey(lock_id)), own_field ? kRoomField : uint16{1});
}

void WakeWaitersAtCommit(Oid schema, int64 lock_id, bool has_line) {
  if (has_line) TellLineAtCommit(schema, lock_id);
  if (!PGF_CORE(pending_wakeups.Add(WaitingRoomKey(lock_id)))) {
    ereport(DEBUG1, (errmsg("pg_fencing: more than %d locks to wake in one transaction",
                            PendingWakeups::kCapacity),
                     errdetail("Waiters on lock %lld look again on their own.",
                               static_cast<long long>(lock_id))));
  }
}

void SleepUntilWoken(bool has_until, TimestampTz until) {
  const TimestampTz now = GetCurrentTimestamp();
  const int64 sleep_ms = PGF_CORE(WakeupSleepMs(now, has_until, until, settings::wait_recheck_ms));
  if (sleep_ms > 0) {
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                    static_cast<long>(sleep_ms), PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  }
  CHECK_FOR_INTERRUPTS();
}

bool WaitsInRoom(const LOCKTAG &room) {
  for (int i = 0; i < rooms_waited_count; ++i) {
    if (SameTag(rooms_waited[i].tag, room)) return true;
  }
  return false;
}

bool QueueForRoomAcrossTransactions(const LOCKTAG &room, TimestampTz deadline) {
  LOCKTAG tag = room;
  // Free: taken at once, no subtransaction needed.
  if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL) {
    NoteRoomWaited(tag, true);
    return true;
  }
  // Taken: queue in the lock manager (first come, first served) for what is
  // left of the wait, as lock_timeout.  Its 55P03 is the end of the wait,
  // caught in a subtransaction, which a session lock does not belong to.
  bool granted_anyway = false;
  const TimestampTz now = GetCurrentTimestamp();
  const bool queued = WithLockTimeout(
      PGF_CORE(QueueTimeoutMs(now, deadline)),
      [&] { (void)LockAcquire(&tag, ExclusiveLock, true, false); },
      [&](bool timed_out) {
        // A timeout or a cancel that fired just as the lock manager
        // granted the room leaves it held, recorded as a session lock that
        // no abort gives back (LockErrorCleanup keeps what was granted):
        // kept after the timeout, as if queued; given back on any other
        // error.  The caller's transaction holds no room of its own.
        granted_anyway = compat::LockHeldByMe(tag, ExclusiveLock);
        if (granted_anyway && !timed_out) (void)LockRelease(&tag, ExclusiveLock, true);
      });
  if (queued || granted_anyway) NoteRoomWaited(tag, true);
  return queued || granted_anyway;
}

bool QueueForRoomInTransaction(const LOCKTAG &room, TimestampTz deadline) {
  LOCKTAG tag = room;
  // In a subtransaction, whose lock on the room passes to the caller's
  // transaction when it finishes: a 55P03 at the deadline rolls back only
  // the queueing.
  const TimestampTz now = GetCurrentTimestamp();
  const bool queued = WithLockTimeout(
      PGF_CORE(QueueTimeoutMs(now, deadline)),
      [&] { (void)LockAcquire(&tag, ExclusiveLock, false, false); }, [](bool) {});
  if (queued) NoteRoomWaited(tag, false);
  return queued;
}

void LeaveRoomInTransaction(const LOCKTAG &room) {
  ForgetRoomWaited(room);
  LOCKTAG tag = room;
  // Queued in a subtransaction that finished: the lock is the current
  // transaction's.
  ResourceOwner saved = CurrentResourceOwner;
  CurrentResourceOwner = CurTransactionResourceOwner;
  (void)LockRelease(&tag, ExclusiveLock, false);
  CurrentResourceOwner = saved;
}

void LeaveRoomAcrossTransactions(const LOCKTAG &room) {
  ForgetRoomWaited(room);
  LOCKTAG tag = room;
  (void)LockRelease(&tag, ExclusiveLock, true);
}

void RegisterLeaseWakeup() { RegisterXactCallback(OnTransactionEvent, nullptr); }

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_wake_waiters_at_commit(lock_id bigint) RETURNS void: when the
// current transaction commits, wake the first waiter of the lock, which
// then looks at the lease again.  For every transaction that frees a lease
// or moves its end; harmless when nobody waits (or when the lease turns out
// to be still busy: the waiter sleeps again).
PG_FUNCTION_INFO_V1(fencing_wake_waiters_at_commit);
Datum fencing_wake_waiters_at_commit(PG_FUNCTION_ARGS) {
  // Called from SQL (a revoke, a session's close, a lock-delay changed),
  // which does not know whether the lock has a line: looked at.
  WakeWaitersAtCommit(ExtensionSchema(fcinfo), PG_GETARG_INT64(0), true);
  PG_RETURN_VOID();
}

// fencing_wait_for_wakeup(until timestamptz) RETURNS void: sleeps until the
// latch is set (fencing_wake_waiters_at_commit, or any signal), until
// `until` (NULL: no end known), or for pg_fencing.wait_recheck, whichever
// comes first.  Interrupts (cancel, statement_timeout, terminate) are
// served when it wakes.
PG_FUNCTION_INFO_V1(fencing_wait_for_wakeup);
Datum fencing_wait_for_wakeup(PG_FUNCTION_ARGS) {
  SleepUntilWoken(!PG_ARGISNULL(0), PG_ARGISNULL(0) ? 0 : PG_GETARG_TIMESTAMPTZ(0));
  PG_RETURN_VOID();
}

// fencing_enter_waiting_room(lock_id bigint) RETURNS void: queues in the
// lock's waiting room (held until the transaction ends), first come first
// served, for at most lock_timeout (55P03 then).  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_enter_waiting_room);
Datum fencing_enter_waiting_room(PG_FUNCTION_ARGS) {
  LOCKTAG room = WaitingRoomTag(ExtensionSchema(fcinfo), PG_GETARG_INT64(0));
  (void)LockAcquire(&room, ExclusiveLock, false, false);
  NoteRoomWaited(room, false);
  PG_RETURN_VOID();
}

// fencing_try_waiting_room(lock_id bigint) RETURNS boolean: takes the
// lock's waiting room until the transaction ends if nobody holds it (or
// this transaction already does).  The permit and shared acquires
// (extension/pg_fencing--1.3--1.4.sql) grant only from inside it.  PUBLIC
// may not call it.
PG_FUNCTION_INFO_V1(fencing_try_waiting_room);
Datum fencing_try_waiting_room(PG_FUNCTION_ARGS) {
  LOCKTAG room = WaitingRoomTag(ExtensionSchema(fcinfo), PG_GETARG_INT64(0));
  PG_RETURN_BOOL(LockAcquire(&room, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL);
}

// fencing_leave_waiting_room(lock_id bigint, queued boolean) RETURNS void:
// gives back one acquisition of the lock's waiting room, so that a caller
// that stays in its transaction holds up no other acquire: that of an
// attempt that granted nothing (fencing_try_waiting_room, made by the
// current resource owner), or with queued, that of a waiting acquire that
// answered NULL (fencing_enter_waiting_room, made in the subtransaction
// that caught its lock_timeout, whose locks went to the current
// (sub)transaction when it committed).  The lock manager counts each
// acquisition: the room stays held while others remain.  PUBLIC may not
// call it.
PG_FUNCTION_INFO_V1(fencing_leave_waiting_room);
Datum fencing_leave_waiting_room(PG_FUNCTION_ARGS) {
  LOCKTAG room = WaitingRoomTag(ExtensionSchema(fcinfo), PG_GETARG_INT64(0));
  if (PG_GETARG_BOOL(1)) {
    LeaveRoomInTransaction(room);
  } else {
    (void)LockRelease(&room, ExclusiveLock, false);
  }
  PG_RETURN_VOID();
}

}  // extern "C"
