// What one attempt at a permit of a semaphore or a shared lease does with
// the slots it found: the rule of fencing_acquire_permit and
// fencing_acquire_shared, PostgreSQL-free, beside the exclusive lease's
// (lease_decision.hpp).  src/backend/lease_engine.cpp reads the slots of
// fencing_permit and carries the decision out.  Not installed.
#pragma once

#include <cstdint>

#include "guard_decision.hpp"  // LockKind

namespace pg_fencing {

// A slot's latest grant as an attempt found it (a row of fencing_permit).
// Times are microseconds on the server's clock (PostgreSQL's TimestampTz).
struct SlotSeen {
  std::int32_t slot;
  bool ours;   // its holder and holder role are the caller's, and it has not ended early
  bool ended;  // released, revoked, or marked expired
  std::int64_t expires_at;
  // When the slot can be granted again: at once after a release or a
  // revoke, its end plus the lock's lock-delay after an expiry.
  std::int64_t free_at;
};

// The caller's own live slot (a retry after a lost reply keeps its token,
// and the grant's end moves), as an index into seen; -1 when it has none.
constexpr int OwnLiveSlot(const SlotSeen *seen, int count, std::int64_t now) noexcept {
  for (int i = 0; i < count; ++i) {
    if (seen[i].ours && !seen[i].ended && seen[i].expires_at > now) return i;
  }
  return -1;
}

// A semaphore's slots that can be granted now, in ascending order, into
// free (room for permits of them): every slot 1..permits that has no grant
// yet or whose latest grant is free.  seen is in ascending slot order.
// Returns how many.
constexpr int FreePermitSlots(const SlotSeen *seen, int count, int permits, std::int64_t now,
                              std::int32_t *free) noexcept {
  int found = 0;
  int next_seen = 0;
  for (std::int32_t slot = 1; slot <= permits; ++slot) {
    while (next_seen < count && seen[next_seen].slot < slot) ++next_seen;
    const bool taken =
        next_seen < count && seen[next_seen].slot == slot && seen[next_seen].free_at > now;
    if (!taken) free[found++] = slot;
  }
  return found;
}

// The slot a shared lease is granted on: the lowest one whose last holder
// is gone (ended, or expired with its lock-delay over), else a new one
// above the highest.  A shared lock has as many slots as it had holders at
// once.  seen is in ascending slot order.
constexpr std::int32_t SharedSlot(const SlotSeen *seen, int count, std::int64_t now) noexcept {
  std::int32_t highest = 0;
  for (int i = 0; i < count; ++i) {
    if (seen[i].free_at <= now && seen[i].expires_at <= now) return seen[i].slot;
    if (seen[i].slot > highest) highest = seen[i].slot;
  }
  return highest + 1;
}

// What an acquire of kind `want` (kSemaphore with want_permits, or
// kShared) makes of the lock's kind as it stands.
enum class KindFit {
  kFits,     // the lock is of that kind (a semaphore with that many permits)
  kConvert,  // the lock is still exclusive: its first permit or shared lease decides its kind,
             // if nothing else has used it as exclusive and its owner asks
  kRefused,  // another kind, or a semaphore with another number of permits: an error
};

constexpr KindFit FitKind(LockKind lock, int lock_permits, LockKind want,
                          int want_permits) noexcept {
  if (lock == LockKind::kExclusive) return KindFit::kConvert;
  if (lock != want) return KindFit::kRefused;
  if (want == LockKind::kSemaphore && lock_permits != want_permits) return KindFit::kRefused;
  return KindFit::kFits;
}

}  // namespace pg_fencing
