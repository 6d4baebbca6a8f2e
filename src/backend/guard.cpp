// fencing_guard(): the BEFORE UPDATE row trigger that refuses stale and
// missing fencing tokens, and the column/option resolution it shares with
// fencing_protect().
//
// Hot path: per row we read two attributes, test one bitmap bit and compare
// two integers.  Everything that needs the catalog (finding the column,
// checking its type, parsing the options) runs once per trigger per query
// and is cached in fn_extra.
#include "boundary.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "nodes/bitmapset.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#include "fences.hpp"
#include "merge_actions.hpp"

namespace pg_fencing {
namespace {

constexpr const char *kTokenTypeName = "fencing_token";
constexpr const char *kKnownOptions = "allow_unset, skip, lock=NAME";

// The fencing_token type lives in the extension's schema, which is also the
// schema of the calling function (fencing_guard or fencing_protect's helper).
Oid TokenTypeOid(Oid fn_oid) {
  const Oid schema = get_func_namespace(fn_oid);
  const Oid type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum(kTokenTypeName),
                                   ObjectIdGetDatum(schema));
  if (!OidIsValid(type)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("type \"%s\" of extension pg_fencing does not exist in schema \"%s\"",
                           kTokenTypeName, get_namespace_name(schema))));
  }
  return type;
}

// A column holds tokens when its type is fencing_token or a domain over it.
bool IsTokenColumn(Form_pg_attribute att, Oid token_type) {
  return !att->attisdropped && getBaseType(att->atttypid) == token_type;
}

AttrNumber ResolveNamedColumn(Relation rel, const char *column, Oid token_type) {
  TupleDesc desc = RelationGetDescr(rel);
  for (int i = 0; i < desc->natts; ++i) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (att->attisdropped || strcmp(NameStr(att->attname), column) != 0) continue;
    if (!IsTokenColumn(att, token_type)) {
      ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                      errmsg("column \"%s\" of table \"%s\" is of type %s, not fencing_token", column,
                             RelationGetRelationName(rel), format_type_be(att->atttypid)),
                      errhint("The guarded column must hold fencing tokens: ALTER TABLE %s ALTER "
                              "COLUMN %s TYPE fencing_token.",
                              quote_identifier(RelationGetRelationName(rel)), quote_identifier(column))));
    }
    return att->attnum;
  }
  ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                  errmsg("column \"%s\" of table \"%s\" does not exist", column,
                         RelationGetRelationName(rel))));
  pg_unreachable();
}

AttrNumber FindOnlyTokenColumn(Relation rel, Oid token_type) {
  TupleDesc desc = RelationGetDescr(rel);
  AttrNumber found = InvalidAttrNumber;
  for (int i = 0; i < desc->natts; ++i) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (!IsTokenColumn(att, token_type)) continue;
    if (found != InvalidAttrNumber) {
      ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_COLUMN),
                      errmsg("table \"%s\" has more than one fencing_token column (\"%s\", \"%s\")",
                             RelationGetRelationName(rel),
                             NameStr(TupleDescAttr(desc, found - 1)->attname), NameStr(att->attname)),
                      errhint("Name the column to guard: fencing_protect('%s', 'column').",
                              RelationGetRelationName(rel))));
    }
    found = att->attnum;
  }
  if (found == InvalidAttrNumber) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                    errmsg("table \"%s\" has no fencing_token column", RelationGetRelationName(rel)),
                    errhint("Add one: ALTER TABLE %s ADD COLUMN token fencing_token.",
                            quote_identifier(RelationGetRelationName(rel)))));
  }
  return found;
}

// Parses the option words; where names the trigger or function for errors.
// The returned lock name, if any, points into words.
GuardOptions ParseOptions(const char *const *words, int count, const char *where) {
  GuardOptions options;
  OptionStatus status = OptionStatus::kOk;
  const char *word = nullptr;
  for (int i = 0; i < count && status == OptionStatus::kOk; ++i) {
    word = words[i];
    RunCxx([&] { status = ApplyGuardOption(word, options); });
  }
  if (status == OptionStatus::kOk) RunCxx([&] { status = FinishGuardOptions(options); });
  switch (status) {
    case OptionStatus::kOk:
      break;
    case OptionStatus::kUnknown:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("unknown fencing_guard option \"%s\" in %s", word, where),
                      errhint("Known options: %s.", kKnownOptions)));
      break;
    case OptionStatus::kEmptyLockName:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard option \"lock=\" in %s names no lock", where)));
      break;
    case OptionStatus::kConflictingLocks:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard options in %s name two different locks", where),
                      errdetail("The second is \"%s\".", word)));
      break;
    case OptionStatus::kUnsetUnderLock:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard option \"allow_unset\" cannot be combined with a lock "
                             "in %s",
                             where),
                      errhint("Under a lock-wide fence every write carries a token; a writer that "
                              "does not set the column can present its token with "
                              "fencing_present().")));
      break;
  }
  return options;
}

// What a guard trigger needs per row; trivially destructible by design.
struct GuardCache {
  Oid trigger_oid;
  Oid relation_oid;
  AttrNumber attnum;
  GuardOptions options;  // options.lock_name points at lock_name below
  const char *lock_name;  // nullptr: per-row fence only; else in fn_mcxt
  Oid extension_schema;
};

const char *TriggerWhere(const TriggerData *td) {
  return psprintf("trigger \"%s\" on table \"%s\"", td->tg_trigger->tgname,
                  RelationGetRelationName(td->tg_relation));
}

// Per-row fences guard UPDATE only.  Lock-wide fences also guard INSERT and
// DELETE (row triggers) and TRUNCATE (a statement trigger: it fires no row
// triggers).
void CheckTriggerProtocol(const TriggerData *td, const GuardCache &guard) {
  const TriggerEvent event = td->tg_event;
  const bool under_lock = guard.lock_name != nullptr;
  const char *problem = nullptr;
  if (!TRIGGER_FIRED_BEFORE(event)) {
    problem = TRIGGER_FIRED_AFTER(event) ? "fired AFTER" : "fired INSTEAD OF";
  } else if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
    if (!under_lock) problem = "fired by TRUNCATE";
  } else if (!TRIGGER_FIRED_FOR_ROW(event)) {
    problem = "fired FOR EACH STATEMENT";
  } else if (!under_lock && TRIGGER_FIRED_BY_INSERT(event)) {
    problem = "fired by INSERT";
  } else if (!under_lock && TRIGGER_FIRED_BY_DELETE(event)) {
    problem = "fired by DELETE";
  }
  if (problem == nullptr) return;
  if (under_lock) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("fencing_guard() under a lock must be fired BEFORE INSERT, UPDATE or "
                           "DELETE FOR EACH ROW, or BEFORE TRUNCATE, but %s is %s",
                           TriggerWhere(td), problem),
                    errhint("Create the triggers with fencing_protect().")));
  }
  ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                  errmsg("fencing_guard() must be fired BEFORE UPDATE FOR EACH ROW, but %s is %s",
                         TriggerWhere(td), problem),
                  errhint("Create the trigger with fencing_protect(); a lock-wide fence (option "
                          "lock=NAME) also guards INSERT, DELETE and TRUNCATE.")));
}

const GuardCache &LookupGuard(FunctionCallInfo fcinfo, const TriggerData *td) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  const Trigger *trigger = td->tg_trigger;
  const Oid relid = RelationGetRelid(td->tg_relation);
  auto *cache = static_cast<GuardCache *>(flinfo->fn_extra);
  if (cache != nullptr && cache->trigger_oid == trigger->tgoid && cache->relation_oid == relid) {
    return *cache;
  }

  if (trigger->tgnargs < 1) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("%s gives fencing_guard() no token column", TriggerWhere(td)),
                    errhint("Pass the fencing_token column's name as the first trigger argument, "
                            "or create the trigger with fencing_protect().")));
  }
  GuardCache fresh;
  fresh.trigger_oid = trigger->tgoid;
  fresh.relation_oid = relid;
  fresh.attnum = ResolveNamedColumn(td->tg_relation, trigger->tgargs[0], TokenTypeOid(flinfo->fn_oid));
  fresh.options = ParseOptions(trigger->tgargs + 1, trigger->tgnargs - 1, TriggerWhere(td));
  fresh.lock_name = nullptr;
  if (!fresh.options.lock_name.empty()) {
    // Our own copy: the trigger's arguments may not outlive the query.
    const std::size_t length = fresh.options.lock_name.size();
    char *copy = static_cast<char *>(MemoryContextAlloc(flinfo->fn_mcxt, length + 1));
    memcpy(copy, fresh.options.lock_name.data(), length);
    copy[length] = '\0';
    fresh.lock_name = copy;
    fresh.options.lock_name = std::string_view(copy, length);
  }
  fresh.extension_schema = get_func_namespace(flinfo->fn_oid);

  if (cache == nullptr) {
    cache = static_cast<GuardCache *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(GuardCache)));
    flinfo->fn_extra = cache;
  }
  *cache = fresh;
  return *cache;
}

// ---- Reporting ---------------------------------------------------------------

[[noreturn]] void ReportStaleForRow(const TriggerData *td, AttrNumber attnum, Token token,
                                    Token row_mark) {
  ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                  errmsg("stale fencing token " INT64_FORMAT " for table \"%s\": the row has "
                         "already seen " INT64_FORMAT,
                         token, RelationGetRelationName(td->tg_relation), row_mark),
                  errdetail("A holder with a newer token has written this row; the lock you held "
                            "has moved on."),
                  errtablecol(td->tg_relation, attnum)));
  pg_unreachable();
}

[[noreturn]] void ReportStaleForLock(const TriggerData *td, const GuardCache &guard, Token token,
                                     Token lock_mark) {
  ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                  errmsg("stale fencing token " INT64_FORMAT " for table \"%s\" under lock \"%s\": "
                         "the lock has already seen " INT64_FORMAT,
                         token, RelationGetRelationName(td->tg_relation), guard.lock_name, lock_mark),
                  errdetail("A newer holder of the lock has been granted or has written under it; "
                            "the lock you held has moved on."),
                  errtablecol(td->tg_relation, guard.attnum)));
  pg_unreachable();
}

// what says what was missing, e.g. "column \"token\" is set to NULL".
[[noreturn]] void ReportMissing(const TriggerData *td, const GuardCache &guard, const char *what,
                                const char *hint) {
  const char *table = RelationGetRelationName(td->tg_relation);
  if (guard.lock_name != nullptr) {
    ereport(ERROR, (errcode(PGF_ERRCODE_MISSING_TOKEN),
                    errmsg("missing fencing token for table \"%s\" under lock \"%s\": %s", table,
                           guard.lock_name, what),
                    errhint("%s", hint), errtablecol(td->tg_relation, guard.attnum)));
  }
  ereport(ERROR, (errcode(PGF_ERRCODE_MISSING_TOKEN),
                  errmsg("missing fencing token for table \"%s\": %s", table, what),
                  errhint("%s", hint), errtablecol(td->tg_relation, guard.attnum)));
  pg_unreachable();
}

const char *ColumnName(const TriggerData *td, const GuardCache &guard) {
  return NameStr(TupleDescAttr(RelationGetDescr(td->tg_relation), guard.attnum - 1)->attname);
}

// ---- The two kinds of fence ---------------------------------------------------

bool ColumnAssigned(const TriggerData *td, const GuardCache &guard) {
  return UpdateAssignsColumn(td, guard.attnum);
}

Token ReadToken(HeapTuple tuple, const TriggerData *td, const GuardCache &guard, bool *is_null) {
  return DatumGetInt64(heap_getattr(tuple, guard.attnum, RelationGetDescr(td->tg_relation), is_null));
}

// Per-row fence: an UPDATE must carry a token no lower than the row's.
Datum GuardRow(const TriggerData *td, const GuardCache &guard) {
  GuardInput in{};
  in.column_assigned = ColumnAssigned(td, guard);
  in.old_token = ReadToken(td->tg_trigtuple, td, guard, &in.old_is_null);
  in.new_token = ReadToken(td->tg_newtuple, td, guard, &in.new_is_null);

  GuardVerdict verdict = GuardVerdict::kRejectMissing;
  RunCxx([&] { verdict = DecideGuard(in, guard.options); });
  const char *column = ColumnName(td, guard);
  switch (verdict) {
    case GuardVerdict::kAccept:
      return PointerGetDatum(td->tg_newtuple);
    case GuardVerdict::kSkip:
      return PointerGetDatum(nullptr);
    case GuardVerdict::kRejectStale:
      ReportStaleForRow(td, guard.attnum, in.new_token, in.old_token);
    case GuardVerdict::kRejectMissing:
      if (in.column_assigned) {
        ReportMissing(td, guard, psprintf("column \"%s\" is set to NULL", column),
                      psprintf("Set \"%s\" to the fencing token of the lock you hold.", column));
      }
      ReportMissing(td, guard, psprintf("the UPDATE does not set column \"%s\"", column),
                    psprintf("Set \"%s\" to the fencing token of the lock you hold, or protect "
                             "the table with option 'allow_unset'.",
                             column));
  }
  pg_unreachable();
}

// TRUNCATE removes every row at once and fires no row triggers: it needs
// the lock's current token, presented for the transaction.
Datum GuardTruncate(const TriggerData *td, const GuardCache &guard) {
  const LockFence *fence = FindTransactionFence(guard.lock_name);
  if (fence == nullptr || !fence->presented) {
    ReportMissing(td, guard, "TRUNCATE needs the token presented for the transaction",
                  psprintf("Call fencing_present('%s', token) first in this transaction.",
                           guard.lock_name));
  }
  const Token token = fence->presented_token;
  Token mark = 0;
  if (!AdvanceLockFence(guard.extension_schema, guard.lock_name, token, &mark)) {
    ReportStaleForLock(td, guard, token, mark);
  }
  return PointerGetDatum(nullptr);  // ignored for statement triggers
}

// Lock-wide fence: INSERT, UPDATE or DELETE must carry a token no lower
// than the row's and than the lock's high-water mark.
Datum GuardUnderLock(const TriggerData *td, const GuardCache &guard) {
  if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) return GuardTruncate(td, guard);

  LockWriteInput in{};
  in.kind = TRIGGER_FIRED_BY_INSERT(td->tg_event)   ? WriteKind::kInsert
            : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? WriteKind::kUpdate
                                                    : WriteKind::kDelete;
  // For INSERT tg_trigtuple is the new row; for UPDATE and DELETE the old.
  HeapTuple new_row = in.kind == WriteKind::kInsert   ? td->tg_trigtuple
                      : in.kind == WriteKind::kUpdate ? td->tg_newtuple
                                                      : nullptr;
  HeapTuple old_row = in.kind == WriteKind::kInsert ? nullptr : td->tg_trigtuple;
  in.new_is_null = true;
  in.old_is_null = true;
  if (new_row != nullptr) in.new_token = ReadToken(new_row, td, guard, &in.new_is_null);
  if (old_row != nullptr) in.old_token = ReadToken(old_row, td, guard, &in.old_is_null);
  in.column_assigned = in.kind == WriteKind::kUpdate && ColumnAssigned(td, guard);
  if (const LockFence *fence = FindTransactionFence(guard.lock_name)) {
    in.presented = fence->presented;
    in.presented_token = fence->presented_token;
  }

  LockWriteDecision decision{};
  RunCxx([&] { decision = DecideLockWrite(in, guard.options); });
  const char *column = ColumnName(td, guard);
  const char *present_hint =
      psprintf("Set \"%s\" to your token, or call fencing_present('%s', token) first in this "
               "transaction.",
               column, guard.lock_name);
  switch (decision.verdict) {
    case GuardVerdict::kAccept:
      break;
    case GuardVerdict::kSkip:
      return PointerGetDatum(nullptr);
    case GuardVerdict::kRejectStale:
      ReportStaleForRow(td, guard.attnum, decision.write_token, in.old_token);
    case GuardVerdict::kRejectMissing:
      switch (in.kind) {
        case WriteKind::kInsert:
          ReportMissing(td, guard,
                        psprintf("the new row's \"%s\" is NULL and the transaction presented no "
                                 "token",
                                 column),
                        present_hint);
        case WriteKind::kUpdate:
          ReportMissing(td, guard,
                        in.column_assigned
                            ? psprintf("column \"%s\" is set to NULL", column)
                            : psprintf("the UPDATE does not set column \"%s\" and the "
                                       "transaction presented no token",
                                       column),
                        present_hint);
        case WriteKind::kDelete:
          ReportMissing(td, guard, "DELETE needs the token presented for the transaction",
                        psprintf("Call fencing_present('%s', token) first in this transaction.",
                                 guard.lock_name));
      }
  }

  Token mark = 0;
  if (!AdvanceLockFence(guard.extension_schema, guard.lock_name, decision.write_token, &mark)) {
    if (guard.options.skip) return PointerGetDatum(nullptr);
    ReportStaleForLock(td, guard, decision.write_token, mark);
  }
  if (in.kind == WriteKind::kDelete) return PointerGetDatum(old_row);
  if (!decision.fill_from_presented) return PointerGetDatum(new_row);
  int column_number = guard.attnum;
  Datum value = Int64GetDatum(decision.write_token);
  bool is_null = false;
  return PointerGetDatum(heap_modify_tuple_by_cols(new_row, RelationGetDescr(td->tg_relation), 1,
                                                   &column_number, &value, &is_null));
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PG_FUNCTION_INFO_V1(fencing_guard);
Datum fencing_guard(PG_FUNCTION_ARGS) {
  if (!CALLED_AS_TRIGGER(fcinfo)) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("fencing_guard() can only be called as a trigger"),
                    errhint("Protect a table with fencing_protect().")));
  }
  const TriggerData *td = reinterpret_cast<TriggerData *>(fcinfo->context);
  const GuardCache &guard = LookupGuard(fcinfo, td);
  CheckTriggerProtocol(td, guard);
  return guard.lock_name == nullptr ? GuardRow(td, guard) : GuardUnderLock(td, guard);
}

// fencing_resolve_token_column(tbl, token_column, options) RETURNS name:
// the checks fencing_protect() makes before it creates the trigger, using
// the same rules as the trigger itself so both fail the same way.
PG_FUNCTION_INFO_V1(fencing_resolve_token_column);
Datum fencing_resolve_token_column(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("table must not be NULL")));
  }
  const Oid relid = PG_GETARG_OID(0);
  const Oid token_type = TokenTypeOid(fcinfo->flinfo->fn_oid);

  if (!PG_ARGISNULL(2)) {
    Datum *elems = nullptr;
    bool *nulls = nullptr;
    int count = 0;
    deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls,
                      &count);
    const char **words = static_cast<const char **>(palloc(sizeof(char *) * (count + 1)));
    for (int i = 0; i < count; ++i) {
      if (nulls[i]) {
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("fencing_protect() options must not contain NULL")));
      }
      words[i] = TextDatumGetCString(elems[i]);
    }
    ParseOptions(words, count, "fencing_protect()");
  }

  Relation rel = table_open(relid, AccessShareLock);
  const AttrNumber attnum = PG_ARGISNULL(1)
                                ? FindOnlyTokenColumn(rel, token_type)
                                : ResolveNamedColumn(rel, NameStr(*PG_GETARG_NAME(1)), token_type);
  Name result = static_cast<Name>(palloc(sizeof(NameData)));
  namestrcpy(result, NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname));
  table_close(rel, AccessShareLock);
  PG_RETURN_NAME(result);
}

}  // extern "C"
