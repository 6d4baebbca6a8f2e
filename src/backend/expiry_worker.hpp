// Announcing the expiries nobody acts on: a background worker, when the
// library is in shared_preload_libraries.  See expiry_worker.cpp.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace pg_fencing {

// In _PG_init: the launcher, when preloading.
void RegisterExpiryWorker();

// The schedule of the databases' expiry workers (preloaded): the module's
// shared-memory request and startup hooks call these.
void RequestExpiryMemory();
void AttachExpiryMemory();

// A lease of this database will end at lease_end if the current
// transaction commits: the worker looks at the database's leases then.
void ScheduleExpiryCheckAtCommit(TimestampTz lease_end);

// The database's worker looks no later than at (now, not at commit): for a
// transaction writing under a lease that ends then (lease_writers.cpp).
// Nothing without the preload.
void ScheduleLookNoLaterThan(Oid database, TimestampTz at);

}  // namespace pg_fencing
