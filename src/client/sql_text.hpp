// The text forms the client library sends and reads back: a duration as
// the SQL casts it to interval, and a token as the server prints it.
// Internal to the client library (lease.cpp, session.cpp).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "pg_fencing/token.hpp"

namespace pg_fencing::client::detail {

// '1500 milliseconds'.
inline std::string IntervalText(std::chrono::milliseconds duration) {
  return std::to_string(duration.count()) + " milliseconds";
}

// A token as the server prints it, for messages.
inline std::string TokenText(Token token) {
  char buf[kTokenTextBufferSize];
  const std::size_t length = FormatToken(token, buf);
  return std::string(buf, length);
}

// A token the server returned; std::runtime_error if it is malformed.
inline Token TokenOfText(const char *text) {
  const ParseResult parsed = ParseToken(text);
  if (parsed.status != ParseStatus::kOk) {
    throw std::runtime_error(std::string("the server returned a malformed token: \"") + text +
                             "\"");
  }
  return parsed.value;
}

}  // namespace pg_fencing::client::detail
