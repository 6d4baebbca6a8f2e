// The module's settings: see settings.hpp.  The descriptions here are what
// SHOW ALL and pg_settings print; docs/settings.md says what each trades.
#include "settings.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

#include <climits>

namespace pg_fencing::settings {

bool shared_fence = true;
bool fast_update = true;
int wait_recheck_ms = 1000;
int audit_long_wait_s = 60;
int history_size = 100;
int max_sessions_per_role = 25000;
bool reserve_tokens = true;
int max_tracked_locks = 10000;
int max_tracked_tables = 1000;
int rejections_kept = 1000;

void Define() {
  DefineCustomBoolVariable(
      "pg_fencing.shared_fence",
      "Whether writers under a lock's current mark share its fence gate.",
      "Off: every writer under a lock takes the gate exclusively and locks the mark's row, as "
      "before 1.4, and a holder's transactions under the lock take turns. Raises of the mark "
      "take the gate exclusively either way.",
      &shared_fence, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
  DefineCustomBoolVariable(
      "pg_fencing.fast_update",
      "Whether plain UPDATEs of guarded tables are judged in their own projection.",
      "On: an UPDATE that sets the token column of a table whose only BEFORE UPDATE row trigger "
      "is fencing_guard (without option skip, no partitions) judges each row as it computes it, "
      "and runs without the trigger. Off: the trigger judges every row.",
      &fast_update, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pg_fencing.wait_recheck",
      "The longest a fencing_acquire waiter sleeps between looks at the lease.",
      "A waiter is woken by the commit of a release and wakes on its own at the lease's end; "
      "this bounds its sleep when neither comes (a lease freed by hand, a release committed "
      "with COMMIT PREPARED).",
      &wait_recheck_ms, 1000, 1, INT_MAX, PGC_USERSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pg_fencing.audit_long_wait",
      "How long a waiting acquire function may wait before fencing_audit() reports it.",
      "A waiting fencing_acquire, fencing_acquire_shared or fencing_acquire_permit holds its "
      "snapshot, and so the xmin horizon of the whole database, for as long as it waits; "
      "CALL fencing_await waits without one.",
      &audit_long_wait_s, 60, 1, INT_MAX, PGC_USERSET, GUC_UNIT_S, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pg_fencing.history_size",
                          "How many leases of each lock fencing_history keeps.",
                          "0 keeps none but the current lease. A lower value leaves the entries in "
                          "slots beyond it until they are deleted by hand.",
                          &history_size, 100, 0, 1000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pg_fencing.max_sessions_per_role", "How many fencing sessions a role may have at once.",
      "Sessions that have ended count until they are swept (by the expiry worker, or by the "
      "role's next fencing_session_open at READ COMMITTED). Set per role with ALTER ROLE ... SET.",
      &max_sessions_per_role, 25000, 1, 100000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  if (process_shared_preload_libraries_in_progress) {
    // Server-wide and at start only: a backend taking tokens from the
    // sequence while others hand out a range reserved below them would
    // break the order of grants.
    DefineCustomBoolVariable("pg_fencing.reserve_tokens",
                             "Whether fencing_grant() hands out tokens from ranges reserved in "
                             "shared memory.",
                             "Off: every grant takes the next value of the sequence and flushes "
                             "its WAL, as without shared_preload_libraries.",
                             &reserve_tokens, true, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_fencing.max_tracked_locks", "How many locks fencing_lock_stats can count.",
        "Locks beyond this many (over all databases) are not counted until fencing_stats_reset().",
        &max_tracked_locks, 10000, 100, 10000000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_fencing.max_tracked_tables", "How many protected tables fencing_table_stats can count.",
        "Tables beyond this many (over all databases) are not counted until fencing_stats_reset().",
        &max_tracked_tables, 1000, 10, 10000000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pg_fencing.rejections_kept", "How many refused writes fencing_rejections keeps.",
        "The oldest make room for new ones; over all databases.", &rejections_kept, 1000, 1,
        1000000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    // Reserved only when preloaded, as pg_prewarm does: in a backend that
    // loads the library on demand the start-only settings above are not
    // defined, and reserving the prefix there would turn their entries in
    // postgresql.conf into a WARNING in every session and make ALTER SYSTEM
    // refuse them (from 17; 15 refuses any undefined name) -- the very step
    // that turns the preload on.
    MarkGUCPrefixReserved("pg_fencing");
  }
}

}  // namespace pg_fencing::settings
