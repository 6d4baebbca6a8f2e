// The differences between the PostgreSQL majors we build against (15, 16,
// 17, 18), named by feature.  Every PG_VERSION_NUM test of the backend code,
// and every test for a definition that some releases lack, lives here: the
// rest of the code includes this header and uses the names below.
#pragma once

#include "boundary.hpp"

// 16 moved the varlena macros (VARSIZE_ANY_EXHDR, VARDATA_ANY, ...) out of
// postgres.h into varatt.h; 15 has no varatt.h.
#if PG_VERSION_NUM >= 160000
#define PGF_HAVE_VARATT_H 1
#else
#define PGF_HAVE_VARATT_H 0
#endif

extern "C" {
#if PGF_HAVE_VARATT_H
#include "varatt.h"
#endif
#include "access/genam.h"
#include "access/heapam.h"
#include "catalog/pg_proc.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "replication/walsender_private.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/timestamp.h"
}

// 17 added infinite intervals ('infinity', '-infinity'); 15 and 16 reject
// them on input, so every interval there is finite.
#if PG_VERSION_NUM >= 170000
#define PGF_HAVE_INFINITE_INTERVALS 1
#else
#define PGF_HAVE_INFINITE_INTERVALS 0
#endif

// 17 keeps the MERGE action being executed in ModifyTableState.mt_merge_action,
// set before the BEFORE UPDATE row triggers fire; 15 and 16 keep it in a
// local variable of the executor, out of our reach.
#if PG_VERSION_NUM >= 170000
#define PGF_HAVE_MERGE_ACTION_FIELD 1
#else
#define PGF_HAVE_MERGE_ACTION_FIELD 0
#endif

// 17 (WHEN NOT MATCHED BY SOURCE) files a relation's MERGE actions by match
// kind in ri_MergeActions[]; 15 and 16 in ri_matchedMergeAction and
// ri_notMatchedMergeAction.
#if PG_VERSION_NUM >= 170000
#define PGF_HAVE_MERGE_ACTIONS_BY_MATCH_KIND 1
#else
#define PGF_HAVE_MERGE_ACTIONS_BY_MATCH_KIND 0
#endif

// Which indexes need entries for the new version of a row heap_update()
// wrote.  16 says it through an argument (TU_UpdateIndexes: none, all, or
// only the summarizing ones, such as BRIN, when the update was HOT); 15
// through the tuple: a HOT (heap-only) version needs none, another all.
namespace pg_fencing::compat {
enum class IndexEntries { kNone, kAll, kSummarizingOnly };

#if PG_VERSION_NUM >= 160000
inline TM_Result HeapUpdate(Relation table, ItemPointer otid, HeapTuple replacement,
                            TM_FailureData *failure, IndexEntries *entries) {
  LockTupleMode lock_mode;
  TU_UpdateIndexes update_indexes = TU_None;
  const TM_Result result = heap_update(table, otid, replacement, GetCurrentCommandId(true),
                                       InvalidSnapshot, true, failure, &lock_mode, &update_indexes);
  *entries = update_indexes == TU_All           ? IndexEntries::kAll
             : update_indexes == TU_Summarizing ? IndexEntries::kSummarizingOnly
                                                : IndexEntries::kNone;
  return result;
}
inline bool IndexIsSummarizing(const IndexInfo *info) { return info->ii_Summarizing; }
#else
inline TM_Result HeapUpdate(Relation table, ItemPointer otid, HeapTuple replacement,
                            TM_FailureData *failure, IndexEntries *entries) {
  LockTupleMode lock_mode;
  const TM_Result result = heap_update(table, otid, replacement, GetCurrentCommandId(true),
                                       InvalidSnapshot, true, failure, &lock_mode);
  *entries = HeapTupleIsHeapOnly(replacement) ? IndexEntries::kNone : IndexEntries::kAll;
  return result;
}
inline bool IndexIsSummarizing(const IndexInfo *) { return false; }
#endif
}  // namespace pg_fencing::compat

// 18 gave index_beginscan() an argument for EXPLAIN ANALYZE's
// instrumentation, which plain scans pass as NULL.
namespace pg_fencing::compat {
inline IndexScanDesc IndexBeginScan(Relation table, Relation index, Snapshot snapshot, int nkeys) {
#if PG_VERSION_NUM >= 180000
  return index_beginscan(table, index, snapshot, nullptr, nkeys, 0);
#else
  return index_beginscan(table, index, snapshot, nkeys, 0);
#endif
}
}  // namespace pg_fencing::compat

// ExecutorStart_hook_type is void (QueryDesc *, int) in every major we
// build against (15 to 18).

// 16 made expression_tree_walker() a macro that casts the walker to its
// callback type; 15 declares the walker as bool (*)() (no prototype), which
// C++ reads as a function of no arguments.
#if PG_VERSION_NUM >= 160000
#define PGF_TREE_WALKER(walker) (walker)
#else
#define PGF_TREE_WALKER(walker) reinterpret_cast<bool (*)()>(walker)
#endif

// 16 replaced pg_proc_aclcheck() by object_aclcheck(ProcedureRelationId, ...).
namespace pg_fencing::compat {
inline bool MayExecute(Oid function, Oid role) {
#if PG_VERSION_NUM >= 160000
  return object_aclcheck(ProcedureRelationId, function, role, ACL_EXECUTE) == ACLCHECK_OK;
#else
  return pg_proc_aclcheck(function, role, ACL_EXECUTE) == ACLCHECK_OK;
#endif
}
}  // namespace pg_fencing::compat

// Whether the shared state says synchronous standbys are defined.  The
// minor releases of May 2025 (15.13, 16.9, 17.5) and 18 replaced the bool
// WalSndCtl->sync_standbys_defined with bits in sync_standbys_status; the
// major alone does not tell, so the test is for the bit's definition.
#ifdef SYNC_STANDBY_DEFINED
#define PGF_HAVE_SYNC_STANDBYS_STATUS 1
#else
#define PGF_HAVE_SYNC_STANDBYS_STATUS 0
#endif

namespace pg_fencing::compat {

inline bool IntervalIsFinite(const Interval *interval) {
#if PGF_HAVE_INFINITE_INTERVALS
  return !INTERVAL_NOT_FINITE(interval);
#else
  (void)interval;
  return true;
#endif
}

// The caller holds SyncRepLock (shared is enough).
inline bool SyncStandbysDefinedInSharedState() {
#if PGF_HAVE_SYNC_STANDBYS_STATUS
  return (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED) != 0;
#else
  return WalSndCtl->sync_standbys_defined;
#endif
}

// How many lists of MergeActionState can UPDATE an existing row.
constexpr int kMergeRowActionLists = PGF_HAVE_MERGE_ACTIONS_BY_MATCH_KIND ? 2 : 1;

// The index-th of them for rri: WHEN MATCHED, then (17) WHEN NOT MATCHED BY
// SOURCE.
inline List *MergeRowActions(const ResultRelInfo *rri, int index) {
#if PGF_HAVE_MERGE_ACTIONS_BY_MATCH_KIND
  return rri->ri_MergeActions[index == 0 ? MERGE_WHEN_MATCHED : MERGE_WHEN_NOT_MATCHED_BY_SOURCE];
#else
  (void)index;
  return rri->ri_matchedMergeAction;
#endif
}

// The MERGE action being executed, or nullptr where the server does not say.
inline const MergeActionState *CurrentMergeAction(const ModifyTableState *mtstate) {
#if PGF_HAVE_MERGE_ACTION_FIELD
  return mtstate->mt_merge_action;
#else
  (void)mtstate;
  return nullptr;
#endif
}

}  // namespace pg_fencing::compat

// 17 names a backend's PGPROC by its ProcNumber (VirtualTransactionId.procNumber,
// ProcNumberGetProc() in storage/procarray.h); 15 and 16 by its BackendId
// (VirtualTransactionId.backendId, BackendIdGetProc() in storage/sinvaladt.h).
#if PG_VERSION_NUM >= 170000
#define PGF_HAVE_PROC_NUMBER 1
extern "C" {
#include "storage/procarray.h"
}
#else
#define PGF_HAVE_PROC_NUMBER 0
extern "C" {
#include "storage/sinvaladt.h"
}
#endif

extern "C" {
#include "storage/lock.h"
#include "storage/proc.h"
}

namespace pg_fencing::compat {

// The PGPROC of the backend running vxid's transaction, or nullptr (a
// prepared transaction, or a slot out of range).  The slot may have been
// reused by the time the caller looks: use it only where that is harmless.
inline PGPROC *ProcOfVirtualTransaction(const VirtualTransactionId &vxid) {
#if PGF_HAVE_PROC_NUMBER
  return ProcNumberGetProc(vxid.procNumber);
#else
  return BackendIdGetProc(vxid.backendId);
#endif
}

// A PGPROC's place in ProcGlobal->allProcs, the index of per-backend
// arrays in shared memory (17 calls it the proc number; 15 and 16 keep it
// in pgprocno).
inline int ProcIndex(const PGPROC *proc) {
#if PGF_HAVE_PROC_NUMBER
  return static_cast<int>(GetNumberFromPGProc(proc));
#else
  return proc->pgprocno;
#endif
}

// The local id of the top-level transaction a PGPROC runs (17 moved it
// into the PGPROC's vxid).
inline LocalTransactionId ProcLocalTransactionId(const PGPROC *proc) {
#if PGF_HAVE_PROC_NUMBER
  return proc->vxid.lxid;
#else
  return proc->lxid;
#endif
}

// Whether this backend holds lock tag in mode (at session or transaction
// level); 17 added whether a stronger mode counts (orstronger).
inline bool LockHeldByMe(const LOCKTAG &tag, LOCKMODE mode) {
#if PG_VERSION_NUM >= 170000
  return ::LockHeldByMe(&tag, mode, false);
#else
  return ::LockHeldByMe(&tag, mode);
#endif
}

}  // namespace pg_fencing::compat

// Uses of PostgreSQL's internals that no major has changed yet but that no
// API promises either: each is named here, with what it relies on, so that
// a new major's review starts in this file.
extern "C" {
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "replication/syncrep.h"
#include "utils/memutils.h"
}

namespace pg_fencing::compat {

// The WAL position the synchronous standbys have confirmed flushing.
// Relies on walsender_private.h's WalSndCtl->lsn[], advanced by the
// walsenders (syncrep.c) only when the standbys confirm, never moved back.
// The caller holds SyncRepLock (shared is enough).
inline XLogRecPtr SynchronousStandbysFlushedUpTo() { return WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH]; }

// A parse location no SQL can produce, to mark an expression a hook made.
// Relies on the parser recording locations as byte offsets into the
// statement's text (0 and up) or -1 for none, as stored rules and views
// keep them (nodes/primnodes.h, ParseLoc).
constexpr int kLocationNoParserMakes = -0x5047;

// A copy of desc, allocated in context, in which the trigger trigger_oid no
// longer fires on UPDATE, and no BEFORE UPDATE row trigger is announced
// (the caller has made sure trigger_oid was the only one).  Shallow: the
// triggers' arguments are shared, read-only, with desc.  Relies on the
// executor reading a result relation's ri_TrigDesc, and its trig_* summary
// flags, afresh for each row after ExecutorStart, and on trigger.c testing
// a trigger's events through tgtype (TRIGGER_TYPE_MATCHES).
inline TriggerDesc *TriggerDescWithoutUpdateTrigger(const TriggerDesc *desc, Oid trigger_oid,
                                                    MemoryContext context) {
  auto *without = static_cast<TriggerDesc *>(MemoryContextAlloc(context, sizeof(TriggerDesc)));
  auto *triggers =
      static_cast<Trigger *>(MemoryContextAlloc(context, sizeof(Trigger) * desc->numtriggers));
  *without = *desc;
  memcpy(triggers, desc->triggers, sizeof(Trigger) * desc->numtriggers);
  for (int i = 0; i < desc->numtriggers; ++i) {
    if (triggers[i].tgoid == trigger_oid) triggers[i].tgtype &= ~TRIGGER_TYPE_UPDATE;
  }
  without->triggers = triggers;
  without->trig_update_before_row = false;
  return without;
}

}  // namespace pg_fencing::compat
