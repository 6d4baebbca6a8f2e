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
  {
    // Each thread's first act is to take the mutex, so it sees its id.
    std::lock_guard<std::mutex> lock(mutex_);
    if (!options_.group) {
      thread_ = std::thread(&Heartbeat::Run, this);
      thread_id_ = thread_.get_id();
    }
    if (options_.on_at_risk) {
      watcher_ = std::thread(&Heartbeat::Watch, this);
      watcher_id_ = watcher_.get_id();
    }
  }
  if (options_.group) options_.group->Add(this);
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
  // Leaves its group, waiting for a report to this lock in progress (its
  // on_lost) unless called on the group's thread, which makes it.
  if (options_.group) options_.group->Remove(this);
  // Neither thread waits for the other, so whichever calls this can wait
  // for the other one.
  if (!on_thread && thread_.joinable()) thread_.join();
  if (!on_watcher && watcher_.joinable()) watcher_.join();
  return true;
}

bool Heartbeat::OnHeartbeatThread() const {
  if (options_.group) return options_.group->OnThread();
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

Heartbeat::Due Heartbeat::DueLocked(Clock::time_point now) const {
  Due due;
  if (stopped_ || !lost_reason_.empty()) return due;  // kDone
  due.deadline = DeadlineLocked();
  due.period = Period();
  due.next = valid_from_ + due.period;
  if (now >= due.deadline) {
    due.state = Due::kLate;
  } else {
    due.state = now < due.next ? Due::kWaiting : Due::kDue;
  }
  return due;
}

Heartbeat::Due Heartbeat::Look(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return DueLocked(now);
}

void Heartbeat::ReportLate() {
  // Woken late (the process was paused): too late to renew, and a lock that
  // may have been given away must not be revived.
  MarkLost("not renewed before the lock's safe deadline (" + MarginText() +
           "); was the process paused?");
}

bool Heartbeat::Apply(Renewal outcome, Clock::time_point sent, const std::string &failure) {
  if (failure.empty() && outcome == Renewal::kRenewed) {
    std::lock_guard<std::mutex> lock(mutex_);
    valid_from_ = std::max(valid_from_, sent);
    // A late renewal that was sent long ago does not end the stall: the
    // lock is as short-lived as before, and one warning is enough.
    if (Now() < valid_from_ + AtRiskAfter()) warned_ = false;
    wake_.notify_all();  // the watch thread's next time to look moved
    return true;
  }
  if (failure.empty() && outcome == Renewal::kTimedOut) {
    ReportTimedOut();
  } else {
    MarkLost(failure.empty() ? "renewal refused: " + options_.refused
                             : "renewal failed: " + failure);
  }
  return false;
}

void Heartbeat::Run() {
  try {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const Clock::time_point now = Now();
      const Due due = DueLocked(now);
      if (due.state == Due::kDone) return;
      if (due.state == Due::kLate) {
        lock.unlock();
        ReportLate();
        return;
      }
      if (due.state == Due::kWaiting) {
        // A duration, not a time point: the clock may be a test's.  Wake for
        // the deadline too, in case the renewal is due after it.
        wake_.wait_for(lock, std::min(due.next, due.deadline) - now);
        continue;
      }
      lock.unlock();

      const Clock::time_point sent = Now();
      std::string failure;
      Renewal outcome = Renewal::kRefused;
      try {
        outcome = options_.renew(due.deadline);
      } catch (const std::exception &error) {
        failure = error.what();
      } catch (...) {
        failure = "unknown exception";
      }
      if (!Apply(outcome, sent, failure)) return;
      lock.lock();
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

// ---- HeartbeatGroup: one thread for many locks ------------------------------
//
// The group's thread looks at every lock (Heartbeat::Look, under the group's
// mutex and then the lock's: that order only), reports those it finds past
// their deadline, and sends the batch of those due.  Reports (Answer,
// TimedOut, ReportLate: on_lost may run) are made outside the group's mutex,
// each to a lock "claimed" under it: Remove() from another thread takes the
// lock out of the group and of the round, and waits only while it is
// claimed, so that once Stop() returned the group never touches it again,
// and a Stop() never waits for a batch in flight, nor for another lock's
// on_lost.  From the group's thread (an on_lost that stops or destroys a
// lock of the group) Remove() waits for nothing: the thread is there.

HeartbeatGroup::HeartbeatGroup(Options options) : options_(std::move(options)) {
  if (!options_.renew) throw std::invalid_argument("a heartbeat group needs a renewal function");
}

HeartbeatGroup::~HeartbeatGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // cannot happen: a lock that reports keeps the group
    } else {
      thread_.join();
    }
  }
}

std::size_t HeartbeatGroup::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return locks_.size();
}

bool HeartbeatGroup::OnThread() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::this_thread::get_id() == thread_id_;
}

HeartbeatGroup::Clock::time_point HeartbeatGroup::Now() const {
  return options_.now ? options_.now() : Clock::now();
}

void HeartbeatGroup::Add(Heartbeat *heartbeat) {
  std::lock_guard<std::mutex> lock(mutex_);
  locks_.push_back(heartbeat);
  if (!thread_.joinable()) {
    // The thread's first act is to take the mutex, so it sees its id.
    thread_ = std::thread(&HeartbeatGroup::Run, this);
    thread_id_ = thread_.get_id();
  }
  wake_.notify_all();
}

void HeartbeatGroup::Remove(Heartbeat *heartbeat) {
  std::unique_lock<std::mutex> lock(mutex_);
  locks_.erase(std::remove(locks_.begin(), locks_.end(), heartbeat), locks_.end());
  round_.erase(std::remove(round_.begin(), round_.end(), heartbeat), round_.end());
  wake_.notify_all();
  if (std::this_thread::get_id() == thread_id_) return;
  claimed_.wait(lock, [&] { return claim_ != heartbeat; });
}

bool HeartbeatGroup::Claim(Heartbeat *heartbeat) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(round_.begin(), round_.end(), heartbeat) == round_.end()) return false;
  claim_ = heartbeat;
  return true;
}

void HeartbeatGroup::Unclaim() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    claim_ = nullptr;
  }
  claimed_.notify_all();
}

void HeartbeatGroup::Run() {
  for (;;) {
    try {
      Loop();
      return;
    } catch (...) {
      // Only a mutex or an allocation could throw (renew's exceptions are
      // the round's): what the group renews now is lost, as when a lock's
      // own heartbeat thread fails; what comes later is renewed.
      std::vector<Heartbeat *> locks;
      try {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          locks = locks_;
          round_ = locks_;
        }
        for (Heartbeat *heartbeat : locks) {
          if (!Claim(heartbeat)) continue;
          heartbeat->MarkLost("heartbeat thread failed");
          Unclaim();
        }
        std::lock_guard<std::mutex> lock(mutex_);
        round_.clear();
      } catch (...) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void HeartbeatGroup::Loop() {
  using Due = Heartbeat::Due;
  bool idle = true;  // no renewal since the last idle call
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (ending_) return;
    if (locks_.empty()) {
      if (!idle) {
        idle = true;
        if (options_.idle) {
          lock.unlock();
          try {
            options_.idle();
          } catch (...) {
          }
          lock.lock();
        }
        continue;
      }
      wake_.wait(lock);
      continue;
    }
    const Clock::time_point now = Now();
    std::vector<Heartbeat *> late;
    std::vector<std::pair<Heartbeat *, Due>> live;
    bool any_due = false;
    Clock::time_point wake_at = Clock::time_point::max();
    for (Heartbeat *heartbeat : locks_) {
      const Due due = heartbeat->Look(now);
      switch (due.state) {
        case Due::kDone:
          break;  // lost or stopped: it leaves when its holder stops it
        case Due::kLate:
          late.push_back(heartbeat);
          break;
        case Due::kWaiting:
          wake_at = std::min(wake_at, std::min(due.next, due.deadline));
          live.emplace_back(heartbeat, due);
          break;
        case Due::kDue:
          any_due = true;
          live.emplace_back(heartbeat, due);
          break;
      }
    }
    if (late.empty() && !any_due) {
      // Durations, as in Heartbeat::Run: the clock may be a test's.
      if (wake_at == Clock::time_point::max()) {
        wake_.wait(lock);
      } else {
        wake_.wait_for(lock, wake_at - now);
      }
      continue;
    }
    // The batch: what is due or due within half its period, then whatever
    // must be renewed before the batch's deadline (including a lock only
    // moves that deadline earlier, and one pass takes all it concerns).
    std::vector<Heartbeat *> batch;
    Clock::time_point deadline = Clock::time_point::max();
    std::vector<bool> taken(live.size(), false);
    if (any_due) {
      for (std::size_t i = 0; i < live.size(); ++i) {
        const Due &due = live[i].second;
        if (due.state == Due::kDue || due.next - now <= due.period / 2) {
          taken[i] = true;
          deadline = std::min(deadline, due.deadline);
        }
      }
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (!taken[i] && live[i].second.deadline <= deadline) taken[i] = true;
      }
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (taken[i]) batch.push_back(live[i].first);
      }
    }
    round_ = late;
    round_.insert(round_.end(), batch.begin(), batch.end());
    lock.unlock();

    for (Heartbeat *heartbeat : late) {
      if (!Claim(heartbeat)) continue;
      heartbeat->ReportLate();
      Unclaim();
    }
    if (!batch.empty()) {
      idle = false;
      Round round(*this, std::move(batch));
      try {
        options_.renew(round);
        round.Finish();
      } catch (const std::exception &error) {
        round.Fail(error.what());
      } catch (...) {
        round.Fail("unknown exception");
      }
    }

    lock.lock();
    round_.clear();
  }
}

HeartbeatGroup::Round::Round(HeartbeatGroup &group, std::vector<Heartbeat *> locks)
    : group_(group),
      heartbeats_(std::move(locks)),
      locks_(heartbeats_.begin(), heartbeats_.end()),
      answered_(heartbeats_.size(), false) {}

HeartbeatGroup::Clock::time_point HeartbeatGroup::Round::deadline() const {
  Clock::time_point earliest = Clock::time_point::max();
  std::lock_guard<std::mutex> lock(group_.mutex_);
  for (std::size_t i = 0; i < heartbeats_.size(); ++i) {
    if (answered_[i]) continue;
    Heartbeat *heartbeat = heartbeats_[i];
    if (std::find(group_.round_.begin(), group_.round_.end(), heartbeat) == group_.round_.end()) {
      continue;  // it left the group
    }
    earliest = std::min(earliest, heartbeat->deadline());
  }
  return earliest;
}

void HeartbeatGroup::Round::Answer(std::size_t i, Clock::time_point sent,
                                   Heartbeat::Renewal renewal, const std::string &failure) {
  if (i >= heartbeats_.size() || answered_[i]) return;
  answered_[i] = true;
  if (!group_.Claim(heartbeats_[i])) return;
  try {
    // kTimedOut is no answer: what TimedOut() says of it.
    if (renewal == Heartbeat::Renewal::kTimedOut && failure.empty()) {
      if (group_.Now() >= heartbeats_[i]->deadline()) heartbeats_[i]->ReportTimedOut();
    } else {
      heartbeats_[i]->Apply(renewal, sent, failure);
    }
  } catch (...) {
    group_.Unclaim();
    throw;
  }
  group_.Unclaim();
}

void HeartbeatGroup::Round::TimedOut() {
  const Clock::time_point now = group_.Now();
  for (std::size_t i = 0; i < heartbeats_.size(); ++i) {
    if (answered_[i]) continue;
    Heartbeat *heartbeat = heartbeats_[i];
    if (!group_.Claim(heartbeat)) {
      answered_[i] = true;  // it left the group
      continue;
    }
    if (now >= heartbeat->deadline()) {
      answered_[i] = true;
      heartbeat->ReportTimedOut();
    }
    group_.Unclaim();
  }
}

void HeartbeatGroup::Round::Fail(const std::string &failure) {
  for (std::size_t i = 0; i < heartbeats_.size(); ++i) {
    try {
      Answer(i, Clock::time_point(), Heartbeat::Renewal::kRefused,
             failure.empty() ? std::string("unknown failure") : failure);
    } catch (...) {
    }
  }
}

void HeartbeatGroup::Round::Finish() {
  // Locks renew left unanswered: lost if their deadline has passed, asked
  // again in the next round otherwise.
  TimedOut();
}

}  // namespace pg_fencing::client
