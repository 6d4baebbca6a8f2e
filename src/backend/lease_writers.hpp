// Transactions cannot outlive the leases they write under (1.6).  See
// lease_writers.cpp.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "storage/lock.h"
}

namespace pg_fencing {

// In _PG_init: the transaction callbacks.
void RegisterLeaseWriters();

// The shared list of every backend's leases (preloaded): the module's
// shared-memory request and startup hooks call these.
void RequestLeaseWriterMemory();
void AttachLeaseWriterMemory();

// The last token the current transaction wrote under and noted (0: none):
// the common case, every row of a transaction under one token, costs one
// comparison.
extern Token last_noted_token;

void NoteLeaseOfToken(Oid extension_schema, Token token, const char *lock_name);

// The current transaction writes, deletes, truncates or presents under
// token: if the token is a lease's (an exclusive lease, a permit or a
// shared holder's, granted by this database), the transaction can commit
// only while that lease lives, and is ended when it ends.  lock_name: the
// lock written under (nullptr for a per-row fence), for the messages.
inline void NoteWriteUnderToken(Oid extension_schema, Token token, const char *lock_name) {
  if (token != last_noted_token) NoteLeaseOfToken(extension_schema, token, lock_name);
}

// The current transaction has ended the lease under token early -- a
// release, a revoke, its session's close -- at a moment the lease lived
// (the caller has just judged it so, and written the end).  If the
// transaction wrote under that lease, its COMMIT takes the lease as ended
// by the commit itself; undone if the subtransaction rolls back.
void NoteLeaseEndedHere(Token token);

// The current transaction ends the lease under token early: a release, a
// revoke.  At its commit, if another transaction of this database is still
// writing under that lease, the expiry worker is asked to look at once, so
// that the writer is ended now rather than at the lease's old end.  Only
// then: a look starts a process, and most releases have nobody writing
// under them.
void EndWritersOfLeaseAtCommit(Token token);

// Takes a fence or permit gate (a transaction-level lock) in mode.  When
// transactions hold it that wrote under a lease that has ended, they are
// ended first (cancelled, then terminated if they sit idle), so that the
// grant or write waiting for the gate is not held up by a holder frozen in
// its transaction.  Holders whose leases live are waited for, as before.
void AcquireGate(const LOCKTAG &gate, LOCKMODE mode);

// For the database's expiry worker: ends every transaction of the current
// database that has outlived a lease it wrote under, and returns when to
// look again (0: no transaction writes under a lease).
TimestampTz EndTransactionsPastTheirLeases();

}  // namespace pg_fencing
