// libFuzzer target for the PostgreSQL-free core (include/pg_fencing/token.hpp and src/core/).
//
// Every input runs through all parts below; each part checks properties of
// the core against a small, independent model written from the header's and
// the rules of docs/functions.md, and abort()s (a libFuzzer crash) on a violation:
//
//   1. ParseToken on the raw bytes (exact-size heap copy, so ASan sees any
//      read past the view) against a reference parser; FormatToken round trips.
//   2. The binary receive rule (fencing_token_recv): 8 bytes, network order,
//      valid iff >= 0.  The core has no function for it, so the decode is a
//      pure function here (DecodeBinaryToken), checked against the text form.
//   3. ApplyGuardOption / FinishGuardOptions on words split from the input.
//   4. DecideGuard and 5. DecideLockWrite with fields drawn from the input.
//   6. TransactionFences driven directly with a random op sequence.
//   7. A simulation of the backend's lock-wide fence (src/backend/fences.cpp
//      and guard.cpp: AdvanceLockFence, fencing_present, the row trigger)
//      over TransactionFences + DecideLockWrite + JudgeAgainstHighWater,
//      against a model server (one fence row per lock, row locks and
//      savepoint rollback): a write or presentation is accepted iff its
//      token is not below the lock's mark, and a cached mark is trusted only
//      while the fence row is locked and equal to it.
//
// Build and run: test/fuzz/run.sh.  Replay a crash with FUZZ_TRACE=1 to see
// part 7's steps as SQL.
//
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guard_decision.hpp"
#include "pg_fencing/token.hpp"
#include "transaction_fences.hpp"

using namespace pg_fencing;

namespace {

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// An exact-size heap copy: a read one byte past it (even of an empty view:
// new char[0] has no usable byte) is an ASan report.
struct HeapCopy {
  explicit HeapCopy(const void *data, std::size_t size) : bytes(new char[size]), size(size) {
    if (size != 0) std::memcpy(bytes.get(), data, size);
  }
  std::string_view view() const { return {bytes.get(), size}; }
  std::unique_ptr<char[]> bytes;
  std::size_t size;
};

// ---- 1. Text form ------------------------------------------------------------

constexpr bool IsPgSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// The rule of docs/functions.md, written independently of src/core/token.cpp.
ParseResult ModelParse(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && IsPgSpace(text[begin])) ++begin;
  while (end > begin && IsPgSpace(text[end - 1])) --end;
  if (begin == end) return {ParseStatus::kInvalidSyntax, 0};
  unsigned __int128 value = 0;
  bool overflow = false;
  for (std::size_t i = begin; i < end; ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return {ParseStatus::kInvalidSyntax, 0};
    if (!overflow) {
      value = value * 10 + static_cast<unsigned>(c - '0');
      if (value > static_cast<unsigned __int128>(kMaxToken)) overflow = true;
    }
  }
  if (overflow) return {ParseStatus::kOutOfRange, 0};
  return {ParseStatus::kOk, static_cast<Token>(value)};
}

void CheckParse(std::string_view bytes) {
  const HeapCopy copy(bytes.data(), bytes.size());
  const ParseResult got = ParseToken(copy.view());
  const ParseResult want = ModelParse(copy.view());
  FUZZ_CHECK(got.status == want.status);
  if (got.status != ParseStatus::kOk) return;
  FUZZ_CHECK(got.value == want.value);
  FUZZ_CHECK(got.value >= 0 && IsValidToken(got.value));
  // FormatToken(value) re-parses to the same value, in canonical form.
  std::unique_ptr<char[]> buf(new char[kTokenTextBufferSize]);
  const std::size_t len = FormatToken(got.value, buf.get());
  FUZZ_CHECK(len >= 1 && len < kTokenTextBufferSize && buf[len] == '\0');
  const HeapCopy formatted(buf.get(), len);
  const ParseResult again = ParseToken(formatted.view());
  FUZZ_CHECK(again.status == ParseStatus::kOk && again.value == got.value);
}

void CheckFormat(std::int64_t value, std::string_view pad_left, std::string_view pad_right) {
  std::unique_ptr<char[]> buf(new char[kTokenTextBufferSize]);  // exactly the documented size
  const std::size_t len = FormatToken(value, buf.get());
  FUZZ_CHECK(len < kTokenTextBufferSize);
  FUZZ_CHECK(buf[len] == '\0');
  if (!IsValidToken(value)) {
    // Not a token: "print it rather than misbehave".  It either printed the
    // signed number or nothing; either way within the buffer.
    if (len != 0) {
      FUZZ_CHECK(buf[0] == '-');
      FUZZ_CHECK(std::strtoll(buf.get(), nullptr, 10) == value);
    }
    return;
  }
  FUZZ_CHECK(len >= 1);
  for (std::size_t i = 0; i < len; ++i) FUZZ_CHECK(buf[i] >= '0' && buf[i] <= '9');
  FUZZ_CHECK(len == 1 || buf[0] != '0');  // canonical: no leading zero
  // Surrounded by white space it still parses to the value.
  std::string text;
  for (char c : pad_left) text.push_back(" \t\n\r\v\f"[static_cast<unsigned char>(c) % 6]);
  text.append(buf.get(), len);
  for (char c : pad_right) text.push_back(" \t\n\r\v\f"[static_cast<unsigned char>(c) % 6]);
  const HeapCopy copy(text.data(), text.size());
  const ParseResult parsed = ParseToken(copy.view());
  FUZZ_CHECK(parsed.status == ParseStatus::kOk && parsed.value == value);
}

// ---- 2. Binary form (model of fencing_token_recv / _send) ---------------------

enum class BinaryStatus {
  kOk,
  kWrongLength,  // 22P03
  kOutOfRange,   // 22003
};

// fencing_token_recv's rule as a pure function: exactly 8 bytes, big-endian
// two's complement (pq_getmsgint64), a token iff not negative.
BinaryStatus DecodeBinaryToken(const unsigned char *data, std::size_t size, Token *out) {
  if (size != 8) return BinaryStatus::kWrongLength;
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < 8; ++i) bits = (bits << 8) | data[i];
  std::int64_t value;
  std::memcpy(&value, &bits, sizeof value);
  if (!IsValidToken(value)) return BinaryStatus::kOutOfRange;
  *out = value;
  return BinaryStatus::kOk;
}

void EncodeBinaryToken(Token token, unsigned char out[8]) {  // fencing_token_send
  std::uint64_t bits;
  std::memcpy(&bits, &token, sizeof bits);
  for (int i = 7; i >= 0; --i, bits >>= 8) out[i] = static_cast<unsigned char>(bits & 0xff);
}

void CheckBinary(const unsigned char *data, std::size_t size) {
  const HeapCopy copy(data, size);
  const auto *bytes = reinterpret_cast<const unsigned char *>(copy.bytes.get());
  Token token = -1;
  const BinaryStatus status = DecodeBinaryToken(bytes, size, &token);
  if (size != 8) {
    FUZZ_CHECK(status == BinaryStatus::kWrongLength);
    return;
  }
  // Valid iff the sign bit of the first (most significant) byte is clear.
  FUZZ_CHECK((status == BinaryStatus::kOk) == (bytes[0] < 0x80));
  if (status != BinaryStatus::kOk) {
    FUZZ_CHECK(status == BinaryStatus::kOutOfRange);
    return;
  }
  FUZZ_CHECK(IsValidToken(token));
  unsigned char again[8];
  EncodeBinaryToken(token, again);
  FUZZ_CHECK(std::memcmp(again, bytes, 8) == 0);  // send(recv(x)) == x
  // The binary and the text form agree.
  char buf[kTokenTextBufferSize];
  const std::size_t len = FormatToken(token, buf);
  const ParseResult parsed = ParseToken(std::string_view(buf, len));
  FUZZ_CHECK(parsed.status == ParseStatus::kOk && parsed.value == token);
}

// ---- 3. Guard options ----------------------------------------------------------

bool SameView(std::string_view a, std::string_view b) {
  return a.data() == b.data() && a.size() == b.size();
}

bool SameOptions(const GuardOptions &a, const GuardOptions &b) {
  return a.allow_unset == b.allow_unset && a.skip == b.skip && a.fence_reads == b.fence_reads &&
         a.token_source == b.token_source && SameView(a.lock_name, b.lock_name);
}

void CheckFinish(const GuardOptions &options) {
  const OptionStatus status = FinishGuardOptions(options);
  if (options.allow_unset && !options.lock_name.empty()) {
    FUZZ_CHECK(status == OptionStatus::kUnsetUnderLock);
  } else if (options.fence_reads && options.lock_name.empty()) {
    FUZZ_CHECK(status == OptionStatus::kReadsWithoutLock);
  } else if (options.token_source != TokenSource::kUnknown && !options.lock_name.empty()) {
    FUZZ_CHECK(status == OptionStatus::kSourceUnderLock);
  } else {
    FUZZ_CHECK(status == OptionStatus::kOk);
  }
}

// Applies words one by one, checking each step; returns the options and
// whether every word was accepted (as src/backend/guard.cpp ParseOptions
// requires before it calls FinishGuardOptions).
void CheckOptionWords(const std::vector<std::string_view> &words) {
  constexpr std::string_view kLock = "lock=";
  GuardOptions options;
  bool all_ok = true;
  bool want_allow_unset = false, want_skip = false;
  std::string_view want_lock;
  for (std::string_view word : words) {
    const GuardOptions before = options;
    const OptionStatus status = ApplyGuardOption(word, options);
    const bool is_lock = word.size() >= kLock.size() && word.substr(0, kLock.size()) == kLock;
    const std::string_view name = is_lock ? word.substr(kLock.size()) : std::string_view();
    switch (status) {
      case OptionStatus::kOk:
        if (word == "allow_unset") {
          FUZZ_CHECK(options.allow_unset && options.skip == before.skip &&
                     SameView(options.lock_name, before.lock_name));
          want_allow_unset = true;
        } else if (word == "skip") {
          FUZZ_CHECK(options.skip && options.allow_unset == before.allow_unset &&
                     SameView(options.lock_name, before.lock_name));
          want_skip = true;
        } else if (word == "fence_reads") {
          FUZZ_CHECK(options.fence_reads && options.skip == before.skip &&
                     options.allow_unset == before.allow_unset);
        } else if (word == "granted_tokens" || word == "external_tokens") {
          FUZZ_CHECK(options.token_source == (word == "granted_tokens" ? TokenSource::kGranted
                                                                       : TokenSource::kExternal));
          FUZZ_CHECK(options.skip == before.skip && options.allow_unset == before.allow_unset &&
                     SameView(options.lock_name, before.lock_name));
        } else {
          FUZZ_CHECK(is_lock && !name.empty());
          FUZZ_CHECK(options.allow_unset == before.allow_unset && options.skip == before.skip);
          FUZZ_CHECK(options.lock_name == name);
          // Points into the option word, as documented.
          FUZZ_CHECK(options.lock_name.data() >= word.data() &&
                     options.lock_name.data() + options.lock_name.size() <=
                         word.data() + word.size());
          FUZZ_CHECK(before.lock_name.empty() || before.lock_name == name);
          want_lock = name;
        }
        break;
      case OptionStatus::kUnknown:
        FUZZ_CHECK(word != "allow_unset" && word != "skip" && word != "fence_reads" &&
                   word != "granted_tokens" && word != "external_tokens" && !is_lock);
        break;
      case OptionStatus::kConflictingSources:
        FUZZ_CHECK((word == "granted_tokens" || word == "external_tokens") &&
                   before.token_source != TokenSource::kUnknown);
        break;
      case OptionStatus::kEmptyLockName:
        FUZZ_CHECK(word == kLock);
        break;
      case OptionStatus::kConflictingLocks:
        FUZZ_CHECK(is_lock && !name.empty() && !before.lock_name.empty() &&
                   before.lock_name != name);
        break;
      case OptionStatus::kUnsetUnderLock:
      case OptionStatus::kReadsWithoutLock:
      case OptionStatus::kSourceUnderLock:
        FUZZ_CHECK(false);  // only FinishGuardOptions returns them
        break;
    }
    if (status != OptionStatus::kOk) {
      FUZZ_CHECK(SameOptions(options, before));  // a refused word changes nothing
      all_ok = false;
    }
    // lock_name is either never set (the default, null view) or non-empty.
    FUZZ_CHECK(options.lock_name.data() == nullptr || !options.lock_name.empty());
    CheckFinish(options);
  }
  if (all_ok) {
    FUZZ_CHECK(options.allow_unset == want_allow_unset && options.skip == want_skip &&
               options.lock_name == want_lock);
  }
}

std::vector<std::string_view> SplitWords(std::string_view text, std::size_t max_words) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  auto is_sep = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == ','; };
  while (i < text.size() && words.size() < max_words) {
    while (i < text.size() && is_sep(text[i])) ++i;
    std::size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

// ---- Drawing values ------------------------------------------------------------

Token ConsumeToken(FuzzedDataProvider &fdp, bool allow_negative) {
  static constexpr Token kEdges[] = {0,
                                     1,
                                     2,
                                     kMaxToken,
                                     kMaxToken - 1,
                                     INT32_MAX,
                                     static_cast<Token>(INT32_MAX) + 1,
                                     1000000000000000000LL};
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
    case 1:
    case 2:
    case 3:
      return fdp.ConsumeIntegralInRange<Token>(0, 10);
    case 4:
      return kEdges[fdp.ConsumeIntegralInRange<std::size_t>(0, std::size(kEdges) - 1)];
    case 5:
      return fdp.ConsumeIntegralInRange<Token>(0, kMaxToken);
    case 6:
      return allow_negative ? fdp.ConsumeIntegral<std::int64_t>()
                            : fdp.ConsumeIntegralInRange<Token>(0, 100);
    default:
      return allow_negative ? -fdp.ConsumeIntegralInRange<Token>(1, 3)
                            : fdp.ConsumeIntegralInRange<Token>(0, 3);
  }
}

GuardOptions ConsumeOptions(FuzzedDataProvider &fdp) {
  GuardOptions options;
  options.allow_unset = fdp.ConsumeBool();
  options.skip = fdp.ConsumeBool();
  if (fdp.ConsumeBool()) options.lock_name = "tenant-7";
  return options;
}

// ---- 4. DecideGuard --------------------------------------------------------------

// The table in docs/functions.md, for inputs the backend can produce: an UPDATE that
// does not SET the column carries the old value into NEW.
GuardVerdict ModelGuard(const GuardInput &in, const GuardOptions &options) {
  if (!in.column_assigned) {
    return options.allow_unset ? GuardVerdict::kAccept : GuardVerdict::kRejectMissing;
  }
  if (in.new_is_null) return GuardVerdict::kRejectMissing;
  if (in.old_is_null) return GuardVerdict::kAccept;
  if (in.new_token < in.old_token) {
    return options.skip ? GuardVerdict::kSkip : GuardVerdict::kRejectStale;
  }
  return GuardVerdict::kAccept;
}

void CheckGuard(FuzzedDataProvider &fdp) {
  GuardInput in{};
  in.column_assigned = fdp.ConsumeBool();
  in.old_is_null = fdp.ConsumeBool();
  in.old_token = ConsumeToken(fdp, true);
  in.new_is_null = fdp.ConsumeBool();
  in.new_token = ConsumeToken(fdp, true);
  const bool consistent = fdp.ConsumeBool();
  if (consistent && !in.column_assigned) {
    in.new_is_null = in.old_is_null;
    in.new_token = in.old_token;
  }
  const GuardOptions options = ConsumeOptions(fdp);
  const GuardVerdict verdict = DecideGuard(in, options);

  if (verdict == GuardVerdict::kAccept && !in.old_is_null && !in.new_is_null) {
    FUZZ_CHECK(in.new_token >= in.old_token);
  }
  if (verdict == GuardVerdict::kSkip) FUZZ_CHECK(options.skip);
  if (verdict == GuardVerdict::kSkip || verdict == GuardVerdict::kRejectStale) {
    FUZZ_CHECK(!in.old_is_null && !in.new_is_null && in.new_token < in.old_token);
  }
  if (!in.column_assigned && !options.allow_unset) {
    FUZZ_CHECK(verdict == GuardVerdict::kRejectMissing);
  }
  if (in.column_assigned && in.new_is_null) FUZZ_CHECK(verdict == GuardVerdict::kRejectMissing);
  if (in.column_assigned && !in.new_is_null && in.old_is_null) {
    FUZZ_CHECK(verdict == GuardVerdict::kAccept);
  }
  // 'skip' only turns a stale rejection into a skip.
  GuardOptions flipped = options;
  flipped.skip = !options.skip;
  const GuardVerdict other = DecideGuard(in, flipped);
  auto unskip = [](GuardVerdict v) {
    return v == GuardVerdict::kSkip ? GuardVerdict::kRejectStale : v;
  };
  FUZZ_CHECK(unskip(verdict) == unskip(other));
  if (consistent) FUZZ_CHECK(verdict == ModelGuard(in, options));
}

// ---- 5. DecideLockWrite ------------------------------------------------------------

void CheckLockWrite(FuzzedDataProvider &fdp) {
  LockWriteInput in{};
  in.kind = static_cast<WriteKind>(fdp.ConsumeIntegralInRange<int>(0, 2));
  in.column_assigned = fdp.ConsumeBool();
  in.new_is_null = fdp.ConsumeBool();
  in.new_token = ConsumeToken(fdp, true);
  in.old_is_null = fdp.ConsumeBool();
  in.old_token = ConsumeToken(fdp, true);
  in.presented = fdp.ConsumeBool();
  in.presented_token = ConsumeToken(fdp, true);
  GuardOptions options = ConsumeOptions(fdp);
  const LockWriteDecision d = DecideLockWrite(in, options);

  const bool row_gives = in.kind == WriteKind::kInsert   ? !in.new_is_null
                         : in.kind == WriteKind::kUpdate ? in.column_assigned
                                                         : false;
  const bool has_old = in.kind != WriteKind::kInsert && !in.old_is_null;
  const bool has_token = row_gives ? !in.new_is_null : in.presented;

  if (!has_token) {
    FUZZ_CHECK(d.verdict == GuardVerdict::kRejectMissing);
  } else {
    FUZZ_CHECK(d.verdict != GuardVerdict::kRejectMissing);
    // The write's token: the row's when the statement gives one, else the
    // transaction's; only a token taken from the transaction is filled in,
    // and never into a DELETE.
    if (row_gives) {
      FUZZ_CHECK(d.write_token == in.new_token && !d.fill_from_presented);
    } else {
      FUZZ_CHECK(d.write_token == in.presented_token);
      FUZZ_CHECK(d.fill_from_presented == (in.kind != WriteKind::kDelete));
    }
    const bool stale = has_old && d.write_token < in.old_token;
    if (stale) {
      FUZZ_CHECK(d.verdict == (options.skip ? GuardVerdict::kSkip : GuardVerdict::kRejectStale));
    } else {
      FUZZ_CHECK(d.verdict == GuardVerdict::kAccept);
    }
  }
  if (d.verdict == GuardVerdict::kAccept && has_old) FUZZ_CHECK(d.write_token >= in.old_token);
  if (d.verdict == GuardVerdict::kSkip) FUZZ_CHECK(options.skip);
  if (in.kind == WriteKind::kDelete) FUZZ_CHECK(!d.fill_from_presented);
  if (in.kind == WriteKind::kDelete && !in.presented) {
    FUZZ_CHECK(d.verdict == GuardVerdict::kRejectMissing);
  }
  // An explicit NULL in an UPDATE's SET is never replaced by the presented token.
  if (in.kind == WriteKind::kUpdate && in.column_assigned && in.new_is_null) {
    FUZZ_CHECK(d.verdict == GuardVerdict::kRejectMissing);
  }

  // Fields a kind does not use do not matter.
  LockWriteInput other = in;
  if (in.kind == WriteKind::kInsert) {
    other.column_assigned = !in.column_assigned;
    other.old_is_null = !in.old_is_null;
    other.old_token = in.old_token ^ 1;
  } else if (in.kind == WriteKind::kDelete) {
    other.column_assigned = !in.column_assigned;
    other.new_is_null = !in.new_is_null;
    other.new_token = in.new_token ^ 1;
  } else if (in.column_assigned) {
    other.presented = !in.presented;
    other.presented_token = in.presented_token ^ 1;
  }
  const LockWriteDecision e = DecideLockWrite(other, options);
  FUZZ_CHECK(e.verdict == d.verdict && e.fill_from_presented == d.fill_from_presented);
  if (d.verdict != GuardVerdict::kRejectMissing) FUZZ_CHECK(e.write_token == d.write_token);

  // JudgeAgainstHighWater on the write's token.
  const bool mark_known = fdp.ConsumeBool();
  const Token mark = ConsumeToken(fdp, true);
  const HighWaterVerdict hw = JudgeAgainstHighWater(d.write_token, mark_known, mark);
  if (!mark_known || d.write_token > mark) {
    FUZZ_CHECK(hw == HighWaterVerdict::kRaise);
  } else if (d.write_token < mark) {
    FUZZ_CHECK(hw == HighWaterVerdict::kStale);
  } else {
    FUZZ_CHECK(hw == HighWaterVerdict::kAccept);
  }
}

// ---- 6. TransactionFences, driven directly ----------------------------------------

void CheckFencesDirect(FuzzedDataProvider &fdp) {
  auto fences = std::make_unique<TransactionFences>();
  std::deque<std::string> storage;  // stable addresses for the names
  std::vector<std::string> added;   // names in the order they were added
  std::map<std::string, LockFence *> where;
  SubxactId subxact = 1;

  auto name_of = [&](int n) {
    return n < 8 ? std::string(1, static_cast<char>('a' + n)) : "lock-" + std::to_string(n);
  };
  // Every entry is found by its name (from another buffer: by content) at
  // the place it was added.  Quadratic, so after the ops that could break it.
  auto check_all = [&] {
    for (const std::string &name : added) {
      const std::string probe = name;  // another buffer: found by content
      LockFence *f = fences->Find(probe);
      FUZZ_CHECK(f != nullptr && f == where[name] && f->lock_name == name);
    }
  };

  const int ops = fdp.ConsumeIntegralInRange<int>(0, 200);
  for (int op = 0; op < ops && fdp.remaining_bytes() > 0; ++op) {
    // Bulk adds (1) are drawn half as often as the other ops.
    static constexpr int kKinds[] = {0, 1, 2, 3, 4, 5, 6, 0, 2, 3, 4, 5, 6};
    const int kind = kKinds[fdp.ConsumeIntegralInRange<std::size_t>(0, std::size(kKinds) - 1)];
    switch (kind) {
      case 0: {  // FindOrAdd a name, sometimes one of many
        const std::string name = name_of(fdp.ConsumeIntegralInRange<int>(0, 90));
        storage.push_back(name);
        const bool known = where.count(name) != 0;
        const bool full = fences->size() == TransactionFences::kCapacity;
        LockFence *f = fences->FindOrAdd(storage.back());
        if (known) {
          FUZZ_CHECK(f == where[name]);
        } else if (full) {
          FUZZ_CHECK(f == nullptr);
        } else {
          FUZZ_CHECK(f != nullptr && f->lock_name == name && !f->presented && !f->locked);
          where[name] = f;
          added.push_back(name);
        }
        break;
      }
      case 1: {  // fill up to (or past) capacity at once
        const int count = fdp.ConsumeIntegralInRange<int>(0, 70);
        for (int i = 0; i < count; ++i) {
          const std::string name = "bulk-" + std::to_string(added.size() + i);
          storage.push_back(name);
          const bool full = fences->size() == TransactionFences::kCapacity;
          LockFence *f = fences->FindOrAdd(storage.back());
          if (where.count(name)) {
            FUZZ_CHECK(f == where[name]);
          } else if (full) {
            FUZZ_CHECK(f == nullptr);
            break;  // full stays full
          } else {
            FUZZ_CHECK(f != nullptr);
            where[name] = f;
            added.push_back(name);
          }
        }
        break;
      }
      case 2: {  // Find a name that may be absent
        const std::string name = name_of(fdp.ConsumeIntegralInRange<int>(0, 90));
        LockFence *f = fences->Find(name);
        FUZZ_CHECK((f != nullptr) == (where.count(name) != 0));
        break;
      }
      case 3: {  // Present
        if (added.empty()) break;
        LockFence *f = where[added[fdp.ConsumeIntegralInRange<std::size_t>(0, added.size() - 1)]];
        const LockFence before = *f;
        const Token token = ConsumeToken(fdp, false);
        fences->Present(*f, token, subxact);
        FUZZ_CHECK(f->presented && f->presented_token == token && f->presented_in == subxact);
        FUZZ_CHECK(f->locked == before.locked && f->locked_in == before.locked_in &&
                   f->mark == before.mark && f->mark_known == before.mark_known);
        break;
      }
      case 4: {  // Lock
        if (added.empty()) break;
        LockFence *f = where[added[fdp.ConsumeIntegralInRange<std::size_t>(0, added.size() - 1)]];
        const LockFence before = *f;
        const bool known = fdp.ConsumeBool();
        const Token mark = ConsumeToken(fdp, false);
        fences->Lock(*f, known, mark, subxact);
        FUZZ_CHECK(f->locked && f->mark_known == known && f->mark == mark &&
                   f->locked_in == subxact);
        FUZZ_CHECK(f->presented == before.presented &&
                   f->presented_token == before.presented_token &&
                   f->presented_in == before.presented_in);
        break;
      }
      case 5:  // the subtransaction id moves on (never back)
        subxact += fdp.ConsumeIntegralInRange<SubxactId>(0, 3);
        break;
      case 6: {  // AbortSubTransaction(s), s <= the current id
        const SubxactId s = fdp.ConsumeIntegralInRange<SubxactId>(1, subxact);
        std::vector<LockFence> before;
        for (const std::string &name : added) before.push_back(*where[name]);
        fences->AbortSubTransaction(s);
        for (std::size_t i = 0; i < added.size(); ++i) {
          const LockFence &now = *where[added[i]];
          const LockFence &was = before[i];
          FUZZ_CHECK(!(now.presented && now.presented_in >= s));
          FUZZ_CHECK(!(now.locked && now.locked_in >= s));
          // What S did not touch is kept as it was.
          if (was.presented && was.presented_in < s) {
            FUZZ_CHECK(now.presented && now.presented_token == was.presented_token &&
                       now.presented_in == was.presented_in);
          }
          if (was.locked && was.locked_in < s) {
            FUZZ_CHECK(now.locked && now.mark_known == was.mark_known && now.mark == was.mark &&
                       now.locked_in == was.locked_in);
          }
          if (!was.presented) FUZZ_CHECK(!now.presented);
          if (!was.locked) FUZZ_CHECK(!now.locked);
          FUZZ_CHECK(now.lock_name == was.lock_name);
        }
        // Later subtransactions get higher ids.
        subxact += 1;
        break;
      }
    }
    FUZZ_CHECK(fences->size() >= 0 && fences->size() <= TransactionFences::kCapacity);
    FUZZ_CHECK(static_cast<std::size_t>(fences->size()) == added.size());
    if (kind == 1) check_all();
  }
  check_all();
}

// ---- 7. The backend's lock-wide fence, simulated ----------------------------------

// One transaction at a time against a model server.  Ids as PostgreSQL
// assigns them: the top level is 1, each new subtransaction gets the next.
class FenceSimulation {
 public:
  explicit FenceSimulation(FuzzedDataProvider &fdp)
      : fdp_(fdp), trace_(std::getenv("FUZZ_TRACE") != nullptr) {
    BeginTransaction();
  }

  void Run() {
    const int ops = fdp_.ConsumeIntegralInRange<int>(0, 120);
    for (int op = 0; op < ops && fdp_.remaining_bytes() > 0; ++op) {
      switch (fdp_.ConsumeIntegralInRange<int>(0, 8)) {
        case 0:
          Savepoint();
          break;
        case 1:
          Release();
          break;
        case 2:
          RollbackTo(fdp_.ConsumeIntegralInRange<std::size_t>(1, 3));
          break;
        case 3:
          EndTransaction(fdp_.ConsumeBool());
          break;
        case 4:
          Present(PickName(), ConsumeToken(fdp_, false));
          break;
        case 5:
        case 6:
          Write(PickName());
          break;
        case 7:
          ExternalRaise(PickName(), ConsumeToken(fdp_, false));
          break;
        case 8:
          OpenMany(fdp_.ConsumeIntegralInRange<int>(0, 70));
          break;
      }
      CheckCache();
      CheckPresentations();
    }
  }

 private:
  struct ServerFence {
    bool exists = false;
    Token mark = 0;
    SubxactId row_lock = 0;  // the subtransaction that locked it, 0: not ours
  };
  struct Undo {
    SubxactId in;
    std::string name;
    ServerFence was;
  };
  struct Presentation {
    SubxactId in;
    Token token;
  };
  // An ERROR: PostgreSQL aborts the innermost subtransaction (the client
  // then rolls back to its savepoint) or, at the top level, the transaction.
  struct Error {};

  std::string PickName() {
    static const char *const kNames[] = {"a", "b", "tenant-7", "x"};
    return kNames[fdp_.ConsumeIntegralInRange<int>(0, 3)];
  }

  bool IsSelfOrDescendant(SubxactId x, SubxactId s) const {
    while (x != 0) {
      if (x == s) return true;
      x = parent_.at(x);
    }
    return false;
  }

  SubxactId Current() const { return stack_.back(); }

  // FUZZ_TRACE=1 ./fuzz_core CRASH-FILE prints the sequence as SQL.
  __attribute__((format(printf, 2, 3))) void Trace(const char *format, ...) const {
    if (!trace_) return;
    std::fprintf(stderr, "  [subxact %u] ", Current());
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fputc('\n', stderr);
  }

  void BeginTransaction() {
    fences_ = std::make_unique<TransactionFences>();
    stack_ = {1};
    parent_ = {{1, 0}};
    next_id_ = 2;
    undo_.clear();
    presented_.clear();
  }

  void EndTransaction(bool commit) {
    Trace("%s", commit ? "COMMIT; BEGIN;" : "ROLLBACK; BEGIN;");
    if (!commit) AbortDown(1);
    for (auto &[name, fence] : server_) fence.row_lock = 0;  // locks go at transaction end
    BeginTransaction();
  }

  void Savepoint() {
    if (stack_.size() > 20) return;
    const SubxactId id = next_id_++;
    parent_[id] = Current();
    stack_.push_back(id);
    Trace("SAVEPOINT s%u;", id);
  }

  void Release() {  // RELEASE SAVEPOINT: the child's work becomes the parent's
    if (stack_.size() > 1) {
      Trace("RELEASE SAVEPOINT s%u;", Current());
      stack_.pop_back();
    }
  }

  void RollbackTo(std::size_t levels) {
    while (levels-- > 0 && stack_.size() > 1) {
      const SubxactId s = stack_.back();
      Trace("ROLLBACK TO SAVEPOINT s%u; RELEASE SAVEPOINT s%u;", s, s);
      stack_.pop_back();
      AbortSub(s);
    }
  }

  // What the server and the model forget when subtransaction s aborts.
  void AbortDown(SubxactId s) {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      if (IsSelfOrDescendant(it->in, s)) server_[it->name] = it->was;
    }
    std::vector<Undo> kept;
    for (Undo &u : undo_) {
      if (!IsSelfOrDescendant(u.in, s)) kept.push_back(std::move(u));
    }
    undo_ = std::move(kept);
    for (auto &[name, stack] : presented_) {
      while (!stack.empty() && IsSelfOrDescendant(stack.back().in, s)) stack.pop_back();
    }
  }

  void AbortSub(SubxactId s) {
    AbortDown(s);
    fences_->AbortSubTransaction(s);  // the backend's SUBXACT_EVENT_ABORT_SUB callback
    CheckPresentations();
  }

  // An error inside the current (sub)transaction.
  void Fail() {
    Trace("%s", "-- ERROR");
    if (stack_.size() > 1) {
      RollbackTo(1);
    } else {
      EndTransaction(false);
    }
  }

  // fencing_fence_advance(): locks the lock's row (creating it) and raises
  // the mark; returns whether there was one, and it.
  bool ServerAdvance(const std::string &name, Token token, Token *previous) {
    ServerFence &fence = server_[name];
    undo_.push_back({Current(), name, fence});
    if (fence.row_lock == 0) fence.row_lock = Current();
    if (!fence.exists) {
      fence.exists = true;
      fence.mark = token;
      return false;
    }
    *previous = fence.mark;
    if (token > fence.mark) fence.mark = token;
    return true;
  }

  // Another transaction raises the mark; possible only while this one does
  // not hold the fence row.
  void ExternalRaise(const std::string &name, Token token) {
    ServerFence &fence = server_[name];
    if (fence.row_lock != 0) return;
    Trace("-- another session: SELECT fencing_present('%s', %lld); COMMIT;", name.c_str(),
          static_cast<long long>(token));
    if (!fence.exists || token > fence.mark) {
      fence.exists = true;
      fence.mark = token;
    }
  }

  LockFence *FenceFor(const std::string &name) {
    if (LockFence *found = fences_->Find(name)) return found;
    names_.push_back(name);  // the backend copies the name into transaction memory
    return fences_->FindOrAdd(names_.back());
  }

  void OpenMany(int count) {  // writes under many locks in one transaction
    Trace("-- writes under %d locks many-0...", count);
    for (int i = 0; i < count; ++i) {
      if (FenceFor("many-" + std::to_string(i)) == nullptr) {
        FUZZ_CHECK(fences_->size() == TransactionFences::kCapacity);
        Fail();
        return;
      }
    }
  }

  // src/backend/fences.cpp AdvanceLockFence.  Also checks its verdict against
  // the model server: accepted iff the token is not below the lock's mark.
  bool AdvanceLockFence(const std::string &name, Token token, Token *mark) {
    const ServerFence before = server_[name];
    const bool want_ok = !before.exists || token >= before.mark;
    LockFence *fence = FenceFor(name);
    if (fence == nullptr) throw Error{};  // at most kCapacity locks
    bool ok = false;
    bool decided = false;
    if (fence->locked) {
      switch (JudgeAgainstHighWater(token, fence->mark_known, fence->mark)) {
        case HighWaterVerdict::kAccept:
          *mark = fence->mark;
          ok = decided = true;
          break;
        case HighWaterVerdict::kStale:
          *mark = fence->mark;
          ok = false;
          decided = true;
          break;
        case HighWaterVerdict::kRaise:
          break;
      }
    }
    if (!decided) {
      Token previous = 0;
      const bool had_mark = ServerAdvance(name, token, &previous);
      LockFence *locked = fences_->Find(name);
      FUZZ_CHECK(locked == fence);
      if (had_mark && token < previous) {
        fences_->Lock(*locked, true, previous, Current());
        *mark = previous;
        ok = false;
      } else {
        fences_->Lock(*locked, true, token, Current());
        *mark = token;
        ok = true;
      }
    }
    // The safety property of the lock-wide fence, and its precision.
    FUZZ_CHECK(ok == want_ok);
    if (!ok) FUZZ_CHECK(*mark == before.mark && token < *mark);
    return ok;
  }

  // fencing_present(lock, token).
  void Present(const std::string &name, Token token) {
    Trace("SELECT fencing_present('%s', %lld);", name.c_str(), static_cast<long long>(token));
    try {
      Token mark = 0;
      if (!AdvanceLockFence(name, token, &mark)) throw Error{};
      LockFence *fence = fences_->Find(name);
      FUZZ_CHECK(fence != nullptr);
      fences_->Present(*fence, token, Current());
      presented_[name].push_back({Current(), token});
    } catch (const Error &) {
      Fail();
    }
  }

  // A row written under lock=NAME (src/backend/guard.cpp GuardUnderLock).
  void Write(const std::string &name) {
    LockWriteInput in{};
    in.kind = static_cast<WriteKind>(fdp_.ConsumeIntegralInRange<int>(0, 2));
    in.column_assigned = in.kind == WriteKind::kUpdate && fdp_.ConsumeBool();
    in.new_is_null = in.kind == WriteKind::kDelete || fdp_.ConsumeBool();
    if (!in.new_is_null) in.new_token = ConsumeToken(fdp_, false);
    in.old_is_null = in.kind == WriteKind::kInsert || fdp_.ConsumeBool();
    if (!in.old_is_null) in.old_token = ConsumeToken(fdp_, false);
    if (const LockFence *fence = fences_->Find(name)) {
      in.presented = fence->presented;
      in.presented_token = fence->presented_token;
    }
    GuardOptions options;
    options.skip = fdp_.ConsumeBool();
    options.lock_name = name;

    static const char *const kKinds[] = {"INSERT", "UPDATE", "DELETE"};
    Trace("%s under lock '%s'%s: new %s%lld, old %s%lld, presented %s%lld", kKinds[int(in.kind)],
          name.c_str(), options.skip ? " (skip)" : "", in.new_is_null ? "NULL/" : "",
          static_cast<long long>(in.new_token), in.old_is_null ? "NULL/" : "",
          static_cast<long long>(in.old_token), in.presented ? "" : "none/",
          static_cast<long long>(in.presented_token));
    const LockWriteDecision d = DecideLockWrite(in, options);
    if (d.verdict == GuardVerdict::kSkip) return;
    if (d.verdict != GuardVerdict::kAccept) return Fail();
    FUZZ_CHECK(in.kind == WriteKind::kInsert || in.old_is_null || d.write_token >= in.old_token);
    try {
      Token mark = 0;
      if (!AdvanceLockFence(name, d.write_token, &mark)) {
        if (options.skip) return;
        throw Error{};
      }
    } catch (const Error &) {
      Fail();
    }
  }

  // A cached mark is trusted only while the fence row is locked by this
  // transaction and holds exactly that mark.
  void CheckCache() {
    for (const auto &[name, fence] : server_) {
      const LockFence *cached = fences_->Find(name);
      if (cached == nullptr || !cached->locked) continue;
      FUZZ_CHECK(fence.row_lock != 0);
      FUZZ_CHECK(cached->mark_known == fence.exists);
      FUZZ_CHECK(!fence.exists || cached->mark == fence.mark);
    }
    FUZZ_CHECK(fences_->size() <= TransactionFences::kCapacity);
  }

  // A presentation the fences still hold is the one the transaction made
  // last and has not rolled back.
  void CheckPresentations() {
    for (const auto &[name, stack] : presented_) {
      const LockFence *fence = fences_->Find(name);
      const bool have = fence != nullptr && fence->presented;
      if (have) {
        FUZZ_CHECK(!stack.empty() && stack.back().token == fence->presented_token);
      }
      // docs/functions.md: a presentation is gone "with a savepoint rolled back to
      // before it" -- so one made before the savepoint survives (within
      // LockFence::kMaxNesting levels; deeper, dropping is allowed).
      if (stack.size() <= static_cast<std::size_t>(LockFence::kMaxNesting)) {
        FUZZ_CHECK(have == !stack.empty());
      }
    }
  }

  FuzzedDataProvider &fdp_;
  const bool trace_;
  std::unique_ptr<TransactionFences> fences_;
  std::deque<std::string> names_;
  std::map<std::string, ServerFence> server_;
  std::vector<SubxactId> stack_;
  std::map<SubxactId, SubxactId> parent_;
  SubxactId next_id_ = 2;
  std::vector<Undo> undo_;
  std::map<std::string, std::vector<Presentation>> presented_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);

  // 1. Text form: the whole input, and each line of it.
  CheckParse(text);
  for (std::size_t begin = 0; begin < size;) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = size;
    if (end != size || begin != 0) CheckParse(text.substr(begin, end - begin));
    begin = end + 1;
  }

  // 2. Binary form: the whole input, and each 8-byte chunk.
  CheckBinary(data, size);
  for (std::size_t i = 0; i + 8 <= size && i < 256; i += 8) CheckBinary(data + i, 8);

  // 3. Option words.
  CheckOptionWords(SplitWords(text, 16));

  FuzzedDataProvider fdp(data, size);
  {
    const std::int64_t value =
        fdp.ConsumeBool() ? ConsumeToken(fdp, true) : fdp.ConsumeIntegral<std::int64_t>();
    const std::string left = fdp.ConsumeRandomLengthString(4);
    const std::string right = fdp.ConsumeRandomLengthString(4);
    CheckFormat(value, left, right);
  }
  {
    GuardOptions options = ConsumeOptions(fdp);
    CheckFinish(options);
  }
  // 4 to 7 share what is left of the input; which of them run is drawn too,
  // so that each can have all of it.
  const int parts = fdp.ConsumeIntegralInRange<int>(0, 3);
  if (parts == 0 || parts == 3) {
    for (int i = 0; i < 8 && fdp.remaining_bytes() > 0; ++i) {
      CheckGuard(fdp);
      CheckLockWrite(fdp);
    }
  }
  if (parts == 1 || parts == 3) CheckFencesDirect(fdp);
  if (parts == 2 || parts == 3) FenceSimulation(fdp).Run();
  return 0;
}
