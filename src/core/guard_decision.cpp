// The accept/reject rule of the fencing guard (see include/pg_fencing/core.hpp).
#include "pg_fencing/core.hpp"

namespace pg_fencing {

OptionStatus ApplyGuardOption(std::string_view word, GuardOptions &options) noexcept {
  constexpr std::string_view kLockPrefix = "lock=";
  if (word == "allow_unset") {
    options.allow_unset = true;
  } else if (word == "skip") {
    options.skip = true;
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

  // The row's own mark still holds: it may be above the lock's if the row
  // was written under another lock or before the fence was set up.
  const bool has_old = in.kind != WriteKind::kInsert && !in.old_is_null;
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

LockFence *TransactionFences::Find(std::string_view lock_name) noexcept {
  for (int i = 0; i < count_; ++i) {
    if (fences_[i].lock_name == lock_name) return &fences_[i];
  }
  return nullptr;
}

LockFence *TransactionFences::FindOrAdd(std::string_view lock_name) noexcept {
  if (LockFence *found = Find(lock_name)) return found;
  if (count_ == kCapacity) return nullptr;
  LockFence &fence = fences_[count_++];
  fence = LockFence{};
  fence.lock_name = lock_name;
  return &fence;
}

namespace {

void SyncPresented(LockFence &fence) noexcept {
  fence.presented = fence.presentation_depth > 0;
  if (fence.presented) {
    const Presentation &top = fence.presentations[fence.presentation_depth - 1];
    fence.presented_token = top.token;
    fence.presented_in = top.subxact;
  }
}

}  // namespace

void TransactionFences::Present(LockFence &fence, Token token, SubTransactionId subxact) noexcept {
  int &depth = fence.presentation_depth;
  if (depth > 0 && fence.presentations[depth - 1].subxact == subxact) {
    fence.presentations[depth - 1].token = token;  // again in the same (sub)transaction
  } else {
    if (depth == LockFence::kMaxNesting) {
      for (int i = 1; i < depth; ++i) fence.presentations[i - 1] = fence.presentations[i];
      --depth;
    }
    fence.presentations[depth++] = Presentation{token, subxact};
  }
  SyncPresented(fence);
}

void TransactionFences::Lock(LockFence &fence, bool mark_known, Token mark,
                             SubTransactionId subxact) noexcept {
  // Remember the latest subtransaction that read or moved the mark: if it
  // aborts, its row lock or its raise may be gone, so the entry is
  // forgotten and the next write locks and reads the mark again.  Forgetting
  // too much only costs a query; trusting too much would let a stale write in.
  fence.locked = true;
  fence.mark_known = mark_known;
  fence.mark = mark;
  fence.locked_in = subxact;
}

void TransactionFences::AbortSubTransaction(SubTransactionId subxact) noexcept {
  for (int i = 0; i < count_; ++i) {
    LockFence &fence = fences_[i];
    while (fence.presentation_depth > 0 &&
           fence.presentations[fence.presentation_depth - 1].subxact >= subxact) {
      --fence.presentation_depth;
    }
    SyncPresented(fence);
    if (fence.locked && fence.locked_in >= subxact) fence.locked = false;
  }
}

}  // namespace pg_fencing
