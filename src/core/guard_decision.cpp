// The accept/reject rule of the fencing guard (see src/core/guard_decision.hpp).
#include "guard_decision.hpp"

namespace pg_fencing {

OptionStatus ApplyGuardOption(std::string_view word, GuardOptions &options) noexcept {
  constexpr std::string_view kLockPrefix = "lock=";
  if (word == "allow_unset") {
    options.allow_unset = true;
  } else if (word == "skip") {
    options.skip = true;
  } else if (word == "fence_reads") {
    options.fence_reads = true;
  } else if (word == "granted_tokens" || word == "external_tokens") {
    const TokenSource source =
        word == "granted_tokens" ? TokenSource::kGranted : TokenSource::kExternal;
    if (options.token_source != TokenSource::kUnknown && options.token_source != source) {
      return OptionStatus::kConflictingSources;
    }
    options.token_source = source;
  } else if (word.substr(0, kLockPrefix.size()) == kLockPrefix) {
    const std::string_view name = word.substr(kLockPrefix.size());
    if (name.empty()) return OptionStatus::kEmptyLockName;
    if (!options.lock_name.empty() && options.lock_name != name) {
      return OptionStatus::kConflictingLocks;
    }
    options.lock_name = name;
  } else {
    return OptionStatus::kUnknown;
  }
  return OptionStatus::kOk;
}

OptionStatus FinishGuardOptions(const GuardOptions &options) noexcept {
  if (options.allow_unset && !options.lock_name.empty()) return OptionStatus::kUnsetUnderLock;
  if (options.fence_reads && options.lock_name.empty()) return OptionStatus::kReadsWithoutLock;
  if (options.token_source != TokenSource::kUnknown && !options.lock_name.empty()) {
    return OptionStatus::kSourceUnderLock;
  }
  return OptionStatus::kOk;
}

GuardVerdict DecideGuard(const GuardInput &in, const GuardOptions &options) noexcept {
  // A writer that does not say which token it holds cannot be fenced, so by
  // default it is refused.  With allow_unset the column keeps its old value,
  // which is the row's own high-water mark, so the ordering still holds.
  if (!in.column_assigned && !options.allow_unset) return GuardVerdict::kRejectMissing;
  if (in.new_is_null) {
    // Unassigned + allow_unset copies OLD into NEW; NULL then means the row
    // was never fenced and stays so.  An explicit NULL is a missing token.
    if (!in.column_assigned && in.old_is_null) return GuardVerdict::kAccept;
    return GuardVerdict::kRejectMissing;
  }
  if (in.old_is_null) return GuardVerdict::kAccept;  // first fenced write
  if (in.new_token < in.old_token) {
    return options.skip ? GuardVerdict::kSkip : GuardVerdict::kRejectStale;
  }
  return GuardVerdict::kAccept;  // equal: the same holder writing again
}

LockWriteDecision DecideLockWrite(const LockWriteInput &in, const GuardOptions &options) noexcept {
  LockWriteDecision out{GuardVerdict::kRejectMissing, 0, false};

  // The token the write is made under: the row's, when the statement gives
  // one; otherwise the transaction's.  An explicit NULL is never replaced:
  // the statement said "no token".
  // (A trigger cannot tell an INSERT that omits the column from one that
  // writes NULL into it: both are filled from the transaction's token.)
  const bool row_gives_token = in.kind == WriteKind::kInsert   ? !in.new_is_null
                               : in.kind == WriteKind::kUpdate ? in.column_assigned
                                                               : false;
  if (row_gives_token) {
    if (in.new_is_null) return out;
    out.write_token = in.new_token;
  } else if (in.presented) {
    out.write_token = in.presented_token;
    out.fill_from_presented = in.kind != WriteKind::kDelete;
  } else {
    return out;
  }

  // The row's own mark still holds under an exclusive lock: it may be above
  // the lock's if the row was written under another lock or before the
  // fence was set up.  Holders of a shared lock or of a semaphore's permits
  // write side by side, so a row's token says nothing about its writer.
  const bool has_old =
      in.lock_kind == LockKind::kExclusive && in.kind != WriteKind::kInsert && !in.old_is_null;
  if (has_old && out.write_token < in.old_token) {
    out.verdict = options.skip ? GuardVerdict::kSkip : GuardVerdict::kRejectStale;
    return out;
  }
  out.verdict = GuardVerdict::kAccept;
  return out;
}

HighWaterVerdict JudgeAgainstHighWater(Token token, bool mark_known, Token mark) noexcept {
  if (!mark_known || token > mark) return HighWaterVerdict::kRaise;
  if (token < mark) return HighWaterVerdict::kStale;
  return HighWaterVerdict::kAccept;
}

HighWaterVerdict JudgeAgainstSharedMark(Token token, bool mark_known, Token mark) noexcept {
  return !mark_known || token >= mark ? HighWaterVerdict::kAccept : HighWaterVerdict::kStale;
}

OriginVerdict JudgeTokenOrigin(TokenSource source, bool lock_grants_leases, Token token,
                               Token highest_granted) noexcept {
  if (source != TokenSource::kGranted) return OriginVerdict::kAccept;
  if (lock_grants_leases) return OriginVerdict::kAboveLeasedMark;
  return token <= highest_granted ? OriginVerdict::kAccept : OriginVerdict::kAboveAllGrants;
}

}  // namespace pg_fencing

#include "no_postgres.hpp"  // last: checks that nothing above brought in PostgreSQL
