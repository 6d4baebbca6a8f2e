// Text form of fencing tokens (see include/pg_fencing/token.hpp).
#include "pg_fencing/token.hpp"

#include <charconv>

namespace pg_fencing {

namespace {

// PostgreSQL's own integer input accepts the same white space set.
constexpr bool IsSpace(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

constexpr bool IsDigit(char c) noexcept { return c >= '0' && c <= '9'; }

}  // namespace

ParseResult ParseToken(std::string_view text) noexcept {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);

  if (text.empty()) return {ParseStatus::kInvalidSyntax, 0};
  for (char c : text) {
    if (!IsDigit(c)) return {ParseStatus::kInvalidSyntax, 0};
  }

  // Only digits remain, so from_chars can fail only by overflowing int64.
  Token value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) return {ParseStatus::kOutOfRange, 0};
  if (error != std::errc() || end != text.data() + text.size()) {
    return {ParseStatus::kInvalidSyntax, 0};
  }
  return {ParseStatus::kOk, value};
}

std::size_t FormatToken(Token token, char *buf) noexcept {
  // 19 digits always fit: kMaxToken has 19.  A negative value is not a token
  // and never reaches here from the backend: it is printed if it fits, and
  // gives an empty string if it does not (below -10^18), never an overrun.
  const auto [end, error] = std::to_chars(buf, buf + kTokenTextBufferSize - 1, token);
  if (error != std::errc()) {
    buf[0] = '\0';
    return 0;
  }
  *end = '\0';
  return static_cast<std::size_t>(end - buf);
}

}  // namespace pg_fencing

#include "no_postgres.hpp"  // last: checks that nothing above brought in PostgreSQL
