// The accept/reject rule of the fencing guard (see include/pg_fencing/core.hpp).
#include "pg_fencing/core.hpp"

namespace pg_fencing {

OptionStatus ApplyGuardOption(std::string_view word, GuardOptions &options) noexcept {
  if (word == "allow_unset") {
    options.allow_unset = true;
  } else if (word == "skip") {
    options.skip = true;
  } else {
    return OptionStatus::kUnknown;
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

}  // namespace pg_fencing
