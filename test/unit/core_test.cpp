// Unit tests of the PostgreSQL-free core (include/pg_fencing/token.hpp, src/core/).
#include "guard_decision.hpp"
#include "lease_counts.hpp"
#include "lease_decision.hpp"
#include "lease_wait.hpp"
#include "pg_fencing/token.hpp"
#include "slot_decision.hpp"
#include "token_clock.hpp"
#include "transaction_fences.hpp"
#include "written_leases.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace pg_fencing {

// Readable names in assertion failures.
std::ostream &operator<<(std::ostream &os, ParseStatus status) {
  switch (status) {
    case ParseStatus::kOk:
      return os << "kOk";
    case ParseStatus::kInvalidSyntax:
      return os << "kInvalidSyntax";
    case ParseStatus::kOutOfRange:
      return os << "kOutOfRange";
  }
  return os << "ParseStatus(" << static_cast<int>(status) << ")";
}

std::ostream &operator<<(std::ostream &os, OptionStatus status) {
  switch (status) {
    case OptionStatus::kOk:
      return os << "kOk";
    case OptionStatus::kUnknown:
      return os << "kUnknown";
    case OptionStatus::kEmptyLockName:
      return os << "kEmptyLockName";
    case OptionStatus::kConflictingLocks:
      return os << "kConflictingLocks";
    case OptionStatus::kUnsetUnderLock:
      return os << "kUnsetUnderLock";
    case OptionStatus::kReadsWithoutLock:
      return os << "kReadsWithoutLock";
    case OptionStatus::kConflictingSources:
      return os << "kConflictingSources";
    case OptionStatus::kSourceUnderLock:
      return os << "kSourceUnderLock";
  }
  return os << "OptionStatus(" << static_cast<int>(status) << ")";
}

std::ostream &operator<<(std::ostream &os, GuardVerdict verdict) {
  switch (verdict) {
    case GuardVerdict::kAccept:
      return os << "kAccept";
    case GuardVerdict::kSkip:
      return os << "kSkip";
    case GuardVerdict::kRejectStale:
      return os << "kRejectStale";
    case GuardVerdict::kRejectMissing:
      return os << "kRejectMissing";
  }
  return os << "GuardVerdict(" << static_cast<int>(verdict) << ")";
}

namespace {

// Shows control characters and NULs of a test input in failure messages.
std::string Printable(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  out += "\" (size " + std::to_string(text.size()) + ")";
  return out;
}

// ---- ParseToken: accepted inputs --------------------------------------------

struct ParseOkCase {
  std::string_view text;
  Token expected;
};

TEST(ParseTokenTest, AcceptsPlainDecimalNumbers) {
  const ParseOkCase cases[] = {
      {"0", 0},
      {"1", 1},
      {"7", 7},
      {"42", 42},
      {"1000", 1000},
      {"2147483647", 2147483647},
      {"2147483648", 2147483648LL},
      {"4294967296", 4294967296LL},
      {"1234567890123456789", 1234567890123456789LL},
      {"9223372036854775806", kMaxToken - 1},
      {"9223372036854775807", kMaxToken},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(Printable(c.text));
    const ParseResult r = ParseToken(c.text);
    EXPECT_EQ(r.status, ParseStatus::kOk);
    EXPECT_EQ(r.value, c.expected);
  }
}

TEST(ParseTokenTest, AcceptsLeadingZeros) {
  const ParseOkCase cases[] = {
      {"007", 7},
      {"00", 0},
      {"0000000000000000000000000000", 0},
      {"010", 10},
      // More than 19 characters, but the value still fits.
      {"00000000000000000000042", 42},
      {"0009223372036854775807", kMaxToken},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(Printable(c.text));
    const ParseResult r = ParseToken(c.text);
    EXPECT_EQ(r.status, ParseStatus::kOk);
    EXPECT_EQ(r.value, c.expected);
  }
}

TEST(ParseTokenTest, AcceptsSurroundingWhiteSpace) {
  // PostgreSQL's integer input skips the isspace() set on both sides.
  const ParseOkCase cases[] = {
      {"  42  ", 42},
      {" 42", 42},
      {"42 ", 42},
      {"\t42\n", 42},
      {"\r\n42\r\n", 42},
      {"\v\f 42 \f\v", 42},
      {" \t\n\v\f\r0 \t\n\v\f\r", 0},
      {"   9223372036854775807   ", kMaxToken},
      {"  007  ", 7},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(Printable(c.text));
    const ParseResult r = ParseToken(c.text);
    EXPECT_EQ(r.status, ParseStatus::kOk);
    EXPECT_EQ(r.value, c.expected);
  }
}

TEST(ParseTokenTest, ReadsOnlyTheGivenLength) {
  // The view ends before the buffer does: the bytes after it must not count.
  const char buffer[] = "12345xyz";
  const ParseResult r = ParseToken(std::string_view(buffer, 3));
  EXPECT_EQ(r.status, ParseStatus::kOk);
  EXPECT_EQ(r.value, 123);

  const ParseResult whole_digits = ParseToken(std::string_view(buffer, 5));
  EXPECT_EQ(whole_digits.status, ParseStatus::kOk);
  EXPECT_EQ(whole_digits.value, 12345);

  const ParseResult with_letter = ParseToken(std::string_view(buffer, 6));
  EXPECT_EQ(with_letter.status, ParseStatus::kInvalidSyntax);
}

// ---- ParseToken: rejected inputs --------------------------------------------

TEST(ParseTokenTest, RejectsAboveMaxAsOutOfRange) {
  const std::string_view cases[] = {
      "9223372036854775808",  // kMaxToken + 1
      "9223372036854775809",
      "9999999999999999999",             // 19 digits, above kMaxToken
      "10000000000000000000",            // 20 digits
      "18446744073709551615",            // UINT64_MAX
      "18446744073709551616",            // UINT64_MAX + 1
      "123456789012345678901234567890",  // 30 digits
      "  9223372036854775808  ",         // white space does not change the class
      "0009223372036854775808",          // nor do leading zeros
  };
  for (const auto text : cases) {
    SCOPED_TRACE(Printable(text));
    EXPECT_EQ(ParseToken(text).status, ParseStatus::kOutOfRange);
  }
}

TEST(ParseTokenTest, RejectsNonNumbersAsInvalidSyntax) {
  using std::string_view_literals::operator""sv;
  const std::string_view cases[] = {
      "",
      "   ",
      " \t\n\v\f\r",
      "-1",
      "-0",
      "+1",
      "+0",
      "1.5",
      "1.",
      ".5",
      "1e3",
      "1E3",
      "0x10",
      "0X10",
      "abc",
      "12a",
      "a12",
      "1 2",
      "1\t2",
      "1,000",
      "1_000",
      "- 1",
      "\xc2\xa0"
      "42",        // U+00A0 NO-BREAK SPACE is not ASCII white space
      "\xd9\xa1",  // U+0661 ARABIC-INDIC DIGIT ONE
      // Invalid characters win over an out-of-range magnitude.
      "-9223372036854775808",
      "99999999999999999999x",
      // Embedded NULs: the size, not a terminator, delimits the text.
      "42\0"sv,
      "\0"
      "42"sv,
      "4\0"
      "2"sv,
      " 42 \0"sv,
      "\0"sv,
  };
  for (const auto text : cases) {
    SCOPED_TRACE(Printable(text));
    EXPECT_EQ(ParseToken(text).status, ParseStatus::kInvalidSyntax);
  }
}

TEST(ParseTokenTest, EmbeddedNulIsNotATerminator) {
  // Spelled out once without a literal operator: a 3-byte view "42\0".
  const char bytes[] = {'4', '2', '\0'};
  const std::string_view text(bytes, sizeof bytes);
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(ParseToken(text).status, ParseStatus::kInvalidSyntax);
  EXPECT_EQ(ParseToken(text.substr(0, 2)).status, ParseStatus::kOk);
  EXPECT_EQ(ParseToken(text.substr(0, 2)).value, 42);
}

TEST(ParseTokenTest, DefaultConstructedViewIsInvalid) {
  EXPECT_EQ(ParseToken(std::string_view()).status, ParseStatus::kInvalidSyntax);
}

// ---- FormatToken -------------------------------------------------------------

// Formats into a buffer larger than required, filled with a sentinel, and
// checks that nothing at or past kTokenTextBufferSize was written.
std::string FormatChecked(Token token) {
  constexpr char kSentinel = '#';
  char buf[kTokenTextBufferSize + 16];
  std::memset(buf, kSentinel, sizeof buf);
  const std::size_t len = FormatToken(token, buf);
  EXPECT_LT(len, kTokenTextBufferSize) << "token " << token;
  if (len >= kTokenTextBufferSize) return std::string();
  EXPECT_EQ(buf[len], '\0') << "token " << token;
  EXPECT_EQ(std::strlen(buf), len) << "token " << token;
  for (std::size_t i = kTokenTextBufferSize; i < sizeof buf; ++i) {
    EXPECT_EQ(buf[i], kSentinel) << "byte " << i << " written for token " << token;
  }
  return std::string(buf, len);
}

TEST(FormatTokenTest, Zero) {
  char buf[kTokenTextBufferSize];
  std::memset(buf, 'x', sizeof buf);
  const std::size_t len = FormatToken(0, buf);
  EXPECT_EQ(len, 1u);
  EXPECT_STREQ(buf, "0");
  EXPECT_EQ(FormatChecked(0), "0");
}

TEST(FormatTokenTest, MaxTokenFillsTheBufferExactly) {
  char buf[kTokenTextBufferSize];
  std::memset(buf, 'x', sizeof buf);
  const std::size_t len = FormatToken(kMaxToken, buf);
  EXPECT_EQ(len, 19u);
  EXPECT_EQ(len + 1, kTokenTextBufferSize);
  EXPECT_EQ(buf[19], '\0');
  EXPECT_STREQ(buf, "9223372036854775807");
  EXPECT_EQ(FormatChecked(kMaxToken), "9223372036854775807");
}

TEST(FormatTokenTest, ExactStrings) {
  EXPECT_EQ(FormatChecked(1), "1");
  EXPECT_EQ(FormatChecked(9), "9");
  EXPECT_EQ(FormatChecked(10), "10");
  EXPECT_EQ(FormatChecked(42), "42");
  EXPECT_EQ(FormatChecked(100), "100");
  EXPECT_EQ(FormatChecked(1000000007), "1000000007");
  EXPECT_EQ(FormatChecked(1000000000000000000LL), "1000000000000000000");
  EXPECT_EQ(FormatChecked(kMaxToken - 1), "9223372036854775806");
}

TEST(FormatTokenTest, NeverOverrunsTheBufferForNonTokens) {
  // Negative values are not tokens; whatever FormatToken writes for them, it
  // must stay inside kTokenTextBufferSize bytes and stay NUL-terminated.
  // INT64_MIN needs 20 characters plus a NUL, which does not fit.
  FormatChecked(-1);
  FormatChecked(std::numeric_limits<std::int64_t>::min() + 1);
  FormatChecked(std::numeric_limits<std::int64_t>::min());
}

// ---- Round trip ----------------------------------------------------------------

// Deterministic 64-bit generator (SplitMix64), so failures are reproducible.
std::uint64_t SplitMix64(std::uint64_t &state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<Token> RoundTripValues() {
  std::vector<Token> values = {0, 1, 2, kMaxToken - 1, kMaxToken};
  for (int bit = 0; bit < 63; ++bit) {
    const Token p = Token{1} << bit;
    values.push_back(p - 1);
    values.push_back(p);
    if (p < kMaxToken) values.push_back(p + 1);
  }
  for (Token p = 1;; p *= 10) {
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(p + 1);
    if (p > kMaxToken / 10) break;
  }
  std::uint64_t state = 0x5eed'f00d'cafe'd00dULL;
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t r = SplitMix64(state);
    // Vary the magnitude too, so short numbers are not rare.
    const int shift = static_cast<int>(r % 63);
    values.push_back(static_cast<Token>((SplitMix64(state) >> 1) >> shift));
  }
  return values;
}

TEST(RoundTripTest, FormatThenParseGivesTheSameToken) {
  for (const Token value : RoundTripValues()) {
    ASSERT_TRUE(IsValidToken(value)) << value;
    char buf[kTokenTextBufferSize];
    const std::size_t len = FormatToken(value, buf);
    const std::string_view text(buf, len);

    // Independent oracle for the text form.
    ASSERT_EQ(text, std::to_string(value)) << "token " << value;
    ASSERT_EQ(buf[len], '\0') << "token " << value;

    const ParseResult parsed = ParseToken(text);
    ASSERT_EQ(parsed.status, ParseStatus::kOk) << Printable(text);
    ASSERT_EQ(parsed.value, value) << Printable(text);

    // The text form also survives the white space PostgreSQL allows.
    const std::string padded = " \t" + std::string(text) + "\n ";
    const ParseResult parsed_padded = ParseToken(padded);
    ASSERT_EQ(parsed_padded.status, ParseStatus::kOk) << Printable(padded);
    ASSERT_EQ(parsed_padded.value, value) << Printable(padded);
  }
}

TEST(RoundTripTest, ParseThenFormatCanonicalises) {
  const struct {
    std::string_view text;
    std::string_view canonical;
  } cases[] = {
      {"007", "7"},
      {"  42  ", "42"},
      {"000", "0"},
      {"\t0009223372036854775807\n", "9223372036854775807"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(Printable(c.text));
    const ParseResult r = ParseToken(c.text);
    ASSERT_EQ(r.status, ParseStatus::kOk);
    EXPECT_EQ(FormatChecked(r.value), c.canonical);
  }
}

// ---- IsValidToken --------------------------------------------------------------

static_assert(IsValidToken(0));
static_assert(IsValidToken(kMaxToken));
static_assert(!IsValidToken(-1));
static_assert(kMaxToken == std::numeric_limits<std::int64_t>::max());
static_assert(kTokenTextBufferSize == 20);

TEST(IsValidTokenTest, NonNegativeValuesAreTokens) {
  EXPECT_TRUE(IsValidToken(0));
  EXPECT_TRUE(IsValidToken(1));
  EXPECT_TRUE(IsValidToken(42));
  EXPECT_TRUE(IsValidToken(std::numeric_limits<std::int32_t>::max()));
  EXPECT_TRUE(IsValidToken(std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1));
  EXPECT_TRUE(IsValidToken(kMaxToken - 1));
  EXPECT_TRUE(IsValidToken(kMaxToken));
}

TEST(IsValidTokenTest, NegativeValuesAreNotTokens) {
  EXPECT_FALSE(IsValidToken(-1));
  EXPECT_FALSE(IsValidToken(-42));
  EXPECT_FALSE(IsValidToken(std::numeric_limits<std::int32_t>::min()));
  EXPECT_FALSE(IsValidToken(std::numeric_limits<std::int64_t>::min() + 1));
  EXPECT_FALSE(IsValidToken(std::numeric_limits<std::int64_t>::min()));
}

// ---- ApplyGuardOption ------------------------------------------------------------

TEST(GuardOptionsTest, DefaultsAreOff) {
  const GuardOptions options;
  EXPECT_FALSE(options.allow_unset);
  EXPECT_FALSE(options.skip);
}

TEST(ApplyGuardOptionTest, AllowUnsetSetsOnlyItsFlag) {
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption("allow_unset", options), OptionStatus::kOk);
  EXPECT_TRUE(options.allow_unset);
  EXPECT_FALSE(options.skip);
}

TEST(ApplyGuardOptionTest, SkipSetsOnlyItsFlag) {
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption("skip", options), OptionStatus::kOk);
  EXPECT_TRUE(options.skip);
  EXPECT_FALSE(options.allow_unset);
}

TEST(ApplyGuardOptionTest, OptionsAccumulateAndRepeatHarmlessly) {
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption("skip", options), OptionStatus::kOk);
  EXPECT_EQ(ApplyGuardOption("allow_unset", options), OptionStatus::kOk);
  EXPECT_TRUE(options.allow_unset);
  EXPECT_TRUE(options.skip);
  EXPECT_EQ(ApplyGuardOption("skip", options), OptionStatus::kOk);
  EXPECT_EQ(ApplyGuardOption("allow_unset", options), OptionStatus::kOk);
  EXPECT_TRUE(options.allow_unset);
  EXPECT_TRUE(options.skip);
}

TEST(ApplyGuardOptionTest, UnknownWordsAreRejectedAndChangeNothing) {
  using std::string_view_literals::operator""sv;
  const std::string_view words[] = {
      "ALLOW_UNSET",
      "",
      "skip ",
      "foo",
      "SKIP",
      "Skip",
      " skip",
      "skip\n",
      "ski",
      "skipp",
      "allow_unse",
      "allow_unset ",
      "allow-unset",
      "allowunset",
      "allow_unset,skip",
      "skip\0"sv,
      "allow_unset\0"sv,
      "\0"sv,
  };
  const GuardOptions starts[] = {
      {false, false, false, {}},
      {true, false, false, {}},
      {false, true, false, {}},
      {true, true, false, {}},
  };
  for (const auto word : words) {
    for (const auto &start : starts) {
      SCOPED_TRACE(Printable(word));
      SCOPED_TRACE(::testing::Message()
                   << "start allow_unset=" << start.allow_unset << " skip=" << start.skip);
      GuardOptions options = start;
      EXPECT_EQ(ApplyGuardOption(word, options), OptionStatus::kUnknown);
      EXPECT_EQ(options.allow_unset, start.allow_unset);
      EXPECT_EQ(options.skip, start.skip);
    }
  }
}

TEST(ApplyGuardOptionTest, KnownWordsNeverClearAFlag) {
  GuardOptions options{true, true, false, {}};
  EXPECT_EQ(ApplyGuardOption("skip", options), OptionStatus::kOk);
  EXPECT_TRUE(options.allow_unset);
  EXPECT_TRUE(options.skip);
  EXPECT_EQ(ApplyGuardOption("allow_unset", options), OptionStatus::kOk);
  EXPECT_TRUE(options.allow_unset);
  EXPECT_TRUE(options.skip);
}

TEST(ApplyGuardOptionTest, ReadsOnlyTheGivenLength) {
  // "skipper" cut to four characters is exactly "skip".
  const char buffer[] = "skipper";
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption(std::string_view(buffer, 4), options), OptionStatus::kOk);
  EXPECT_TRUE(options.skip);
  EXPECT_FALSE(options.allow_unset);
}

// ---- DecideGuard -----------------------------------------------------------------

// How the new token compares with the old one when both are present.  When
// either side is NULL the comparison must not matter; the table still
// enumerates it so that every combination is exercised.
enum class Order { kLess, kEqual, kGreater };

const char *OrderName(Order order) {
  switch (order) {
    case Order::kLess:
      return "new<old";
    case Order::kEqual:
      return "new==old";
    case Order::kGreater:
      return "new>old";
  }
  return "?";
}

constexpr GuardVerdict kAcc = GuardVerdict::kAccept;
constexpr GuardVerdict kSkp = GuardVerdict::kSkip;
constexpr GuardVerdict kStale = GuardVerdict::kRejectStale;
constexpr GuardVerdict kMiss = GuardVerdict::kRejectMissing;

constexpr bool T = true;
constexpr bool F = false;

struct DecideCase {
  bool column_assigned;
  bool old_is_null;
  bool new_is_null;
  Order order;
  bool allow_unset;
  GuardVerdict expected_without_skip;
  GuardVerdict expected_with_skip;
};

// Every combination of the five inputs, each with skip off and on (96 cases).
// Written by hand from the rule:
//   not assigned and not allow_unset            -> kRejectMissing
//   new NULL: not assigned and old NULL          -> kAccept, else kRejectMissing
//   old NULL                                     -> kAccept
//   new < old                                    -> skip ? kSkip : kRejectStale
//   otherwise                                    -> kAccept
// clang-format off
const DecideCase kDecideCases[] = {
    // assigned old_null new_null order            allow_unset  !skip   skip
    // -- column not assigned, allow_unset off: always missing ----------------------
    {F, F, F, Order::kLess,    F, kMiss,  kMiss},
    {F, F, F, Order::kEqual,   F, kMiss,  kMiss},
    {F, F, F, Order::kGreater, F, kMiss,  kMiss},
    {F, F, T, Order::kLess,    F, kMiss,  kMiss},
    {F, F, T, Order::kEqual,   F, kMiss,  kMiss},
    {F, F, T, Order::kGreater, F, kMiss,  kMiss},
    {F, T, F, Order::kLess,    F, kMiss,  kMiss},
    {F, T, F, Order::kEqual,   F, kMiss,  kMiss},
    {F, T, F, Order::kGreater, F, kMiss,  kMiss},
    {F, T, T, Order::kLess,    F, kMiss,  kMiss},
    {F, T, T, Order::kEqual,   F, kMiss,  kMiss},
    {F, T, T, Order::kGreater, F, kMiss,  kMiss},
    // -- column not assigned, allow_unset on ------------------------------------------
    {F, F, F, Order::kLess,    T, kStale, kSkp},
    {F, F, F, Order::kEqual,   T, kAcc,   kAcc},
    {F, F, F, Order::kGreater, T, kAcc,   kAcc},
    {F, F, T, Order::kLess,    T, kMiss,  kMiss},
    {F, F, T, Order::kEqual,   T, kMiss,  kMiss},
    {F, F, T, Order::kGreater, T, kMiss,  kMiss},
    {F, T, F, Order::kLess,    T, kAcc,   kAcc},
    {F, T, F, Order::kEqual,   T, kAcc,   kAcc},
    {F, T, F, Order::kGreater, T, kAcc,   kAcc},
    {F, T, T, Order::kLess,    T, kAcc,   kAcc},
    {F, T, T, Order::kEqual,   T, kAcc,   kAcc},
    {F, T, T, Order::kGreater, T, kAcc,   kAcc},
    // -- column assigned, allow_unset off ---------------------------------------------
    {T, F, F, Order::kLess,    F, kStale, kSkp},
    {T, F, F, Order::kEqual,   F, kAcc,   kAcc},
    {T, F, F, Order::kGreater, F, kAcc,   kAcc},
    {T, F, T, Order::kLess,    F, kMiss,  kMiss},
    {T, F, T, Order::kEqual,   F, kMiss,  kMiss},
    {T, F, T, Order::kGreater, F, kMiss,  kMiss},
    {T, T, F, Order::kLess,    F, kAcc,   kAcc},
    {T, T, F, Order::kEqual,   F, kAcc,   kAcc},
    {T, T, F, Order::kGreater, F, kAcc,   kAcc},
    {T, T, T, Order::kLess,    F, kMiss,  kMiss},
    {T, T, T, Order::kEqual,   F, kMiss,  kMiss},
    {T, T, T, Order::kGreater, F, kMiss,  kMiss},
    // -- column assigned, allow_unset on (same as off) --------------------------------
    {T, F, F, Order::kLess,    T, kStale, kSkp},
    {T, F, F, Order::kEqual,   T, kAcc,   kAcc},
    {T, F, F, Order::kGreater, T, kAcc,   kAcc},
    {T, F, T, Order::kLess,    T, kMiss,  kMiss},
    {T, F, T, Order::kEqual,   T, kMiss,  kMiss},
    {T, F, T, Order::kGreater, T, kMiss,  kMiss},
    {T, T, F, Order::kLess,    T, kAcc,   kAcc},
    {T, T, F, Order::kEqual,   T, kAcc,   kAcc},
    {T, T, F, Order::kGreater, T, kAcc,   kAcc},
    {T, T, T, Order::kLess,    T, kMiss,  kMiss},
    {T, T, T, Order::kEqual,   T, kMiss,  kMiss},
    {T, T, T, Order::kGreater, T, kMiss,  kMiss},
};
// clang-format on

// The token pairs each Order is tried with: small values, values around
// zero, and values at the top of the range.
struct TokenPair {
  Token old_token;
  Token new_token;
};

std::vector<TokenPair> PairsFor(Order order) {
  switch (order) {
    case Order::kLess:
      return {{100, 99}, {1, 0}, {kMaxToken, kMaxToken - 1}, {kMaxToken, 0}, {1LL << 32, 1}};
    case Order::kEqual:
      return {{100, 100}, {0, 0}, {kMaxToken, kMaxToken}, {1LL << 32, 1LL << 32}};
    case Order::kGreater:
      return {{100, 101}, {0, 1}, {kMaxToken - 1, kMaxToken}, {0, kMaxToken}, {1, 1LL << 32}};
  }
  return {};
}

TEST(DecideGuardTest, TableCoversEveryCombinationOnce) {
  // 2 (assigned) x 2 (old null) x 2 (new null) x 3 (order) x 2 (allow_unset)
  // rows; skip is the two verdict columns.
  ASSERT_EQ(std::size(kDecideCases), 48u);
  bool seen[2][2][2][3][2] = {};
  for (const auto &c : kDecideCases) {
    bool &slot = seen[c.column_assigned][c.old_is_null][c.new_is_null][static_cast<int>(c.order)]
                     [c.allow_unset];
    EXPECT_FALSE(slot) << "duplicate row";
    slot = true;
  }
}

TEST(DecideGuardTest, EveryCombination) {
  for (const auto &c : kDecideCases) {
    for (const bool skip : {false, true}) {
      for (const TokenPair &pair : PairsFor(c.order)) {
        GuardInput input{};
        input.column_assigned = c.column_assigned;
        input.old_is_null = c.old_is_null;
        input.old_token = pair.old_token;
        input.new_is_null = c.new_is_null;
        input.new_token = pair.new_token;
        GuardOptions options;
        options.allow_unset = c.allow_unset;
        options.skip = skip;
        const GuardVerdict expected = skip ? c.expected_with_skip : c.expected_without_skip;
        EXPECT_EQ(DecideGuard(input, options), expected)
            << "assigned=" << c.column_assigned << " old_null=" << c.old_is_null
            << " new_null=" << c.new_is_null << " " << OrderName(c.order)
            << " (old=" << pair.old_token << " new=" << pair.new_token << ")"
            << " allow_unset=" << c.allow_unset << " skip=" << skip;
      }
    }
  }
}

TEST(DecideGuardTest, NullSidesIgnoreTheirTokenField) {
  // The token field of a NULL side holds garbage in practice; it must not
  // influence the decision, even when it compares "wrongly".
  const GuardOptions strict;
  GuardOptions skip;
  skip.skip = true;

  // Old NULL with a huge old_token: still the first fenced write.
  const GuardInput first_write{true, true, kMaxToken, false, 0};
  EXPECT_EQ(DecideGuard(first_write, strict), GuardVerdict::kAccept);
  EXPECT_EQ(DecideGuard(first_write, skip), GuardVerdict::kAccept);

  // Old NULL with a negative garbage old_token.
  const GuardInput negative_garbage{true, true, -1, false, 5};
  EXPECT_EQ(DecideGuard(negative_garbage, strict), GuardVerdict::kAccept);

  // New NULL with a new_token above the old one: still missing, not accepted.
  const GuardInput null_new{true, false, 5, true, kMaxToken};
  EXPECT_EQ(DecideGuard(null_new, strict), GuardVerdict::kRejectMissing);
  EXPECT_EQ(DecideGuard(null_new, skip), GuardVerdict::kRejectMissing);

  // New NULL with a new_token below the old one: missing, never skipped.
  const GuardInput null_new_low{true, false, 5, true, 0};
  EXPECT_EQ(DecideGuard(null_new_low, skip), GuardVerdict::kRejectMissing);
}

TEST(DecideGuardTest, StaleBoundaries) {
  const GuardOptions strict;
  GuardOptions skip;
  skip.skip = true;

  // One below the old token is stale; equal is the holder writing again.
  EXPECT_EQ(DecideGuard({true, false, 10, false, 9}, strict), GuardVerdict::kRejectStale);
  EXPECT_EQ(DecideGuard({true, false, 10, false, 9}, skip), GuardVerdict::kSkip);
  EXPECT_EQ(DecideGuard({true, false, 10, false, 10}, strict), GuardVerdict::kAccept);
  EXPECT_EQ(DecideGuard({true, false, 10, false, 10}, skip), GuardVerdict::kAccept);
  EXPECT_EQ(DecideGuard({true, false, 10, false, 11}, strict), GuardVerdict::kAccept);

  // The full 64-bit range is compared, not a truncated part of it.
  EXPECT_EQ(DecideGuard({true, false, Token{1} << 32, false, 1}, strict),
            GuardVerdict::kRejectStale);
  EXPECT_EQ(DecideGuard({true, false, (Token{1} << 32) + 1, false, Token{1} << 32}, strict),
            GuardVerdict::kRejectStale);
  EXPECT_EQ(DecideGuard({true, false, 1, false, Token{1} << 32}, strict), GuardVerdict::kAccept);
  EXPECT_EQ(DecideGuard({true, false, kMaxToken, false, kMaxToken - 1}, strict),
            GuardVerdict::kRejectStale);
  EXPECT_EQ(DecideGuard({true, false, kMaxToken, false, kMaxToken}, strict), GuardVerdict::kAccept);
}

TEST(DecideGuardTest, DoesNotModifyItsArguments) {
  const GuardInput input{true, false, 10, false, 9};
  GuardOptions options;
  options.skip = true;
  EXPECT_EQ(DecideGuard(input, options), GuardVerdict::kSkip);
  EXPECT_TRUE(options.skip);
  EXPECT_FALSE(options.allow_unset);
  EXPECT_EQ(input.old_token, 10);
  EXPECT_EQ(input.new_token, 9);
}

// ---- Lock-wide fences ----------------------------------------------------------

TEST(LockOptionTest, LockNameIsTakenFromTheWord) {
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption("lock=tenant-7", options), OptionStatus::kOk);
  EXPECT_EQ(options.lock_name, "tenant-7");
  EXPECT_FALSE(options.allow_unset);
  EXPECT_FALSE(options.skip);
  // Everything after the first '=' is the name, '=' included.
  GuardOptions odd;
  EXPECT_EQ(ApplyGuardOption("lock=a=b", odd), OptionStatus::kOk);
  EXPECT_EQ(odd.lock_name, "a=b");
}

TEST(LockOptionTest, EmptyAndConflictingLocksAreErrors) {
  GuardOptions options;
  EXPECT_EQ(ApplyGuardOption("lock=", options), OptionStatus::kEmptyLockName);
  EXPECT_TRUE(options.lock_name.empty());
  EXPECT_EQ(ApplyGuardOption("lock=a", options), OptionStatus::kOk);
  EXPECT_EQ(ApplyGuardOption("lock=a", options), OptionStatus::kOk);  // repeating is fine
  EXPECT_EQ(ApplyGuardOption("lock=b", options), OptionStatus::kConflictingLocks);
  EXPECT_EQ(options.lock_name, "a");
  EXPECT_EQ(ApplyGuardOption("LOCK=a", options), OptionStatus::kUnknown);
  EXPECT_EQ(ApplyGuardOption("lock", options), OptionStatus::kUnknown);
}

TEST(LockOptionTest, AllowUnsetCannotBeCombinedWithALock) {
  GuardOptions options;
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kOk);
  ASSERT_EQ(ApplyGuardOption("allow_unset", options), OptionStatus::kOk);
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kOk);
  ASSERT_EQ(ApplyGuardOption("lock=x", options), OptionStatus::kOk);
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kUnsetUnderLock);
  GuardOptions skip_under_lock;
  ASSERT_EQ(ApplyGuardOption("skip", skip_under_lock), OptionStatus::kOk);
  ASSERT_EQ(ApplyGuardOption("lock=x", skip_under_lock), OptionStatus::kOk);
  EXPECT_EQ(FinishGuardOptions(skip_under_lock), OptionStatus::kOk);
}

TEST(LockOptionTest, FenceReadsNeedsALock) {
  GuardOptions options;
  ASSERT_EQ(ApplyGuardOption("fence_reads", options), OptionStatus::kOk);
  EXPECT_TRUE(options.fence_reads);
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kReadsWithoutLock);
  ASSERT_EQ(ApplyGuardOption("lock=x", options), OptionStatus::kOk);
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kOk);
}

LockWriteInput Write(WriteKind kind) {
  LockWriteInput in{};
  in.kind = kind;
  in.new_is_null = true;
  in.old_is_null = true;
  return in;
}

TEST(DecideLockWriteTest, InsertTakesTheRowsTokenOrThePresentedOne) {
  GuardOptions options;
  LockWriteInput in = Write(WriteKind::kInsert);
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectMissing);

  in.presented = true;
  in.presented_token = 40;
  LockWriteDecision filled = DecideLockWrite(in, options);
  EXPECT_EQ(filled.verdict, GuardVerdict::kAccept);
  EXPECT_EQ(filled.write_token, 40);
  EXPECT_TRUE(filled.fill_from_presented);

  in.new_is_null = false;
  in.new_token = 41;  // the row's own token wins, even when presented differs
  LockWriteDecision own = DecideLockWrite(in, options);
  EXPECT_EQ(own.verdict, GuardVerdict::kAccept);
  EXPECT_EQ(own.write_token, 41);
  EXPECT_FALSE(own.fill_from_presented);
}

TEST(DecideLockWriteTest, RowsTokenCountsOnlyUnderAnExclusiveLock) {
  GuardOptions options;
  LockWriteInput in = Write(WriteKind::kUpdate);
  in.column_assigned = true;
  in.old_is_null = false;
  in.old_token = 70;  // written last by another permit (or shared) holder
  in.new_is_null = false;
  in.new_token = 60;
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectStale);
  in.lock_kind = LockKind::kShared;
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kAccept);
  in.lock_kind = LockKind::kSemaphore;
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kAccept);
  EXPECT_EQ(DecideLockWrite(in, options).write_token, 60);
}

TEST(JudgeAgainstSharedMarkTest, NeverRaises) {
  EXPECT_EQ(JudgeAgainstSharedMark(5, false, 0), HighWaterVerdict::kAccept);
  EXPECT_EQ(JudgeAgainstSharedMark(9, true, 7), HighWaterVerdict::kAccept);
  EXPECT_EQ(JudgeAgainstSharedMark(7, true, 7), HighWaterVerdict::kAccept);
  EXPECT_EQ(JudgeAgainstSharedMark(6, true, 7), HighWaterVerdict::kStale);
}

TEST(DecideLockWriteTest, UpdateUsesTheAssignedTokenElseThePresentedOne) {
  GuardOptions options;
  LockWriteInput in = Write(WriteKind::kUpdate);
  in.old_is_null = false;
  in.old_token = 30;
  in.new_is_null = false;
  in.new_token = 30;  // unassigned: NEW carries OLD's value
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectMissing);

  in.presented = true;
  in.presented_token = 35;
  LockWriteDecision filled = DecideLockWrite(in, options);
  EXPECT_EQ(filled.verdict, GuardVerdict::kAccept);
  EXPECT_EQ(filled.write_token, 35);
  EXPECT_TRUE(filled.fill_from_presented);

  in.column_assigned = true;
  in.new_token = 36;
  LockWriteDecision assigned = DecideLockWrite(in, options);
  EXPECT_EQ(assigned.write_token, 36);
  EXPECT_FALSE(assigned.fill_from_presented);

  // An explicit NULL is missing even with a presented token.
  in.new_is_null = true;
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectMissing);
}

TEST(DecideLockWriteTest, DeleteNeedsThePresentedToken) {
  GuardOptions options;
  LockWriteInput in = Write(WriteKind::kDelete);
  in.old_is_null = false;
  in.old_token = 30;
  EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectMissing);
  in.presented = true;
  in.presented_token = 30;
  LockWriteDecision decision = DecideLockWrite(in, options);
  EXPECT_EQ(decision.verdict, GuardVerdict::kAccept);
  EXPECT_EQ(decision.write_token, 30);
  EXPECT_FALSE(decision.fill_from_presented);  // there is no new row to fill
}

TEST(DecideLockWriteTest, TheRowsOwnMarkStillHolds) {
  GuardOptions options;
  GuardOptions skipping;
  skipping.skip = true;
  for (WriteKind kind : {WriteKind::kUpdate, WriteKind::kDelete}) {
    LockWriteInput in = Write(kind);
    in.old_is_null = false;
    in.old_token = 50;
    in.presented = true;
    in.presented_token = 49;
    EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kRejectStale);
    EXPECT_EQ(DecideLockWrite(in, skipping).verdict, GuardVerdict::kSkip);
    in.presented_token = 50;
    EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kAccept);
    in.old_is_null = true;  // never fenced: any token
    in.presented_token = 0;
    EXPECT_EQ(DecideLockWrite(in, options).verdict, GuardVerdict::kAccept);
  }
  // An INSERT has no old row: its token is judged by the lock alone.
  LockWriteInput insert = Write(WriteKind::kInsert);
  insert.old_is_null = false;
  insert.old_token = 50;
  insert.new_is_null = false;
  insert.new_token = 1;
  EXPECT_EQ(DecideLockWrite(insert, options).verdict, GuardVerdict::kAccept);
}

TEST(JudgeAgainstHighWaterTest, BelowIsStaleEqualPassesAboveRaises) {
  EXPECT_EQ(JudgeAgainstHighWater(5, false, 0), HighWaterVerdict::kRaise);
  EXPECT_EQ(JudgeAgainstHighWater(0, false, 0), HighWaterVerdict::kRaise);
  EXPECT_EQ(JudgeAgainstHighWater(33, true, 34), HighWaterVerdict::kStale);
  EXPECT_EQ(JudgeAgainstHighWater(34, true, 34), HighWaterVerdict::kAccept);
  EXPECT_EQ(JudgeAgainstHighWater(35, true, 34), HighWaterVerdict::kRaise);
  EXPECT_EQ(JudgeAgainstHighWater(0, true, kMaxToken), HighWaterVerdict::kStale);
  EXPECT_EQ(JudgeAgainstHighWater(kMaxToken, true, kMaxToken), HighWaterVerdict::kAccept);
}

TEST(TransactionFencesTest, EntriesAreFoundByNameAndCapacityIsBounded) {
  TransactionFences fences;
  EXPECT_EQ(fences.Find("a"), nullptr);
  LockFence *a = fences.FindOrAdd("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(fences.FindOrAdd("a"), a);
  EXPECT_EQ(fences.Find("a"), a);
  EXPECT_FALSE(a->presented);
  EXPECT_FALSE(a->locked);
  std::vector<std::string> names;
  for (int i = 1; i < TransactionFences::kCapacity; ++i)
    names.push_back("lock-" + std::to_string(i));
  for (const std::string &name : names) ASSERT_NE(fences.FindOrAdd(name), nullptr) << name;
  EXPECT_EQ(fences.size(), TransactionFences::kCapacity);
  EXPECT_EQ(fences.FindOrAdd("one-too-many"), nullptr);
  EXPECT_EQ(fences.Find("a"), a);  // existing entries still found when full
}

TEST(TransactionFencesTest, AbortingASubtransactionForgetsWhatItDid) {
  TransactionFences fences;
  LockFence &top = *fences.FindOrAdd("top");
  fences.Present(top, 10, 1);
  fences.Lock(top, true, 10, 1);
  LockFence &inner = *fences.FindOrAdd("inner");
  fences.Present(inner, 20, 3);
  fences.Lock(inner, false, 0, 3);

  fences.AbortSubTransaction(2);  // subtransaction 2 and its children (3)
  EXPECT_TRUE(top.presented);
  EXPECT_TRUE(top.locked);
  EXPECT_EQ(top.mark, 10);
  EXPECT_FALSE(inner.presented);
  EXPECT_FALSE(inner.locked);

  // A raise inside a subtransaction is forgotten with it; the mark is read
  // again on the next write instead of being trusted.
  fences.Lock(top, true, 15, 4);
  fences.AbortSubTransaction(4);
  EXPECT_FALSE(top.locked);
  EXPECT_TRUE(top.presented);  // presented at the top level, before 4
}

TEST(TransactionFencesTest, AMarkHeldSharedIsRememberedAsSuchUntilItIsRaised) {
  TransactionFences fences;
  LockFence &fence = *fences.FindOrAdd("lock");
  fences.Lock(fence, true, 10, 1, /*shared=*/true);
  EXPECT_TRUE(fence.locked);
  EXPECT_TRUE(fence.shared);
  EXPECT_EQ(fence.mark, 10);
  // The raise that follows holds it exclusively.
  fences.Lock(fence, true, 12, 1);
  EXPECT_FALSE(fence.shared);
  EXPECT_EQ(fence.mark, 12);
  // Held shared in a savepoint rolled back: forgotten (the gate went with it).
  LockFence &other = *fences.FindOrAdd("other");
  fences.Lock(other, true, 5, 2, /*shared=*/true);
  fences.AbortSubTransaction(2);
  EXPECT_FALSE(other.locked);
}

TEST(TransactionFencesTest, APermitTokenIsRememberedApartFromAMark) {
  TransactionFences fences;
  LockFence &fence = *fences.FindOrAdd("sem");
  fences.Lock(fence, true, 7, 1);  // an exclusive lock's mark
  EXPECT_FALSE(fence.permit);
  fences.Lock(fence, true, 7, 1, /*shared=*/true, /*permit=*/true);
  EXPECT_TRUE(fence.permit);
  EXPECT_EQ(fence.mark, 7);
  fences.Lock(fence, true, 9, 1);
  EXPECT_FALSE(fence.permit);
}

TEST(TransactionFencesTest, RollingBackASavepointBringsTheOuterPresentationBack) {
  TransactionFences fences;
  LockFence &fence = *fences.FindOrAdd("tenant");
  fences.Present(fence, 5, 1);  // top level
  fences.Present(fence, 5, 2);  // SAVEPOINT a; the same token again
  fences.AbortSubTransaction(2);
  ASSERT_TRUE(fence.presented);
  EXPECT_EQ(fence.presented_token, 5);

  fences.Present(fence, 7, 3);  // SAVEPOINT b; another token
  EXPECT_EQ(fence.presented_token, 7);
  fences.Present(fence, 8, 3);  // again in b: replaces, does not stack
  fences.AbortSubTransaction(3);
  ASSERT_TRUE(fence.presented);
  EXPECT_EQ(fence.presented_token, 5);
  EXPECT_EQ(fence.presented_in, 1u);

  fences.AbortSubTransaction(1);
  EXPECT_FALSE(fence.presented);
}

TEST(TransactionFencesTest, NestingDeeperThanTheLimitDropsTheOutermost) {
  TransactionFences fences;
  LockFence &fence = *fences.FindOrAdd("deep");
  for (SubxactId s = 1; s <= LockFence::kMaxNesting + 2; ++s) {
    fences.Present(fence, static_cast<Token>(s), s);
  }
  EXPECT_EQ(fence.presentation_depth, LockFence::kMaxNesting);
  fences.AbortSubTransaction(5);  // back to presentation 4
  ASSERT_TRUE(fence.presented);
  EXPECT_EQ(fence.presented_token, 4);
  fences.AbortSubTransaction(3);  // presentations 1 and 2 were dropped: none left
  EXPECT_FALSE(fence.presented);
}

// ---- Lease wake-ups (lease_wait.hpp) ------------------------------------------

TEST(LeaseWakeupTest, WaitingRoomKeyMatchesTheSqlFunction) {
  // SELECT fencing_waiting_room(1), fencing_waiting_room(4294967295);
  EXPECT_EQ(WaitingRoomKey(1), INT64_C(5063539405717766145));
  EXPECT_EQ(WaitingRoomKey(4294967295), INT64_C(5063539410012733439));
}

TEST(LeaseWakeupTest, SleepsUntilTheEndRoundedUpAndNoLongerThanTheRecheck) {
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 1'000'001, 1000), 1);  // 1 us: 1 ms, not 0
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 1'005'000, 1000), 5);
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 1'005'001, 1000), 6);
  EXPECT_EQ(WakeupSleepMs(0, true, 60'000'000, 1000), 1000);  // capped
  EXPECT_EQ(WakeupSleepMs(0, false, 0, 250), 250);            // no end known
}

// A waiter whose attempt failed although the lease's end has passed (a
// place in line is ahead of it) sleeps a short while, not 0 in a loop.
TEST(LeaseWakeupTest, AnEndInThePastSleepsAShortWhile) {
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 1'000'000, 1000), kPastDueSleepMs);
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 0, 1000), kPastDueSleepMs);
  EXPECT_EQ(WakeupSleepMs(1'000'000, true, 0, 5), 5);  // never past the recheck
  EXPECT_EQ(WakeupSleepMs(0, true, 10'000, -5), 0);
}

TEST(AwaitTest, KindsAreTheThreeAcquiresSpelledExactly) {
  const auto named = [](const char *word) { return AwaitKindNamed(word, std::strlen(word)); };
  EXPECT_EQ(named("exclusive"), AwaitKind::kExclusive);
  EXPECT_EQ(named("shared"), AwaitKind::kShared);
  EXPECT_EQ(named("permit"), AwaitKind::kPermit);
  EXPECT_EQ(named("Exclusive"), AwaitKind::kUnknown);
  EXPECT_EQ(named("permits"), AwaitKind::kUnknown);
  EXPECT_EQ(named(""), AwaitKind::kUnknown);
  EXPECT_EQ(AwaitKindNamed("shared", 5), AwaitKind::kUnknown);  // a prefix is not the word
}

TEST(AwaitTest, EachKindTakesTheArgumentsOfItsAcquire) {
  using P = AwaitArgumentProblem;
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kExclusive, false, true), P::kNone);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kShared, false, false), P::kNone);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kPermit, true, false), P::kNone);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kPermit, false, false), P::kPermitsMissing);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kExclusive, true, false), P::kPermitsNotForKind);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kShared, true, false), P::kPermitsNotForKind);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kShared, false, true), P::kPayloadNotForKind);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kPermit, true, true), P::kPayloadNotForKind);
  EXPECT_EQ(CheckAwaitArguments(AwaitKind::kUnknown, false, false), P::kUnknownKind);
}

TEST(AwaitTest, QueueTimeoutIsTheRestOfTheWaitRoundedUpNeverZero) {
  EXPECT_EQ(QueueTimeoutMs(1'000'000, 1'000'001), 1);
  EXPECT_EQ(QueueTimeoutMs(1'000'000, 1'250'000), 250);
  EXPECT_EQ(QueueTimeoutMs(1'000'000, 1'250'001), 251);
  EXPECT_EQ(QueueTimeoutMs(1'000'000, 1'000'000), 1);  // over: 0 would mean "no timeout"
  EXPECT_EQ(QueueTimeoutMs(1'000'000, 0), 1);
  EXPECT_EQ(QueueTimeoutMs(0, std::numeric_limits<std::int64_t>::max()), kMaxWaitMs);
  EXPECT_EQ(QueueTimeoutMs(std::numeric_limits<std::int64_t>::min(),
                           std::numeric_limits<std::int64_t>::max()),
            kMaxWaitMs);
}

TEST(LeaseWakeupTest, ExtremeTimestampsDoNotOverflow) {
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(WakeupSleepMs(kMin, true, kMax, 1000), 1000);
  EXPECT_EQ(WakeupSleepMs(kMax, true, kMin, 1000), kPastDueSleepMs);
}

TEST(LeaseWakeupTest, PendingWakeupsDeduplicateAndReportOverflow) {
  PendingWakeups pending;
  EXPECT_TRUE(pending.Add(7));
  EXPECT_TRUE(pending.Add(7));
  EXPECT_EQ(pending.Count(), 1);
  for (int i = 1; i < PendingWakeups::kCapacity; ++i) EXPECT_TRUE(pending.Add(100 + i));
  EXPECT_EQ(pending.Count(), PendingWakeups::kCapacity);
  EXPECT_FALSE(pending.Add(99));
  EXPECT_TRUE(pending.Add(7));  // already there
  pending.Clear();
  EXPECT_EQ(pending.Count(), 0);
}

}  // namespace
// ---- Lease attempts (lease_decision.hpp) -------------------------------------

namespace {
constexpr std::int64_t kNow = 1'000'000;
LeaseSeen Seen(bool ours, bool ended, std::int64_t expires_at, std::int64_t available_at) {
  return LeaseSeen{true, ours, ended, expires_at, available_at};
}
}  // namespace

TEST(DecideAttemptTest, NoLeaseYetIsAFirstGrant) {
  EXPECT_EQ(DecideAttempt(LeaseSeen{false, false, false, 0, 0}, kNow), LeaseAttempt::kGrantFirst);
}

TEST(DecideAttemptTest, ALiveLeaseBelongsToItsHolder) {
  EXPECT_EQ(DecideAttempt(Seen(false, false, kNow + 1, kNow + 1), kNow), LeaseAttempt::kBusy);
  EXPECT_EQ(DecideAttempt(Seen(true, false, kNow + 1, kNow + 1), kNow), LeaseAttempt::kExtendOwn);
}

TEST(DecideAttemptTest, ALeaseEndingNowIsOver) {
  // expires_at is the first instant the lease is no longer held.
  EXPECT_EQ(DecideAttempt(Seen(false, false, kNow, kNow), kNow), LeaseAttempt::kGrantExpired);
  EXPECT_EQ(DecideAttempt(Seen(true, false, kNow, kNow), kNow), LeaseAttempt::kGrantExpired);
}

TEST(DecideAttemptTest, AnExpiredLeaseWaitsOutItsLockDelay) {
  EXPECT_EQ(DecideAttempt(Seen(false, false, kNow - 10, kNow + 5), kNow), LeaseAttempt::kBusy);
  // Even for its own former holder: the delay is for that holder's side effects.
  EXPECT_EQ(DecideAttempt(Seen(true, false, kNow - 10, kNow + 5), kNow), LeaseAttempt::kBusy);
  EXPECT_EQ(DecideAttempt(Seen(false, false, kNow - 10, kNow), kNow), LeaseAttempt::kGrantExpired);
}

TEST(DecideAttemptTest, AReleasedOrRevokedLeaseFreesTheLockAtOnce) {
  // available_at is not read: no lock-delay after a release or a revoke.
  EXPECT_EQ(DecideAttempt(Seen(false, true, kNow - 10, kNow + 1'000'000), kNow),
            LeaseAttempt::kGrantEnded);
  EXPECT_EQ(DecideAttempt(Seen(true, true, kNow - 10, kNow + 1'000'000), kNow),
            LeaseAttempt::kGrantEnded);
}

// ---- Slots: the permits of a semaphore and the holders of a shared lock -----------

namespace {
// A slot's latest grant: live until expires_at, free from free_at.
SlotSeen Slot(std::int32_t slot, std::int64_t expires_at, std::int64_t free_at, bool ours = false,
              bool ended = false) {
  return SlotSeen{slot, ours, ended, expires_at, free_at};
}

std::vector<std::int32_t> FreeOf(const std::vector<SlotSeen> &seen, int permits) {
  std::vector<std::int32_t> free(static_cast<size_t>(permits));
  const int found =
      FreePermitSlots(seen.data(), static_cast<int>(seen.size()), permits, kNow, free.data());
  free.resize(static_cast<size_t>(found));
  return free;
}
}  // namespace

TEST(SlotDecisionTest, TheCallersOwnLiveSlotIsFoundAmongOthers) {
  const std::vector<SlotSeen> seen = {Slot(1, kNow + 5, kNow + 5), Slot(2, kNow + 5, kNow + 5, true),
                                      Slot(3, kNow + 5, kNow + 5)};
  EXPECT_EQ(OwnLiveSlot(seen.data(), 3, kNow), 1);
}

TEST(SlotDecisionTest, AnOwnSlotThatEndedOrRanOutIsNotKept) {
  // Released: a new grant, with a new token.
  const std::vector<SlotSeen> released = {Slot(1, kNow + 5, kNow + 5, true, true)};
  EXPECT_EQ(OwnLiveSlot(released.data(), 1, kNow), -1);
  // expires_at is the first instant the permit is no longer held.
  const std::vector<SlotSeen> ran_out = {Slot(1, kNow, kNow + 10, true)};
  EXPECT_EQ(OwnLiveSlot(ran_out.data(), 1, kNow), -1);
  EXPECT_EQ(OwnLiveSlot(nullptr, 0, kNow), -1);
}

TEST(SlotDecisionTest, ASemaphoreGrantsSlotsWithoutALiveGrantInOrder) {
  // Slot 2 was never granted; 3 is live; 4 ended; 1 expired past its lock-delay.
  const std::vector<SlotSeen> seen = {Slot(1, kNow - 20, kNow - 10), Slot(3, kNow + 5, kNow + 5),
                                      Slot(4, kNow - 1, kNow - 1, false, true)};
  EXPECT_EQ(FreeOf(seen, 4), (std::vector<std::int32_t>{1, 2, 4}));
  // Slots above permits are never granted.
  EXPECT_EQ(FreeOf(seen, 2), (std::vector<std::int32_t>{1, 2}));
}

TEST(SlotDecisionTest, ASemaphoreSlotWaitsOutItsLockDelay) {
  const std::vector<SlotSeen> seen = {Slot(1, kNow - 10, kNow + 5), Slot(2, kNow + 1, kNow + 1)};
  EXPECT_TRUE(FreeOf(seen, 2).empty());
  // Free at the instant free_at comes.
  const std::vector<SlotSeen> at_end = {Slot(1, kNow - 10, kNow)};
  EXPECT_EQ(FreeOf(at_end, 1), (std::vector<std::int32_t>{1}));
}

TEST(SlotDecisionTest, ANewSemaphoreHasEveryPermitFree) {
  EXPECT_EQ(FreeOf({}, 3), (std::vector<std::int32_t>{1, 2, 3}));
}

TEST(SlotDecisionTest, ASharedLeaseTakesTheLowestSlotWhoseHolderIsGone) {
  const std::vector<SlotSeen> seen = {Slot(1, kNow + 5, kNow + 5), Slot(2, kNow - 3, kNow - 3),
                                      Slot(3, kNow - 9, kNow - 9)};
  EXPECT_EQ(SharedSlot(seen.data(), 3, kNow), 2);
}

TEST(SlotDecisionTest, ASharedLeaseOpensASlotAboveTheHighestWhenNoneIsFree) {
  // Slot 2 expired but is in its lock-delay; slot 1 is live.
  const std::vector<SlotSeen> seen = {Slot(1, kNow + 5, kNow + 5), Slot(2, kNow - 3, kNow + 7)};
  EXPECT_EQ(SharedSlot(seen.data(), 2, kNow), 3);
  EXPECT_EQ(SharedSlot(nullptr, 0, kNow), 1);
}

TEST(SlotDecisionTest, ASharedSlotReleasedEarlyIsNotFreeBeforeItsEnd) {
  // A free_at at or before now is not enough while the grant still runs: a
  // shared holder's slot is free only once its end has passed too.
  const std::vector<SlotSeen> seen = {Slot(1, kNow + 5, kNow - 1, false, true)};
  EXPECT_EQ(SharedSlot(seen.data(), 1, kNow), 2);
}

TEST(SlotDecisionTest, AnAcquireFitsOnlyALockOfItsKind) {
  EXPECT_EQ(FitKind(LockKind::kSemaphore, 3, LockKind::kSemaphore, 3), KindFit::kFits);
  EXPECT_EQ(FitKind(LockKind::kSemaphore, 3, LockKind::kSemaphore, 4), KindFit::kRefused);
  EXPECT_EQ(FitKind(LockKind::kShared, 0, LockKind::kShared, 0), KindFit::kFits);
  EXPECT_EQ(FitKind(LockKind::kShared, 0, LockKind::kSemaphore, 2), KindFit::kRefused);
  EXPECT_EQ(FitKind(LockKind::kSemaphore, 2, LockKind::kShared, 0), KindFit::kRefused);
  EXPECT_EQ(FitKind(LockKind::kExclusive, 0, LockKind::kShared, 0), KindFit::kConvert);
  EXPECT_EQ(FitKind(LockKind::kExclusive, 0, LockKind::kSemaphore, 5), KindFit::kConvert);
}

// ---- PendingLeaseCounts: a transaction's lease events until commit ----------------

namespace {
int CountOf(const PendingLeaseCounts &pending, std::string_view lock, LeaseCounter counter) {
  int total = 0;
  for (int i = 0; i < pending.Count(); ++i) {
    if (lock == pending.At(i).lock_name) total += pending.At(i).counts[static_cast<int>(counter)];
  }
  return total;
}

// Counts with room for `capacity` locks, as the backend starts.
struct Pending {
  explicit Pending(int capacity) : storage(capacity), counts(storage.data(), capacity) {}
  std::vector<PendingLockCounts> storage;
  PendingLeaseCounts counts;
};
}  // namespace

TEST(PendingLeaseCountsTest, CountsPerLockAndCounter) {
  Pending p(8);
  PendingLeaseCounts &pending = p.counts;
  EXPECT_EQ(pending.Add("a", LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kCounted);
  pending.Add("a", LeaseCounter::kGrants, 1);
  pending.Add("a", LeaseCounter::kReleases, 1);
  pending.Add("b", LeaseCounter::kGrants, 1);
  EXPECT_EQ(pending.Count(), 2);
  EXPECT_EQ(CountOf(pending, "a", LeaseCounter::kGrants), 2);
  EXPECT_EQ(CountOf(pending, "a", LeaseCounter::kReleases), 1);
  EXPECT_EQ(CountOf(pending, "b", LeaseCounter::kGrants), 1);
  EXPECT_EQ(CountOf(pending, "b", LeaseCounter::kRevokes), 0);
}

TEST(PendingLeaseCountsTest, ARolledBackSavepointTakesItsEventsAndItsChildren) {
  Pending p(8);
  PendingLeaseCounts &pending = p.counts;
  pending.Add("a", LeaseCounter::kGrants, 1);  // top level
  pending.Add("a", LeaseCounter::kGrants, 2);  // savepoint 2
  pending.Add("a", LeaseCounter::kGrants, 3);  // savepoint 3, inside 2
  pending.CommitSubTransaction(3, 2);
  pending.AbortSubTransaction(2);
  EXPECT_EQ(CountOf(pending, "a", LeaseCounter::kGrants), 1);
}

TEST(PendingLeaseCountsTest, ACommittedSavepointsEventsStayWithItsParent) {
  Pending p(8);
  PendingLeaseCounts &pending = p.counts;
  pending.Add("a", LeaseCounter::kRenewals, 2);
  pending.CommitSubTransaction(2, 1);
  pending.Add("a", LeaseCounter::kRenewals, 4);  // a later savepoint, rolled back
  pending.AbortSubTransaction(4);
  EXPECT_EQ(CountOf(pending, "a", LeaseCounter::kRenewals), 1);
}

TEST(PendingLeaseCountsTest, DropsNamesTooLongOrEmpty) {
  Pending p(8);
  PendingLeaseCounts &pending = p.counts;
  const std::string longest(kMaxCountedLockName, 'x');
  EXPECT_EQ(pending.Add(longest, LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kCounted);
  EXPECT_EQ(pending.Add(longest + "x", LeaseCounter::kGrants, 1),
            PendingLeaseCounts::Added::kDropped);
  EXPECT_EQ(pending.Add("", LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kDropped);
  EXPECT_EQ(pending.Dropped(), 2u);
}

TEST(PendingLeaseCountsTest, WhenFullItMovesToLargerStorageAndLosesNothing) {
  Pending p(2);
  PendingLeaseCounts &pending = p.counts;
  pending.Add("a", LeaseCounter::kGrants, 1);
  pending.Add("b", LeaseCounter::kGrants, 1);
  EXPECT_EQ(pending.Add("a", LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kCounted);
  EXPECT_EQ(pending.Add("c", LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kFull);
  std::vector<PendingLockCounts> larger(4);
  pending.MoveTo(larger.data(), 4);
  EXPECT_EQ(pending.Add("c", LeaseCounter::kGrants, 1), PendingLeaseCounts::Added::kCounted);
  EXPECT_EQ(pending.Capacity(), 4);
  EXPECT_EQ(CountOf(pending, "a", LeaseCounter::kGrants), 2);
  EXPECT_EQ(CountOf(pending, "b", LeaseCounter::kGrants), 1);
  EXPECT_EQ(CountOf(pending, "c", LeaseCounter::kGrants), 1);
  pending.Reset(p.storage.data(), 2);
  EXPECT_EQ(pending.Count(), 0);
  EXPECT_EQ(pending.Capacity(), 2);
  EXPECT_EQ(pending.Dropped(), 0u);
}

TEST(EarlierEndTest, ZeroMeansNone) {
  EXPECT_EQ(EarlierEnd(0, 0), 0);
  EXPECT_EQ(EarlierEnd(0, 5), 5);
  EXPECT_EQ(EarlierEnd(7, 0), 7);
  EXPECT_EQ(EarlierEnd(7, 5), 5);
  EXPECT_EQ(EarlierEnd(5, 7), 5);
}

// ---- Tokens anchored to the clock (src/core/token_clock.hpp) ------------------

// A database's token sequence as src/backend/grant.cpp runs it without
// reserved ranges, on an injected clock (microseconds since 1970): each
// backend anchors its first grant at the clock; a database that goes back
// in time gets its sequence back from a snapshot and starts every backend
// afresh, as a restore or a promotion does.  Every token it hands out is
// remembered, so that a repeat is seen.
class SimulatedDatabase {
 public:
  explicit SimulatedDatabase(std::int64_t clock, bool anchored = true)
      : clock_(clock), anchored_(anchored) {}
  void Advance(std::int64_t micros) { clock_ += micros; }
  void SetClock(std::int64_t clock) { clock_ = clock; }
  std::int64_t clock() const { return clock_; }

  std::int64_t Grant(int backend) {
    std::int64_t token = sequence_ + 1;
    if (anchored_ && started_.insert(backend).second) token = AnchoredFirstToken(token, clock_);
    sequence_ = token;
    if (!handed_out_.insert(token).second) ++repeats_;
    return token;
  }
  // Grants `count` tokens spread over `micros` of the clock, round-robin
  // over `backends` backends.
  void GrantOver(int count, std::int64_t micros, int backends) {
    for (int i = 0; i < count; ++i) {
      Advance(micros / count);
      Grant(i % backends);
    }
  }
  std::int64_t Snapshot() const { return sequence_; }
  void GoBackTo(std::int64_t snapshot) {
    sequence_ = snapshot;
    started_.clear();
  }
  void Bump(std::int64_t by) {
    std::int64_t floor = 0;
    ASSERT_EQ(BumpedFloor(sequence_, by, &floor), BumpStatus::kOk);
    sequence_ = floor;
  }
  std::int64_t Lead() const { return LeadOverClock(sequence_, clock_); }
  int repeats() const { return repeats_; }

 private:
  std::int64_t clock_;
  bool anchored_;
  std::int64_t sequence_ = 0;
  std::set<int> started_;
  std::set<std::int64_t> handed_out_;
  int repeats_ = 0;
};

constexpr std::int64_t kSecond = 1'000'000;
constexpr std::int64_t kDec2026 = 1'796'169'600LL * kSecond;  // 2026-12-02 00:00 UTC

TEST(TokenClock, UnixMicrosShiftsPostgresEpoch) {
  EXPECT_EQ(UnixMicros(0), kPostgresEpochInUnixMicros);
  EXPECT_EQ(UnixMicros(-kPostgresEpochInUnixMicros), 0);
  EXPECT_EQ(UnixMicros(std::numeric_limits<std::int64_t>::min()), 0);
  EXPECT_EQ(UnixMicros(std::numeric_limits<std::int64_t>::max()),
            std::numeric_limits<std::int64_t>::max());
  // 2026-12-02 00:00 UTC on PostgreSQL's clock.
  EXPECT_EQ(UnixMicros(kDec2026 - kPostgresEpochInUnixMicros), kDec2026);
}

TEST(TokenClock, AnchorIsTheHigherOfSequenceAndClock) {
  EXPECT_EQ(AnchoredFirstToken(102, kDec2026), kDec2026);
  EXPECT_EQ(AnchoredFirstToken(kDec2026 + 5, kDec2026), kDec2026 + 5);
  EXPECT_EQ(AnchoredFirstToken(kDec2026, kDec2026), kDec2026);
}

TEST(TokenClock, LeadOverClock) {
  EXPECT_EQ(LeadOverClock(kDec2026 - 1, kDec2026), 0);
  EXPECT_EQ(LeadOverClock(kDec2026, kDec2026), 0);
  EXPECT_EQ(LeadOverClock(kDec2026 + 3 * kSecond, kDec2026), 3 * kSecond);
}

TEST(TokenClock, ReservedRangeLastStopsAtTheLargestToken) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(ReservedRangeLast(kDec2026, 1024), kDec2026 + 1023);
  EXPECT_EQ(ReservedRangeLast(max - 1023, 1024), max);
  EXPECT_EQ(ReservedRangeLast(max - 1022, 1024), max);  // would pass it
  EXPECT_EQ(ReservedRangeLast(max, 1024), max);
}

TEST(TokenClock, BumpedFloor) {
  std::int64_t floor = -1;
  EXPECT_EQ(BumpedFloor(206, 1'000'000'000, &floor), BumpStatus::kOk);
  EXPECT_EQ(floor, 1'000'000'206);
  floor = -1;
  EXPECT_EQ(BumpedFloor(206, 0, &floor), BumpStatus::kNotPositive);
  EXPECT_EQ(BumpedFloor(206, -1, &floor), BumpStatus::kNotPositive);
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(BumpedFloor(max - 10, 10, &floor), BumpStatus::kOutOfRange);  // no room for a grant
  EXPECT_EQ(BumpedFloor(max - 10, max, &floor), BumpStatus::kOutOfRange);
  EXPECT_EQ(floor, -1);  // untouched
  EXPECT_EQ(BumpedFloor(max - 10, 9, &floor), BumpStatus::kOk);
  EXPECT_EQ(floor, max - 1);
}

// The table: grants, a snapshot, more grants (a zombie's among
// them), then the database goes back to the snapshot.  Whatever the point
// it goes back to, the first grant afterwards is above every token.
TEST(TokenClock, GoingBackToAnyPointGrantsAboveEverything) {
  for (int snapshot_after = 0; snapshot_after <= 200; snapshot_after += 25) {
    SimulatedDatabase db(kDec2026);
    db.GrantOver(snapshot_after, 10 * kSecond, 4);
    const std::int64_t snapshot = db.Snapshot();
    db.GrantOver(200 - snapshot_after + 1, 10 * kSecond, 4);
    const std::int64_t highest = db.Snapshot();
    db.Advance(kSecond / 10);  // a promotion 100 ms after the last grant
    db.GoBackTo(snapshot);
    EXPECT_GT(db.Grant(7), highest) << "went back after " << snapshot_after << " grants";
    for (int backend = 0; backend < 4; ++backend) db.Grant(backend);
    EXPECT_EQ(db.repeats(), 0) << "went back after " << snapshot_after << " grants";
  }
}

// The same history without the anchor is release 1.4: the first grant
// after going back repeats a token (the test above can fail).
TEST(TokenClock, WithoutTheAnchorGoingBackRepeatsTokens) {
  SimulatedDatabase db(kDec2026, /*anchored=*/false);
  db.GrantOver(100, kSecond, 2);
  const std::int64_t snapshot = db.Snapshot();
  db.GrantOver(106, kSecond, 2);
  db.Advance(kSecond);
  db.GoBackTo(snapshot);
  EXPECT_EQ(db.Grant(0), 101);
  EXPECT_GT(db.repeats(), 0);
}

// A long-lived backend's grants fall behind the clock (one per grant, a
// million a second): harmless, and each new backend jumps to the clock.
TEST(TokenClock, TokensStayStrictlyIncreasingAcrossAnchors) {
  SimulatedDatabase db(kDec2026);
  std::int64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    db.Advance(i % 7 == 0 ? kSecond : 3);
    const std::int64_t token = db.Grant(i % 13);
    EXPECT_GT(token, last);
    EXPECT_LE(token, db.clock());  // never ahead of the clock at this rate
    last = token;
  }
  EXPECT_EQ(db.Lead(), 0);
}

// The clock set back by more than the time between the last grant and the
// event: the first grants afterwards repeat tokens of that span.  It is
// seen before the event (the sequence leads the clock), and a bump by the
// lead covers it.
TEST(TokenClock, ClockSetBackFurtherThanTheGapRepeatsAndIsDetectable) {
  SimulatedDatabase db(kDec2026);
  db.GrantOver(50, kSecond, 2);
  const std::int64_t snapshot = db.Snapshot();
  db.GrantOver(50, kSecond, 2);
  const std::int64_t highest = db.Snapshot();
  db.SetClock(db.clock() - 5 * kSecond);  // set back 5 s ...
  db.Advance(kSecond);                     // ... and the restore 1 s later
  const std::int64_t lead = db.Lead();
  EXPECT_GT(lead, kSecond);  // fencing_audit() reports it

  // The runbook's answer: after the restore, bump by the lead seen.
  SimulatedDatabase bumped = db;
  bumped.GoBackTo(snapshot);
  bumped.Bump(lead + kSecond);
  bumped.Grant(0);
  bumped.Grant(1);
  EXPECT_EQ(bumped.repeats(), 0);

  db.GoBackTo(snapshot);
  EXPECT_LE(db.Grant(0), highest);  // a repeat: what the clock cannot cover
  EXPECT_GT(db.repeats(), 0);
}

// The clock set back by less than the time since the last grant: still
// above everything.
TEST(TokenClock, ClockSetBackWithinTheGapStillGrantsAbove) {
  SimulatedDatabase db(kDec2026);
  db.GrantOver(100, kSecond, 3);
  const std::int64_t snapshot = db.Snapshot();
  db.GrantOver(100, kSecond, 3);
  const std::int64_t highest = db.Snapshot();
  db.Advance(10 * kSecond);               // the restore 10 s after the last grant,
  db.SetClock(db.clock() - 2 * kSecond);  // on a clock 2 s behind
  db.GoBackTo(snapshot);
  EXPECT_GT(db.Grant(0), highest);
  EXPECT_EQ(db.repeats(), 0);
}

// More than a million grants a second: the sequence runs ahead of the
// clock (seen as a lead), and a database that goes back before the clock
// has caught up repeats tokens; once it has, going back is safe again.
TEST(TokenClock, GrantRateAboveTheClockLeadsItUntilItCatchesUp) {
  SimulatedDatabase db(kDec2026);
  db.Grant(0);
  const std::int64_t snapshot = db.Snapshot();
  for (int i = 0; i < 300'000; ++i) {  // three million grants a second, for 0.1 s
    if (i % 3 == 0) db.Advance(1);
    db.Grant(1);
  }
  const std::int64_t highest = db.Snapshot();
  EXPECT_GT(db.Lead(), kSecond / 10);

  SimulatedDatabase early = db;
  early.GoBackTo(snapshot);
  EXPECT_LE(early.Grant(2), highest);
  EXPECT_GT(early.repeats(), 0);

  db.Advance(kSecond);  // the clock passes the lead
  EXPECT_EQ(db.Lead(), 0);
  db.GoBackTo(snapshot);
  EXPECT_GT(db.Grant(2), highest);
  EXPECT_EQ(db.repeats(), 0);
}

// ---- Tokens nobody handed out (guard_decision.hpp, 1.5) -----------------------

TEST(TokenSourceOptionTest, WordsSetTheSourceAndConflictsAreRefused) {
  GuardOptions options;
  EXPECT_EQ(options.token_source, TokenSource::kUnknown);  // a guard made before 1.5
  EXPECT_EQ(ApplyGuardOption("granted_tokens", options), OptionStatus::kOk);
  EXPECT_EQ(options.token_source, TokenSource::kGranted);
  EXPECT_EQ(ApplyGuardOption("granted_tokens", options), OptionStatus::kOk);  // repeated: fine
  EXPECT_EQ(ApplyGuardOption("external_tokens", options), OptionStatus::kConflictingSources);
  EXPECT_EQ(options.token_source, TokenSource::kGranted);  // unchanged
  EXPECT_EQ(FinishGuardOptions(options), OptionStatus::kOk);

  GuardOptions external;
  EXPECT_EQ(ApplyGuardOption("external_tokens", external), OptionStatus::kOk);
  EXPECT_EQ(external.token_source, TokenSource::kExternal);
  EXPECT_EQ(ApplyGuardOption("lock=a", external), OptionStatus::kOk);
  // Under a lock the lock's setting decides.
  EXPECT_EQ(FinishGuardOptions(external), OptionStatus::kSourceUnderLock);
}

TEST(JudgeTokenOriginTest, OnlyGrantedSourcesAreChecked) {
  constexpr Token kHighest = 1'796'000'000'000'000;
  for (const TokenSource source : {TokenSource::kUnknown, TokenSource::kExternal}) {
    EXPECT_EQ(JudgeTokenOrigin(source, false, kMaxToken, kHighest), OriginVerdict::kAccept);
    EXPECT_EQ(JudgeTokenOrigin(source, true, kMaxToken, kHighest), OriginVerdict::kAccept);
  }
  // A fence without leases (tokens from fencing_grant(), a per-row fence):
  // up to the highest grant.
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, false, kHighest, kHighest),
            OriginVerdict::kAccept);
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, false, 7, kHighest), OriginVerdict::kAccept);
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, false, kHighest + 1, kHighest),
            OriginVerdict::kAboveAllGrants);
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, false, kMaxToken, kHighest),
            OriginVerdict::kAboveAllGrants);
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, false, 1, 0), OriginVerdict::kAboveAllGrants);
  // A lock whose leases the database grants: a token new to its mark was
  // granted to nobody, however low.
  EXPECT_EQ(JudgeTokenOrigin(TokenSource::kGranted, true, 7, kHighest),
            OriginVerdict::kAboveLeasedMark);
}


// ---- Transactions and the leases they write under (1.6) -------------------------

TEST(WrittenLeasesTest, EachLeaseOnceUpToCapacity) {
  WrittenLeases leases;
  EXPECT_EQ(leases.Add({10, LeaseRow::kExclusive, 100}), WrittenLeases::Added::kAdded);
  EXPECT_EQ(leases.Add({10, LeaseRow::kExclusive, 200}), WrittenLeases::Added::kAlreadyThere);
  EXPECT_EQ(leases.Add({11, LeaseRow::kSlot, 300}), WrittenLeases::Added::kAdded);
  ASSERT_EQ(leases.Count(), 2);
  ASSERT_NE(leases.Find(10), nullptr);
  EXPECT_EQ(leases.Find(10)->known_end, 100);  // the first look stays
  EXPECT_EQ(leases.Find(11)->row, LeaseRow::kSlot);
  EXPECT_EQ(leases.Find(12), nullptr);
  for (Token t = 100; leases.Count() < WrittenLeases::kCapacity; ++t) {
    ASSERT_EQ(leases.Add({t, LeaseRow::kExclusive, 0}), WrittenLeases::Added::kAdded);
  }
  EXPECT_EQ(leases.Add({99, LeaseRow::kExclusive, 0}), WrittenLeases::Added::kFull);
  EXPECT_EQ(leases.Find(99), nullptr);
  leases.Clear();
  EXPECT_EQ(leases.Count(), 0);
  EXPECT_EQ(leases.Find(10), nullptr);
}

TEST(JudgeLeaseTest, LiveOnlyBeforeItsEndAndWhileItsRowCarriesTheToken) {
  EXPECT_EQ(JudgeLease({true, false, 1000, false}, 999), LeaseLife::kLive);
  // The end itself is past: a lease lives while expires_at > now, as the
  // lease engine judges it.
  EXPECT_EQ(JudgeLease({true, false, 1000, false}, 1000), LeaseLife::kRanOut);
  EXPECT_EQ(JudgeLease({true, false, 1000, false}, 5000), LeaseLife::kRanOut);
  EXPECT_EQ(JudgeLease({true, true, 1000, false}, 10), LeaseLife::kEnded);
  EXPECT_EQ(JudgeLease({false, false, 1000, false}, 10), LeaseLife::kReplaced);
}

TEST(JudgeLeaseTest, OnlyAnEarlyEndOfTheTransactionsOwnLivesUntilItsCommit) {
  // Released, revoked or closed by this transaction while it lived: it ends
  // with the commit -- unless the transaction granted its lock again.
  EXPECT_EQ(JudgeLease({true, true, 1000, true}, 5000), LeaseLife::kLive);
  EXPECT_EQ(JudgeLease({false, false, 0, true}, 10), LeaseLife::kReplaced);
  // Released by another transaction, or ended by its time: judged as the
  // row says, whoever wrote the row last.
  EXPECT_EQ(JudgeLease({true, true, 1000, false}, 500), LeaseLife::kEnded);
  EXPECT_EQ(JudgeLease({true, false, 1000, false}, 5000), LeaseLife::kRanOut);
}

TEST(WrittenLeasesTest, AnEndMadeHereIsUndoneWithItsSubtransaction) {
  WrittenLeases leases;
  ASSERT_EQ(leases.Add({10, LeaseRow::kExclusive, 0}), WrittenLeases::Added::kAdded);
  ASSERT_EQ(leases.Add({11, LeaseRow::kSlot, 0}), WrittenLeases::Added::kAdded);
  EXPECT_FALSE(leases.Find(10)->ended_here);
  // A lease the transaction did not write under is no concern of its COMMIT.
  EXPECT_FALSE(leases.MarkEndedHere(12, 3));
  EXPECT_TRUE(leases.MarkEndedHere(10, 2));
  EXPECT_TRUE(leases.MarkEndedHere(11, 4));
  // Marked again later: the first end stands.
  EXPECT_TRUE(leases.MarkEndedHere(10, 5));
  EXPECT_EQ(leases.Find(10)->ended_in, 2u);
  // Subtransaction 3 rolls back: the end made in 4, which it started, goes
  // with it; the one made in 2, before it, stays.
  leases.AbortSubTransaction(3);
  EXPECT_TRUE(leases.Find(10)->ended_here);
  EXPECT_FALSE(leases.Find(11)->ended_here);
  // Both stay noted.
  EXPECT_EQ(leases.Count(), 2);
}

TEST(NextEndingStepTest, CancelFirstThenTerminateWhenStillThere) {
  constexpr std::int64_t kAfter = 100'000;
  EXPECT_EQ(NextEndingStep(0, 5'000'000, kAfter), EndingStep::kCancel);
  EXPECT_EQ(NextEndingStep(5'000'000, 5'000'000, kAfter), EndingStep::kWait);
  EXPECT_EQ(NextEndingStep(5'000'000, 5'099'999, kAfter), EndingStep::kWait);
  EXPECT_EQ(NextEndingStep(5'000'000, 5'100'000, kAfter), EndingStep::kTerminate);
  EXPECT_EQ(NextEndingStep(5'000'000, 9'000'000, kAfter), EndingStep::kTerminate);
}

}  // namespace pg_fencing
