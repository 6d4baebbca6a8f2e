// Module entry: the magic block and the callbacks and hooks the module
// installs when it is loaded.
#include "boundary.hpp"
#include "durable_commit.hpp"
#include "expiry_worker.hpp"
#include "fences.hpp"
#include "grant.hpp"
#include "lease_events.hpp"
#include "lease_wakeup.hpp"
#include "lease_writers.hpp"
#include "merge_actions.hpp"
#include "shared_stats.hpp"
#include "update_check.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
void _PG_init(void) {
  pg_fencing::RegisterFenceCallbacks();
  pg_fencing::RegisterDurableCommitCallback();
  pg_fencing::RegisterMergeTracking();
  pg_fencing::RegisterLeaseWakeup();
  pg_fencing::RegisterLeaseEvents();
  pg_fencing::RegisterSharedStats();
  pg_fencing::RegisterExpiryWorker();
  pg_fencing::RegisterLeaseWriters();
  pg_fencing::RegisterGrantReservations();
  pg_fencing::RegisterUpdateCheck();
}
}
