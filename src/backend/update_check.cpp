// Plain UPDATEs of a guarded table, judged in the UPDATE's own projection
// instead of by the BEFORE row trigger.
//
// Why: PostgreSQL charges every BEFORE UPDATE row trigger, whatever it does,
// for locking the old row version a second time (a WAL record per row) and
// for forming the new row as a heap tuple: 93 % of what the guard costs a
// bulk UPDATE (BENCHMARKS.md, "Bulk UPDATE: where the time goes").
//
// How, in two steps:
//  1. The planner hook wraps the new value of the token column in
//     fencing_guard_check(new, old, trigger, table), old being the old row's
//     column: in the finished plan's scan for an UPDATE of the one table, in
//     the query before planning for one that joins (WrapInPlan, WrapInQuery).
//     Each row is judged as it is projected, by the guard's own rules
//     (guard.cpp), and judged again on the newest row version when a
//     concurrent update made PostgreSQL re-project it (EvalPlanQual).
//  2. The executor hook lets that statement run without the guard's UPDATE
//     trigger, once it has found the call at the top of a new value in the
//     plan, for that trigger, bearing the planner hook's mark.  The mark is
//     a parse location no SQL can produce (the parser records offsets into
//     the statement's text, 0 and up, or -1 for none, as do stored rules
//     and views), so a call written by hand -- in a plan
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
#include "utils/syscache.h"
}

#include "extension_objects.hpp"
#include "guard.hpp"
#include "settings.hpp"
#include "update_check.hpp"

namespace pg_fencing {
namespace {

// FuncExpr.location of the planner hook's own calls (step 2 above).
constexpr int kPlannerMark = compat::kLocationNoParserMakes;
planner_hook_type previous_planner = nullptr;
ExecutorStart_hook_type previous_executor_start = nullptr;

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
  const Oid arguments[] = {token_type, token_type, OIDOID, OIDOID};
  FmgrInfo *check = ExtensionFunctionIfExists(schema, "fencing_guard_check", 4, arguments);
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

// What step 1 needs about the statement's table, read before planning.
struct CheckTarget {
  Index rti;  // the table's range table entry
  Oid relid;
  Oid trigger;
  AttrNumber attnum;
  int32 typmod;
  Oid collation;
  GuardFunctions functions;
};

// Whether parse is a plain UPDATE that sets the token column of a table
// whose guard a check can stand in for; if so, *target says how.
bool FindCheckTarget(const Query *parse, CheckTarget *target) {
  if (parse->commandType != CMD_UPDATE || parse->resultRelation <= 0) return false;
  const RangeTblEntry *rte = rt_fetch(parse->resultRelation, parse->rtable);
  if (rte->rtekind != RTE_RELATION || rte->relkind != RELKIND_RELATION) return false;
  // The parser (or the plan cache) holds the statement's lock on the table.
  Relation rel = relation_open(rte->relid, NoLock);
  AttrNumber attnum = InvalidAttrNumber;
  GuardFunctions functions{};
  const Trigger *trigger = rel->rd_rel->relhassubclass
                               ? nullptr
                               : CheckableGuard(rel, rel->trigdesc, &attnum, &functions);
  const TargetEntry *assignment = nullptr;
  if (trigger != nullptr && compat::MayExecute(functions.check, GetUserId())) {
    ListCell *cell = nullptr;
    foreach (cell, parse->targetList) {
      auto *entry = static_cast<const TargetEntry *>(lfirst(cell));
      if (!entry->resjunk && entry->resno == attnum) assignment = entry;
    }
  }
  const bool found =
      assignment != nullptr &&
      exprType(reinterpret_cast<const Node *>(assignment->expr)) == functions.token_type &&
      !ContainsMultiAssignment(reinterpret_cast<Node *>(assignment->expr), nullptr);
  if (found) {
    Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
    *target = {static_cast<Index>(parse->resultRelation),
               RelationGetRelid(rel),
               trigger->tgoid,
               attnum,
               att->atttypmod,
               att->attcollation,
               functions};
  }
  relation_close(rel, NoLock);
  return found;
}

// The check around new_value, with the old row's token read by old_token.
Expr *WrapInCheck(const CheckTarget &target, Expr *new_value, Var *old_token) {
  Const *trigger_oid =
      makeConst(OIDOID, -1, InvalidOid, sizeof(Oid), ObjectIdGetDatum(target.trigger), false, true);
  Const *table_oid =
      makeConst(OIDOID, -1, InvalidOid, sizeof(Oid), ObjectIdGetDatum(target.relid), false, true);
  FuncExpr *check = makeFuncExpr(target.functions.check, target.functions.token_type,
                                 list_make4(new_value, old_token, trigger_oid, table_oid),
                                 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
  check->location = kPlannerMark;
  return reinterpret_cast<Expr *>(check);
}

// Step 1 on the query, before planning: for an UPDATE that joins other
// tables (FROM, or a sub-select the planner may turn into a join), whose
// plan's shape cannot be foreseen.  The planner then carries the old token
// to wherever the new values are computed.
void WrapInQuery(Query *parse, const CheckTarget &target) {
  ListCell *cell = nullptr;
  foreach (cell, parse->targetList) {
    auto *entry = static_cast<TargetEntry *>(lfirst(cell));
    if (entry->resjunk || entry->resno != target.attnum) continue;
    Var *old_token = makeVar(target.rti, target.attnum, target.functions.token_type, target.typmod,
                             target.collation, 0);
    entry->expr = WrapInCheck(target, entry->expr, old_token);
  }
}

// Step 1 on the finished plan, for an UPDATE of the one table: when the new
// values are computed by the scan of the table itself, the check goes into
// that scan's targetlist, where the old row is the scan's tuple.  Done here
// rather than before planning because planning the extra call costs about
// as much again as the trigger saves on a one-row UPDATE.  Any other shape
// keeps the trigger.
void WrapInPlan(PlannedStmt *stmt, const CheckTarget &target) {
  if (stmt->planTree == nullptr || !IsA(stmt->planTree, ModifyTable)) return;
  auto *plan = reinterpret_cast<ModifyTable *>(stmt->planTree);
  if (plan->operation != CMD_UPDATE || list_length(plan->resultRelations) != 1 ||
      plan->updateColnosLists == NIL) {
    return;
  }
  Plan *subplan = outerPlan(&plan->plan);
  if (subplan == nullptr) return;
  switch (nodeTag(subplan)) {
    case T_SeqScan:
    case T_SampleScan:
    case T_IndexScan:
    case T_BitmapHeapScan:
    case T_TidScan:
    case T_TidRangeScan:
      break;
    default:
      return;
  }
  const Index scanrelid = reinterpret_cast<Scan *>(subplan)->scanrelid;
  if (scanrelid != static_cast<Index>(linitial_int(plan->resultRelations))) return;
  const List *columns = static_cast<const List *>(linitial(plan->updateColnosLists));
  int position = -1;
  for (int i = 0; i < list_length(columns); ++i) {
    if (list_nth_int(columns, i) == target.attnum) position = i;
  }
  int seen = 0;
  ListCell *cell = nullptr;
  foreach (cell, subplan->targetlist) {
    auto *entry = static_cast<TargetEntry *>(lfirst(cell));
    if (entry->resjunk || seen++ != position) continue;
    Var *old_token = makeVar(scanrelid, target.attnum, target.functions.token_type, target.typmod,
                             target.collation, 0);
    entry->expr = WrapInCheck(target, entry->expr, old_token);
    // The plan now calls the function: it is made again if the function
    // changes, as for a call the planner saw.
    PlanInvalItem *item = makeNode(PlanInvalItem);
    item->cacheId = PROCOID;
    item->hashValue = GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(target.functions.check));
    stmt->invalItems = lappend(stmt->invalItems, item);
  }
}

PlannedStmt *PlanWithTokenCheck(Query *parse, const char *query_string, int cursor_options,
                                ParamListInfo params) {
  CheckTarget target{};
  const bool checked = settings::fast_update && FindCheckTarget(parse, &target);
  const bool before =
      checked && (parse->hasSubLinks || list_length(parse->jointree->fromlist) != 1);
  if (before) WrapInQuery(parse, target);
  PlannedStmt *stmt = previous_planner != nullptr
                          ? previous_planner(parse, query_string, cursor_options, params)
                          : standard_planner(parse, query_string, cursor_options, params);
  if (checked && !before) WrapInPlan(stmt, target);
  return stmt;
}

// The guard trigger whose check step 1 put at the top of one of the plan's
// new values (the subplan's targetlist holds the new values of the assigned
// columns, then junk); InvalidOid if none.  A call with the planner hook's
// mark is that call: no SQL makes the mark, and the hook puts the call only
// at the top of the guarded column's value.
Oid TriggerCheckedInPlan(const ModifyTable *plan) {
  const Plan *subplan = outerPlan(&plan->plan);
  if (subplan == nullptr) return InvalidOid;
  ListCell *cell = nullptr;
  foreach (cell, subplan->targetlist) {
    auto *entry = static_cast<const TargetEntry *>(lfirst(cell));
    if (entry->resjunk || !IsA(entry->expr, FuncExpr)) continue;
    const auto *call = reinterpret_cast<const FuncExpr *>(entry->expr);
    if (call->location != kPlannerMark || list_length(call->args) != 4) continue;
    const Node *trigger_arg = static_cast<const Node *>(lthird(call->args));
    if (!IsA(trigger_arg, Const)) continue;
    const auto *trigger = reinterpret_cast<const Const *>(trigger_arg);
    if (!trigger->constisnull) return DatumGetObjectId(trigger->constvalue);
  }
  return InvalidOid;
}

// Step 2: the statement's own copy of the table's triggers, without the
// guard's UPDATE event, if the plan judges its rows and the guard is still
// the table's only BEFORE UPDATE row trigger.  A shallow copy: the
// triggers' arguments are shared, read-only, with the one the executor made.
void DropCheckedGuard(QueryDesc *query_desc) {
  if (!settings::fast_update || query_desc->operation != CMD_UPDATE) return;
  PlanState *top = query_desc->planstate;
  if (top == nullptr || !IsA(top, ModifyTableState)) return;
  auto *mtstate = reinterpret_cast<ModifyTableState *>(top);
  if (mtstate->operation != CMD_UPDATE || mtstate->mt_nrels != 1) return;
  ResultRelInfo *result = mtstate->resultRelInfo;
  const Trigger *guard = OnlyBeforeUpdateRowTrigger(result->ri_TrigDesc);
  if (guard == nullptr ||
      guard->tgoid !=
          TriggerCheckedInPlan(reinterpret_cast<const ModifyTable *>(mtstate->ps.plan))) {
    return;
  }
  // The guard was the only BEFORE UPDATE row trigger.
  result->ri_TrigDesc = compat::TriggerDescWithoutUpdateTrigger(result->ri_TrigDesc, guard->tgoid,
                                                                query_desc->estate->es_query_cxt);
}

void StartWithTokenCheck(QueryDesc *query_desc, int eflags) {
  if (previous_executor_start != nullptr) {
    previous_executor_start(query_desc, eflags);
  } else {
    standard_ExecutorStart(query_desc, eflags);
  }
  DropCheckedGuard(query_desc);
}

}  // namespace

void RegisterUpdateCheck() {
  previous_planner = planner_hook;
  planner_hook = PlanWithTokenCheck;
  previous_executor_start = ExecutorStart_hook;
  ExecutorStart_hook = StartWithTokenCheck;
}

}  // namespace pg_fencing
