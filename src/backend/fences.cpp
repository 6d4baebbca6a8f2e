// Lock-wide fences: the transaction's presented tokens (fencing_present)
// and its locked view of each lock's high-water mark.
//
// The mark itself lives in the table fencing_fence, one row per lock.  Writes
// read and move it through the SQL function fencing_fence_advance(),
// presentations read it through fencing_fence_lock(), and a lease grant
// raises it in fencing_try_acquire(); each locks the row for the rest of the
// transaction.  So writers under one lock are serialised on that one row
// whatever tables they write, and a transaction that has locked the mark can
// judge every further row against its cached copy without another query.
#include "fences.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
}

#include <new>

#include "durable_commit.hpp"
#include "extension_objects.hpp"
#include "locks.hpp"
#include "shared_stats.hpp"

namespace pg_fencing {
namespace {

// The current transaction's fences; nullptr until first used.  Allocated in
// TopTransactionContext, which is reset at transaction end, when the
// callback below also forgets the pointer.
TransactionFences *current_fences = nullptr;

void OnTransactionEnd(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      current_fences = nullptr;
      break;
    default:
      break;
  }
}

void OnSubTransactionEvent(SubXactEvent event, SubTransactionId my_subid, SubTransactionId,
                           void *) {
  if (event == SUBXACT_EVENT_ABORT_SUB && current_fences != nullptr) {
    PGF_CORE(current_fences->AbortSubTransaction(my_subid));
  }
}

TransactionFences &Fences() {
  if (current_fences == nullptr) {
    void *memory = MemoryContextAllocZero(TopTransactionContext, sizeof(TransactionFences));
    current_fences = new (memory) TransactionFences();
  }
  return *current_fences;
}

LockFence &FenceFor(const char *lock_name) {
  TransactionFences &fences = Fences();
  if (LockFence *found = PGF_CORE(fences.Find(lock_name))) return *found;
  // The entry points at a copy that lives as long as the transaction.
  const char *copy = MemoryContextStrdup(TopTransactionContext, lock_name);
  LockFence *added = PGF_CORE(fences.FindOrAdd(copy));
  if (added == nullptr) {
    ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                    errmsg("a transaction can write under at most %d fencing locks",
                           TransactionFences::kCapacity),
                    errdetail("Lock \"%s\" would be one more.", lock_name)));
  }
  return *added;
}

// fencing_fence_advance(lock_name, token): locks the lock's fence row
// (creating it) and moves the mark up to token if token is higher.  Returns
// whether a mark existed before, and it in *previous.
bool CallFenceAdvance(Oid schema, const char *lock_name, Token token, Token *previous) {
  const Oid argtypes[] = {TEXTOID, TokenTypeOid(schema)};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_fence_advance", 2, argtypes);
  const Datum args[] = {CStringGetTextDatum(lock_name), Int64GetDatum(token)};
  bool is_null = false;
  const Datum result = CallExtensionFunction(fn, 2, args, nullptr, &is_null);
  if (is_null) return false;
  *previous = DatumGetInt64(result);
  return true;
}

// fencing_fence_lock(lock_name): locks the lock's fence row (creating it at
// 0) without moving the mark, and returns the mark.
Token CallFenceLock(Oid schema, const char *lock_name) {
  const Oid argtypes[] = {TEXTOID};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_fence_lock", 1, argtypes);
  const Datum args[] = {CStringGetTextDatum(lock_name)};
  bool is_null = false;
  const Datum result = CallExtensionFunction(fn, 1, args, nullptr, &is_null);
  return is_null ? 0 : DatumGetInt64(result);
}

}  // namespace

void RegisterFenceCallbacks() {
  RegisterXactCallback(OnTransactionEnd, nullptr);
  RegisterSubXactCallback(OnSubTransactionEvent, nullptr);
}

LockFence *FindTransactionFence(const char *lock_name) {
  return current_fences == nullptr ? nullptr : PGF_CORE(current_fences->Find(lock_name));
}

bool AdvanceLockFence(Oid schema, const char *lock_name, Token token, Token *mark) {
  LockFence &fence = FenceFor(lock_name);
  if (fence.locked) {
    switch (PGF_CORE(JudgeAgainstHighWater(token, fence.mark_known, fence.mark))) {
      case HighWaterVerdict::kAccept:
        *mark = fence.mark;
        return true;
      case HighWaterVerdict::kStale:
        *mark = fence.mark;
        return false;
      case HighWaterVerdict::kRaise:
        break;
    }
  }
  Token previous = 0;
  const bool had_mark = CallFenceAdvance(schema, lock_name, token, &previous);
  // The function call may have run arbitrary code; look the entry up again.
  LockFence &locked = FenceFor(lock_name);
  if (had_mark && token < previous) {
    const SubxactId subxact = GetCurrentSubTransactionId();
    TransactionFences &fences = Fences();
    PGF_CORE(fences.Lock(locked, true, previous, subxact));
    *mark = previous;
    return false;
  }
  const SubxactId subxact = GetCurrentSubTransactionId();
  TransactionFences &fences = Fences();
  PGF_CORE(fences.Lock(locked, true, token, subxact));
  // The mark was raised (or made): that must survive a crash with the commit.
  if (!had_mark || token > previous) RequireDurableCommit();
  *mark = token;
  return true;
}

bool CheckLockFence(Oid schema, const char *lock_name, Token token, Token *mark) {
  LockFence *fence = &FenceFor(lock_name);
  if (!fence->locked) {
    const Token locked_mark = CallFenceLock(schema, lock_name);
    fence = &FenceFor(lock_name);  // the call may have run arbitrary code
    const SubxactId subxact = GetCurrentSubTransactionId();
    TransactionFences &fences = Fences();
    PGF_CORE(fences.Lock(*fence, true, locked_mark, subxact));
  }
  *mark = fence->mark;
  return PGF_CORE(JudgeAgainstHighWater(token, fence->mark_known, fence->mark)) !=
         HighWaterVerdict::kStale;
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_present(lock_name text, token fencing_token) RETURNS void
PG_FUNCTION_INFO_V1(fencing_present);
Datum fencing_present(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  const Oid schema = ExtensionSchema(fcinfo);
  // Presenting takes the lock's fence, which every writer under the lock
  // then waits for: only a role that may use the lock may do it.  (And only
  // such a role's refusals are recorded: the record is bounded, and no
  // other role may fill it.)
  AuthorizeLock(schema, lock_name, GetUserId(), true, InvalidOid);
  if (PG_ARGISNULL(1)) {
    RecordRefusedWrite({InvalidOid, lock_name, 0, false, 0, false, PGF_ERRCODE_MISSING_TOKEN});
    ereport(ERROR,
            (errcode(PGF_ERRCODE_MISSING_TOKEN),
             errmsg("missing fencing token for lock \"%s\": fencing_present() was given NULL",
                    lock_name)));
  }
  const Token token = PG_GETARG_INT64(1);
  Token mark = 0;
  if (!CheckLockFence(schema, lock_name, token, &mark)) {
    RecordRefusedWrite({InvalidOid, lock_name, token, true, mark, true, PGF_ERRCODE_STALE_TOKEN});
    ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                    errmsg("stale fencing token " INT64_FORMAT " for lock \"%s\": the lock has "
                           "already seen " INT64_FORMAT,
                           token, lock_name, mark),
                    errdetail("A newer holder of the lock has been granted or has written; the "
                              "lock you held has moved on.")));
  }
  TransactionFences &fences = Fences();
  const SubxactId subxact = GetCurrentSubTransactionId();
  LockFence *fence = PGF_CORE(fences.Find(lock_name));
  PGF_CORE(fences.Present(*fence, token, subxact));
  PG_RETURN_VOID();
}

}  // extern "C"
