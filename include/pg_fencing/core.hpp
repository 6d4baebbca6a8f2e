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
};

enum class OptionStatus { kOk, kUnknown };

// Applies one trigger option word ("allow_unset", "skip") to options.
OptionStatus ApplyGuardOption(std::string_view word, GuardOptions &options) noexcept;

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

}  // namespace pg_fencing
