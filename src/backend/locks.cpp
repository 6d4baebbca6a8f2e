// Who may use a lock, and the gates through which public functions act for
// their caller.
//
// The decisions are SQL (fencing_lock_authorize and the *_as functions in
// extension/pg_fencing--1.1--1.2.sql), where a DBA can read them.  What C
// adds is the caller's identity: a SECURITY DEFINER function cannot tell
// who called it, but a C function that is not one runs as its caller, so
// GetUserId() is the role every PostgreSQL privilege check would judge.
#include "locks.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include "extension_objects.hpp"
#include "lease_tables.hpp"
#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR: varatt.h from 16 on

namespace pg_fencing {

const char *CheckLockName(FunctionCallInfo fcinfo, int arg) {
  return CheckLockNameValue(PG_ARGISNULL(arg), PG_ARGISNULL(arg) ? Datum(0) : PG_GETARG_DATUM(arg));
}

const char *CheckLockNameValue(bool is_null, Datum name) {
  if (is_null || VARSIZE_ANY_EXHDR(DatumGetTextPP(name)) == 0) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lock name must not be NULL or empty")));
  }
  return text_to_cstring(DatumGetTextPP(name));
}

int64 AuthorizeLock(Oid schema, const char *lock_name, Oid role, bool may_create, Oid for_table) {
  static const Oid kArgTypes[] = {TEXTOID, OIDOID, BOOLOID, REGCLASSOID};
  FmgrInfo *fn = ExtensionFunctionIfExists(schema, "fencing_lock_authorize", 4, kArgTypes);
  if (fn == nullptr) return 0;  // before 1.2: no lock model (see locks.hpp)
  const Datum args[] = {CStringGetTextDatum(lock_name), ObjectIdGetDatum(role),
                        BoolGetDatum(may_create), ObjectIdGetDatum(for_table)};
  const bool nulls[] = {false, false, false, !OidIsValid(for_table)};
  bool is_null = false;
  const Datum id = CallExtensionFunction(fn, 4, args, nulls, &is_null);
  if (is_null) {
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("fencing_lock_authorize() returned NULL for lock \"%s\"", lock_name)));
  }
  return DatumGetInt64(id);
}

bool RoleMayUseLock(Oid role, Oid owner, Datum users, bool users_null) {
  if (has_privs_of_role(role, owner)) return true;
  if (users_null) return false;
  Datum *elems = nullptr;
  bool *elem_nulls = nullptr;
  int count = 0;
  deconstruct_array(DatumGetArrayTypeP(users), REGROLEOID, sizeof(Oid), true, TYPALIGN_INT, &elems,
                    &elem_nulls, &count);
  for (int i = 0; i < count; ++i) {
    if (!elem_nulls[i] && has_privs_of_role(role, DatumGetObjectId(elems[i]))) return true;
  }
  return false;
}

bool LockUsableBy(Oid schema, const char *lock_name, Oid role, int64 *lock_id,
                  LockTraits *traits) {
  // Before 1.2 there is no fencing_lock (nor, before 1.3, its hash index):
  // AuthorizeLock() knows what to do.
  if (!OidIsValid(get_relname_relid("fencing_lock_name_hash", schema))) return false;
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  Relation lock = table_open(ids.lock, AccessShareLock);
  Relation probe = index_open(ids.lock_probe, AccessShareLock);
  HeapTuple row = FetchRowCommittedNow(lock, probe, ids.name_collation, lock_name);
  bool usable = false;
  if (row != nullptr) {
    bool is_null = false, users_null = false;
    const Oid owner = DatumGetObjectId(RowColumn(lock, row, ids.lock_owner, &is_null));
    const Datum users = RowColumn(lock, row, ids.lock_users, &users_null);
    usable = RoleMayUseLock(role, owner, users, users_null);
    if (usable) *lock_id = DatumGetInt64(RowColumn(lock, row, ids.lock_id, &is_null));
    if (usable && traits != nullptr) *traits = {LockKindOfRow(lock, row), TokenSourceOfRow(lock, row)};
  }
  index_close(probe, NoLock);
  table_close(lock, NoLock);
  return usable;
}

LockTraits LockTraitsOf(Oid schema, const char *lock_name) {
  LockTraits traits;
  if (!OidIsValid(get_relname_relid("fencing_lock_name_hash", schema))) return traits;
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  Relation lock = table_open(ids.lock, AccessShareLock);
  Relation probe = index_open(ids.lock_probe, AccessShareLock);
  HeapTuple row = FetchRowCommittedNow(lock, probe, ids.name_collation, lock_name);
  if (row != nullptr) traits = {LockKindOfRow(lock, row), TokenSourceOfRow(lock, row)};
  index_close(probe, NoLock);
  table_close(lock, NoLock);
  return traits;
}

}  // namespace pg_fencing

using namespace pg_fencing;

namespace {

// A gate's target, found once per call site.
struct GateTarget {
  FmgrInfo *target;
  int nargs;
};

// The function a gate stands for: NAME_as(oid, the gate's own arguments),
// in the gate's schema.  lock_first: a lock function's gate, which must
// take the lock's name first.
GateTarget *LookupGateTarget(FunctionCallInfo fcinfo, bool lock_first) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  if (flinfo->fn_extra != nullptr) return static_cast<GateTarget *>(flinfo->fn_extra);

  HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(flinfo->fn_oid));
  if (!HeapTupleIsValid(proc)) {
    elog(ERROR, "cache lookup failed for function %u", flinfo->fn_oid);
  }
  const auto *form = reinterpret_cast<Form_pg_proc>(GETSTRUCT(proc));
  const int nargs = form->pronargs;
  if (nargs + 1 > FUNC_MAX_ARGS) elog(ERROR, "fencing_gate: too many arguments");
  // Every gate is a lock function whose first argument is the lock's name.
  if (lock_first && (nargs < 1 || form->proargtypes.values[0] != TEXTOID)) {
    elog(ERROR, "fencing_gate: %s does not take a lock name first", NameStr(form->proname));
  }
  Oid argtypes[FUNC_MAX_ARGS];
  argtypes[0] = OIDOID;
  for (int i = 0; i < nargs; ++i) argtypes[i + 1] = form->proargtypes.values[i];
  // The name must outlive this call: the cache keeps a pointer to it.
  const char *target_name =
      MemoryContextStrdup(TopMemoryContext, psprintf("%s_as", NameStr(form->proname)));
  const Oid schema = form->pronamespace;
  ReleaseSysCache(proc);

  auto *gate = static_cast<GateTarget *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(GateTarget)));
  gate->target = ExtensionFunction(schema, target_name, nargs + 1, argtypes);
  gate->nargs = nargs + 1;
  flinfo->fn_extra = gate;
  return gate;
}

// Calls the gate's target with the caller's role first.
Datum CallGateTarget(FunctionCallInfo fcinfo, const GateTarget *gate) {
  LOCAL_FCINFO(call, FUNC_MAX_ARGS);
  InitFunctionCallInfoData(*call, gate->target, gate->nargs, fcinfo->fncollation, nullptr, nullptr);
  call->args[0].value = ObjectIdGetDatum(GetUserId());
  call->args[0].isnull = false;
  for (int i = 1; i < gate->nargs; ++i) call->args[i] = fcinfo->args[i - 1];
  const Datum result = FunctionCallInvoke(call);
  fcinfo->isnull = call->isnull;
  return result;
}

}  // namespace

extern "C" {

// fencing_gate: the body of the public functions that act on a lock for
// their caller through a PL/pgSQL NAME_as function (fencing_leader,
// fencing_revoke, fencing_reset_mark, and the lock management functions;
// the lease engine's acquire, renew and release have C bodies of their own
// since 1.3).  It calls NAME_as(caller, arguments...) with
// the caller's role; PUBLIC may not call the _as functions directly, so a
// role cannot claim to be another.  (A direct fmgr call does not check
// EXECUTE; the gate's own EXECUTE was checked when it was called.)
PG_FUNCTION_INFO_V1(fencing_gate);
Datum fencing_gate(PG_FUNCTION_ARGS) {
  const GateTarget *gate = LookupGateTarget(fcinfo, true);
  CheckLockName(fcinfo, 0);
  return CallGateTarget(fcinfo, gate);
}

// fencing_session_gate: the same for the session functions (1.8), which
// act on a session, for the caller, through fencing_session_NAME_as.
PG_FUNCTION_INFO_V1(fencing_session_gate);
Datum fencing_session_gate(PG_FUNCTION_ARGS) {
  return CallGateTarget(fcinfo, LookupGateTarget(fcinfo, false));
}

}  // extern "C"
