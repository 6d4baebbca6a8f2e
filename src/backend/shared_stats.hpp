// The statistics of fencing_lock_stats, fencing_table_stats and the record
// of refused writes fencing_rejections, in shared memory.  They exist only
// when the library is in shared_preload_libraries; without it, counting is
// a no-op and the views raise 55000.  See shared_stats.cpp.
#pragma once

#include "boundary.hpp"
#include "lease_counts.hpp"

namespace pg_fencing {

// In _PG_init: the transaction callbacks.
void RegisterSharedStats();

// The counters and the ring of refused writes (preloaded): the module's
// shared-memory request and startup hooks call these.
void RequestStatsMemory();
void AttachStatsMemory();

// Counts one event of a lease of lock_name if the current transaction
// commits (a savepoint rolled back forgets it).
void CountLeaseEventAtCommit(const char *lock_name, LeaseCounter counter);

// A write the guard refused (or, with option 'skip', skipped): counted and
// recorded now, so that they survive the rollback of the refused
// transaction.  relid: InvalidOid for a token refused by fencing_present();
// lock_name: nullptr for a per-row fence; has_mark: false for a missing
// token.
struct RefusedWrite {
  Oid relid;
  const char *lock_name;
  Token token;
  bool has_token;
  Token mark;
  bool has_mark;
  int sqlerrcode;  // 0: skipped ('skip'), not raised
};
void RecordRefusedWrite(const RefusedWrite &write);

}  // namespace pg_fencing
