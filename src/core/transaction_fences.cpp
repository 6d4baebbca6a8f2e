// What a transaction knows per lock (see src/core/transaction_fences.hpp).
#include "transaction_fences.hpp"

namespace pg_fencing {

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

void TransactionFences::Present(LockFence &fence, Token token, SubxactId subxact) noexcept {
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

void TransactionFences::Lock(LockFence &fence, bool mark_known, Token mark, SubxactId subxact,
                             bool shared, bool permit) noexcept {
  // Remember the latest subtransaction that read or moved the mark: if it
  // aborts, its row lock or its raise may be gone, so the entry is
  // forgotten and the next write locks and reads the mark again.  Forgetting
  // too much only costs a query; trusting too much would let a stale write in.
  fence.locked = true;
  fence.shared = shared;
  fence.permit = permit;
  fence.mark_known = mark_known;
  fence.mark = mark;
  fence.locked_in = subxact;
}

void TransactionFences::AbortSubTransaction(SubxactId subxact) noexcept {
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

#include "no_postgres.hpp"  // last: checks that nothing above brought in PostgreSQL
