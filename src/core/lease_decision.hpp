// What one attempt to take a lease does with the lease it found: the rule
// of fencing_acquire, PostgreSQL-free (src/backend/lease_engine.cpp reads
// the lease and carries the decision out).  Not installed.
#pragma once

#include <cstdint>

namespace pg_fencing {

// The most permits a semaphore may have: each attempt looks at every slot.
constexpr int kMaxPermits = 1000;

// A lock's lease as an attempt found it, without locking it.  Times are
// microseconds on the server's clock (PostgreSQL's TimestampTz).
struct LeaseSeen {
  bool exists;  // the lock has a lease row (it has been granted before)
  bool ours;    // its holder and holder role are the caller's
  bool ended;   // ended before its time: released or revoked
  std::int64_t expires_at;
  // When the lock can be granted again after the lease expired: its end
  // plus the lock's lock-delay.  Only read for a lease that expired.
  std::int64_t available_at;
};

enum class LeaseAttempt {
  kBusy,          // a live lease of someone else's, or an expired one in its lock-delay
  kExtendOwn,     // the caller's own live lease: same token, end moved, payload replaced
  kGrantFirst,    // the lock's first lease
  kGrantEnded,    // a new lease over one that was released or revoked
  kGrantExpired,  // a new lease over one that expired (its lock-delay over)
};

// The rule: a live lease belongs to its holder; a lease released or revoked
// frees the lock at once; one that expired frees it once its lock-delay is
// over.
constexpr LeaseAttempt DecideAttempt(const LeaseSeen &seen, std::int64_t now) noexcept {
  if (!seen.exists) return LeaseAttempt::kGrantFirst;
  if (seen.expires_at > now) return seen.ours ? LeaseAttempt::kExtendOwn : LeaseAttempt::kBusy;
  if (seen.ended) return LeaseAttempt::kGrantEnded;
  return seen.available_at > now ? LeaseAttempt::kBusy : LeaseAttempt::kGrantExpired;
}

}  // namespace pg_fencing
