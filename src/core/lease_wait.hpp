// Waiting for a lease and waking its first waiter: the plain
// arithmetic and bookkeeping, PostgreSQL-free (src/backend/lease_wakeup.cpp
// does the waiting and the waking).  Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pg_fencing {

// The longest wait an acquire takes, in milliseconds: what lock_timeout
// (an int of milliseconds) can express, 24.8 days.  Longer waits are made
// of repeated calls.
constexpr std::int64_t kMaxWaitMs = 2147483647;

// What fencing_await waits for: its argument kind => 'exclusive' |
// 'shared' | 'permit', the three acquires it stands for.
enum class AwaitKind { kExclusive, kShared, kPermit, kUnknown };

inline AwaitKind AwaitKindNamed(const char *name, std::size_t length) noexcept {
  const auto is = [&](const char *word) {
    return length == std::strlen(word) && std::memcmp(name, word, length) == 0;
  };
  if (is("exclusive")) return AwaitKind::kExclusive;
  if (is("shared")) return AwaitKind::kShared;
  if (is("permit")) return AwaitKind::kPermit;
  return AwaitKind::kUnknown;
}

// Which of fencing_await's optional arguments does not fit its kind: each
// takes what its acquire function takes -- permits only a permit, which
// needs them, a payload only an exclusive lease.
enum class AwaitArgumentProblem { kNone, kUnknownKind, kPermitsMissing, kPermitsNotForKind,
                                  kPayloadNotForKind };

constexpr AwaitArgumentProblem CheckAwaitArguments(AwaitKind kind, bool has_permits,
                                                   bool has_payload) noexcept {
  if (kind == AwaitKind::kUnknown) return AwaitArgumentProblem::kUnknownKind;
  if (kind == AwaitKind::kPermit && !has_permits) return AwaitArgumentProblem::kPermitsMissing;
  if (kind != AwaitKind::kPermit && has_permits) return AwaitArgumentProblem::kPermitsNotForKind;
  if (kind != AwaitKind::kExclusive && has_payload) return AwaitArgumentProblem::kPayloadNotForKind;
  return AwaitArgumentProblem::kNone;
}

// How long a waiter may still queue for the waiting room, as a lock_timeout
// in whole milliseconds, rounded up and at least 1 (0 would mean no
// timeout at all): until deadline_us, microseconds on now_us's clock.
constexpr std::int64_t QueueTimeoutMs(std::int64_t now_us, std::int64_t deadline_us) noexcept {
  if (deadline_us <= now_us) return 1;
  const std::uint64_t span_us =
      static_cast<std::uint64_t>(deadline_us) - static_cast<std::uint64_t>(now_us);
  const std::uint64_t span_ms = span_us / 1000 + (span_us % 1000 != 0 ? 1 : 0);
  if (span_ms > static_cast<std::uint64_t>(kMaxWaitMs)) return kMaxWaitMs;
  return span_ms < 1 ? 1 : static_cast<std::int64_t>(span_ms);
}

// The advisory-lock key of a lock's waiting room: the same value as the SQL
// function fencing_waiting_room(lock_id) (extension/pg_fencing--1.1--1.2.sql),
// 'FENC' in the high 32 bits and the lock's id in the low ones.
constexpr std::int64_t WaitingRoomKey(std::int64_t lock_id) noexcept {
  return static_cast<std::int64_t>((std::uint64_t{0x46454e43} << 32) |
                                   static_cast<std::uint64_t>(lock_id));
}

// How long a waiter sleeps, in whole milliseconds rounded up (so that it
// wakes after the lease's end, not just before it), when it has seen the
// lease busy: until `until_us` (the earlier of the lease's end and the
// caller's deadline; microseconds on the same clock as now_us), at most
// recheck_ms.  has_until false: no end known, recheck_ms.  An end already
// past (the attempt just made found the lock held up by what the end does
// not tell: a place in the lock's line ahead of the waiter, which takes the
// lock when its candidate polls) sleeps kPastDueSleepMs, at most
// recheck_ms, rather than trying again at once in a loop that would spin.
// 0: do not sleep.
constexpr std::int64_t kPastDueSleepMs = 20;
constexpr std::int64_t WakeupSleepMs(std::int64_t now_us, bool has_until, std::int64_t until_us,
                                     std::int64_t recheck_ms) noexcept {
  if (recheck_ms < 0) recheck_ms = 0;
  if (!has_until) return recheck_ms;
  if (until_us <= now_us) return recheck_ms < kPastDueSleepMs ? recheck_ms : kPastDueSleepMs;
  // until_us - now_us > 0 cannot overflow to negative unless the span is
  // beyond int64; clamp that case to the recheck interval.
  const std::uint64_t span_us =
      static_cast<std::uint64_t>(until_us) - static_cast<std::uint64_t>(now_us);
  const std::uint64_t span_ms = span_us / 1000 + (span_us % 1000 != 0 ? 1 : 0);
  return span_ms < static_cast<std::uint64_t>(recheck_ms) ? static_cast<std::int64_t>(span_ms)
                                                          : recheck_ms;
}

// The waiting rooms a transaction must wake at its commit: a small set with
// no allocation, so the backend can keep it in a static.  Overflow is
// reported, not fatal: a waiter that is not woken still rechecks on its own.
class PendingWakeups {
 public:
  static constexpr int kCapacity = 64;

  // Adds room; false when the set is full (room not added).
  bool Add(std::int64_t room) noexcept {
    for (int i = 0; i < count_; ++i) {
      if (rooms_[i] == room) return true;
    }
    if (count_ == kCapacity) return false;
    rooms_[count_++] = room;
    return true;
  }
  int Count() const noexcept { return count_; }
  std::int64_t At(int i) const noexcept { return rooms_[i]; }
  void Clear() noexcept { count_ = 0; }

 private:
  std::int64_t rooms_[kCapacity] = {};
  int count_ = 0;
};

}  // namespace pg_fencing
