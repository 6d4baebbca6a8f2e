// See extension_objects.hpp.
#include "extension_objects.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/pg_list.h"
#include "parser/parse_func.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
}

namespace pg_fencing {
namespace {

// A handful of functions are looked up, so a list searched by name is
// enough.  An entry is never changed or freed once made: a call through it
// may be running further up the stack when the cache is invalidated.  A
// change to any function (pg_proc) starts a new generation; an entry of an
// older one is checked before use -- is its function still the same row
// of pg_proc? -- and used again if so.  Only when one of the extension's
// own functions was replaced (ALTER EXTENSION UPDATE, DROP and CREATE
// EXTENSION) is a new entry made, and the old one (a few hundred bytes) is
// left behind.
struct CachedFunction {
  CachedFunction *next;
  Oid schema;
  const char *name;  // a string literal of the caller's
  int nargs;
  Oid argtypes[FUNC_MAX_ARGS];
  FmgrInfo flinfo;
  uint64 generation;        // of the cache when last checked
  TransactionId proc_xmin;  // of the function's pg_proc row when looked up
  ItemPointerData proc_tid;
  bool replaced;  // superseded by a newer entry: never used again
};

CachedFunction *cached_functions = nullptr;
uint64 function_generation = 1;
Oid cached_token_type = InvalidOid;
Oid cached_token_schema = InvalidOid;
Oid cached_sequence = InvalidOid;
Oid cached_sequence_schema = InvalidOid;
Oid cached_table_owner = InvalidOid;
Oid cached_table_owner_schema = InvalidOid;
bool invalidation_registered = false;

void NewFunctionGeneration(Datum, int, uint32) { ++function_generation; }

void ForgetCachedOids(Datum, int, uint32) {
  cached_token_type = InvalidOid;
  cached_token_schema = InvalidOid;
  cached_sequence = InvalidOid;
  cached_sequence_schema = InvalidOid;
  cached_table_owner = InvalidOid;
  cached_table_owner_schema = InvalidOid;
}

void RegisterInvalidation() {
  if (invalidation_registered) return;
  CacheRegisterSyscacheCallback(PROCOID, NewFunctionGeneration, 0);
  CacheRegisterSyscacheCallback(TYPEOID, ForgetCachedOids, 0);
  CacheRegisterSyscacheCallback(RELOID, ForgetCachedOids, 0);
  invalidation_registered = true;
}

// Whether the function's pg_proc row is the one the entry was made from.
bool StillTheSameFunction(const CachedFunction &f) {
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(f.flinfo.fn_oid));
  if (!HeapTupleIsValid(tuple)) return false;
  const bool same = HeapTupleHeaderGetRawXmin(tuple->t_data) == f.proc_xmin &&
                    ItemPointerEquals(&tuple->t_self, const_cast<ItemPointer>(&f.proc_tid));
  ReleaseSysCache(tuple);
  return same;
}

bool SameSignature(const CachedFunction &f, Oid schema, const char *name, int nargs,
                   const Oid *argtypes) {
  if (f.schema != schema || f.nargs != nargs || strcmp(f.name, name) != 0) return false;
  for (int i = 0; i < nargs; ++i) {
    if (f.argtypes[i] != argtypes[i]) return false;
  }
  return true;
}

}  // namespace

Oid ExtensionSchema(FunctionCallInfo fcinfo) { return get_func_namespace(fcinfo->flinfo->fn_oid); }

Oid TokenTypeOid(Oid schema) {
  RegisterInvalidation();
  if (cached_token_schema == schema && OidIsValid(cached_token_type)) return cached_token_type;
  const Oid type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum("fencing_token"),
                                   ObjectIdGetDatum(schema));
  if (!OidIsValid(type)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("type \"fencing_token\" of extension pg_fencing does not exist in "
                           "schema \"%s\"",
                           get_namespace_name(schema))));
  }
  cached_token_type = type;
  cached_token_schema = schema;
  return type;
}

Oid TokenSequenceOid(Oid schema) {
  RegisterInvalidation();
  if (cached_sequence_schema == schema && OidIsValid(cached_sequence)) return cached_sequence;
  const Oid seq = get_relname_relid("fencing_token_seq", schema);
  if (!OidIsValid(seq)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("sequence \"fencing_token_seq\" of extension pg_fencing does not exist "
                           "in schema \"%s\"",
                           get_namespace_name(schema)),
                    errhint("Reinstall the extension: DROP EXTENSION pg_fencing; CREATE EXTENSION "
                            "pg_fencing.")));
  }
  cached_sequence = seq;
  cached_sequence_schema = schema;
  return seq;
}

Oid ExtensionTableOwner(Oid schema) {
  RegisterInvalidation();
  if (cached_table_owner_schema == schema && OidIsValid(cached_table_owner)) {
    return cached_table_owner;
  }
  const Oid table = get_relname_relid("fencing_lock", schema);
  HeapTuple tuple = OidIsValid(table) ? SearchSysCache1(RELOID, ObjectIdGetDatum(table)) : nullptr;
  if (!HeapTupleIsValid(tuple)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("table \"fencing_lock\" of extension pg_fencing does not exist in "
                           "schema \"%s\"",
                           get_namespace_name(schema)),
                    errhint("Update the extension: ALTER EXTENSION pg_fencing UPDATE.")));
  }
  const Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
  ReleaseSysCache(tuple);
  cached_table_owner = owner;
  cached_table_owner_schema = schema;
  return owner;
}

FmgrInfo *ExtensionFunctionIfExists(Oid schema, const char *name, int nargs, const Oid *argtypes) {
  RegisterInvalidation();
  for (CachedFunction *f = cached_functions; f != nullptr; f = f->next) {
    if (f->replaced || !SameSignature(*f, schema, name, nargs, argtypes)) continue;
    if (f->generation == function_generation) return &f->flinfo;
    if (StillTheSameFunction(*f)) {
      f->generation = function_generation;
      return &f->flinfo;
    }
    f->replaced = true;
  }
  Assert(nargs <= FUNC_MAX_ARGS);
  List *qualified = list_make2(makeString(get_namespace_name(schema)), makeString(pstrdup(name)));
  const Oid function = LookupFuncName(qualified, nargs, argtypes, true);
  if (!OidIsValid(function)) return nullptr;
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) elog(ERROR, "cache lookup failed for function %u", function);
  auto *entry = static_cast<CachedFunction *>(
      MemoryContextAllocZero(TopMemoryContext, sizeof(CachedFunction)));
  entry->proc_xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
  entry->proc_tid = tuple->t_self;
  ReleaseSysCache(tuple);
  fmgr_info_cxt(function, &entry->flinfo, TopMemoryContext);
  entry->generation = function_generation;
  entry->schema = schema;
  entry->name = name;
  entry->nargs = nargs;
  for (int i = 0; i < nargs; ++i) entry->argtypes[i] = argtypes[i];
  entry->next = cached_functions;
  cached_functions = entry;
  return &entry->flinfo;
}

FmgrInfo *ExtensionFunction(Oid schema, const char *name, int nargs, const Oid *argtypes) {
  FmgrInfo *fn = ExtensionFunctionIfExists(schema, name, nargs, argtypes);
  if (fn == nullptr) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
                    errmsg("function %s.%s of extension pg_fencing does not exist",
                           get_namespace_name(schema), name),
                    errhint("Update the extension: ALTER EXTENSION pg_fencing UPDATE.")));
  }
  return fn;
}

Datum CallExtensionFunction(FmgrInfo *fn, int nargs, const Datum *args, const bool *nulls,
                            bool *is_null) {
  LOCAL_FCINFO(fcinfo, FUNC_MAX_ARGS);
  InitFunctionCallInfoData(*fcinfo, fn, nargs, InvalidOid, nullptr, nullptr);
  for (int i = 0; i < nargs; ++i) {
    fcinfo->args[i].value = args[i];
    fcinfo->args[i].isnull = nulls != nullptr && nulls[i];
  }
  const Datum result = FunctionCallInvoke(fcinfo);
  *is_null = fcinfo->isnull;
  return result;
}

}  // namespace pg_fencing
