// Heartbeat: the one renewal loop (see heartbeat.hpp).
#include "pg_fencing/heartbeat.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>

namespace pg_fencing::client {

using std::chrono::milliseconds;

milliseconds Heartbeat::SafetyMargin(milliseconds ttl) noexcept {
  return std::min(std::max(ttl / 10, milliseconds(50)), ttl / 2);
}

void Heartbeat::CheckTiming(milliseconds ttl, milliseconds period, const std::string &what) {
  if (ttl <= milliseconds(0)) {
    throw std::invalid_argument("lease ttl must be positive (" + what + ")");
  }
  if (period < milliseconds(0)) {
    throw std::invalid_argument("heartbeat must not be negative (" + what + ")");
  }
  const milliseconds effective = period.count() > 0 ? period : std::max(ttl / 3, milliseconds(1));
  if (effective >= ttl - SafetyMargin(ttl)) {
    throw std::invalid_argument(
        "heartbeat must be shorter than ttl minus the safety margin, or the lease lapses between "
        "renewals (" +
        what + ")");
  }
}

Heartbeat::Heartbeat(Options options, Clock::time_point valid_from)
    : options_(std::move(options)), valid_from_(valid_from) {
  CheckTiming(options_.ttl, options_.period, "heartbeat");
}

Heartbeat::~Heartbeat() {
  try {
    Stop();
  } catch (...) {
  }
  // Stop() joins unless it runs on the thread itself; std::thread's
  // destructor would terminate the process if it were still joinable.
  if (thread_.joinable()) thread_.detach();
}

void Heartbeat::Start() {
  // The thread's first act is to take the mutex, so it sees thread_id_.
  std::lock_guard<std::mutex> lock(mutex_);
  thread_ = std::thread(&Heartbeat::Run, this);
  thread_id_ = thread_.get_id();
}

Heartbeat::Clock::time_point Heartbeat::Now() const {
  return options_.now ? options_.now() : Clock::now();
}

milliseconds Heartbeat::Period() const noexcept {
  if (options_.period.count() > 0) return options_.period;
  return std::max(options_.ttl / 3, milliseconds(1));
}

Heartbeat::Clock::time_point Heartbeat::DeadlineLocked() const {
  return valid_from_ + options_.ttl - SafetyMargin(options_.ttl);
}

Heartbeat::Clock::time_point Heartbeat::deadline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return DeadlineLocked();
}

std::string Heartbeat::MarginText() const {
  return "ttl minus " + std::to_string(SafetyMargin(options_.ttl).count()) +
         " ms since the last successful renewal was sent";
}

bool Heartbeat::held() const {
  const Clock::time_point now = Now();
  std::lock_guard<std::mutex> lock(mutex_);
  return !stopped_ && lost_reason_.empty() && now < DeadlineLocked();
}

std::string Heartbeat::lost_reason() const {
  const Clock::time_point now = Now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!lost_reason_.empty()) return lost_reason_;
  if (stopped_) return "released by its holder";
  if (now >= DeadlineLocked()) {
    // The thread has not run since the deadline passed (say, the whole
    // process was paused); it will report the same when it does.
    return "not renewed within " + MarginText();
  }
  return std::string();
}

bool Heartbeat::Stop() {
  bool on_thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return false;
    stopped_ = true;
    on_thread = std::this_thread::get_id() == thread_id_;
  }
  wake_.notify_all();
  if (!on_thread && thread_.joinable()) thread_.join();
  return true;
}

bool Heartbeat::OnHeartbeatThread() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::this_thread::get_id() == thread_id_;
}

void Heartbeat::ReportTimedOut() {
  MarkLost("renewal got no answer before the lock's safe deadline (" + MarginText() + ")");
}

void Heartbeat::MarkLost(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Once, and not after the holder let go.
    if (stopped_ || !lost_reason_.empty()) return;
    lost_reason_ = reason;
  }
  if (!options_.on_lost) return;
  try {
    options_.on_lost(reason);
  } catch (...) {
    // The callback's exception has nowhere to go on this thread.
  }
}

void Heartbeat::Run() {
  try {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (stopped_ || !lost_reason_.empty()) return;
      const Clock::time_point now = Now();
      const Clock::time_point deadline = DeadlineLocked();
      if (now >= deadline) {
        // Woken late (the process was paused): too late to renew, and a
        // lock that may have been given away must not be revived.
        lock.unlock();
        MarkLost("not renewed before the lock's safe deadline (" + MarginText() +
                 "); was the process paused?");
        return;
      }
      const Clock::time_point next = valid_from_ + Period();
      if (now < next) {
        // A duration, not a time point: the clock may be a test's.  Wake for
        // the deadline too, in case the renewal is due after it.
        wake_.wait_for(lock, std::min(next, deadline) - now);
        continue;
      }
      lock.unlock();

      const Clock::time_point sent = Now();
      std::string failure;
      Renewal outcome = Renewal::kRefused;
      try {
        outcome = options_.renew(deadline);
      } catch (const std::exception &error) {
        failure = error.what();
      } catch (...) {
        failure = "unknown exception";
      }
      if (outcome == Renewal::kRenewed) {
        lock.lock();
        valid_from_ = std::max(valid_from_, sent);
        continue;
      }
      if (outcome == Renewal::kTimedOut) {
        ReportTimedOut();
      } else {
        MarkLost(failure.empty() ? "renewal refused: " + options_.refused
                                 : "renewal failed: " + failure);
      }
      return;
    }
  } catch (...) {
    // Only the mutex or an allocation could throw; never let it out of the thread.
    try {
      MarkLost("heartbeat thread failed");
    } catch (...) {
    }
  }
}

}  // namespace pg_fencing::client
