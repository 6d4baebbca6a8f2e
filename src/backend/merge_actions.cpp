// Which columns the firing UPDATE assigned, when the statement is a MERGE.
//
// For MERGE, tg_updatedcols is the union of the SET lists of all its UPDATE
// actions, so an action that leaves the token column alone looks as if it
// set it.  An action that does not set a column copies it from the old row,
// so a token that differs from the row's was assigned; an equal one is
// ambiguous, and for that case we find the MERGE's executor state: an
// ExecutorStart hook records every running MERGE's ModifyTableState, and
// the trigger's new-tuple slot tells which result relation (and so which
// action lists) it belongs to.  Where that cannot decide, we fail closed.
//
// Only pointers and integers live in these frames: everything here can
// reach an ereport.
#include "merge_actions.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "nodes/bitmapset.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
}

#include "pg_compat.hpp"

namespace pg_fencing {
namespace {

// A ModifyTableState whose ExecutorStart we saw and whose executor is still
// running.  Lives in the executor's es_query_cxt; the context's reset
// callback unlinks it before that memory goes away.
struct ModifyRecord {
  ModifyTableState *mtstate;
  ModifyRecord *next;
  MemoryContextCallback forget;
};

ModifyRecord *g_records = nullptr;
ExecutorStart_hook_type previous_executor_start = nullptr;
// statement_timestamp() of the statement that loaded the library (0 when
// loaded by the postmaster).
TimestampTz g_loaded_in_statement = 0;

// The hook saw every ExecutorStart of the current top-level statement
// unless the library was loaded during it.
bool LoadedDuringCurrentStatement() {
  return GetCurrentStatementStartTimestamp() == g_loaded_in_statement;
}

void ForgetRecord(void *arg) {
  auto *record = static_cast<ModifyRecord *>(arg);
  for (ModifyRecord **link = &g_records; *link != nullptr; link = &(*link)->next) {
    if (*link == record) {
      *link = record->next;
      return;
    }
  }
}

// MERGEs always; other statements only while we are unsure whether we saw
// every ExecutorStart, so that the guard can recognise them as not MERGE
// (see UpdateAssignsColumn).
void Record(EState *estate, PlanState *planstate) {
  if (planstate == nullptr || !IsA(planstate, ModifyTableState)) return;
  auto *mtstate = reinterpret_cast<ModifyTableState *>(planstate);
  if (mtstate->operation != CMD_MERGE && !LoadedDuringCurrentStatement()) return;
  auto *record = static_cast<ModifyRecord *>(
      MemoryContextAllocZero(estate->es_query_cxt, sizeof(ModifyRecord)));
  record->mtstate = mtstate;
  record->next = g_records;
  record->forget.func = ForgetRecord;
  record->forget.arg = record;
  MemoryContextRegisterResetCallback(estate->es_query_cxt, &record->forget);
  g_records = record;
}

void RecordingExecutorStart(QueryDesc *query_desc, int eflags) {
  if (previous_executor_start != nullptr) {
    previous_executor_start(query_desc, eflags);
  } else {
    standard_ExecutorStart(query_desc, eflags);
  }
  EState *estate = query_desc->estate;
  if (estate == nullptr) return;
  Record(estate, query_desc->planstate);
  ListCell *cell = nullptr;
  foreach (cell, estate->es_auxmodifytables) {
    Record(estate, static_cast<PlanState *>(lfirst(cell)));
  }
}

// The recorded statement whose result relation fills slot, if any.
struct Writer {
  const ModifyTableState *mtstate;  // nullptr: none recorded
  const ResultRelInfo *rri;
};

Writer FindWriter(const TupleTableSlot *slot) {
  for (const ModifyRecord *record = g_records; record != nullptr; record = record->next) {
    const ModifyTableState *mtstate = record->mtstate;
    for (int i = 0; i < mtstate->mt_nrels; ++i) {
      const ResultRelInfo *rri = &mtstate->resultRelInfo[i];
      const bool on_conflict_slot =
          rri->ri_onConflict != nullptr && rri->ri_onConflict->oc_ProjSlot == slot;
      if (rri->ri_newTupleSlot == slot || on_conflict_slot) return Writer{mtstate, rri};
    }
  }
  return Writer{nullptr, nullptr};
}

bool ActionSets(const MergeActionState *action, AttrNumber attnum) {
  return list_member_int(action->mas_action->updateColnos, attnum);
}

// For a MERGE whose new token equals the old one: assigned if every UPDATE
// action on this relation sets the column, or (17) if the firing one does.
// On 15 and 16 a mixed MERGE cannot tell, and counts as not assigned.
bool MergeAssigns(const Writer &writer, AttrNumber attnum) {
  int updates = 0;
  int setting = 0;
  bool firing_is_ours = false;
  const MergeActionState *firing = compat::CurrentMergeAction(writer.mtstate);
  for (int i = 0; i < compat::kMergeRowActionLists; ++i) {
    ListCell *cell = nullptr;
    foreach (cell, compat::MergeRowActions(writer.rri, i)) {
      const auto *action = static_cast<const MergeActionState *>(lfirst(cell));
      if (firing != nullptr && action == firing) firing_is_ours = true;
      if (action->mas_action->commandType != CMD_UPDATE) continue;
      ++updates;
      if (ActionSets(action, attnum)) ++setting;
    }
  }
  if (updates > 0 && setting == updates) return true;
  if (firing_is_ours && firing->mas_action->commandType == CMD_UPDATE) {
    return ActionSets(firing, attnum);
  }
  return false;
}

}  // namespace

void RegisterMergeTracking() {
  g_loaded_in_statement = GetCurrentStatementStartTimestamp();
  previous_executor_start = ExecutorStart_hook;
  ExecutorStart_hook = RecordingExecutorStart;
}

bool UpdateAssignsColumn(const TriggerData *td, AttrNumber attnum, bool token_unchanged) {
  if (!bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, td->tg_updatedcols)) return false;
  // An action that does not set the column copies it from the old row.
  if (!token_unchanged) return true;
  const Writer writer = FindWriter(td->tg_newslot);
  if (writer.mtstate == nullptr) {
    // Not a statement we recorded, so not a MERGE whose start we saw: if we
    // saw every start of this statement, tg_updatedcols is exact; if not,
    // this may be a MERGE that began before the library was loaded.
    return !LoadedDuringCurrentStatement();
  }
  if (writer.mtstate->operation != CMD_MERGE) return true;  // tg_updatedcols is exact
  return MergeAssigns(writer, attnum);
}

}  // namespace pg_fencing
