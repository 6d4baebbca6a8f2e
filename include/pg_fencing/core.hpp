// The PostgreSQL-free core of pg_fencing.
//
// Everything here is plain C++17: no PostgreSQL header may be included by
// this file or by src/core/*.cpp.  The backend code (src/backend/) calls
// these functions and turns their plain results into ereport()s; GoogleTest
// (test/unit/) and fuzzers call them directly.  Keeping the decisions here
// means they can be tested without a server, and that no C++ object with a
// destructor lives in a frame PostgreSQL might longjmp over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pg_fencing {

// A fencing token is a non-negative 64-bit integer.
using Token = std::int64_t;
inline constexpr Token kMaxToken = INT64_MAX;

// ---- Text and binary forms -------------------------------------------------

enum class ParseStatus {
  kOk,
  kInvalidSyntax,  // not a plain decimal number: 22P02
  kOutOfRange,     // decimal, but above kMaxToken: 22003
};

struct ParseResult {
  ParseStatus status;
  Token value;  // meaningful only when status == kOk
};

// Parses the text form: optional surrounding white space around one or more
// ASCII decimal digits.  No sign, no fraction, no exponent, no hex: a token
// that is not written exactly as a number is a bug in the caller.
ParseResult ParseToken(std::string_view text) noexcept;

// Largest text form: 19 digits plus the terminating NUL.
inline constexpr std::size_t kTokenTextBufferSize = 20;

// Writes the decimal form of a valid token and a NUL into buf, which must
// hold kTokenTextBufferSize bytes; returns the length without the NUL.
std::size_t FormatToken(Token token, char *buf) noexcept;

// Whether a 64-bit value taken from elsewhere (an int8, an int4, a binary
// message) is a valid token.
constexpr bool IsValidToken(std::int64_t value) noexcept { return value >= 0; }

// ---- The guard's decision ----------------------------------------------------

// Options given to the fencing_guard trigger after the column name.
struct GuardOptions {
  bool allow_unset = false;  // an UPDATE that does not SET the column passes
  bool skip = false;         // a stale row is skipped instead of raising
  // "lock=NAME": fence against the lock's high-water mark, not only the
  // row's.  Points into the option word; empty when per-row only.
  std::string_view lock_name;
};

enum class OptionStatus {
  kOk,
  kUnknown,           // not an option word
  kEmptyLockName,     // "lock=" with nothing after it
  kConflictingLocks,  // two different "lock=" options
  kUnsetUnderLock,    // allow_unset with lock=: a lock-wide fence has no unfenced writes
};

// Applies one trigger option word ("allow_unset", "skip", "lock=NAME") to
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

struct LockWriteInput {
  WriteKind kind;
  bool column_assigned;  // UPDATE: the SET list names the token column
  bool new_is_null;      // INSERT/UPDATE: NEW's token column
  Token new_token;
  bool old_is_null;  // UPDATE/DELETE: OLD's token column
  Token old_token;
  bool presented;  // the transaction presented a token for the lock
  Token presented_token;
};

struct LockWriteDecision {
  GuardVerdict verdict;  // kAccept: still to be judged against the lock
  Token write_token;     // the token the write is made under
  bool fill_from_presented;  // store write_token in NEW's token column
};

// The row-level part of a lock-wide fence: which token the write carries,
// and whether it is missing or below the row's own token.
LockWriteDecision DecideLockWrite(const LockWriteInput &input, const GuardOptions &options) noexcept;

// The lock-level part, against the lock's high-water mark as the current
// transaction holds it (locked).
enum class HighWaterVerdict {
  kAccept,  // equal to the mark
  kRaise,   // above the mark (or no mark yet): the mark must move up first
  kStale,   // below the mark
};
HighWaterVerdict JudgeAgainstHighWater(Token token, bool mark_known, Token mark) noexcept;

// What the current transaction has done per lock: the token it presented
// (fencing_present) and the high-water mark it has locked.  Fixed capacity
// and no allocation, so the backend can keep it in transaction memory;
// lock names point to memory the caller owns.  Subtransaction ids increase
// within a transaction: aborting subtransaction S forgets every entry last
// touched in S or in the subtransactions it started (a presentation made
// there is gone; a mark read there is read again on the next write).
using SubTransactionId = std::uint32_t;

// A presentation and the subtransaction that made it.
struct Presentation {
  Token token;
  SubTransactionId subxact;
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
  SubTransactionId presented_in;
  bool locked;       // the lock's fence row is locked by this transaction
  bool mark_known;   // a high-water mark exists (false: none yet)
  Token mark;        // valid when locked && mark_known
  SubTransactionId locked_in;
};

class TransactionFences {
 public:
  static constexpr int kCapacity = 64;

  LockFence *Find(std::string_view lock_name) noexcept;
  // Finds the lock's entry, or adds an empty one; nullptr when full.
  LockFence *FindOrAdd(std::string_view lock_name) noexcept;
  void Present(LockFence &fence, Token token, SubTransactionId subxact) noexcept;
  void Lock(LockFence &fence, bool mark_known, Token mark, SubTransactionId subxact) noexcept;
  void AbortSubTransaction(SubTransactionId subxact) noexcept;
  int size() const noexcept { return count_; }

 private:
  LockFence fences_[kCapacity];
  int count_ = 0;
};

}  // namespace pg_fencing
