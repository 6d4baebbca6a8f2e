// Tokens anchored to the clock (1.5): the rule that keeps a database that
// went back in time -- a base backup restored, point-in-time recovery, an
// asynchronous standby promoted, an older dump restored, pg_upgrade -- from
// handing out again a token it already gave away.  PostgreSQL-free
// (src/backend/grant.cpp reads the clock and the sequence and carries the
// rule out).  Not installed.
//
// The sequence behind fencing_grant() goes back with the data; the server's
// clock does not.  So every anchor -- a backend's first grant from the
// sequence, and every reserved range when the library is preloaded --
// starts at least at the clock's microseconds since 1970.  Between anchors
// tokens go up by one per grant, and a clock moves up by a million a
// second: as long as fewer than a million tokens a second are granted on
// average, every token is at most the clock's reading when it was granted.
// A database that went back starts every backend afresh, so its first
// grant is an anchor, above the clock, hence above every token handed out
// before -- whatever point it went back to.
//
// What it rests on: the clock of the server that grants after the event
// has not been set back by more than the time between the last grant
// before the event and the event itself.  When it has, the first grants
// after the event can repeat tokens of that span; LeadOverClock() measures
// how far the sequence runs ahead of the clock, which fencing_audit()
// reports, and fencing_bump_tokens() covers the span by hand.
#pragma once

#include <cstdint>
#include <limits>

namespace pg_fencing {

// PostgreSQL's clock (TimestampTz) counts microseconds from 2000-01-01;
// tokens count them from 1970-01-01, as Unix time does, so that a token
// reads the same on every server and in every tool.
constexpr std::int64_t kPostgresEpochInUnixMicros = 946'684'800'000'000;

// A reading of PostgreSQL's clock as microseconds since 1970; a clock
// before 1970 reads 0, so an anchor is never below the sequence's start.
constexpr std::int64_t UnixMicros(std::int64_t postgres_timestamp) noexcept {
  if (postgres_timestamp <= -kPostgresEpochInUnixMicros) return 0;
  if (postgres_timestamp > std::numeric_limits<std::int64_t>::max() - kPostgresEpochInUnixMicros) {
    return std::numeric_limits<std::int64_t>::max();
  }
  return postgres_timestamp + kPostgresEpochInUnixMicros;
}

// The first token of an anchor: the sequence's next value, or the clock's
// reading when that is higher (it is, unless the sequence runs ahead of
// the clock).
constexpr std::int64_t AnchoredFirstToken(std::int64_t next_value,
                                          std::int64_t clock_unix_micros) noexcept {
  return next_value < clock_unix_micros ? clock_unix_micros : next_value;
}

// The last token of a reserved range of `size` tokens from first, short of
// the largest token when the range would pass it (the grant after it then
// fails on the sequence's maximum, 2200H, instead of wrapping).
constexpr std::int64_t ReservedRangeLast(std::int64_t first, std::int64_t size) noexcept {
  return first > std::numeric_limits<std::int64_t>::max() - (size - 1)
             ? std::numeric_limits<std::int64_t>::max()
             : first + (size - 1);
}

// How far the highest token reserved runs ahead of the clock, in
// microseconds; 0 when it does not.  Above zero by more than a reserved
// range, the clock's protection is gone for that span: the clock was set
// back, more than a million tokens a second were granted, or tokens were
// bumped by hand.
constexpr std::int64_t LeadOverClock(std::int64_t highest, std::int64_t clock_unix_micros) noexcept {
  return highest > clock_unix_micros ? highest - clock_unix_micros : 0;
}

// The first half of a token sequence's gate (src/backend/grant.cpp), beside
// the waiting rooms' 'FENC' and the fence gates' 'FENW'.
constexpr std::uint32_t kTokenGateTag = 0x46454e54;  // 'FENT'

enum class BumpStatus { kOk, kNotPositive, kOutOfRange };

// fencing_bump_tokens(by): the new floor, by above the highest token the
// sequence has reserved; every later grant is above it, so the floor must
// leave room for one more.  Nothing is changed unless kOk.
constexpr BumpStatus BumpedFloor(std::int64_t highest, std::int64_t by,
                                 std::int64_t *floor) noexcept {
  if (by <= 0) return BumpStatus::kNotPositive;
  if (highest >= std::numeric_limits<std::int64_t>::max() - by) return BumpStatus::kOutOfRange;
  *floor = highest + by;
  return BumpStatus::kOk;
}

}  // namespace pg_fencing
