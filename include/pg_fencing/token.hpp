// Fencing tokens: the type, and their text form.  Installed with the client
// library; plain C++17, no PostgreSQL header, so a client program builds
// against it alone.  The extension uses the same functions for the
// fencing_token type's input and output.
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

}  // namespace pg_fencing
