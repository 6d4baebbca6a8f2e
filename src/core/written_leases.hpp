// The leases a transaction writes under, and what becomes of a transaction
// whose lease has ended: the plain rules, PostgreSQL-free
// (src/backend/lease_writers.cpp keeps the list, checks it at commit and
// ends the transactions that outlive their leases).  Not installed.
#pragma once

#include <cstdint>

#include "pg_fencing/token.hpp"

namespace pg_fencing {

// Where a lease lives: the lock's exclusive lease (fencing_lease), or a
// permit of a semaphore or a shared holder's slot (fencing_permit).
enum class LeaseRow : std::uint8_t { kExclusive, kSlot };

// A lease the transaction has written, deleted, truncated or presented
// under.  Times are microseconds on the server's clock.
struct WrittenLease {
  Token token;
  LeaseRow row;
  // The end the lease had when last looked at: the earliest moment it can
  // end by running out (a renewal moves it later; a release or a revoke
  // ends the lease sooner, which only a look at its row shows).
  std::int64_t known_end;
};

// The leases of one transaction: fixed capacity and no allocation, so that
// the backend can keep it in a static and mirror it into shared memory.
class WrittenLeases {
 public:
  static constexpr int kCapacity = 64;

  enum class Added { kAdded, kAlreadyThere, kFull };

  Added Add(const WrittenLease &lease) noexcept {
    if (Find(lease.token) != nullptr) return Added::kAlreadyThere;
    if (count_ == kCapacity) return Added::kFull;
    leases_[count_++] = lease;
    return Added::kAdded;
  }
  const WrittenLease *Find(Token token) const noexcept {
    for (int i = 0; i < count_; ++i) {
      if (leases_[i].token == token) return &leases_[i];
    }
    return nullptr;
  }
  int Count() const noexcept { return count_; }
  const WrittenLease &At(int i) const noexcept { return leases_[i]; }
  void Clear() noexcept { count_ = 0; }

 private:
  WrittenLease leases_[kCapacity] = {};
  int count_ = 0;
};

// A lease's row as committed now, found by the token of the lease written
// under: none when the lock (or the slot) has been granted again since.
struct LeaseRowNow {
  bool found;
  bool ended_early;  // released or revoked (fencing_permit.ended; a lease row's end moves to now)
  std::int64_t expires_at;
  // The row's last version is the current transaction's own write.  The
  // functions that end a lease early (release, revoke, a session's close)
  // write 'released' or 'revoked' only into a lease that is live at that
  // moment; whatever else a transaction writes into a lease's row (the
  // session's end by its sweep or by the close of an ended session, an
  // 'expired' mark by a grant that passes it) records an end that had
  // already come.
  bool ended_here;
};

enum class LeaseLife {
  kLive,
  kRanOut,    // its end has passed (judged by the server's clock)
  kEnded,     // released or revoked
  kReplaced,  // its lock or slot has been granted again
};

// Whether the lease still lives, now, for the COMMIT of a transaction that
// wrote under it.  Nothing brings an ended lease back: a renewal or an own
// acquire extends only a live one.  A lease the transaction itself ended
// early (ended_here and ended_early: it was live when the transaction
// released or revoked it) ends with the transaction's commit, so it lives
// until then; any other write of the transaction's into the row is judged
// as the row says, so no call inside the transaction turns a lease that had
// already ended into one that ended by the transaction's own hand.
constexpr LeaseLife JudgeLease(const LeaseRowNow &row, std::int64_t now) noexcept {
  if (!row.found) return LeaseLife::kReplaced;
  if (row.ended_early) return row.ended_here ? LeaseLife::kLive : LeaseLife::kEnded;
  return row.expires_at > now ? LeaseLife::kLive : LeaseLife::kRanOut;
}

// How a transaction that outlived its lease is ended: first cancelled (a
// running statement, or one waiting for a lock, stops, and the transaction
// with it); a session that is still in the transaction a moment later is
// idle in it (a cancel does nothing to an idle session), and is
// terminated, as idle_in_transaction_session_timeout would terminate it.
enum class EndingStep { kCancel, kWait, kTerminate };

// The step due at now for a transaction first cancelled at cancelled_at (0:
// not yet), when a cancel is given terminate_after microseconds to work.
constexpr EndingStep NextEndingStep(std::int64_t cancelled_at, std::int64_t now,
                                    std::int64_t terminate_after) noexcept {
  if (cancelled_at == 0) return EndingStep::kCancel;
  return now - cancelled_at >= terminate_after ? EndingStep::kTerminate : EndingStep::kWait;
}

}  // namespace pg_fencing
