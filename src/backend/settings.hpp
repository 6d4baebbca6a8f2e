// Every setting of the module (pg_fencing.*), defined in one place: the
// variables PostgreSQL's GUC machinery writes, read by the files that use
// them.  docs/settings.md is the table of them for users.
#pragma once

#include "boundary.hpp"

namespace pg_fencing::settings {

// pg_fencing.shared_fence: writers of a lock's current mark share its
// fence gate.  A session that turns it off only makes its own writers take
// the gate exclusively (and lock the mark's row): safe beside any other
// session.
extern bool shared_fence;

// pg_fencing.fast_update: plain UPDATEs of a guarded table are judged in
// their own projection, without the trigger (update_check.cpp).
extern bool fast_update;

// pg_fencing.wait_recheck, milliseconds: the longest a waiting acquire
// sleeps between looks at the lease.
extern int wait_recheck_ms;

// pg_fencing.audit_long_wait, seconds.  Read only by fencing_audit() (SQL,
// through current_setting); defined so that it has a unit, a range and a
// description.
extern int audit_long_wait_s;

// pg_fencing.history_size: leases kept per lock in fencing_grant_history.
extern int history_size;

// pg_fencing.max_sessions_per_role: the sessions a role may have at once,
// ended ones not yet swept included.  Read only by
// fencing_session_open_as (SQL, through current_setting); defined so that
// it has a range, a description and the superuser context.
extern int max_sessions_per_role;

// Settable at server start only, and defined only while the library is
// preloaded (PostgreSQL refuses a PGC_POSTMASTER setting defined later):
// pg_fencing.reserve_tokens -- grants hand out tokens from ranges reserved
// in shared memory; the sizes of the statistics' shared memory.
extern bool reserve_tokens;
extern int max_tracked_locks;
extern int max_tracked_tables;
extern int rejections_kept;

// Defines them all and, when preloaded, reserves the prefix "pg_fencing."
// so that a misspelt setting is an error rather than a silent placeholder.
// Called first from _PG_init.
void Define();

}  // namespace pg_fencing::settings
