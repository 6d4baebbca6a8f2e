// What the current transaction knows per lock it writes under: presented
// tokens and the locked high-water mark.  Part of the PostgreSQL-free core;
// the backend keeps one TransactionFences in transaction memory
// (src/backend/fences.cpp).  Not installed.
#pragma once

#include <cstdint>
#include <string_view>

#include "pg_fencing/token.hpp"

namespace pg_fencing {

// What the current transaction has done per lock: the token it presented
// (fencing_present) and the high-water mark it has locked.  Fixed capacity
// and no allocation, so the backend can keep it in transaction memory;
// lock names point to memory the caller owns.  Subtransaction ids increase
// within a transaction: aborting subtransaction S forgets every entry last
// touched in S or in the subtransactions it started (a presentation made
// there is gone; a mark read there is read again on the next write).
// (PostgreSQL's SubTransactionId, which this header cannot include.)
using SubxactId = std::uint32_t;

// A presentation and the subtransaction that made it.
struct Presentation {
  Token token;
  SubxactId subxact;
};

struct LockFence {
  std::string_view lock_name;
  // The presentations still in force, innermost last: a savepoint may
  // present again, and rolling it back brings the outer one back.  Deeper
  // than kMaxNesting, the outermost are dropped (a rollback past them then
  // leaves nothing presented: refused writes, never wrongly accepted ones).
  static constexpr int kMaxNesting = 8;
  Presentation presentations[kMaxNesting];
  int presentation_depth;
  // The one in force: presentations[presentation_depth - 1].
  bool presented;
  Token presented_token;
  SubxactId presented_in;
  bool locked;  // the lock's mark is held by this transaction (see shared)
  // Held in share mode: the transaction writes under the mark as it is
  // (its token is the mark), alongside others that do; it holds the lock's
  // fence gate shared and no row lock, and must take the gate exclusively
  // before it may raise the mark.  false: the gate exclusively and the mark's
  // row locked, as every writer held them before 1.4.
  bool shared;
  bool mark_known;  // a high-water mark exists (false: none yet)
  Token mark;       // valid when locked && mark_known
  // Under a semaphore (1.4): mark is the permit token last let through,
  // whose slot's gate the transaction holds; never an exclusive lock's mark
  // (a lock can become a semaphore while a transaction holds that).
  bool permit;
  SubxactId locked_in;
};

// The key of a lock's fence gate: a transaction-level lock in the lock
// manager that writers under the lock's current mark hold shared (they do
// not wait for each other) and whatever raises the mark holds exclusively
// (it waits for the writers in flight, and writers that come after it wait
// for its commit: the lock manager queues them in order).  The same two
// 32-bit halves as an advisory lock, but in a field SQL cannot name (see
// src/backend/fences.cpp), so no role can hold a gate from SQL.
constexpr std::uint32_t kFenceGateTag = 0x46454e57;  // 'FENW'

class TransactionFences {
 public:
  static constexpr int kCapacity = 64;

  LockFence *Find(std::string_view lock_name) noexcept;
  // Finds the lock's entry, or adds an empty one; nullptr when full.
  LockFence *FindOrAdd(std::string_view lock_name) noexcept;
  void Present(LockFence &fence, Token token, SubxactId subxact) noexcept;
  // shared: see LockFence::shared.
  void Lock(LockFence &fence, bool mark_known, Token mark, SubxactId subxact, bool shared = false,
            bool permit = false) noexcept;
  void AbortSubTransaction(SubxactId subxact) noexcept;
  int size() const noexcept { return count_; }
  // Empty again, for the next transaction (the entries are overwritten as
  // they are added).
  void Clear() noexcept { count_ = 0; }

 private:
  LockFence fences_[kCapacity];
  int count_ = 0;
};

}  // namespace pg_fencing
