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

namespace pg_fencing {
namespace {

constexpr const char *kTokenTypeName = "fencing_token";
constexpr const char *kKnownOptions = "allow_unset, skip";

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
GuardOptions ParseOptions(const char *const *words, int count, const char *where) {
  GuardOptions options;
  for (int i = 0; i < count; ++i) {
    OptionStatus status = OptionStatus::kOk;
    const char *word = words[i];
    RunCxx([&] { status = ApplyGuardOption(word, options); });
    if (status != OptionStatus::kOk) {
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("unknown fencing_guard option \"%s\" in %s", word, where),
                      errhint("Known options: %s.", kKnownOptions)));
    }
  }
  return options;
}

// What a guard trigger needs per row; trivially destructible by design.
struct GuardCache {
  Oid trigger_oid;
  Oid relation_oid;
  AttrNumber attnum;
  GuardOptions options;
};

const char *TriggerWhere(const TriggerData *td) {
  return psprintf("trigger \"%s\" on table \"%s\"", td->tg_trigger->tgname,
                  RelationGetRelationName(td->tg_relation));
}

void CheckTriggerProtocol(const TriggerData *td) {
  const char *problem = nullptr;
  if (TRIGGER_FIRED_BY_INSERT(td->tg_event)) {
    problem = "fired by INSERT";
  } else if (TRIGGER_FIRED_BY_DELETE(td->tg_event)) {
    problem = "fired by DELETE";
  } else if (!TRIGGER_FIRED_BY_UPDATE(td->tg_event)) {
    problem = "fired by TRUNCATE";
  } else if (!TRIGGER_FIRED_BEFORE(td->tg_event)) {
    problem = TRIGGER_FIRED_AFTER(td->tg_event) ? "fired AFTER" : "fired INSTEAD OF";
  } else if (!TRIGGER_FIRED_FOR_ROW(td->tg_event)) {
    problem = "fired FOR EACH STATEMENT";
  }
  if (problem != nullptr) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("fencing_guard() must be fired BEFORE UPDATE FOR EACH ROW, but %s is %s",
                           TriggerWhere(td), problem),
                    errhint("Create the trigger with fencing_protect().")));
  }
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

  if (cache == nullptr) {
    cache = static_cast<GuardCache *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(GuardCache)));
    flinfo->fn_extra = cache;
  }
  *cache = fresh;
  return *cache;
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
  TriggerData *td = reinterpret_cast<TriggerData *>(fcinfo->context);
  CheckTriggerProtocol(td);
  const GuardCache &guard = LookupGuard(fcinfo, td);

  TupleDesc desc = RelationGetDescr(td->tg_relation);
  GuardInput in{};
  in.column_assigned =
      bms_is_member(guard.attnum - FirstLowInvalidHeapAttributeNumber, td->tg_updatedcols);
  in.old_token = DatumGetInt64(heap_getattr(td->tg_trigtuple, guard.attnum, desc, &in.old_is_null));
  in.new_token = DatumGetInt64(heap_getattr(td->tg_newtuple, guard.attnum, desc, &in.new_is_null));

  GuardVerdict verdict = GuardVerdict::kRejectMissing;
  RunCxx([&] { verdict = DecideGuard(in, guard.options); });

  const char *table = RelationGetRelationName(td->tg_relation);
  const char *column = NameStr(TupleDescAttr(desc, guard.attnum - 1)->attname);
  switch (verdict) {
    case GuardVerdict::kAccept:
      return PointerGetDatum(td->tg_newtuple);
    case GuardVerdict::kSkip:
      return PointerGetDatum(nullptr);
    case GuardVerdict::kRejectStale:
      ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                      errmsg("stale fencing token " INT64_FORMAT " for table \"%s\": the row has "
                             "already seen " INT64_FORMAT,
                             in.new_token, table, in.old_token),
                      errdetail("A holder with a newer token has written this row; the lock you "
                                "held has moved on."),
                      errtablecol(td->tg_relation, guard.attnum)));
      break;
    case GuardVerdict::kRejectMissing:
      ereport(ERROR, (errcode(PGF_ERRCODE_MISSING_TOKEN),
                      errmsg("missing fencing token for table \"%s\": %s", table,
                             in.column_assigned
                                 ? psprintf("column \"%s\" is set to NULL", column)
                                 : psprintf("the UPDATE does not set column \"%s\"", column)),
                      errhint("Set \"%s\" to the fencing token of the lock you hold%s.", column,
                              in.column_assigned ? ""
                                                 : ", or protect the table with option 'allow_unset'"),
                      errtablecol(td->tg_relation, guard.attnum)));
      break;
  }
  pg_unreachable();
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
