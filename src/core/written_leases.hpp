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

// A subtransaction of the current transaction (PostgreSQL's
// SubTransactionId, which this header cannot include): they increase
// within a transaction.
using EndingSubxact = std::uint32_t;

// A lease the transaction has written, deleted, truncated or presented
// under.  Times are microseconds on the server's clock.
struct WrittenLease {
  Token token;
  LeaseRow row;
  // The end the lease had when last looked at: the earliest moment it can
  // end by running out (a renewal moves it later; a release or a revoke
  // ends the lease sooner, which only a look at its row shows).
  std::int64_t known_end;
  // The transaction itself ended the lease early -- released or revoked
  // it, or closed its session -- at a moment the lease lived (the ending
  // functions say so only then), in subtransaction ended_in.
  bool ended_here = false;
  EndingSubxact ended_in = 0;
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
  // The transaction ended the lease under token early while it lived, in
  // subtransaction subxact.  False when the transaction has not written
  // under that lease (it is then no concern of its COMMIT).
  bool MarkEndedHere(Token token, EndingSubxact subxact) noexcept {
    for (int i = 0; i < count_; ++i) {
      if (leases_[i].token != token) continue;
      if (!leases_[i].ended_here) {
        leases_[i].ended_here = true;
        leases_[i].ended_in = subxact;
      }
      return true;
    }
    return false;
  }
  // Subtransaction subxact rolled back: the ends made in it, or in the
  // subtransactions it started (later ids), are undone with it.  The leases
  // stay noted: erring towards refusing a COMMIT never lets a stale write in.
  void AbortSubTransaction(EndingSubxact subxact) noexcept {
    for (int i = 0; i < count_; ++i) {
      if (leases_[i].ended_here && leases_[i].ended_in >= subxact) leases_[i].ended_here = false;
    }
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
  // Not of the row: the transaction itself ended this lease early while it
  // lived (WrittenLease::ended_here).  Whatever else the transaction wrote
  // into the row -- an expired session's end by its sweep or by the close
  // of an ended session, an 'expired' mark by a grant that passes it, a
  // rewrite of a lease another transaction released -- counts for nothing.
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
// early while it lived ends with the transaction's commit, so it lives
// until then -- unless its lock or slot has been granted again since (by
// the transaction itself: nobody else can before it commits), which
// replaces it; no other call inside the transaction turns a lease that
// had already ended into one the transaction ended.
constexpr LeaseLife JudgeLease(const LeaseRowNow &row, std::int64_t now) noexcept {
  if (!row.found) return LeaseLife::kReplaced;
  if (row.ended_here) return LeaseLife::kLive;
  if (row.ended_early) return LeaseLife::kEnded;
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
