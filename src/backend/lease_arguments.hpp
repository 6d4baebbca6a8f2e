// Argument checks of the lease functions.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// Checks the lease arguments of a SQL-callable function: the lock name in
// argument 0, the holder in holder_arg (-1: none to check), the ttl in
// ttl_arg.  Raises 22023 naming what is wrong; returns the lock name.
const char *CheckLeaseArguments(FunctionCallInfo fcinfo, int holder_arg, int ttl_arg);

}  // namespace pg_fencing
