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

void Heartbeat::CheckAtRiskFraction(milliseconds ttl, milliseconds period, double fraction,
                                    const std::string &what) {
  CheckTiming(ttl, period, what);
  const milliseconds effective = period.count() > 0 ? period : std::max(ttl / 3, milliseconds(1));
  const double after = static_cast<double>(ttl.count()) * fraction;
  if (!(after > static_cast<double>(effective.count()) &&
        after < static_cast<double>((ttl - SafetyMargin(ttl)).count()))) {
    throw std::invalid_argument(
        "at-risk fraction times ttl must lie between the heartbeat period and ttl minus the "
        "safety margin, or the warning comes for every renewal or never (" +
        what + ")");
  }
}

Heartbeat::Heartbeat(Options options, Clock::time_point valid_from)
    : options_(std::move(options)), valid_from_(valid_from) {
  if (options_.on_at_risk) {
    CheckAtRiskFraction(options_.ttl, options_.period, options_.at_risk_fraction, "heartbeat");
  } else {
    CheckTiming(options_.ttl, options_.period, "heartbeat");
  }
}

Heartbeat::~Heartbeat() {
  try {
    Stop();
  } catch (...) {
  }
  // Stop() joins the threads other than its caller's.  One that called it
  // (from on_lost or on_at_risk) is finishing: wait for it, unless this is
  // it; std::thread's destructor would terminate the process if it were
  // still joinable.
  for (std::thread *thread : {&thread_, &watcher_}) {
    if (!thread->joinable()) continue;
    if (thread->get_id() == std::this_thread::get_id()) {
      thread->detach();
    } else {
      thread->join();
    }
  }
}

void Heartbeat::Start() {
  // Each thread's first act is to take the mutex, so it sees its id.
  std::lock_guard<std::mutex> lock(mutex_);
  thread_ = std::thread(&Heartbeat::Run, this);
  thread_id_ = thread_.get_id();
  if (options_.on_at_risk) {
    watcher_ = std::thread(&Heartbeat::Watch, this);
    watcher_id_ = watcher_.get_id();
  }
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
  bool on_watcher;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return false;
    stopped_ = true;
    on_thread = std::this_thread::get_id() == thread_id_;
    on_watcher = std::this_thread::get_id() == watcher_id_;
  }
  wake_.notify_all();
  // Neither thread waits for the other, so whichever calls this can wait
  // for the other one.
  if (!on_thread && thread_.joinable()) thread_.join();
  if (!on_watcher && watcher_.joinable()) watcher_.join();
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
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Once, and not after the holder let go.
    if (stopped_ || !lost_reason_.empty()) return;
    lost_reason_ = reason;
    // on_lost never overlaps on_at_risk: the watch thread reports the loss
    // once on_at_risk has returned.
    deferred = in_at_risk_;
    lost_pending_ = deferred;
  }
  wake_.notify_all();  // the watch thread has nothing left to watch
  if (!deferred) DeliverLost(reason);
}

void Heartbeat::DeliverLost(const std::string &reason) {
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
        // A late renewal that was sent long ago does not end the stall: the
        // lock is as short-lived as before, and one warning is enough.
        if (Now() < valid_from_ + AtRiskAfter()) warned_ = false;
        wake_.notify_all();  // the watch thread's next time to look moved
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

Heartbeat::Clock::duration Heartbeat::AtRiskAfter() const noexcept {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
      static_cast<double>(options_.ttl.count()) * options_.at_risk_fraction));
}

void Heartbeat::Watch() {
  try {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (stopped_ || !lost_reason_.empty()) return;
      const Clock::time_point now = Now();
      const Clock::time_point deadline = DeadlineLocked();
      if (now >= deadline) {
        // Too late to warn: the heartbeat thread reports the loss (and
        // wakes us when it has).
        wake_.wait_for(lock, Period());
        continue;
      }
      const Clock::time_point at_risk = valid_from_ + AtRiskAfter();
      if (now < at_risk || warned_) {
        // Durations, as in Run(): the clock may be a test's.
        wake_.wait_for(lock, (now < at_risk ? at_risk : deadline) - now);
        continue;
      }
      warned_ = true;
      in_at_risk_ = true;
      const auto ms = [](Clock::duration d) {
        return std::to_string(std::chrono::duration_cast<milliseconds>(d).count());
      };
      const std::string reason = "no renewal has succeeded for " + ms(now - valid_from_) +
                                 " ms of the " + std::to_string(options_.ttl.count()) +
                                 " ms ttl; lost in " + ms(deadline - now) + " ms unless one does";
      lock.unlock();
      try {
        options_.on_at_risk(reason);
      } catch (...) {
        // As for on_lost: nowhere to go on this thread.
      }
      lock.lock();
      in_at_risk_ = false;
      if (lost_pending_) {
        lost_pending_ = false;
        // Not after Stop() (on_at_risk may have called it): the holder let go.
        if (stopped_) return;
        const std::string lost = lost_reason_;
        lock.unlock();
        DeliverLost(lost);
        return;
      }
    }
  } catch (...) {
    // Only the mutex or an allocation could throw: no warning then, the
    // heartbeat thread still reports the loss.
  }
}

}  // namespace pg_fencing::client
