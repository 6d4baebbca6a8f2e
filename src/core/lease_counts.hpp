// What a transaction will add to the lease statistics when it commits: the
// events of its leases per lock, kept per subtransaction so that a
// savepoint rolled back takes its events with it.  PostgreSQL-free
// (src/backend/shared_stats.cpp applies them at commit).  Not installed.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "transaction_fences.hpp"  // SubxactId

namespace pg_fencing {

// The counters of fencing_lock_stats that lease events move.
enum class LeaseCounter : int {
  kGrants,
  kRenewals,
  kReleases,
  kExpiries,
  kTakeovers,
  kRevokes,
};
constexpr int kLeaseCounterCount = 6;

// Lock names longer than this are not counted per lock (their refused
// writes still count per table): the shared table keeps names inline.
constexpr std::size_t kMaxCountedLockName = 255;

struct PendingLockCounts {
  char lock_name[kMaxCountedLockName + 1];
  SubxactId subxact;
  std::uint32_t counts[kLeaseCounterCount];
};

// No allocation of its own: it counts into storage the caller gives it
// (the backend starts with a static array and, when a transaction touches
// more locks, gives it a larger one in the transaction's memory).  A name
// too long to count is dropped and counted as dropped: statistics, not
// state.
class PendingLeaseCounts {
 public:
  PendingLeaseCounts(PendingLockCounts *storage, int capacity) noexcept
      : entries_(storage), capacity_(capacity) {}

  enum class Added { kCounted, kFull, kDropped };

  // Counts one event of lock_name in subtransaction subxact.  kFull: no
  // room for a new lock; move to larger storage (MoveTo) and add again.
  Added Add(std::string_view lock_name, LeaseCounter counter, SubxactId subxact) noexcept {
    if (lock_name.empty() || lock_name.size() > kMaxCountedLockName) {
      ++dropped_;
      return Added::kDropped;
    }
    PendingLockCounts *entry = nullptr;
    for (int i = 0; i < count_ && entry == nullptr; ++i) {
      if (entries_[i].subxact == subxact && lock_name == entries_[i].lock_name)
        entry = &entries_[i];
    }
    if (entry == nullptr) {
      if (count_ == capacity_) return Added::kFull;
      entry = &entries_[count_++];
      std::memcpy(entry->lock_name, lock_name.data(), lock_name.size());
      entry->lock_name[lock_name.size()] = '\0';
      entry->subxact = subxact;
      for (std::uint32_t &c : entry->counts) c = 0;
    }
    ++entry->counts[static_cast<int>(counter)];
    return Added::kCounted;
  }

  // Copies the entries into storage of capacity (at least Count()) and
  // counts there from now on.
  void MoveTo(PendingLockCounts *storage, int capacity) noexcept {
    for (int i = 0; i < count_; ++i) storage[i] = entries_[i];
    entries_ = storage;
    capacity_ = capacity;
  }

  // Subtransaction ids increase within a transaction: rolling back subxact
  // forgets what it and the subtransactions it started counted.
  void AbortSubTransaction(SubxactId subxact) noexcept {
    int kept = 0;
    for (int i = 0; i < count_; ++i) {
      if (entries_[i].subxact < subxact) entries_[kept++] = entries_[i];
    }
    count_ = kept;
  }

  // A committed subtransaction's events belong to its parent from now on
  // (a rollback of the parent takes them).
  void CommitSubTransaction(SubxactId subxact, SubxactId parent) noexcept {
    for (int i = 0; i < count_; ++i) {
      if (entries_[i].subxact == subxact) entries_[i].subxact = parent;
    }
  }

  int Count() const noexcept { return count_; }
  int Capacity() const noexcept { return capacity_; }
  const PendingLockCounts &At(int i) const noexcept { return entries_[i]; }
  std::uint64_t Dropped() const noexcept { return dropped_; }

  // Empty, counting into storage again (the transaction's memory is gone).
  void Reset(PendingLockCounts *storage, int capacity) noexcept {
    entries_ = storage;
    capacity_ = capacity;
    count_ = 0;
    dropped_ = 0;
  }

 private:
  PendingLockCounts *entries_;
  int capacity_;
  int count_ = 0;
  std::uint64_t dropped_ = 0;
};

// The earliest of two lease ends, where 0 means none (microseconds on
// PostgreSQL's clock, which never reaches 0 for a real lease).  The
// expiry schedule keeps, per database, the earliest end it must look at.
constexpr std::int64_t EarlierEnd(std::int64_t a, std::int64_t b) noexcept {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

}  // namespace pg_fencing
