// Lock-wide fences: what the current transaction knows about each lock it
// writes under (see TransactionFences in src/core/transaction_fences.hpp), kept in transaction
// memory and forgotten at commit, rollback, or the abort of the
// subtransaction that learned it.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// Registers the transaction callbacks; called from _PG_init.
void RegisterFenceCallbacks();

// The current transaction's entry for a lock, or nullptr if it has none.
LockFence *FindTransactionFence(const char *lock_name);

// How a lock-wide fence judged a token.
enum class FenceVerdict {
  kAccept,
  kStale,         // below the mark (55Z01); *mark holds it
  // New to the fence and never granted (55Z03, 1.5); *mark holds the mark
  // (0 without one):
  kAboveAllGrants,   // above *highest, the highest token the database granted
  kAboveLeasedMark,  // above the mark of an exclusive lock whose leases it grants
};

// Makes sure the lock's high-water mark is locked by this transaction and
// is not above token, moving it up to token if token is higher.  kStale,
// leaving the mark as it was, when token is below it; *mark then holds the
// mark.  kAboveAllGrants or kAboveLeasedMark when token would raise the mark
// of a lock whose tokens are this database's grants (source kGranted) but
// was never granted: the caller must raise its error, which undoes the raise.  extension_schema is where fencing_fence lives.
// lock_id: the lock's (fencing_lock.lock_id), for its fence gate; 0 for
// none (a database before 1.2): the mark's row is locked for every write.
//
// kind: how the lock is leased (guard_decision.hpp).  Under a shared lock
// the mark is never moved by a write; under a semaphore a token is accepted
// while it is the latest grant of its permit, whose gate is then held
// shared until the transaction ends, and *mark is 0 when it is refused.
FenceVerdict AdvanceLockFence(Oid extension_schema, int64 lock_id, LockKind kind,
                              TokenSource source, const char *lock_name, Token token, Token *mark,
                              Token *highest);

// The same check, without moving the mark (fencing_present).
FenceVerdict CheckLockFence(Oid extension_schema, int64 lock_id, LockKind kind, TokenSource source,
                            const char *lock_name, Token token, Token *mark, Token *highest);

// Makes the current transaction judge its next write under the lock against
// the mark as it stands, not its cached copy: for a grant or a revoke made
// by the transaction itself.  Its presentations are forgotten too (they
// were judged against the old mark).  The gates it holds stay held.
void ForgetLockFence(const char *lock_name);

// Takes the lock's fence gate exclusively until the transaction ends, before
// raising its mark (a grant, a revoke): waits for every transaction writing
// under the current mark.  Nothing in a database without the gate.
void TakeFenceGateExclusively(Oid extension_schema, int64 lock_id);

// The gates of a shared grant and of a permit's grant (1.4).  A shared
// grant holds the lock's gate shared, so that a revoke (which takes it
// exclusively) waits for the grant; a permit's grant takes its slot's gate
// exclusively and so waits for the writes in flight under the slot's old
// token.  Held until the transaction ends, or given back by an attempt
// that granted nothing.
void TakeFenceGateShared(int64 lock_id);
void GiveBackFenceGateShared(int64 lock_id);
void TakePermitGate(int64 lock_id, int32 slot);
bool TryTakePermitGate(int64 lock_id, int32 slot);  // false: a writer holds it
void GiveBackPermitGate(int64 lock_id, int32 slot);

}  // namespace pg_fencing
