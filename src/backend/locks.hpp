// Who may use a lock: the C side of the lock model in
// extension/pg_fencing--1.1--1.2.sql (fencing_lock_authorize).
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// The lock name in argument arg of a SQL-callable function, checked: a NULL
// or empty name is an error (22023).  The one place lock names are checked:
// every public function that takes one calls it (the gates for all of
// theirs), so the SQL behind them can take the name as given.
const char *CheckLockName(FunctionCallInfo fcinfo, int arg);
// The same for a value (is_null: SQL NULL).
const char *CheckLockNameValue(bool is_null, Datum name);

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

// fencing_role_may_use(), in C: role has the privileges of the lock's owner
// or of one of its users (a regrole[] Datum; superusers have every role's).
bool RoleMayUseLock(Oid role, Oid owner, Datum users, bool users_null);

// How a lock is leased (kExclusive before 1.4) and where its tokens come
// from (kUnknown before 1.5), as its row of fencing_lock says.
struct LockTraits {
  LockKind kind = LockKind::kExclusive;
  TokenSource source = TokenSource::kUnknown;
};

// AuthorizeLock() without its SQL for the common case: when the lock exists
// and role may use it (read through the lease tables' index, as committed
// now), returns true with the lock's id.  False when the lock is missing,
// role may not use it, or the extension predates the lock model: call
// AuthorizeLock() then, which creates the lock or raises the usual 42501.
// traits, if given, gets the lock's traits.
bool LockUsableBy(Oid schema, const char *lock_name, Oid role, int64 *lock_id,
                  LockTraits *traits = nullptr);

// A lock's traits as committed now (the defaults for a lock that does not
// exist): for the callers of AuthorizeLock().
LockTraits LockTraitsOf(Oid schema, const char *lock_name);

}  // namespace pg_fencing
