// Plain UPDATEs of a guarded table, judged in the UPDATE's own projection
// instead of by the BEFORE row trigger.
//
// Why: PostgreSQL charges every BEFORE UPDATE row trigger, whatever it does,
// for locking the old row version a second time (a WAL record per row) and
// for forming the new row as a heap tuple: 93 % of what the guard costs a
// bulk UPDATE (BENCHMARKS.md, "Bulk UPDATE: where the time goes").
//
// How, in two steps:
//  1. The planner hook wraps the SET expression of the token column in
//     fencing_guard_check(new, old, trigger), old being the old row's
//     column.  Each row is judged as it is projected, by the guard's own
//     rules (guard.cpp), and judged again on the newest row version when a
//     concurrent update made PostgreSQL re-project it (EvalPlanQual).
//  2. The executor hook lets that statement run without the guard's UPDATE
//     trigger, once it has found the call at the top of the column's
//     expression in the plan, for that trigger, bearing the planner hook's
//     mark.  The mark is a parse location no SQL can produce (the parser
//     records offsets into the statement's text, 0 and up, or -1 for none,
//     as do stored rules and views), so a call written by hand -- in a plan
//     made while the setting was off, say -- never stands in for the
//     trigger.
//
// It fails closed: whenever a step does not happen -- the library loaded in
// the middle of the statement, a statement or table it does not handle, the
// setting off at execution -- the trigger stays and judges the rows (when
// only step 1 happened, both judge, alike).  Handled: UPDATE of a table
// without partitions or inheritance children whose only BEFORE UPDATE row
// trigger is the guard, fencing a column of type fencing_token without
// option skip, and a statement that sets that column.  Everything else
// (MERGE, INSERT ... ON CONFLICT, COPY, partitioned tables, row movement,
// another BEFORE trigger, skip) keeps the trigger.
#include "pg_compat.hpp"

extern "C" {
#include "access/relation.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/planner.h"
#include "parser/parsetree.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

#include "extension_objects.hpp"
#include "guard.hpp"
#include "update_check.hpp"

namespace pg_fencing {
namespace {

bool fast_update = true;
// FuncExpr.location of the planner hook's own calls (step 2 above).
constexpr int kPlannerMark = -0x5047;
planner_hook_type prev_planner = nullptr;
ExecutorStart_hook_type prev_executor_start = nullptr;

// The extension's objects that go with a guard trigger's function.
struct GuardFunctions {
  Oid token_type;
  Oid check;  // fencing_guard_check
};

// Whether function is fencing_guard of an installed pg_fencing whose
// fencing_guard_check exists (a database at 1.4 or later).  Both must be
// this library's C functions, which only a superuser can create: a role
// that may create functions in the extension's schema must not get its own
// called in other roles' UPDATEs.
bool FindGuardFunctions(Oid function, GuardFunctions *out) {
  const Oid schema = get_func_namespace(function);
  if (!OidIsValid(schema)) return false;
  static const Oid kNoArguments[1] = {InvalidOid};
  FmgrInfo *guard = ExtensionFunctionIfExists(schema, "fencing_guard", 0, kNoArguments);
  if (guard == nullptr || guard->fn_oid != function || guard->fn_addr != fencing_guard) {
    return false;
  }
  const Oid token_type = TokenTypeOid(schema);
  const Oid arguments[] = {token_type, token_type, OIDOID};
  FmgrInfo *check = ExtensionFunctionIfExists(schema, "fencing_guard_check", 3, arguments);
  if (check == nullptr || check->fn_addr != fencing_guard_check) return false;
  out->token_type = token_type;
  out->check = check->fn_oid;
  return true;
}

// The table's one BEFORE UPDATE row trigger, or nullptr if it has none or
// more than one (disabled ones count: being conservative costs only speed).
const Trigger *OnlyBeforeUpdateRowTrigger(const TriggerDesc *desc) {
  if (desc == nullptr || !desc->trig_update_before_row) return nullptr;
  const Trigger *found = nullptr;
  for (int i = 0; i < desc->numtriggers; ++i) {
    const Trigger &trigger = desc->triggers[i];
    if (!TRIGGER_TYPE_MATCHES(trigger.tgtype, TRIGGER_TYPE_ROW, TRIGGER_TYPE_BEFORE,
                              TRIGGER_TYPE_UPDATE)) {
      continue;
    }
    if (found != nullptr) return nullptr;
    found = &trigger;
  }
  return found;
}

// The guard trigger whose work a projection can do on rel, with its column
// and the functions; nullptr if there is none.
const Trigger *CheckableGuard(Relation rel, const TriggerDesc *desc, AttrNumber *attnum,
                              GuardFunctions *functions) {
  const Trigger *trigger = OnlyBeforeUpdateRowTrigger(desc);
  if (trigger == nullptr) return nullptr;
  // Fired the usual way: no column list, no WHEN, enabled on origin or always.
  const bool plain =
      trigger->tgnattr == 0 && trigger->tgqual == nullptr &&
      (trigger->tgenabled == TRIGGER_FIRES_ON_ORIGIN || trigger->tgenabled == TRIGGER_FIRES_ALWAYS);
  if (!plain || !FindGuardFunctions(trigger->tgfoid, functions)) return nullptr;
  *attnum = ColumnCheckableInProjection(rel, trigger, functions->token_type);
  return *attnum == InvalidAttrNumber ? nullptr : trigger;
}

// SET (a, b) = (SELECT ...) assigns through PARAM_MULTIEXPR Params, which
// the executor fills in a set order; such an assignment is left alone.
bool ContainsMultiAssignment(Node *node, void *context) {
  if (node == nullptr) return false;
  if (IsA(node, Param) && reinterpret_cast<Param *>(node)->paramkind == PARAM_MULTIEXPR) {
    return true;
  }
  return expression_tree_walker(node, PGF_TREE_WALKER(ContainsMultiAssignment), context);
}

// Step 1, on the query before planning.
void WrapTokenAssignment(Query *parse) {
  if (parse->commandType != CMD_UPDATE || parse->resultRelation <= 0) return;
  RangeTblEntry *rte = rt_fetch(parse->resultRelation, parse->rtable);
  if (rte->rtekind != RTE_RELATION || rte->relkind != RELKIND_RELATION) return;
  // The parser (or the plan cache) holds the statement's lock on the table.
  Relation rel = relation_open(rte->relid, NoLock);
  AttrNumber attnum = InvalidAttrNumber;
  GuardFunctions functions{};
  const Trigger *trigger = rel->rd_rel->relhassubclass
                               ? nullptr
                               : CheckableGuard(rel, rel->trigdesc, &attnum, &functions);
  TargetEntry *assignment = nullptr;
  if (trigger != nullptr && compat::MayExecute(functions.check, GetUserId())) {
    ListCell *cell = nullptr;
    foreach (cell, parse->targetList) {
      auto *entry = static_cast<TargetEntry *>(lfirst(cell));
      if (!entry->resjunk && entry->resno == attnum) assignment = entry;
    }
  }
  if (assignment != nullptr &&
      exprType(reinterpret_cast<Node *>(assignment->expr)) == functions.token_type &&
      !ContainsMultiAssignment(reinterpret_cast<Node *>(assignment->expr), nullptr)) {
    Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
    Var *old_token = makeVar(parse->resultRelation, attnum, functions.token_type, att->atttypmod,
                             att->attcollation, 0);
    Const *trigger_oid = makeConst(OIDOID, -1, InvalidOid, sizeof(Oid),
                                   ObjectIdGetDatum(trigger->tgoid), false, true);
    FuncExpr *check = makeFuncExpr(functions.check, functions.token_type,
                                   list_make3(assignment->expr, old_token, trigger_oid), InvalidOid,
                                   InvalidOid, COERCE_EXPLICIT_CALL);
    check->location = kPlannerMark;
    assignment->expr = reinterpret_cast<Expr *>(check);
  }
  relation_close(rel, NoLock);
}

PlannedStmt *PlanWithTokenCheck(Query *parse, const char *query_string, int cursor_options,
                                ParamListInfo params) {
  if (fast_update) WrapTokenAssignment(parse);
  return prev_planner != nullptr ? prev_planner(parse, query_string, cursor_options, params)
                                 : standard_planner(parse, query_string, cursor_options, params);
}

// Whether the plan's new value for column attnum is, at its top, the call
// step 1 made for trigger.  The subplan's targetlist holds
// the new values of the assigned columns in the order of updateColnos,
// then junk.
bool PlanChecksColumn(const ModifyTable *plan, AttrNumber attnum, Oid trigger, Oid check) {
  const Plan *subplan = outerPlan(&plan->plan);
  if (subplan == nullptr || plan->updateColnosLists == NIL) return false;
  const List *columns = static_cast<const List *>(linitial(plan->updateColnosLists));
  int position = -1;
  for (int i = 0; i < list_length(columns); ++i) {
    if (list_nth_int(columns, i) == attnum) position = i;
  }
  if (position < 0) return false;
  const TargetEntry *value = nullptr;
  int seen = 0;
  ListCell *cell = nullptr;
  foreach (cell, subplan->targetlist) {
    auto *entry = static_cast<const TargetEntry *>(lfirst(cell));
    if (entry->resjunk) continue;
    if (seen++ == position) value = entry;
  }
  if (value == nullptr || !IsA(value->expr, FuncExpr)) return false;
  const auto *call = reinterpret_cast<const FuncExpr *>(value->expr);
  if (call->funcid != check || call->location != kPlannerMark || list_length(call->args) != 3) {
    return false;
  }
  const Node *trigger_arg = static_cast<const Node *>(lthird(call->args));
  if (!IsA(trigger_arg, Const)) return false;
  const auto *trigger_const = reinterpret_cast<const Const *>(trigger_arg);
  return !trigger_const->constisnull && DatumGetObjectId(trigger_const->constvalue) == trigger;
}

// Step 2: the statement's own copy of the table's triggers, without the
// guard's UPDATE event.
void DropCheckedGuard(QueryDesc *query_desc) {
  if (!fast_update || query_desc->operation != CMD_UPDATE) return;
  PlanState *top = query_desc->planstate;
  if (top == nullptr || !IsA(top, ModifyTableState)) return;
  auto *mtstate = reinterpret_cast<ModifyTableState *>(top);
  if (mtstate->operation != CMD_UPDATE || mtstate->mt_nrels != 1) return;
  ResultRelInfo *result = mtstate->resultRelInfo;
  Relation rel = result->ri_RelationDesc;
  if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relhassubclass) return;
  AttrNumber attnum = InvalidAttrNumber;
  GuardFunctions functions{};
  const Trigger *trigger = CheckableGuard(rel, result->ri_TrigDesc, &attnum, &functions);
  if (trigger == nullptr ||
      !PlanChecksColumn(reinterpret_cast<const ModifyTable *>(mtstate->ps.plan), attnum,
                        trigger->tgoid, functions.check)) {
    return;
  }
  const Oid guard_oid = trigger->tgoid;
  MemoryContext caller = MemoryContextSwitchTo(query_desc->estate->es_query_cxt);
  TriggerDesc *without = CopyTriggerDesc(result->ri_TrigDesc);
  MemoryContextSwitchTo(caller);
  for (int i = 0; i < without->numtriggers; ++i) {
    if (without->triggers[i].tgoid == guard_oid)
      without->triggers[i].tgtype &= ~TRIGGER_TYPE_UPDATE;
  }
  without->trig_update_before_row = false;  // the guard was the only one
  result->ri_TrigDesc = without;
}

void StartWithTokenCheck(QueryDesc *query_desc, int eflags) {
  if (prev_executor_start != nullptr) {
    prev_executor_start(query_desc, eflags);
  } else {
    standard_ExecutorStart(query_desc, eflags);
  }
  DropCheckedGuard(query_desc);
}

}  // namespace

void RegisterUpdateCheck() {
  DefineCustomBoolVariable(
      "pg_fencing.fast_update",
      "Whether plain UPDATEs of guarded tables are judged in their own projection.",
      "On: an UPDATE that sets the token column of a table whose only BEFORE UPDATE row trigger "
      "is fencing_guard (without option skip, no partitions) judges each row as it computes it, "
      "and runs without the trigger. Off: the trigger judges every row.",
      &fast_update, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
  prev_planner = planner_hook;
  planner_hook = PlanWithTokenCheck;
  prev_executor_start = ExecutorStart_hook;
  ExecutorStart_hook = StartWithTokenCheck;
}

}  // namespace pg_fencing
