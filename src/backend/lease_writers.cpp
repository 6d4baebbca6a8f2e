// Transactions cannot outlive the leases they write under (1.6).
//
// A holder can freeze in the middle of a transaction (a GC pause, SIGSTOP,
// a stuck client) after writing under its lease.  Its transaction keeps
// what it holds -- the lock's fence gate, the rows it wrote -- so the next
// holder's grant or write would wait for as long as the holder stays
// frozen, and the frozen write would land at its COMMIT, long after the
// lease ended.  Three pieces bound that:
//
//   the list     every transaction notes the leases it writes, deletes,
//                truncates or presents under (the token's lease, found by
//                the token: fencing_lease_token, fencing_permit_token), in
//                backend memory and, with the preload, in a shared array
//                with one slot per backend.
//   the commit   at PRE_COMMIT each noted lease is read as committed now;
//                one that has ended (ran out by the server's clock,
//                released, revoked, granted again) refuses the COMMIT
//                (55Z04).  Preloaded or not.  A renewal from another
//                connection moves the end: the row says so.
//   the ending   with the preload, a transaction that outlives its lease is
//                cancelled, and terminated if it is still there a moment
//                later (a cancel does nothing to a session idle in its
//                transaction).  The database's expiry worker does it at the
//                lease's end (registering a lease schedules a look then; a
//                release or a revoke schedules one at once), and a grant or
//                write that finds a gate taken does it at once for the
//                gate's holders (AcquireGate) before it waits.
//
// What is ended is judged by the lease's row alone, so a holder's live
// lease never ends its transactions: its renewals keep the row's end ahead.
// One exception, at COMMIT: a lease the transaction itself ended early
// while it lived (its release, revoke or session close says so:
// NoteLeaseEndedHere) ends with the commit.  Nothing else the transaction
// writes into a lease's row counts, so no call can turn a lease that had
// already ended into one the transaction ended (1.9).
// A lease once noted stays noted for the whole transaction, even when the
// subtransaction that wrote under it rolls back: its locks may be gone, but
// erring towards refusing a COMMIT never lets a stale write in.
#include "lease_writers.hpp"

#include <cerrno>
#include <csignal>

extern "C" {
#include "access/genam.h"
#include "access/parallel.h"
#include "access/table.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "expiry_worker.hpp"
#include "lease_tables.hpp"
#include "locks.hpp"
#include "lease_counts.hpp"  // EarlierEnd
#include "pg_compat.hpp"
#include "written_leases.hpp"

namespace pg_fencing {

Token last_noted_token = 0;

namespace {

// How long a cancelled transaction has to end before its session is
// terminated: a statement that is running or waiting stops at once; one
// still there after this is idle in its transaction.
constexpr int64 kTerminateAfterUs = 100 * 1000;

// ---- A lease's row as committed now ---------------------------------------------

struct LeaseLook {
  LeaseRowNow row;  // row.ended_here is not the row's: the caller sets it
  char *lock_name;  // palloc'd; nullptr when the row is gone
};

bool TextEquals(Datum value, const char *word) {
  return strcmp(TextDatumGetCString(value), word) == 0;
}

// What the lease rows are read with: as committed now (in parallel mode,
// as the statement sees them).  Registered; the caller unregisters it.
Snapshot LeaseSnapshot() {
  return RegisterSnapshot(IsInParallelMode() ? GetActiveSnapshot() : GetLatestSnapshot());
}

// The row of kind `row` that carries token, as snapshot sees it.
LeaseLook LookAtLease(const LeaseTableIds &ids, LeaseRow row, Token token, Snapshot snapshot) {
  LeaseLook look{};
  const bool exclusive = row == LeaseRow::kExclusive;
  const Oid table_id = exclusive ? ids.lease : ids.permit;
  const Oid index_id = exclusive ? ids.lease_token_index : ids.permit_token;
  if (!OidIsValid(table_id) || !OidIsValid(index_id)) return look;
  Relation table = table_open(table_id, AccessShareLock);
  Relation index = index_open(index_id, AccessShareLock);
  HeapTuple found = FetchRowByNumber(table, index, token, snapshot);
  if (found != nullptr) {
    bool is_null = false;
    look.row.found = true;
    look.row.expires_at = LeaseRowEnd(ids, table, found, snapshot);
    const Datum ended =
        RowColumn(table, found, exclusive ? ids.lease_ended : ids.permit_ended, &is_null);
    // 'expired' only marks a lease whose end has passed: the end says it.
    look.row.ended_early = !is_null && !TextEquals(ended, "expired");
    look.lock_name = TextDatumGetCString(RowColumn(
        table, found, exclusive ? ids.lease_lock_name : ids.permit_lock_name, &is_null));
  }
  index_close(index, NoLock);
  table_close(table, NoLock);
  return look;
}

// The lease token belongs to, if any: the exclusive lease it is the token
// of, or else the permit or shared holder's slot.
bool FindLeaseOfToken(const LeaseTableIds &ids, Token token, LeaseRow *row, LeaseLook *look) {
  Snapshot snapshot = LeaseSnapshot();
  bool found = false;
  for (const LeaseRow kind : {LeaseRow::kExclusive, LeaseRow::kSlot}) {
    *look = LookAtLease(ids, kind, token, snapshot);
    if (look->row.found) {
      *row = kind;
      found = true;
      break;
    }
  }
  UnregisterSnapshot(snapshot);
  return found;
}

// Whether any version of a lease row carries token, committed or written
// by a transaction still in progress (a dirty look): a grant that has
// written its row but not committed yet.  Such a token is no lease's as
// committed now, but it will be one if the grant commits.
bool TokenHasAnyRow(const LeaseTableIds &ids, Token token) {
  SnapshotData dirty;
  InitDirtySnapshot(dirty);
  for (const LeaseRow kind : {LeaseRow::kExclusive, LeaseRow::kSlot}) {
    const bool exclusive = kind == LeaseRow::kExclusive;
    const Oid table_id = exclusive ? ids.lease : ids.permit;
    const Oid index_id = exclusive ? ids.lease_token_index : ids.permit_token;
    if (!OidIsValid(table_id) || !OidIsValid(index_id)) continue;
    Relation table = table_open(table_id, AccessShareLock);
    Relation index = index_open(index_id, AccessShareLock);
    const bool found = FetchRowByNumber(table, index, token, &dirty) != nullptr;
    index_close(index, NoLock);
    table_close(table, NoLock);
    if (found) return true;
  }
  return false;
}

const char *EndedAt(const LeaseLook &look) {
  return timestamptz_to_str(static_cast<TimestampTz>(look.row.expires_at));
}

// ---- The shared list (with the preload) -----------------------------------------

// One backend's current transaction and the leases it wrote under.  The
// owner writes it; a grant or the worker reads it, and writes
// cancelled_at.  All under mutex.
struct WriterSlot {
  slock_t mutex;
  Oid database;
  Oid schema;  // the extension's, for the lease tables
  int pid;
  LocalTransactionId lxid;  // InvalidLocalTransactionId: no transaction noted
  TimestampTz cancelled_at;  // 0: not cancelled
  bool terminated;
  int count;
  WrittenLease leases[WrittenLeases::kCapacity];
};

WriterSlot *slots = nullptr;
int slot_count = 0;

Size SlotsSize() { return mul_size(sizeof(WriterSlot), MaxBackends); }

}  // namespace

void RequestLeaseWriterMemory() { RequestAddinShmemSpace(MAXALIGN(SlotsSize())); }

void AttachLeaseWriterMemory() {
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  slots = static_cast<WriterSlot *>(ShmemInitStruct("pg_fencing lease writers", SlotsSize(), &found));
  slot_count = MaxBackends;
  if (!found) {
    for (int i = 0; i < slot_count; ++i) {
      SpinLockInit(&slots[i].mutex);
      slots[i].lxid = InvalidLocalTransactionId;
      slots[i].count = 0;
    }
  }
  LWLockRelease(AddinShmemInitLock);
}

namespace {

WriterSlot *MySlot() {
  if (slots == nullptr || MyProc == nullptr) return nullptr;
  const int index = compat::ProcIndex(MyProc);
  return index >= 0 && index < slot_count ? &slots[index] : nullptr;
}

// ---- The current transaction's leases -------------------------------------------

WrittenLeases noted;
Oid noted_schema = InvalidOid;
// The lock names of noted's leases, in TopTransactionContext, for messages.
const char *noted_names[WrittenLeases::kCapacity];
bool mirrored = false;  // noted is mirrored into MySlot()

void Mirror(const WrittenLease &lease) {
  WriterSlot *slot = MySlot();
  if (slot == nullptr) return;
  SpinLockAcquire(&slot->mutex);
  if (!mirrored) {
    slot->database = MyDatabaseId;
    slot->schema = noted_schema;
    slot->pid = MyProcPid;
    slot->lxid = compat::ProcLocalTransactionId(MyProc);
    slot->cancelled_at = 0;
    slot->terminated = false;
    slot->count = 0;
  }
  if (slot->count < WrittenLeases::kCapacity) slot->leases[slot->count++] = lease;
  SpinLockRelease(&slot->mutex);
  mirrored = true;
}

void ForgetNoted() {
  noted.Clear();
  last_noted_token = 0;
  if (!mirrored) return;
  mirrored = false;
  WriterSlot *slot = MySlot();
  if (slot == nullptr) return;
  SpinLockAcquire(&slot->mutex);
  slot->count = 0;
  slot->lxid = InvalidLocalTransactionId;
  SpinLockRelease(&slot->mutex);
}

void RefuseCommit(const WrittenLease &lease, const char *lock_name, const LeaseLook &look,
                  LeaseLife life) {
  const char *name = look.lock_name != nullptr ? look.lock_name : lock_name;
  // The primary message names the lease; the detail says how and when it
  // ended (what varies from run to run).
  const char *how =
      life == LeaseLife::kReplaced
          ? psprintf("Its token " INT64_FORMAT " is no longer the lock's: the lease ended and the "
                     "lock has been granted again.",
                     lease.token)
          : psprintf("Its token " INT64_FORMAT " %s at %s.", lease.token,
                     life == LeaseLife::kEnded ? "was released or revoked" : "ran out",
                     EndedAt(look));
  ereport(ERROR, (errcode(PGF_ERRCODE_LEASE_ENDED),
                  errmsg("the lease of fencing lock \"%s\" has ended: this transaction wrote "
                         "under it and cannot commit",
                         name),
                  errdetail_internal("%s A transaction cannot outlive the lease it writes under.",
                                     how),
                  errhint("Renew the lease before it runs out (fencing_renew), or acquire the "
                          "lock again and run the transaction under the new token.")));
}

// At PRE_COMMIT: every noted lease must live.
void CheckNotedLeases() {
  if (noted.Count() == 0) return;
  const LeaseTableIds &ids = LeaseTablesOf(noted_schema);
  const TimestampTz now = GetCurrentTimestamp();
  Snapshot snapshot = LeaseSnapshot();
  for (int i = 0; i < noted.Count(); ++i) {
    const WrittenLease &lease = noted.At(i);
    LeaseLook look = LookAtLease(ids, lease.row, lease.token, snapshot);
    look.row.ended_here = lease.ended_here;
    const LeaseLife life = PGF_CORE(JudgeLease(look.row, now));
    if (life != LeaseLife::kLive) {
      UnregisterSnapshot(snapshot);
      RefuseCommit(lease, noted_names[i], look, life);
    }
  }
  UnregisterSnapshot(snapshot);
}

// ---- Leases the current transaction ended early --------------------------------

// Their tokens (EndWritersOfLeaseAtCommit); past the array, a look at
// commit whatever the slots hold.  A subtransaction rolled back leaves its
// tokens here: at worst one look for nothing.
constexpr int kEndedEarlyCapacity = 16;
Token ended_early[kEndedEarlyCapacity];
int ended_early_count = 0;
bool ended_early_overflow = false;

// Whether a transaction of this database other than the current one has
// noted one of ended_early's leases.  Spinlocks and plain reads only: it
// runs after the commit record, where nothing may fail.
bool OthersWriteUnderEndedEarly();

void ForgetEndedEarly() {
  ended_early_count = 0;
  ended_early_overflow = false;
}

// After the commit (nothing here can fail): the look, if a writer of one of
// the leases this transaction ended early remains.
void LookIfWritersRemain() {
  if (ended_early_count == 0 && !ended_early_overflow) return;
  if (ended_early_overflow || OthersWriteUnderEndedEarly()) {
    ScheduleLookNoLaterThan(MyDatabaseId, GetCurrentTimestamp());
  }
  ForgetEndedEarly();
}

void OnSubTransactionEvent(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                           void *) {
  if (event == SUBXACT_EVENT_ABORT_SUB) noted.AbortSubTransaction(subxact);
}

void OnTransactionEvent(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      CheckNotedLeases();
      break;
    case XACT_EVENT_PRE_PREPARE:
      if (noted.Count() > 0) {
        ereport(ERROR,
                (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                 errmsg("cannot prepare a transaction that wrote under the lease of fencing lock "
                        "\"%s\"",
                        noted_names[0]),
                 errdetail("A prepared transaction could commit after the lease ended.")));
      }
      break;
    case XACT_EVENT_COMMIT:
      ForgetNoted();
      LookIfWritersRemain();
      break;
    case XACT_EVENT_PREPARE:
      // The leases end at COMMIT PREPARED, in whatever session runs it:
      // the worker's periodic look, or the lease's old end, ends their
      // writers then.
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      ForgetNoted();
      ForgetEndedEarly();
      break;
    default:
      break;
  }
}

// ---- Ending a transaction that outlived its lease -------------------------------

// A copy of a slot, taken under its mutex.
struct SlotCopy {
  Oid database;
  Oid schema;
  LocalTransactionId lxid;
  int count;
  WrittenLease leases[WrittenLeases::kCapacity];
};

SlotCopy CopySlot(WriterSlot &slot) {
  SlotCopy copy;
  SpinLockAcquire(&slot.mutex);
  copy.database = slot.database;
  copy.schema = slot.schema;
  copy.lxid = slot.lxid;
  copy.count = slot.count;
  memcpy(copy.leases, slot.leases, sizeof(WrittenLease) * copy.count);
  SpinLockRelease(&slot.mutex);
  return copy;
}

bool OthersWriteUnderEndedEarly() {
  if (slots == nullptr) return false;
  const WriterSlot *mine = MySlot();
  for (int index = 0; index < slot_count; ++index) {
    if (&slots[index] == mine) continue;
    const SlotCopy copy = CopySlot(slots[index]);
    if (copy.database != MyDatabaseId || copy.lxid == InvalidLocalTransactionId) continue;
    for (int i = 0; i < copy.count; ++i) {
      for (int j = 0; j < ended_early_count; ++j) {
        if (copy.leases[i].token == ended_early[j]) return true;
      }
    }
  }
  return false;
}

void Signal(int pid, int signal) {
  if (kill(pid, signal) != 0 && errno != ESRCH) {
    ereport(WARNING, (errmsg("pg_fencing: could not signal process %d: %m", pid)));
  }
}

// The next step for the transaction lxid in slots[index], which wrote
// under a lease that look shows ended; returns when to look at it again.
TimestampTz EndTransaction(int index, LocalTransactionId lxid, Token token, const LeaseLook &look,
                           LeaseLife life, TimestampTz now) {
  WriterSlot &slot = slots[index];
  SpinLockAcquire(&slot.mutex);
  if (slot.lxid != lxid) {
    SpinLockRelease(&slot.mutex);
    return 0;  // ended meanwhile
  }
  const EndingStep step = PGF_CORE(NextEndingStep(slot.cancelled_at, now, kTerminateAfterUs));
  if (step == EndingStep::kCancel) slot.cancelled_at = now;
  const bool first_termination = step == EndingStep::kTerminate && !slot.terminated;
  if (step == EndingStep::kTerminate) slot.terminated = true;
  const int pid = slot.pid;
  const TimestampTz cancelled_at = slot.cancelled_at;
  SpinLockRelease(&slot.mutex);
  // The slot's process still runs that transaction (it could have ended and
  // started another since the copy: then it is left alone).
  const PGPROC *proc = &ProcGlobal->allProcs[index];
  if (proc->pid != pid || compat::ProcLocalTransactionId(proc) != lxid) return 0;

  const char *lease = life == LeaseLife::kReplaced
                          ? psprintf("under token " INT64_FORMAT
                                     ", whose lock has been granted again",
                                     token)
                          : psprintf("of fencing lock \"%s\" under token " INT64_FORMAT
                                     ", which %s at %s",
                                     look.lock_name, token,
                                     life == LeaseLife::kEnded ? "was ended" : "ran out",
                                     EndedAt(look));
  switch (step) {
    case EndingStep::kCancel:
      ereport(LOG, (errmsg("pg_fencing: cancelling the transaction of process %d: it wrote under "
                           "the lease %s",
                           pid, lease)));
      Signal(pid, SIGINT);
      break;
    case EndingStep::kTerminate:
      if (first_termination) {
        ereport(LOG, (errmsg("pg_fencing: terminating process %d, idle in a transaction that "
                             "wrote under the lease %s",
                             pid, lease)));
      }
      Signal(pid, SIGTERM);
      break;
    case EndingStep::kWait:
      break;
  }
  const TimestampTz again = Max(now, cancelled_at) + kTerminateAfterUs;
  ScheduleLookNoLaterThan(MyDatabaseId, again);
  return again;
}

// Ends the transaction lxid of slots[index] if a lease it wrote under has
// ended.  *next: moved to the earliest end of its live leases, or to when
// to look at it again.
void EndIfOverdue(int index, LocalTransactionId lxid, TimestampTz now, TimestampTz *next) {
  const SlotCopy copy = CopySlot(slots[index]);
  if (copy.lxid != lxid || copy.database != MyDatabaseId || copy.count == 0) return;
  const LeaseTableIds &ids = LeaseTablesOf(copy.schema);
  for (int i = 0; i < copy.count; ++i) {
    const WrittenLease &lease = copy.leases[i];
    Snapshot snapshot = LeaseSnapshot();
    const LeaseLook look = LookAtLease(ids, lease.row, lease.token, snapshot);
    UnregisterSnapshot(snapshot);
    // The owner's own release is not committed, and not seen here: its
    // lease is judged by what others see.
    const LeaseLife life = PGF_CORE(JudgeLease(look.row, now));
    if (life == LeaseLife::kLive) {
      *next = EarlierEnd(*next, static_cast<TimestampTz>(look.row.expires_at));
      continue;
    }
    *next = EarlierEnd(*next, EndTransaction(index, lxid, lease.token, look, life, now));
    return;
  }
}

// ---- Which lease a token is, remembered across transactions -------------------

// What a token written under binds a transaction to, for the role that
// wrote it.  A token's lease never changes (each grant hands out a new
// token), and a token that is no lease's never becomes one, so the answer
// is kept from one transaction to the next: the common case, a holder's
// transactions under one token, looks nothing up but the lease's end at
// COMMIT.  The end kept is the one last seen: when it has passed, the
// lease is looked at again (renewed since, or ended).
struct KnownToken {
  Token token;
  Oid role;
  bool binds;         // a lease of a lock the role may use
  LeaseRow row;
  int64 known_end;    // the lease's end when last looked at
  char *lock_name;    // in TopMemoryContext; nullptr unless binds
};

constexpr int kKnownTokens = 16;
KnownToken known_tokens[kKnownTokens];

const KnownToken *LookUpToken(Oid schema, Token token, TimestampTz now) {
  const Oid role = GetUserId();
  KnownToken &entry = known_tokens[static_cast<uint64>(token) % kKnownTokens];
  if (entry.token == token && entry.role == role && (!entry.binds || entry.known_end > now)) {
    return &entry;
  }
  if (entry.lock_name != nullptr) pfree(entry.lock_name);
  entry = KnownToken{token, role, false, LeaseRow::kExclusive, 0, nullptr};
  // A database before 1.6 (before 1.2, it has not even the lease tables
  // the lookup reads): served as before, no transaction tied to a lease.
  if (!OidIsValid(get_relname_relid("fencing_lease_token", schema))) return &entry;
  LeaseLook look{};
  LeaseRow row = LeaseRow::kExclusive;
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  if (!FindLeaseOfToken(ids, token, &row, &look)) {
    // "No lease's" is kept for the next transactions only when no grant
    // of the token is on its way: one that has written its row but not
    // committed would make it a lease's, and a kept answer would then let
    // writes under that lease commit after it ended.
    if (TokenHasAnyRow(ids, token)) entry.role = InvalidOid;  // matches no caller: not kept
    return &entry;
  }
  // Only a lease of a lock the writer may use binds its transaction: a
  // role that writes another's token into a table of its own neither
  // learns of that lease (the COMMIT would name it) nor is ended with it.
  // Not kept either: a role granted the lock's use later is bound from then on.
  int64 lock_id = 0;
  if (!LockUsableBy(schema, look.lock_name, role, &lock_id)) {
    entry.role = InvalidOid;
    return &entry;
  }
  entry.binds = true;
  entry.row = row;
  entry.known_end = look.row.expires_at;
  entry.lock_name = MemoryContextStrdup(TopMemoryContext, look.lock_name);
  return &entry;
}

}  // namespace

void RegisterLeaseWriters() {
  RegisterXactCallback(OnTransactionEvent, nullptr);
  RegisterSubXactCallback(OnSubTransactionEvent, nullptr);
}

void EndWritersOfLeaseAtCommit(Token token) {
  for (int i = 0; i < ended_early_count; ++i) {
    if (ended_early[i] == token) return;
  }
  if (ended_early_count == kEndedEarlyCapacity) {
    ended_early_overflow = true;
    return;
  }
  ended_early[ended_early_count++] = token;
}

void NoteLeaseEndedHere(Token token) {
  const SubTransactionId subxact = GetCurrentSubTransactionId();
  (void)PGF_CORE(noted.MarkEndedHere(token, subxact));
}

void NoteLeaseOfToken(Oid schema, Token token, const char *lock_name) {
  last_noted_token = token;
  if (IsParallelWorker() || noted.Find(token) != nullptr) return;
  const TimestampTz now = GetCurrentTimestamp();
  const KnownToken *known = LookUpToken(schema, token, now);
  if (!known->binds) return;  // not a lease's token, or not the writer's to write under
  const WrittenLease lease{token, known->row, known->known_end};
  switch (PGF_CORE(noted.Add(lease))) {
    case WrittenLeases::Added::kFull:
      last_noted_token = 0;
      ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                      errmsg("a transaction can write under at most %d fencing leases",
                             WrittenLeases::kCapacity),
                      errdetail("The lease of lock \"%s\" under token " INT64_FORMAT
                                " would be one more.",
                                known->lock_name, token)));
    case WrittenLeases::Added::kAlreadyThere:
      break;
    case WrittenLeases::Added::kAdded:
      noted_schema = schema;
      noted_names[noted.Count() - 1] = MemoryContextStrdup(
          TopTransactionContext, known->lock_name != nullptr ? known->lock_name
                                 : lock_name != nullptr      ? lock_name
                                                             : "?");
      Mirror(lease);
      // The worker looks when the lease can end by running out at the
      // earliest; a renewal by then leaves the transaction alone.
      ScheduleLookNoLaterThan(MyDatabaseId, static_cast<TimestampTz>(lease.known_end));
      break;
  }
}

void AcquireGate(const LOCKTAG &gate, LOCKMODE mode) {
  if (LockAcquire(&gate, mode, false, true) != LOCKACQUIRE_NOT_AVAIL) return;
  if (slots != nullptr) {
    int count = 0;
    const VirtualTransactionId *holders = GetLockConflicts(&gate, mode, &count);
    const TimestampTz now = GetCurrentTimestamp();
    TimestampTz next = 0;
    for (int i = 0; i < count; ++i) {
      const PGPROC *proc = compat::ProcOfVirtualTransaction(holders[i]);
      if (proc == nullptr || proc == MyProc) continue;
      const int index = compat::ProcIndex(proc);
      if (index < 0 || index >= slot_count) continue;
      EndIfOverdue(index, holders[i].localTransactionId, now, &next);
    }
  }
  (void)LockAcquire(&gate, mode, false, false);
}

TimestampTz EndTransactionsPastTheirLeases() {
  if (slots == nullptr) return 0;
  const TimestampTz now = GetCurrentTimestamp();
  TimestampTz next = 0;
  for (int index = 0; index < slot_count; ++index) {
    SpinLockAcquire(&slots[index].mutex);
    const bool ours = slots[index].database == MyDatabaseId && slots[index].count > 0 &&
                      slots[index].lxid != InvalidLocalTransactionId;
    const LocalTransactionId lxid = slots[index].lxid;
    SpinLockRelease(&slots[index].mutex);
    if (ours) EndIfOverdue(index, lxid, now, &next);
  }
  return next;
}

}  // namespace pg_fencing
