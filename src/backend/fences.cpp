// Lock-wide fences: the transaction's presented tokens (fencing_present)
// and its locked view of each lock's high-water mark.
//
// The mark itself lives in the table fencing_fence, one row per lock.  A
// transaction that raises it -- a write with a higher token, through the SQL
// function fencing_fence_advance(), a lease grant, a revoke -- locks the row
// for the rest of the transaction, and, from 1.4 on, first takes the lock's
// fence gate (FenceGateKey) exclusively.  A transaction whose token is the
// mark as it stands takes the gate shared and reads the mark, and no row
// lock: the writers of one holder do not wait for each other, while a raise
// waits for every one of them in flight and fences out whatever they write
// after its commit (they wait for the gate behind it).  A transaction that
// holds the mark judges every further row against its cached copy without
// another query.  A database whose extension predates the gate (its revoke
// does not take it) keeps the row lock for every writer.
#include "fences.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

#include "durable_commit.hpp"
#include "extension_objects.hpp"
#include "grant.hpp"
#include "lease_tables.hpp"
#include "lease_writers.hpp"
#include "locks.hpp"
#include "settings.hpp"
#include "shared_stats.hpp"

namespace pg_fencing {
namespace {

// The current transaction's fences: one object for the backend, emptied at
// each transaction's end (the lock names its entries point to live in
// TopTransactionContext, which goes with the transaction).  A fresh one per
// transaction cost 24,000 instructions to zero, a seventh of a single-row
// UPDATE under a lock.
TransactionFences backend_fences;
bool fences_in_use = false;

void OnTransactionEnd(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      PGF_CORE(backend_fences.Clear());
      fences_in_use = false;
      break;
    default:
      break;
  }
}

void OnSubTransactionEvent(SubXactEvent event, SubTransactionId my_subid, SubTransactionId,
                           void *) {
  if (event == SUBXACT_EVENT_ABORT_SUB && fences_in_use) {
    PGF_CORE(backend_fences.AbortSubTransaction(my_subid));
  }
}

TransactionFences &Fences() {
  fences_in_use = true;
  return backend_fences;
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

// ---- The fence gate (1.4) ------------------------------------------------------

// Whether the database's extension has the gate (1.4): its SQL that raises a
// mark takes it (fencing_lock_fence_gate in the revoke).
bool GateInUse(Oid schema) {
  static const Oid kArgTypes[] = {INT8OID};
  return ExtensionFunctionIfExists(schema, "fencing_lock_fence_gate", 1, kArgTypes) != nullptr;
}

// The gate's tag: an advisory lock's, in the field SQL's advisory locks set
// to 1 or 2 (pg_locks.objsubid 3), so that no role can hold it from SQL.
LOCKTAG GateTag(int64 lock_id) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, kFenceGateTag, static_cast<uint32>(lock_id), 3);
  return tag;
}

// The lock's mark as committed now (the latest snapshot, whatever the
// isolation level: the mark is judged as it stands, as a row lock would).
// Under the gate, held in either mode, nobody can move it.  False: no mark.
bool ReadMarkNow(Oid schema, const char *lock_name, Token *mark) {
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  Relation fence = table_open(ids.fence, AccessShareLock);
  Relation probe = index_open(ids.fence_probe, AccessShareLock);
  HeapTuple row = FetchRowCommittedNow(fence, probe, ids.name_collation, lock_name);
  bool found = row != nullptr;
  if (found) {
    bool is_null = false;
    *mark = DatumGetInt64(RowColumn(fence, row, ids.fence_high_water, &is_null));
    found = !is_null;
  }
  index_close(probe, NoLock);
  table_close(fence, NoLock);
  return found;
}

// The first look of a transaction at a lock's mark, with the gate: when
// token is the mark (or below it), the gate is taken shared and the mark
// read again under it, and the fence is held shared (true: *mark and
// *mark_known are what the caller judges).  Otherwise (a higher token, or
// no mark yet) the gate is taken exclusively, and the caller goes on to
// lock and raise the mark's row as before (false).
bool HoldFenceShared(Oid schema, int64 lock_id, const char *lock_name, Token token, Token *mark) {
  LOCKTAG gate = GateTag(lock_id);
  Token seen = 0;
  if (ReadMarkNow(schema, lock_name, &seen) && token <= seen) {
    AcquireGate(gate, ShareLock);
    // A raise may have committed between the look and the gate: it only
    // raised, so token <= the mark still.
    if (!ReadMarkNow(schema, lock_name, &seen)) {
      ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                      errmsg("the mark of fencing lock \"%s\" disappeared", lock_name)));
    }
    LockFence &fence = FenceFor(lock_name);
    TransactionFences &fences = Fences();
    const SubxactId subxact = GetCurrentSubTransactionId();
    PGF_CORE(fences.Lock(fence, true, seen, subxact, true));
    *mark = seen;
    return true;
  }
  AcquireGate(gate, ExclusiveLock);
  return false;
}

// ---- Shared locks and semaphores (1.4) -------------------------------------------

// The mode writers take a gate in: shared, unless pg_fencing.shared_fence
// is off for the session.
LOCKMODE WriterGateMode() { return settings::shared_fence ? ShareLock : ExclusiveLock; }

// Whether the lock has a lease row: its tokens come from its grants, each of
// which raised its mark first (as committed now).
bool LockHasLease(Oid schema, const char *lock_name) {
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  Relation lease = table_open(ids.lease, AccessShareLock);
  Relation probe = index_open(ids.lease_probe, AccessShareLock);
  const bool found = FetchRowCommittedNow(lease, probe, ids.name_collation, lock_name) != nullptr;
  index_close(probe, NoLock);
  table_close(lease, NoLock);
  return found;
}

// A token new to an exclusive or shared lock's fence (above its mark, or
// the lock's first): whether it may be accepted, by where the lock's tokens
// come from.  Looks only when the lock's are this database's grants.
FenceVerdict JudgeNewToken(Oid schema, int64 lock_id, LockKind kind, TokenSource source,
                           const char *lock_name, Token token, Token *highest) {
  *highest = 0;
  if (source != TokenSource::kGranted) return FenceVerdict::kAccept;
  // Under a shared lock a shared holder's token is above the mark (shared
  // holders do not fence each other, and one whose lease ended writes on,
  // as before 1.5): any token the database granted passes.
  const bool leased = kind != LockKind::kShared && LockHasLease(schema, lock_name);
  if (!leased) *highest = HighestGrantedFor(schema, token);
  switch (PGF_CORE(JudgeTokenOrigin(source, leased, token, *highest))) {
    case OriginVerdict::kAccept:
      return FenceVerdict::kAccept;
    case OriginVerdict::kAboveAllGrants:
      return FenceVerdict::kAboveAllGrants;
    case OriginVerdict::kAboveLeasedMark:
      return FenceVerdict::kAboveLeasedMark;
  }
  pg_unreachable();
}

// Under a shared lock: the gate (shared), then the mark as it stands, which
// no write moves; a grant that raises it waits for the gate.
FenceVerdict HoldSharedMark(Oid schema, int64 lock_id, TokenSource source, const char *lock_name,
                            Token token, Token *mark, Token *highest) {
  LockFence *fence = &FenceFor(lock_name);
  if (!fence->locked) {
    LOCKTAG gate = GateTag(lock_id);
    AcquireGate(gate, WriterGateMode());
    Token seen = 0;
    const bool known = ReadMarkNow(schema, lock_name, &seen);
    fence = &FenceFor(lock_name);
    TransactionFences &fences = Fences();
    const SubxactId subxact = GetCurrentSubTransactionId();
    PGF_CORE(fences.Lock(*fence, known, seen, subxact, true));
  }
  *mark = fence->mark;
  if (PGF_CORE(JudgeAgainstSharedMark(token, fence->mark_known, fence->mark)) !=
      HighWaterVerdict::kAccept) {
    return FenceVerdict::kStale;
  }
  const bool is_new = !fence->mark_known || token > fence->mark;
  if (!is_new) return FenceVerdict::kAccept;
  return JudgeNewToken(schema, lock_id, LockKind::kShared, source, lock_name, token, highest);
}

// A permit's gate: an advisory tag with the slot and the lock's id, in a
// field SQL's advisory locks cannot name (pg_locks.objsubid 4).
LOCKTAG PermitGateTag(int64 lock_id, int32 slot) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(slot), static_cast<uint32>(lock_id),
                       4);
  return tag;
}

// The slot of the semaphore lock_id that token is the latest grant of, as
// committed now; false when it is no slot's (granted again since, revoked,
// or never a permit of this semaphore).
bool CurrentPermitSlot(Oid schema, int64 lock_id, Token token, int32 *slot) {
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  if (!OidIsValid(ids.permit)) return false;
  Relation permit = table_open(ids.permit, AccessShareLock);
  Relation probe = index_open(ids.permit_token, AccessShareLock);
  Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
  HeapTuple row = FetchRowByNumber(permit, probe, token, snapshot);
  UnregisterSnapshot(snapshot);
  bool current = false;
  if (row != nullptr) {
    bool is_null = false;
    current = DatumGetInt64(RowColumn(permit, row, ids.permit_lock_id, &is_null)) == lock_id;
    *slot = DatumGetInt32(RowColumn(permit, row, ids.permit_slot, &is_null));
  }
  index_close(probe, NoLock);
  table_close(permit, NoLock);
  return current;
}

// Under a semaphore: the token's slot, its gate, and the slot again under
// the gate (a grant of the slot that committed in between has replaced the
// token).  The transaction remembers the last token it was let write with.
bool HoldPermit(Oid schema, int64 lock_id, const char *lock_name, Token token, Token *mark) {
  *mark = 0;
  LockFence *fence = &FenceFor(lock_name);
  if (fence->locked && fence->permit && fence->mark == token) {
    *mark = token;
    return true;
  }
  int32 slot = 0;
  if (!CurrentPermitSlot(schema, lock_id, token, &slot)) return false;
  LOCKTAG gate = PermitGateTag(lock_id, slot);
  AcquireGate(gate, WriterGateMode());
  int32 again = 0;
  if (!CurrentPermitSlot(schema, lock_id, token, &again) || again != slot) return false;
  fence = &FenceFor(lock_name);
  TransactionFences &fences = Fences();
  const SubxactId subxact = GetCurrentSubTransactionId();
  PGF_CORE(fences.Lock(*fence, true, token, subxact, true, true));
  *mark = token;
  return true;
}

// Under a semaphore or a shared lock, whose marks no write raises: the
// verdict of a write or a presentation alike.
FenceVerdict JudgeUnderSharedKind(Oid schema, int64 lock_id, LockKind kind, TokenSource source,
                                  const char *lock_name, Token token, Token *mark,
                                  Token *highest) {
  if (kind == LockKind::kSemaphore) {
    return HoldPermit(schema, lock_id, lock_name, token, mark) ? FenceVerdict::kAccept
                                                               : FenceVerdict::kStale;
  }
  return HoldSharedMark(schema, lock_id, source, lock_name, token, mark, highest);
}

}  // namespace

void ForgetLockFence(const char *lock_name) {
  if (LockFence *fence = FindTransactionFence(lock_name)) {
    fence->locked = false;
    // A presentation was judged against the old mark: present again.
    fence->presentation_depth = 0;
    fence->presented = false;
  }
}

void TakeFenceGateExclusively(Oid schema, int64 lock_id) {
  if (lock_id == 0 || !GateInUse(schema)) return;
  LOCKTAG gate = GateTag(lock_id);
  AcquireGate(gate, ExclusiveLock);
}

void TakeFenceGateShared(int64 lock_id) {
  LOCKTAG gate = GateTag(lock_id);
  AcquireGate(gate, ShareLock);
}

void GiveBackFenceGateShared(int64 lock_id) {
  LOCKTAG gate = GateTag(lock_id);
  (void)LockRelease(&gate, ShareLock, false);
}

void TakePermitGate(int64 lock_id, int32 slot) {
  LOCKTAG gate = PermitGateTag(lock_id, slot);
  AcquireGate(gate, ExclusiveLock);
}

bool TryTakePermitGate(int64 lock_id, int32 slot) {
  LOCKTAG gate = PermitGateTag(lock_id, slot);
  return LockAcquire(&gate, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

void GiveBackPermitGate(int64 lock_id, int32 slot) {
  LOCKTAG gate = PermitGateTag(lock_id, slot);
  (void)LockRelease(&gate, ExclusiveLock, false);
}

void RegisterFenceCallbacks() {
  RegisterXactCallback(OnTransactionEnd, nullptr);
  RegisterSubXactCallback(OnSubTransactionEvent, nullptr);
}

LockFence *FindTransactionFence(const char *lock_name) {
  return fences_in_use ? PGF_CORE(backend_fences.Find(lock_name)) : nullptr;
}

FenceVerdict AdvanceLockFence(Oid schema, int64 lock_id, LockKind kind, TokenSource source,
                              const char *lock_name, Token token, Token *mark, Token *highest) {
  if (kind != LockKind::kExclusive) {
    return JudgeUnderSharedKind(schema, lock_id, kind, source, lock_name, token, mark, highest);
  }
  LockFence &fence = FenceFor(lock_name);
  // The common case -- the transaction already holds the fence and writes
  // under its mark -- returns before asking whether the gate is in use.
  if (fence.locked) {
    switch (PGF_CORE(JudgeAgainstHighWater(token, fence.mark_known, fence.mark))) {
      case HighWaterVerdict::kAccept:
        *mark = fence.mark;
        return FenceVerdict::kAccept;
      case HighWaterVerdict::kStale:
        *mark = fence.mark;
        return FenceVerdict::kStale;
      case HighWaterVerdict::kRaise:
        // Held shared: the raise needs the gate exclusively (it waits for
        // the others sharing it; two that both do are a deadlock, which
        // PostgreSQL breaks with 40P01).
        if (fence.shared) TakeFenceGateExclusively(schema, lock_id);
        break;
    }
  } else if (lock_id != 0 && GateInUse(schema)) {
    if (!settings::shared_fence) {
      TakeFenceGateExclusively(schema, lock_id);
    } else if (HoldFenceShared(schema, lock_id, lock_name, token, mark)) {
      return token >= *mark ? FenceVerdict::kAccept : FenceVerdict::kStale;
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
    return FenceVerdict::kStale;
  }
  // A raise (or the lock's first mark): the token is new to the lock.  When
  // it was never granted, the caller's error undoes the raise.
  if (!had_mark || token > previous) {
    const FenceVerdict origin = JudgeNewToken(schema, lock_id, kind, source, lock_name, token, highest);
    if (origin != FenceVerdict::kAccept) {
      *mark = had_mark ? previous : 0;
      return origin;
    }
  }
  const SubxactId subxact = GetCurrentSubTransactionId();
  TransactionFences &fences = Fences();
  PGF_CORE(fences.Lock(locked, true, token, subxact));
  // The mark was raised (or made): that must survive a crash with the commit.
  if (!had_mark || token > previous) RequireDurableCommit();
  *mark = token;
  return FenceVerdict::kAccept;
}

FenceVerdict CheckLockFence(Oid schema, int64 lock_id, LockKind kind, TokenSource source,
                            const char *lock_name, Token token, Token *mark, Token *highest) {
  *highest = 0;
  if (kind != LockKind::kExclusive) {
    return JudgeUnderSharedKind(schema, lock_id, kind, source, lock_name, token, mark, highest);
  }
  LockFence *fence = &FenceFor(lock_name);
  if (!fence->locked && lock_id != 0 && GateInUse(schema)) {
    // A presentation of the mark shares the gate; of a higher token, takes
    // it exclusively (the write that follows will raise the mark).
    if (!settings::shared_fence) {
      TakeFenceGateExclusively(schema, lock_id);
    } else if (HoldFenceShared(schema, lock_id, lock_name, token, mark)) {
      return token >= *mark ? FenceVerdict::kAccept : FenceVerdict::kStale;
    }
    fence = &FenceFor(lock_name);
  }
  if (!fence->locked) {
    const Token locked_mark = CallFenceLock(schema, lock_name);
    fence = &FenceFor(lock_name);  // the call may have run arbitrary code
    const SubxactId subxact = GetCurrentSubTransactionId();
    TransactionFences &fences = Fences();
    PGF_CORE(fences.Lock(*fence, true, locked_mark, subxact));
  }
  *mark = fence->mark;
  switch (PGF_CORE(JudgeAgainstHighWater(token, fence->mark_known, fence->mark))) {
    case HighWaterVerdict::kAccept:
      return FenceVerdict::kAccept;
    case HighWaterVerdict::kStale:
      return FenceVerdict::kStale;
    case HighWaterVerdict::kRaise:
      break;
  }
  // A presentation above the mark: the write that follows would raise it.
  if (!fence->mark_known) *mark = 0;
  return JudgeNewToken(schema, lock_id, kind, source, lock_name, token, highest);
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_reads_allowed(lock_name text) RETURNS boolean: whether this
// transaction has presented a token for the lock (fencing_present) that is
// still in force, and the current role may use the lock.  A presentation is
// refused when its token is below the lock's mark, and it holds the lock's
// fence gate until the transaction ends, so nothing can raise the mark
// above it meanwhile: a row-level security policy USING this lets only a
// current holder's transactions read.  The role is checked as the guard
// checks a writer, at the time of the read: a presentation made by another
// role in the same transaction (SET ROLE, a SECURITY DEFINER function)
// lets no role read that could not have presented.  It reveals only the
// calling transaction's own state and changes nothing, so any role may
// call it.
PG_FUNCTION_INFO_V1(fencing_reads_allowed);
Datum fencing_reads_allowed(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  const LockFence *fence = FindTransactionFence(lock_name);
  if (fence == nullptr || !fence->presented) PG_RETURN_BOOL(false);
  // Who may use the lock is read once per statement, role and lock, as the
  // guard reads it for a writer (a policy calling this per row would
  // otherwise probe the lock's row for every row).
  struct UsableCache {
    Oid role;
    const char *lock_name;  // in fn_mcxt
    bool usable;
  };
  FmgrInfo *flinfo = fcinfo->flinfo;
  auto *cache = static_cast<UsableCache *>(flinfo->fn_extra);
  const Oid role = GetUserId();
  if (cache == nullptr || cache->role != role || strcmp(cache->lock_name, lock_name) != 0) {
    if (cache == nullptr) {
      cache =
          static_cast<UsableCache *>(MemoryContextAllocZero(flinfo->fn_mcxt, sizeof(UsableCache)));
      flinfo->fn_extra = cache;
    }
    int64 lock_id = 0;
    const bool usable = LockUsableBy(ExtensionSchema(fcinfo), lock_name, role, &lock_id);
    cache->lock_name = MemoryContextStrdup(flinfo->fn_mcxt, lock_name);
    cache->role = role;
    cache->usable = usable;
  }
  PG_RETURN_BOOL(cache->usable);
}

// fencing_present(lock_name text, token fencing_token) RETURNS void
PG_FUNCTION_INFO_V1(fencing_present);
Datum fencing_present(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  const Oid schema = ExtensionSchema(fcinfo);
  // Presenting takes the lock's fence, which every writer under the lock
  // then waits for: only a role that may use the lock may do it.  (And only
  // such a role's refusals are recorded: the record is bounded, and no
  // other role may fill it.)
  int64 lock_id = 0;
  LockTraits traits;
  if (!LockUsableBy(schema, lock_name, GetUserId(), &lock_id, &traits)) {
    lock_id = AuthorizeLock(schema, lock_name, GetUserId(), true, InvalidOid);
    traits = LockTraitsOf(schema, lock_name);
  }
  const LockKind kind = traits.kind;
  if (PG_ARGISNULL(1)) {
    RecordRefusedWrite({InvalidOid, lock_name, 0, false, 0, false, PGF_ERRCODE_MISSING_TOKEN});
    ereport(ERROR,
            (errcode(PGF_ERRCODE_MISSING_TOKEN),
             errmsg("missing fencing token for lock \"%s\": fencing_present() was given NULL",
                    lock_name)));
  }
  const Token token = PG_GETARG_INT64(1);
  Token mark = 0;
  Token highest = 0;
  const FenceVerdict verdict =
      CheckLockFence(schema, lock_id, kind, traits.source, lock_name, token, &mark, &highest);
  if (verdict == FenceVerdict::kAboveAllGrants || verdict == FenceVerdict::kAboveLeasedMark) {
    RecordRefusedWrite(
        {InvalidOid, lock_name, token, true, mark, true, PGF_ERRCODE_NEVER_GRANTED_TOKEN});
    if (verdict == FenceVerdict::kAboveLeasedMark) {
      ereport(ERROR, (errcode(PGF_ERRCODE_NEVER_GRANTED_TOKEN),
                      errmsg("fencing token " INT64_FORMAT " for lock \"%s\" was never granted: "
                             "the lock's current token is " INT64_FORMAT,
                             token, lock_name, mark),
                      errdetail("Every grant of a lock whose leases this database grants raises "
                                "its mark first, so no holder was ever given a token above it."),
                      errhint("If the lock's tokens come from another service: "
                              "fencing_set_token_source('%s', 'external').",
                              lock_name)));
    }
    ereport(ERROR, (errcode(PGF_ERRCODE_NEVER_GRANTED_TOKEN),
                    errmsg("fencing token " INT64_FORMAT " for lock \"%s\" was never granted: the "
                           "highest token this database has granted is " INT64_FORMAT,
                           token, lock_name, highest),
                    errdetail("A token above every grant is a mistake: a typo, a token of another "
                              "database or lock service, or made up."),
                    errhint("If the lock's tokens come from another service: "
                            "fencing_set_token_source('%s', 'external').",
                            lock_name)));
  }
  if (verdict == FenceVerdict::kStale) {
    RecordRefusedWrite({InvalidOid, lock_name, token, true, mark, true, PGF_ERRCODE_STALE_TOKEN});
    if (kind == LockKind::kSemaphore) {
      ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                      errmsg("stale fencing token " INT64_FORMAT " for semaphore \"%s\": it is "
                             "not the latest grant of any of its permits",
                             token, lock_name),
                      errdetail("Its permit has been granted again or revoked since, or the token "
                                "was never a permit of this semaphore.")));
    }
    ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                    errmsg("stale fencing token " INT64_FORMAT " for lock \"%s\": the lock has "
                           "already seen " INT64_FORMAT,
                           token, lock_name, mark),
                    errdetail("A newer holder of the lock has been granted or has written; the "
                              "lock you held has moved on.")));
  }
  if (traits.source != TokenSource::kExternal) NoteWriteUnderToken(schema, token, lock_name);
  TransactionFences &fences = Fences();
  const SubxactId subxact = GetCurrentSubTransactionId();
  LockFence *fence = PGF_CORE(fences.Find(lock_name));
  PGF_CORE(fences.Present(*fence, token, subxact));
  PG_RETURN_VOID();
}

// fencing_lock_permit_gate(lock_id bigint, slot integer) RETURNS void: takes
// a permit's gate exclusively until the transaction ends, before the slot
// is granted again (or revoked): waits for the writes in flight under its
// old token.  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_lock_permit_gate);
Datum fencing_lock_permit_gate(PG_FUNCTION_ARGS) {
  TakePermitGate(PG_GETARG_INT64(0), PG_GETARG_INT32(1));
  PG_RETURN_VOID();
}

// fencing_try_permit_gate(lock_id bigint, slot integer) RETURNS boolean: the
// same without waiting; false when a writer under the slot's old token is
// still in flight (the grant then prefers another free slot).  PUBLIC may
// not call it.
PG_FUNCTION_INFO_V1(fencing_try_permit_gate);
Datum fencing_try_permit_gate(PG_FUNCTION_ARGS) {
  PG_RETURN_BOOL(TryTakePermitGate(PG_GETARG_INT64(0), PG_GETARG_INT32(1)));
}

// fencing_share_fence_gate(lock_id bigint) RETURNS void: takes the lock's
// fence gate shared until the transaction ends, for a shared grant: a
// revoke, which takes it exclusively, then waits for the grant and ends
// the lease it made.  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_share_fence_gate);
Datum fencing_share_fence_gate(PG_FUNCTION_ARGS) {
  TakeFenceGateShared(PG_GETARG_INT64(0));
  PG_RETURN_VOID();
}

// fencing_forget_fence(lock_name text) RETURNS void: the current
// transaction reads the lock's mark (or its permit) again at its next write,
// after it granted or revoked the lock itself: its cached judgement was made
// under the old mark.  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_forget_fence);
Datum fencing_forget_fence(PG_FUNCTION_ARGS) {
  ForgetLockFence(CheckLockName(fcinfo, 0));
  PG_RETURN_VOID();
}

// fencing_lock_fence_gate(lock_id bigint) RETURNS void: takes the lock's
// fence gate exclusively until the transaction ends, for the SQL that
// raises a mark (the revoke).  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_lock_fence_gate);
Datum fencing_lock_fence_gate(PG_FUNCTION_ARGS) {
  TakeFenceGateExclusively(ExtensionSchema(fcinfo), PG_GETARG_INT64(0));
  PG_RETURN_VOID();
}

}  // extern "C"
