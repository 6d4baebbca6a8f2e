// Argument checks of the lease and session functions: one place for each
// rule, called by the C functions directly and by the SQL through
// fencing_check_lease_args, fencing_check_session_args and
// fencing_check_wait.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// Checks the lease arguments of a SQL-callable function: the lock name in
// argument 0, the holder in holder_arg (-1: none to check), the ttl in
// ttl_arg.  Raises 22023 naming what is wrong; returns the lock name.
const char *CheckLeaseArguments(FunctionCallInfo fcinfo, int holder_arg, int ttl_arg);

// A session's ttl: positive and finite, or 22023.
void CheckSessionTtl(Datum ttl);

// A wait of lock_name's: not negative and at most kMaxWaitMs, or 22023.
void CheckWait(Datum wait, const char *lock_name);

}  // namespace pg_fencing
