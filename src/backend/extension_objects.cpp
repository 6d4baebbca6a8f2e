// See extension_objects.hpp.
#include "extension_objects.hpp"

extern "C" {
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
// enough.  Entries are never changed or freed once made: a call through
// one may be running further up the stack when the cache is invalidated.
// An invalidation forgets the list; its entries leak (a few hundred bytes
// per function, and only when a catalog change is followed by a call).
struct CachedFunction {
  CachedFunction *next;
  Oid schema;
  const char *name;  // a string literal of the caller's
  int nargs;
  Oid argtypes[FUNC_MAX_ARGS];
  FmgrInfo flinfo;
};

CachedFunction *cached_functions = nullptr;
Oid cached_token_type = InvalidOid;
Oid cached_token_schema = InvalidOid;
bool invalidation_registered = false;

void ForgetEverything(Datum, int, uint32) {
  cached_functions = nullptr;
  cached_token_type = InvalidOid;
  cached_token_schema = InvalidOid;
}

void RegisterInvalidation() {
  if (invalidation_registered) return;
  CacheRegisterSyscacheCallback(PROCOID, ForgetEverything, 0);
  CacheRegisterSyscacheCallback(TYPEOID, ForgetEverything, 0);
  invalidation_registered = true;
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

FmgrInfo *ExtensionFunctionIfExists(Oid schema, const char *name, int nargs,
                                    const Oid *argtypes) {
  RegisterInvalidation();
  for (CachedFunction *f = cached_functions; f != nullptr; f = f->next) {
    if (SameSignature(*f, schema, name, nargs, argtypes)) return &f->flinfo;
  }
  Assert(nargs <= FUNC_MAX_ARGS);
  List *qualified = list_make2(makeString(get_namespace_name(schema)), makeString(pstrdup(name)));
  const Oid function = LookupFuncName(qualified, nargs, argtypes, true);
  if (!OidIsValid(function)) return nullptr;
  auto *entry =
      static_cast<CachedFunction *>(MemoryContextAllocZero(TopMemoryContext, sizeof(CachedFunction)));
  fmgr_info_cxt(function, &entry->flinfo, TopMemoryContext);
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
