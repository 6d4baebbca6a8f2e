// What the lease engine (lease_engine.cpp) offers the other modules: the
// acquire in a session and the release, each the one path there is for it.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// 55Z05 unless the session exists, has not ended and caller may act in it
// (the role that opened it, a role with its privileges, or a superuser);
// holds it against its close and its sweep until the transaction ends, as
// every acquire in a session does.
void RefuseUnlessSessionOfCaller(Oid schema, Oid caller, int64 session);

// An exclusive lease of lock_name (text) in the session, taken for caller
// without a wait, as fencing_session_acquire(session, lock_name, payload =>
// payload) takes it: the session checked and held (55Z05), the lock's
// permissions (created, or 42501), the lock-delay, the line.  Whether it
// was taken (*token: its token, the session's own lease's when it already
// held it).
bool AcquireInSession(Oid schema, Oid caller, int64 session, bool lock_name_null, Datum lock_name,
                      bool payload_null, Datum payload, int64 *token);

// fencing_session_acquire(session, lock_name, NULL, NULL, kind, permits)
// for a shared lease (shared) or one permit of a semaphore of `permits`,
// with caller's privileges: whether it was taken (*token).
bool AcquireSlotInSession(Oid schema, Oid caller, int64 session, Datum lock_name, bool shared,
                          int permits, int64 *token);

// Releases the live lease of lock_name (text) under token as
// fencing_release(lock_name, token) does, for the login role holder_role
// (a name: the lease's own, which the caller has checked it may act for):
// whether it did.
bool GiveBackLease(Oid schema, Oid caller, Datum lock_name, int64 token, Datum holder_role);

}  // namespace pg_fencing
