// What a change of a lease tells the world: the announcement on channel
// fencing_events (for a lock whose owner asked for it), the count in
// fencing_lock_stats, and the lease's entry in the grant history.  All of
// it belongs to the transaction that makes the change: NOTIFY is sent at
// its commit, the counts are added at its commit, the history row commits
// with it.  See lease_events.cpp.
#pragma once

#include "boundary.hpp"
#include "lease_counts.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace pg_fencing {

enum class LeaseEventKind { kGranted, kReleased, kExpired, kRevoked };

// One event of a lease.  holder is a text Datum (0 when there is none, as
// for a revoke that found no live lease).
struct LeaseEvent {
  const char *lock_name;
  int64 lock_id;
  LeaseEventKind kind;
  Datum holder;
  bool has_token;
  Token token;
  // kGranted only: the lease it replaced (none for a lock's first grant),
  // and whether that was a takeover (an expired lease of another holder).
  bool takeover;
  Datum previous_holder;
  bool has_previous;
  Token previous_token;
};

// Announces the event if `announce` (the lock's flag) and counts it (and a
// takeover) at commit.
void PublishLeaseEvent(const LeaseEvent &event, bool announce);

// A lease that a grant replaces, as its history entry records it.
struct EndedLease {
  int64 lock_id;
  Datum lock_name;  // text
  Datum holder;     // text
  Datum holder_role;
  Token token;
  TimestampTz granted_at;
  TimestampTz ended_at;
  const char *end_reason;  // released, revoked, expired, taken_over
  int64 grant_count;       // the lease's number among the lock's grants (of its class, below)
  // A permit's or a shared lease's slot; 0 for an exclusive lease.  The
  // slots' leases are numbered apart from the exclusive leases, and kept
  // in a ring of their own beside theirs.
  int32 slot;
};

// Keeps the ended lease in fencing_grant_history (entry grant_count %
// pg_fencing.history_size of its lock's ring), written directly as the
// lease tables are (lease_tables.hpp), by a caller acting as the tables'
// owner.  Nothing when the history is off (size 0) or the extension
// predates it (1.7 for a slot's lease), and nothing over a newer lease's
// entry: a slot's lease ends only when that slot is granted again, which
// may come after later leases of other slots wrapped the ring past it.
void RecordEndedLease(Oid schema, const EndedLease &lease);

// How an expired lease ended, seen from the grant that replaces it: taken
// over when the new holder is another.
inline const char *ExpiredEndReason(bool same_holder) {
  return same_holder ? "expired" : "taken_over";
}

}  // namespace pg_fencing
