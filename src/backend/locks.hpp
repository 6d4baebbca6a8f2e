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
int64 AuthorizeLock(Oid schema, const char *lock_name, Oid role, bool may_create, Oid for_table);

}  // namespace pg_fencing
