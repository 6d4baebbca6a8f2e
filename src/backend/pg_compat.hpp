// The differences between the PostgreSQL majors we build against, named by
// feature.  Every PG_VERSION_NUM test of the backend code lives here.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "executor/executor.h"
#include "nodes/execnodes.h"
}

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

// ExecutorStart_hook_type is void (QueryDesc *, int) in every major we
// build against (15 to 18).

namespace pg_fencing::compat {

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

}  // namespace pg_fencing::compat
