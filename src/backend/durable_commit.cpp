// See durable_commit.hpp.
//
// ForceSyncCommit() makes the commit flush WAL locally even when
// synchronous_commit is off.  Waiting for synchronous standbys is decided
// at commit from synchronous_commit itself, so just before the commit we
// raise it to "on" for this transaction only (SET LOCAL: the value reverts
// when the transaction ends).
#include "durable_commit.hpp"

extern "C" {
#include "access/xact.h"
#include "replication/syncrep.h"
#include "utils/guc.h"
}

namespace pg_fencing {
namespace {

bool durable_commit_required = false;

void OnTransactionEvent(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
    case XACT_EVENT_PARALLEL_PRE_COMMIT:
      if (durable_commit_required && synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH) {
        (void)set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
                                GUC_ACTION_LOCAL, true, ERROR, false);
      }
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      durable_commit_required = false;
      break;
    default:
      break;
  }
}

}  // namespace

void RequireDurableCommit() {
  ForceSyncCommit();
  durable_commit_required = true;
}

void RegisterDurableCommitCallback() { RegisterXactCallback(OnTransactionEvent, nullptr); }

}  // namespace pg_fencing

extern "C" {

// fencing_commit_durably() RETURNS void: RequireDurableCommit() for the
// lease functions.  PUBLIC may not call it (it would only slow its caller's
// own commit, but it is not part of the interface).
PG_FUNCTION_INFO_V1(fencing_commit_durably);
Datum fencing_commit_durably(PG_FUNCTION_ARGS) {
  pg_fencing::RequireDurableCommit();
  PG_RETURN_VOID();
}

}  // extern "C"
