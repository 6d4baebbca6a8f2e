// RenewedLock: a lock of another service kept alive by a heartbeat thread
// (see renewed_lock.hpp).  The same timing rules as
// pg_fencing::client::Lease, without its pipelined, cancellable renewals: a
// session's Renew() bounds its own wait by the budget it is given.
#include "renewed_lock.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "pg_fencing/client.hpp"

namespace pg_fencing::demo {

namespace {

using std::chrono::milliseconds;

milliseconds SafetyMargin(milliseconds ttl) { return client::Lease::SafetyMargin(ttl); }

std::string MarginText(milliseconds ttl) {
  return "ttl minus " + std::to_string(SafetyMargin(ttl).count()) +
         " ms since the last successful renewal was sent";
}

}  // namespace

RenewedLock::RenewedLock(std::unique_ptr<LockSession> session, Token token, milliseconds ttl,
                         Clock::time_point sent, std::function<void(const std::string &)> on_lost)
    : session_(std::move(session)),
      token_(token),
      ttl_(ttl),
      on_lost_(std::move(on_lost)),
      valid_from_(sent) {
  heartbeat_ = std::thread(&RenewedLock::HeartbeatLoop, this);
}

RenewedLock::~RenewedLock() {
  if (!StopHeartbeat()) return;  // released already
  try {
    session_->Release();
  } catch (...) {
    // A destructor must not throw; the service ends the lock after its ttl.
  }
}

Clock::time_point RenewedLock::DeadlineLocked() const {
  return valid_from_ + ttl_ - SafetyMargin(ttl_);
}

bool RenewedLock::held() const {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  return !stopping_ && lost_reason_.empty() && now < DeadlineLocked();
}

void RenewedLock::CheckHeld() const {
  if (held()) return;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason = stopping_               ? "released by its holder"
             : !lost_reason_.empty() ? lost_reason_
                                     : "not renewed within " + MarginText(ttl_);
  }
  throw client::LeaseLostError(session_->Describe() + " (token " + std::to_string(token_) +
                               ") is no longer held: " + reason);
}

bool RenewedLock::Release() {
  if (!StopHeartbeat()) return false;
  // Even a lock we count as lost may still be ours in the service (the
  // safety margin): give it back rather than let it run out.  Both services
  // release only what is still ours.
  return session_->Release();
}

bool RenewedLock::StopHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  return true;
}

void RenewedLock::MarkLost(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || !lost_reason_.empty()) return;
    lost_reason_ = reason;
  }
  if (!on_lost_) return;
  try {
    on_lost_(reason);
  } catch (...) {
    // Nowhere to go on this thread.
  }
}

void RenewedLock::HeartbeatLoop() {
  try {
    RenewUntilStoppedOrLost();
  } catch (...) {
    // Only the mutex or an allocation could throw; never let it out of the thread.
    try {
      MarkLost("heartbeat thread failed");
    } catch (...) {
    }
  }
}

void RenewedLock::RenewUntilStoppedOrLost() {
  const milliseconds period = std::max(ttl_ / 3, milliseconds(1));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stopping_) return;
    const Clock::time_point now = Clock::now();
    const Clock::time_point deadline = DeadlineLocked();
    if (now >= deadline) {
      // Woken late (the process was paused): too late to renew, and a lock
      // that may have been given away must not be revived.
      lock.unlock();
      MarkLost("not renewed before the lock's safe deadline (" + MarginText(ttl_) +
               "); was the process paused?");
      return;
    }
    const Clock::time_point next = valid_from_ + period;
    if (now < next) {
      wake_.wait_until(lock, std::min(next, deadline));
      continue;
    }
    lock.unlock();

    const Clock::time_point sent = Clock::now();
    std::string failure;
    bool renewed = false;
    try {
      renewed = session_->Renew(std::chrono::ceil<milliseconds>(deadline - sent));
    } catch (const std::exception &error) {
      failure = error.what();
    }
    if (!renewed) {
      MarkLost(failure.empty() ? "renewal refused: " + session_->Describe() +
                                     " is no longer ours (it expired or was taken over)"
                               : "renewal failed: " + failure);
      return;
    }
    lock.lock();
    valid_from_ = std::max(valid_from_, sent);
  }
}

}  // namespace pg_fencing::demo
