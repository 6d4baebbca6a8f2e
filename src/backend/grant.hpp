// Tokens: fencing_grant() and the lease grants take them from here.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// A new token from the extension's sequence in schema, durable (and
// replicated to synchronous standbys) before it is returned; see grant.cpp.
int64 GrantToken(Oid schema);

// In _PG_init: the reserved ranges in shared memory, when preloading.
void RegisterGrantReservations();

}  // namespace pg_fencing
