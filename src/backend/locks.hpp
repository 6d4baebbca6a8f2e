// Who may use a lock: the C side of the lock model in
// extension/pg_fencing--1.1--1.2.sql (fencing_lock_authorize).
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// Checks that role may use lock_name -- creating the lock first when it
// does not exist, may_create is true and role may create it -- and returns
// the lock's id; raises 42501 otherwise.  for_table (or InvalidOid) is the
// table being guarded under the lock when role is that table's owner: the
// error then names the table.
//
// In a database whose extension is still at 1.0 or 1.1 (the library is
// updated before ALTER EXTENSION ... UPDATE runs), there is no lock model
// yet: lock names are open, as they were, and this returns 0 instead of
// refusing every write until the update.
int64 AuthorizeLock(Oid schema, const char *lock_name, Oid role, bool may_create, Oid for_table);

}  // namespace pg_fencing
