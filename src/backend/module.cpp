// Module entry: the magic block, and everything the module installs when it
// is loaded -- its settings, its callbacks and hooks, and, when preloaded,
// its shared memory and background worker.  The planner and executor hooks
// are installed by the files that implement them (merge_actions.cpp,
// update_check.cpp), each saving the previous hook as previous_<hook>.
#include "boundary.hpp"
#include "durable_commit.hpp"
#include "expiry_worker.hpp"
#include "fences.hpp"
#include "grant.hpp"
#include "lease_line.hpp"
#include "lease_wakeup.hpp"
#include "lease_writers.hpp"
#include "merge_actions.hpp"
#include "settings.hpp"
#include "shared_stats.hpp"
#include "update_check.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
}

namespace pg_fencing {
namespace {

shmem_request_hook_type previous_shmem_request = nullptr;
shmem_startup_hook_type previous_shmem_startup = nullptr;

// Every part's shared memory, requested and attached in one order.
void RequestSharedMemory() {
  if (previous_shmem_request != nullptr) previous_shmem_request();
  RequestGrantMemory();
  RequestStatsMemory();
  RequestExpiryMemory();
  RequestLeaseWriterMemory();
}

void AttachSharedMemory() {
  if (previous_shmem_startup != nullptr) previous_shmem_startup();
  AttachGrantMemory();
  AttachStatsMemory();
  AttachExpiryMemory();
  AttachLeaseWriterMemory();
}

}  // namespace
}  // namespace pg_fencing

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
void _PG_init(void) {
  using namespace pg_fencing;
  settings::Define();
  RegisterFenceCallbacks();
  RegisterDurableCommitCallback();
  RegisterMergeTracking();
  RegisterLeaseWakeup();
  RegisterLineCallbacks();
  RegisterSharedStats();
  RegisterExpiryWorker();
  RegisterLeaseWriters();
  RegisterUpdateCheck();
  if (process_shared_preload_libraries_in_progress) {
    previous_shmem_request = shmem_request_hook;
    shmem_request_hook = RequestSharedMemory;
    previous_shmem_startup = shmem_startup_hook;
    shmem_startup_hook = AttachSharedMemory;
  }
}
}
