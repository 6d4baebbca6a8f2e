// The extension's own catalog objects (functions, the token type), found by
// name in the extension's schema once and cached for the life of the
// backend.  A catalog change to any function (DROP EXTENSION, ALTER
// EXTENSION UPDATE) empties the cache, so a stale OID is never called.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// The schema the extension lives in: the schema of the C function that is
// running (every C entry point is one of the extension's functions).
Oid ExtensionSchema(FunctionCallInfo fcinfo);

// The fencing_token type in schema.
Oid TokenTypeOid(Oid schema);

// The sequence fencing_grant() takes tokens from, fencing_token_seq in schema.
Oid TokenSequenceOid(Oid schema);

// The role that owns the extension's tables in schema (fencing_lock and
// the others, all made by the same CREATE EXTENSION): the lease functions
// act on the tables as this role, as a SECURITY DEFINER function would.
Oid ExtensionTableOwner(Oid schema);

// The extension's SQL function schema.name(argtypes), ready to call; raises
// 42883 if it does not exist.  The FmgrInfo lives in a long-lived context.
FmgrInfo *ExtensionFunction(Oid schema, const char *name, int nargs, const Oid *argtypes);

// The same, or nullptr when the function does not exist (a database whose
// extension has not been updated to the version that created it).
FmgrInfo *ExtensionFunctionIfExists(Oid schema, const char *name, int nargs, const Oid *argtypes);

// Calls fn with nargs arguments; nulls (or nullptr: none) marks NULL ones.
// *is_null reports a NULL result.
Datum CallExtensionFunction(FmgrInfo *fn, int nargs, const Datum *args, const bool *nulls,
                            bool *is_null);

}  // namespace pg_fencing
