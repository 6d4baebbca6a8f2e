// The line (1.10): a wait in a session for an exclusive lease, a shared
// lease or a permit kept as a row of fencing_line, a place in arrival
// order, instead of a statement that runs for the whole wait.  See
// lease_line.cpp.
#pragma once

#include "boundary.hpp"

#include "lease_tables.hpp"

extern "C" {
#include "storage/lock.h"
}

namespace pg_fencing {

// Whose turn it is for an exclusive lease in lock_id's line as committed
// now (the latest snapshot): no place waits for one (kFree), or the first
// that does (its session live, its wait not run out, its session's role
// still allowed to use the lock) is `session`'s (kYours, its number in
// *place) or another's (kOthers).  An exclusive grant goes to the first
// exclusive place's session only; places for shared leases and permits
// do not hold it off (exclusive first).  The caller holds the lock's
// waiting room; the room's waiters are served before the line
// (lease_wakeup.hpp, WaitsInRoom).  One probe of an empty index when
// nobody waits; the places of ended sessions or waits are stepped over,
// not written.
enum class LineTurn { kFree, kYours, kOthers };
LineTurn LineTurnOf(const LeaseTableIds &ids, int64 lock_id, int64 session, int64 *place);

// Whether the line holds off a new shared lease of lock_id: while a place
// waits for an exclusive lease (exclusive first).  Places for shared
// leases hold off nothing; each takes its lease when it polls.
bool LineHoldsOffShared(const LeaseTableIds &ids, int64 lock_id);

// Whether the line holds off a new permit of the semaphore lock_id, with
// free_count of its permits free: when as many places wait for a permit
// ahead of the grant -- ahead of the place this backend is taking it for
// (a poll's attempt), or any place, for a grant outside the line.  So the
// permits go to the places in order, as many at once as are free.
bool LineHoldsOffPermit(const LeaseTableIds &ids, int64 lock_id, int free_count);

// Records on the place that its session has taken the lease under token
// (a grant to the first place's session made by fencing_session_acquire
// rather than by a poll), so that the place waits no more.
void RecordLineGrant(Oid schema, int64 place, int64 token);

// NOTIFY fencing_line with the number of the first place that waits for
// an exclusive lease of lock_id (when none does, one NOTIFY for each of
// the first shared and permit places, up to 16), at the commit of the current transaction (looked up then, just
// before the commit): for every change that may free the lock.  Nothing on
// a rollback, and nothing for a prepared transaction (PREPARE refuses a
// NOTIFY): its candidates learn by polling.  A candidate listening on the
// channel polls its place at once.  Does nothing in a database without the
// line (before 1.10).
void TellLineAtCommit(Oid schema, int64 lock_id);

// CALL fencing_await(..., session =>) waits as a place (1.10): it joins
// the line, marks its place as kept by it (MarkPlaceKeptByCall) and holds
// the place's lock-manager tag, PlaceTag (an advisory tag in a field SQL
// cannot take: kPlaceField, the place's number in the other two), as a
// session lock while it polls between commits and sleeps on its latch.
// The commit of a change that tells the place (TellLineAtCommit) sets the
// latch of the tag's holder.  A place kept by a CALL whose tag nobody
// holds -- the CALL ended, was cancelled, or its backend died -- waits no
// more.  SessionHasPlace: whether the session has a place in lock_name's
// line already (true without the line, before 1.10): the CALL then waits
// in the lock's waiting room, as a second permit of one session must.
constexpr uint16 kPlaceField = 5;
LOCKTAG PlaceTag(int64 place);
bool SessionHasPlace(Oid schema, int64 session, Datum lock_name);
void MarkPlaceKeptByCall(Oid schema, int64 place);

// Registers the transaction callback that sends TellLineAtCommit's
// notifications; called from _PG_init.
void RegisterLineCallbacks();

}  // namespace pg_fencing
