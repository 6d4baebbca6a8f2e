// Transactions that change pg_fencing's state commit durably, whatever the
// session's synchronous_commit says.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// Makes the current transaction's commit wait for its WAL to be flushed
// locally and, when synchronous standbys are configured, to reach them --
// as with synchronous_commit = on -- even if the session has turned
// synchronous_commit down.  A lease grant or a raised mark lost in a crash
// would let an older token write again.
void RequireDurableCommit();

// Registers the transaction callback; called from _PG_init.
void RegisterDurableCommitCallback();

}  // namespace pg_fencing
