// The guard's decisions: per-row and lock-wide fences.  Part of the
// PostgreSQL-free core (no PostgreSQL header may be included here or in
// src/core/*.cpp): src/backend/ calls these functions and turns their plain
// results into ereport()s; GoogleTest (test/unit/) and the fuzzer call them
// directly.  Not installed: only the backend uses it.
#pragma once

#include <string_view>

#include "pg_fencing/token.hpp"

namespace pg_fencing {

// ---- The guard's decision ----------------------------------------------------

// Where a fence's tokens come from (1.5): fencing_lock.token_source for a
// lock-wide fence, the trigger's option word for a per-row fence.
enum class TokenSource {
  kUnknown,   // fenced before 1.5 (the update cannot tell): any token, as then;
              // fencing_audit() lists it with the command that tightens it
  kGranted,   // this database's grants: a token it never granted is refused (55Z03)
  kExternal,  // another service's (an etcd revision): any token
};

// Options given to the fencing_guard trigger after the column name.
struct GuardOptions {
  bool allow_unset = false;  // an UPDATE that does not SET the column passes
  bool skip = false;         // a stale row is skipped instead of raising
  // "fence_reads" (1.4): fencing_protect() also gives the table a row-level
  // security policy that hides its rows from every transaction that has not
  // presented the lock's current token.  The trigger itself ignores it.
  bool fence_reads = false;
  // "lock=NAME": fence against the lock's high-water mark, not only the
  // row's.  Points into the option word; empty when per-row only.
  std::string_view lock_name;
  // "granted_tokens" (written by fencing_protect() from 1.5 unless it is
  // given "external_tokens"): where a per-row fence's tokens come from.
  // Neither word: kUnknown.  A lock-wide fence takes the lock's setting.
  TokenSource token_source = TokenSource::kUnknown;
};

enum class OptionStatus {
  kOk,
  kUnknown,           // not an option word
  kEmptyLockName,     // "lock=" with nothing after it
  kConflictingLocks,  // two different "lock=" options
  kUnsetUnderLock,    // allow_unset with lock=: a lock-wide fence has no unfenced writes
  kReadsWithoutLock,  // fence_reads without lock=: reads are fenced under a lock
  kConflictingSources,  // granted_tokens with external_tokens
  kSourceUnderLock,     // a token source word with lock=: the lock's setting decides
};

// Applies one trigger option word ("allow_unset", "skip", "fence_reads", "lock=NAME") to
// options.  Call FinishGuardOptions after the last word.
OptionStatus ApplyGuardOption(std::string_view word, GuardOptions &options) noexcept;
// Checks the combination of options once all words are applied.
OptionStatus FinishGuardOptions(const GuardOptions &options) noexcept;

// What the guard saw for one row.
struct GuardInput {
  bool column_assigned;  // the UPDATE's SET list names the token column
  bool old_is_null;      // the row has never been fenced
  Token old_token;
  bool new_is_null;
  Token new_token;
};

enum class GuardVerdict {
  kAccept,         // write the new row version
  kSkip,           // stale, and the 'skip' option is on: leave the row alone
  kRejectStale,    // 55Z01
  kRejectMissing,  // 55Z02
};

GuardVerdict DecideGuard(const GuardInput &input, const GuardOptions &options) noexcept;

// ---- Lock-wide fences ------------------------------------------------------
//
// Under a lock-wide fence ("lock=NAME"), every write to a protected table --
// INSERT, UPDATE and DELETE -- carries a token, and is stale if the token is
// below the highest token seen for that lock anywhere: any row, any table,
// or a lease grant.  A write may take its token from the row (the token
// column) or from the transaction (fencing_present).

enum class WriteKind { kInsert, kUpdate, kDelete };

// How the lock a fence is under is leased (fencing_lock.kind, 1.4):
//   kExclusive  one holder at a time: a write is judged against the row's
//               token and the lock's mark, which a higher token raises;
//   kShared     shared holders, or one exclusive holder: a write is judged
//               against the mark only (holders write the same rows side by
//               side, in no order), and no write raises it -- only grants
//               do, so that one shared holder never fences another;
//   kSemaphore  a token is accepted while it is the latest grant of its
//               permit (src/backend/fences.cpp looks it up); rows are not
//               compared either.
enum class LockKind { kExclusive, kShared, kSemaphore };

struct LockWriteInput {
  WriteKind kind;
  bool column_assigned;  // UPDATE: the SET list names the token column
  bool new_is_null;      // INSERT/UPDATE: NEW's token column
  Token new_token;
  bool old_is_null;  // UPDATE/DELETE: OLD's token column
  Token old_token;
  bool presented;  // the transaction presented a token for the lock
  Token presented_token;
  LockKind lock_kind;  // kExclusive unless the lock says otherwise
};

struct LockWriteDecision {
  GuardVerdict verdict;      // kAccept: still to be judged against the lock
  Token write_token;         // the token the write is made under
  bool fill_from_presented;  // store write_token in NEW's token column
};

// The row-level part of a lock-wide fence: which token the write carries,
// and whether it is missing or below the row's own token.
LockWriteDecision DecideLockWrite(const LockWriteInput &input,
                                  const GuardOptions &options) noexcept;

// The lock-level part, against the lock's high-water mark as the current
// transaction holds it (locked).
enum class HighWaterVerdict {
  kAccept,  // equal to the mark
  kRaise,   // above the mark (or no mark yet): the mark must move up first
  kStale,   // below the mark
};
HighWaterVerdict JudgeAgainstHighWater(Token token, bool mark_known, Token mark) noexcept;

// The same under a shared lock's mark, which writes never raise: a token
// at or above it (or any token, before the lock has a mark) is accepted.
HighWaterVerdict JudgeAgainstSharedMark(Token token, bool mark_known, Token mark) noexcept;

// ---- Tokens nobody handed out (1.5) ------------------------------------------
//
// A token that would raise a fence -- above the row's token on a per-row
// fence, above the lock's mark on a lock-wide one -- is new to it.  Where
// the tokens are this database's grants, a new token must be one it
// granted: at most the highest token it has reserved (its sequence's last
// value), and, under a lock whose leases it grants, never above the mark
// at all: every grant of such a lock raises its mark first, so a higher
// token was granted to no holder of it.  Judged only when a token is new
// to the fence, so the per-row path pays one comparison.
enum class OriginVerdict {
  kAccept,
  kAboveAllGrants,   // 55Z03: above every token the database has granted
  kAboveLeasedMark,  // 55Z03: above the mark of a lock whose leases it grants
};
OriginVerdict JudgeTokenOrigin(TokenSource source, bool lock_grants_leases, Token token,
                               Token highest_granted) noexcept;

}  // namespace pg_fencing
