// Tokens: fencing_grant() and the lease grants take them from here.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// A new token from the extension's sequence in schema, durable (and
// replicated to synchronous standbys) before it is returned; see grant.cpp.
int64 GrantToken(Oid schema);

// The highest token the database in schema has reserved, as this backend
// knows it, looked up again when token is above what it knew: a token at
// or below the answer was handed out (or reserved to be), one above it
// never was.  One comparison when token is not new to this backend.
int64 HighestGrantedFor(Oid schema, int64 token);

// In _PG_init: the reserved ranges in shared memory, when preloading.
void RegisterGrantReservations();

}  // namespace pg_fencing
