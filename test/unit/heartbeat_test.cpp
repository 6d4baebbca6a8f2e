// Unit tests of pg_fencing::client::Heartbeat (include/pg_fencing/heartbeat.hpp),
// the renewal loop of every lock the client library keeps alive, and of
// HeartbeatGroup, which renews many from one thread (a Client's): a fake
// renewal stands for the service, and a clock the test can jump forward
// stands for a paused process.  No server.
#include "pg_fencing/heartbeat.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pg_fencing::client {
namespace {

using namespace std::chrono_literals;
using Clock = Heartbeat::Clock;
using std::chrono::milliseconds;

// The monotonic clock plus an offset the test moves: jumping it forward is
// what a process sees after a pause (SIGSTOP, a GC pause) it never noticed.
class JumpingClock {
 public:
  Clock::time_point Now() const { return Clock::now() + offset_.load(); }
  void Jump(Clock::duration by) { offset_ = offset_.load() + by; }
  std::function<Clock::time_point()> Function() {
    return [this] { return Now(); };
  }

 private:
  std::atomic<Clock::duration> offset_{Clock::duration::zero()};
};

// Records what the heartbeat did.
class Probe {
 public:
  void Renewed(Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++renewals_;
    last_deadline_ = deadline;
  }
  void Lost(const std::string &reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++lost_calls_;
    reason_ = reason;
    cv_.notify_all();
  }
  bool WaitLost(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return lost_calls_ > 0; });
  }
  int renewals() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return renewals_;
  }
  int lost_calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_calls_;
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reason_;
  }
  Clock::time_point last_deadline() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_deadline_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int renewals_ = 0;
  int lost_calls_ = 0;
  std::string reason_;
  Clock::time_point last_deadline_;
};

Heartbeat::Options MakeOptions(Probe &probe, JumpingClock &clock, milliseconds ttl,
                               std::function<Heartbeat::Renewal()> answer) {
  Heartbeat::Options options;
  options.ttl = ttl;
  options.renew = [&probe, answer](Clock::time_point deadline) {
    probe.Renewed(deadline);
    return answer();
  };
  options.refused = "the fake service said no";
  options.on_lost = [&probe](const std::string &reason) { probe.Lost(reason); };
  options.now = clock.Function();
  return options;
}

Heartbeat::Renewal Renewed() { return Heartbeat::Renewal::kRenewed; }

TEST(HeartbeatTest, RenewalsKeepTheLockHeldAcrossSeveralTtls) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(MakeOptions(probe, clock, 300ms, Renewed), clock.Now());
  heartbeat.Start();
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(heartbeat.held()) << "after " << (i + 1) * 100
                                  << " ms: " << heartbeat.lost_reason();
  }
  // Every ttl / 3: about ten in a second.
  EXPECT_GE(probe.renewals(), 5);
  EXPECT_EQ(probe.lost_calls(), 0) << probe.reason();
  EXPECT_EQ(heartbeat.lost_reason(), "");
}

TEST(HeartbeatTest, WithoutRenewalsTheLockLapsesAtTtlMinusTheMargin) {
  Probe probe;
  JumpingClock clock;
  Heartbeat::Options options = MakeOptions(probe, clock, 1000ms, Renewed);
  const Clock::time_point sent = clock.Now();
  Heartbeat heartbeat(std::move(options), sent);  // not started: nothing renews
  EXPECT_EQ(Heartbeat::SafetyMargin(1000ms), 100ms);
  EXPECT_EQ(heartbeat.deadline(), sent + 900ms);
  EXPECT_TRUE(heartbeat.held());
  clock.Jump(sent + 900ms - clock.Now() - 1ms);
  EXPECT_TRUE(heartbeat.held());
  clock.Jump(1ms);
  EXPECT_FALSE(heartbeat.held());
  EXPECT_NE(heartbeat.lost_reason().find("not renewed within ttl minus 100 ms"), std::string::npos)
      << heartbeat.lost_reason();
}

TEST(HeartbeatTest, DeadlineMovesFromTheRenewalsSendTimeNotItsAnswer) {
  Probe probe;
  JumpingClock clock;
  std::atomic<int> calls{0};
  std::atomic<long long> sent_ns{0};
  Heartbeat::Options options = MakeOptions(probe, clock, 3000ms, Renewed);
  options.period = 100ms;
  options.renew = [&](Clock::time_point deadline) {
    probe.Renewed(deadline);
    switch (++calls) {
      case 1:  // sent now, answered two seconds later
        sent_ns = clock.Now().time_since_epoch().count();
        clock.Jump(2s);
        return Heartbeat::Renewal::kRenewed;
      default:  // the next one ends the loop, so the deadline stays put
        return Heartbeat::Renewal::kRefused;
    }
  };
  Heartbeat heartbeat(std::move(options), clock.Now());
  heartbeat.Start();
  ASSERT_TRUE(probe.WaitLost(2s));
  const Clock::time_point sent{Clock::duration(sent_ns.load())};
  // ttl 3000 - margin 300 from the send time, not from the answer 2 s later.
  EXPECT_LE(heartbeat.deadline(), sent + 2700ms);
  EXPECT_GT(heartbeat.deadline(), sent + 2700ms - 50ms);
}

TEST(HeartbeatTest, RenewalIsGivenTheDeadline) {
  Probe probe;
  JumpingClock clock;
  const Clock::time_point sent = clock.Now();
  Heartbeat heartbeat(MakeOptions(probe, clock, 300ms, Renewed), sent);
  heartbeat.Start();
  std::this_thread::sleep_for(150ms);
  heartbeat.Stop();
  ASSERT_GE(probe.renewals(), 1);
  // The first renewal's budget ends at the first deadline: sent + 300 - 50.
  // (Later ones end later; the last one's deadline is what it was given.)
  EXPECT_GE(probe.last_deadline(), sent + 250ms);
  EXPECT_LE(probe.last_deadline(), heartbeat.deadline());
}

TEST(HeartbeatTest, RefusedRenewalMarksTheLockLostOnce) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(MakeOptions(probe, clock, 300ms, [] { return Heartbeat::Renewal::kRefused; }),
                      clock.Now());
  heartbeat.Start();
  ASSERT_TRUE(probe.WaitLost(2s));
  EXPECT_EQ(probe.reason(), "renewal refused: the fake service said no");
  EXPECT_FALSE(heartbeat.held());
  EXPECT_EQ(heartbeat.lost_reason(), probe.reason());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(probe.renewals(), 1) << "a lost lock must never be renewed again";
  EXPECT_EQ(probe.lost_calls(), 1);
}

TEST(HeartbeatTest, FailedRenewalMarksTheLockLostWithTheError) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(
      MakeOptions(probe, clock, 300ms,
                  []() -> Heartbeat::Renewal { throw std::runtime_error("connection reset"); }),
      clock.Now());
  heartbeat.Start();
  ASSERT_TRUE(probe.WaitLost(2s));
  EXPECT_EQ(probe.reason(), "renewal failed: connection reset");
  EXPECT_FALSE(heartbeat.held());
}

TEST(HeartbeatTest, TimedOutRenewalMarksTheLockLost) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(
      MakeOptions(probe, clock, 300ms, [] { return Heartbeat::Renewal::kTimedOut; }), clock.Now());
  heartbeat.Start();
  ASSERT_TRUE(probe.WaitLost(2s));
  EXPECT_NE(probe.reason().find("no answer before the lock's safe deadline"), std::string::npos)
      << probe.reason();
  EXPECT_FALSE(heartbeat.held());
}

TEST(HeartbeatTest, ReportTimedOutFromTheRenewalReportsBeforeItReturns) {
  Probe probe;
  JumpingClock clock;
  Heartbeat *self = nullptr;
  std::atomic<int> lost_before_return{-1};
  Heartbeat::Options options = MakeOptions(probe, clock, 300ms, Renewed);
  options.renew = [&](Clock::time_point) {
    self->ReportTimedOut();
    lost_before_return = probe.lost_calls();
    return Heartbeat::Renewal::kTimedOut;
  };
  Heartbeat heartbeat(std::move(options), clock.Now());
  self = &heartbeat;
  heartbeat.Start();
  ASSERT_TRUE(probe.WaitLost(2s));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(lost_before_return.load(), 1);
  EXPECT_EQ(probe.lost_calls(), 1) << "reported twice";
}

// A process paused past its deadline wakes up to held() = false at once, and
// its heartbeat must not revive the lock with a renewal: the service may have
// given it away meanwhile.
TEST(HeartbeatTest, PausedProcessWakesUpToALostLockThatIsNeverRenewed) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(MakeOptions(probe, clock, 300ms, Renewed), clock.Now());
  heartbeat.Start();
  std::this_thread::sleep_for(50ms);
  const int renewals_before = probe.renewals();
  clock.Jump(10s);
  EXPECT_FALSE(heartbeat.held()) << "held() must not wait for the heartbeat thread";
  ASSERT_TRUE(probe.WaitLost(2s));
  EXPECT_NE(probe.reason().find("was the process paused?"), std::string::npos) << probe.reason();
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(heartbeat.held());
  EXPECT_EQ(probe.renewals(), renewals_before);
  EXPECT_EQ(probe.lost_calls(), 1);
}

TEST(HeartbeatTest, StopEndsRenewalsAndSilencesOnLost) {
  Probe probe;
  JumpingClock clock;
  Heartbeat heartbeat(MakeOptions(probe, clock, 300ms, Renewed), clock.Now());
  heartbeat.Start();
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(heartbeat.Stop());
  EXPECT_FALSE(heartbeat.Stop()) << "only the first Stop() gives the lock back";
  const int renewals = probe.renewals();
  EXPECT_FALSE(heartbeat.held());
  EXPECT_EQ(heartbeat.lost_reason(), "released by its holder");
  clock.Jump(10s);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(probe.renewals(), renewals);
  EXPECT_EQ(probe.lost_calls(), 0) << probe.reason();
}

TEST(HeartbeatTest, OnLostMayStopTheHeartbeatItRunsOn) {
  JumpingClock clock;
  std::atomic<bool> stopped{false};
  Heartbeat *self = nullptr;
  Heartbeat::Options options;
  options.ttl = 300ms;
  options.renew = [](Clock::time_point) { return Heartbeat::Renewal::kRefused; };
  options.on_lost = [&](const std::string &) {
    EXPECT_TRUE(self->OnHeartbeatThread());
    stopped = self->Stop();  // must not join the thread it runs on
  };
  options.now = clock.Function();
  Heartbeat heartbeat(std::move(options), clock.Now());
  self = &heartbeat;
  heartbeat.Start();
  for (int i = 0; i < 200 && !stopped; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(stopped.load());
  EXPECT_FALSE(heartbeat.OnHeartbeatThread());
}

TEST(HeartbeatTest, TimingIsCheckedBeforeAnythingStarts) {
  EXPECT_THROW(Heartbeat::CheckTiming(0ms, 0ms, "x"), std::invalid_argument);
  EXPECT_THROW(Heartbeat::CheckTiming(1000ms, -1ms, "x"), std::invalid_argument);
  EXPECT_THROW(Heartbeat::CheckTiming(1000ms, 900ms, "x"), std::invalid_argument);
  EXPECT_NO_THROW(Heartbeat::CheckTiming(1000ms, 0ms, "x"));
  EXPECT_NO_THROW(Heartbeat::CheckTiming(1000ms, 899ms, "x"));
  EXPECT_EQ(Heartbeat::SafetyMargin(100ms), 50ms);      // at most ttl / 2
  EXPECT_EQ(Heartbeat::SafetyMargin(300ms), 50ms);      // at least 50 ms
  EXPECT_EQ(Heartbeat::SafetyMargin(10000ms), 1000ms);  // ttl / 10
}

// ---- on_at_risk: the warning before the loss ------------------------------------

// Records on_at_risk and on_lost in the order they came, with what held()
// said at each.
class Events {
 public:
  void Add(const std::string &what, bool held, Clock::time_point at) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(what);
    held_.push_back(held);
    at_.push_back(at);
    cv_.notify_all();
  }
  bool WaitFor(const std::string &what, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const std::string &e : events_)
        if (e == what) return true;
      return false;
    });
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
  }
  std::vector<bool> held() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }
  std::vector<Clock::time_point> at() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return at_;
  }
  int count(const std::string &what) const {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (const std::string &e : events_) n += e == what;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> events_;
  std::vector<bool> held_;
  std::vector<Clock::time_point> at_;
};

std::string Join(const std::vector<std::string> &events) {
  std::string all;
  for (const std::string &e : events) all += e + " ";
  return all;
}

// The first renewal succeeds; the second hangs until its deadline, then
// times out.  The warning comes at half the ttl after the first renewal was
// sent, while the lock is still held, and before the loss.
TEST(HeartbeatAtRiskTest, FiresOnceWhileHeldAndBeforeOnLost) {
  JumpingClock clock;
  Events events;
  Heartbeat *self = nullptr;
  std::atomic<int> calls{0};
  std::atomic<long long> first_sent_ns{0};
  Heartbeat::Options options;
  options.ttl = 1000ms;  // period 333 ms, margin 100 ms, at risk after 500 ms
  options.renew = [&](Clock::time_point deadline) {
    if (++calls == 1) {
      first_sent_ns = clock.Now().time_since_epoch().count();
      return Heartbeat::Renewal::kRenewed;
    }
    std::this_thread::sleep_until(deadline);  // the offset stays zero: real time
    return Heartbeat::Renewal::kTimedOut;
  };
  options.on_lost = [&](const std::string &) { events.Add("lost", self->held(), clock.Now()); };
  options.on_at_risk = [&](const std::string &reason) {
    events.Add("at_risk", self->held(), clock.Now());
    EXPECT_NE(reason.find("no renewal has succeeded for"), std::string::npos) << reason;
    // on_lost waits for this to return, even when the loss comes meanwhile.
    std::this_thread::sleep_until(self->deadline() + 150ms);
    events.Add("at_risk_returned", self->held(), clock.Now());
  };
  options.at_risk_fraction = 0.5;
  options.now = clock.Function();
  Heartbeat heartbeat(std::move(options), clock.Now());
  self = &heartbeat;
  heartbeat.Start();
  ASSERT_TRUE(events.WaitFor("lost", 3s)) << Join(events.events());
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(Join(events.events()), "at_risk at_risk_returned lost ");
  EXPECT_TRUE(events.held()[0]) << "the warning came after the lock was lost";
  EXPECT_FALSE(events.held()[2]);
  const Clock::time_point first_sent{Clock::duration(first_sent_ns.load())};
  const auto warned_after = events.at()[0] - first_sent;
  EXPECT_GE(warned_after, 500ms);
  EXPECT_LT(warned_after, 700ms);
  EXPECT_EQ(calls.load(), 2);
}

TEST(HeartbeatAtRiskTest, SilentWhileRenewalsSucceed) {
  Probe probe;
  JumpingClock clock;
  std::atomic<int> warnings{0};
  Heartbeat::Options options = MakeOptions(probe, clock, 300ms, Renewed);
  options.on_at_risk = [&](const std::string &) { ++warnings; };
  Heartbeat heartbeat(std::move(options), clock.Now());
  heartbeat.Start();
  std::this_thread::sleep_for(1200ms);
  EXPECT_TRUE(heartbeat.held()) << heartbeat.lost_reason();
  EXPECT_GE(probe.renewals(), 5);
  EXPECT_EQ(warnings.load(), 0);
  EXPECT_TRUE(heartbeat.Stop());
}

// Two slow renewals, each answered after the warning but before the
// deadline: one warning per stall, no loss.  The renewal right after each
// (due at once) is a little slow too: the stall ends only when it lands,
// since the slow one's send time leaves the lock as short-lived as before.
TEST(HeartbeatAtRiskTest, FiresAgainOnlyAfterARenewalSucceeded) {
  Probe probe;
  JumpingClock clock;
  Events events;
  std::atomic<int> calls{0};
  Heartbeat::Options options = MakeOptions(probe, clock, 1000ms, Renewed);
  options.renew = [&](Clock::time_point) {
    const int call = ++calls;
    if (call == 2 || call == 5) std::this_thread::sleep_for(650ms);
    if (call == 3 || call == 6) std::this_thread::sleep_for(100ms);
    return Heartbeat::Renewal::kRenewed;
  };
  options.on_at_risk = [&](const std::string &) { events.Add("at_risk", true, clock.Now()); };
  Heartbeat heartbeat(std::move(options), clock.Now());
  heartbeat.Start();
  for (int i = 0; i < 400 && calls < 7; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(calls.load(), 7);
  EXPECT_TRUE(heartbeat.held()) << heartbeat.lost_reason();
  EXPECT_EQ(probe.lost_calls(), 0) << probe.reason();
  EXPECT_EQ(events.count("at_risk"), 2) << Join(events.events());
  EXPECT_TRUE(heartbeat.Stop());
}

// None once the holder let go, though nothing renews after Stop().
TEST(HeartbeatAtRiskTest, NotAfterStop) {
  Probe probe;
  JumpingClock clock;
  std::atomic<int> warnings{0};
  Heartbeat::Options options = MakeOptions(probe, clock, 1000ms, Renewed);
  options.on_at_risk = [&](const std::string &) { ++warnings; };
  Heartbeat heartbeat(std::move(options), clock.Now());
  heartbeat.Start();
  heartbeat.Stop();
  std::this_thread::sleep_for(700ms);
  EXPECT_EQ(warnings.load(), 0);
}

// on_at_risk may give the lock up itself (Stop, as Release does): no
// on_lost follows, even if the renewal in flight then times out.
TEST(HeartbeatAtRiskTest, OnAtRiskMayStopTheHeartbeat) {
  JumpingClock clock;
  Events events;
  Heartbeat *self = nullptr;
  std::atomic<int> calls{0};
  Heartbeat::Options options;
  options.ttl = 1000ms;
  options.renew = [&](Clock::time_point deadline) {
    if (++calls == 1) return Heartbeat::Renewal::kRenewed;
    std::this_thread::sleep_until(deadline);
    return Heartbeat::Renewal::kTimedOut;
  };
  options.on_lost = [&](const std::string &) { events.Add("lost", false, clock.Now()); };
  options.on_at_risk = [&](const std::string &) {
    events.Add("at_risk", true, clock.Now());
    EXPECT_FALSE(self->OnHeartbeatThread());
    events.Add(self->Stop() ? "stopped" : "not stopped", false, clock.Now());
  };
  options.now = clock.Function();
  Heartbeat heartbeat(std::move(options), clock.Now());
  self = &heartbeat;
  heartbeat.Start();
  ASSERT_TRUE(events.WaitFor("stopped", 3s)) << Join(events.events());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(Join(events.events()), "at_risk stopped ");
  EXPECT_FALSE(heartbeat.held());
}

TEST(HeartbeatAtRiskTest, FractionIsChecked) {
  EXPECT_NO_THROW(Heartbeat::CheckAtRiskFraction(1000ms, 0ms, 0.5, "x"));
  EXPECT_THROW(Heartbeat::CheckAtRiskFraction(1000ms, 0ms, 0.3, "x"),
               std::invalid_argument);  // below the period (333 ms)
  EXPECT_THROW(Heartbeat::CheckAtRiskFraction(1000ms, 0ms, 0.9, "x"),
               std::invalid_argument);  // at the deadline (900 ms)
  EXPECT_THROW(Heartbeat::CheckAtRiskFraction(1000ms, 0ms, 0.0, "x"), std::invalid_argument);
  Heartbeat::Options options;
  options.ttl = 1000ms;
  options.renew = [](Clock::time_point) { return Heartbeat::Renewal::kRenewed; };
  options.at_risk_fraction = 0.95;
  EXPECT_NO_THROW(Heartbeat(options, Clock::now())) << "unused without on_at_risk";
  options.on_at_risk = [](const std::string &) {};
  EXPECT_THROW(Heartbeat(options, Clock::now()), std::invalid_argument);
}

// ---- HeartbeatGroup: one thread for many locks --------------------------------

// A group whose fake service records each batch (the locks' numbers, the
// thread it came on) and answers it as `answer` says.
class FakeGroup {
 public:
  using Answerer =
      std::function<void(HeartbeatGroup::Round &round, const std::vector<int> &numbers, int call)>;

  FakeGroup(JumpingClock &clock, Answerer answer) : clock_(clock) {
    HeartbeatGroup::Options options;
    options.renew = [this, answer](HeartbeatGroup::Round &round) {
      std::vector<int> numbers;
      int call;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const Heartbeat *heartbeat : round.locks()) numbers.push_back(numbers_.at(heartbeat));
        batches_.push_back(numbers);
        threads_.insert(std::this_thread::get_id());
        call = static_cast<int>(batches_.size());
      }
      answer(round, numbers, call);
    };
    options.idle = [this] { ++idles_; };
    options.now = clock.Function();
    group_ = std::make_shared<HeartbeatGroup>(std::move(options));
  }

  // Lock `number` of the group, started, its losses told to probe.
  std::unique_ptr<Heartbeat> Add(int number, milliseconds ttl, Probe &probe) {
    return Add(number, ttl, [&probe](const std::string &reason) { probe.Lost(reason); });
  }
  std::unique_ptr<Heartbeat> Add(int number, milliseconds ttl,
                                 std::function<void(const std::string &)> on_lost) {
    Heartbeat::Options options;
    options.ttl = ttl;
    options.refused = "the fake service said no";
    options.on_lost = std::move(on_lost);
    options.now = clock_.Function();
    options.group = group_;
    auto heartbeat = std::make_unique<Heartbeat>(std::move(options), clock_.Now());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      numbers_[heartbeat.get()] = number;
    }
    heartbeat->Start();
    return heartbeat;
  }

  std::vector<std::vector<int>> batches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }
  // How many batches renewed lock `number`.
  int renewals(int number) const {
    int n = 0;
    for (const std::vector<int> &batch : batches())
      for (const int in : batch) n += in == number;
    return n;
  }
  std::size_t threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_.size();
  }
  int idles() const { return idles_; }
  HeartbeatGroup &group() { return *group_; }

 private:
  JumpingClock &clock_;
  mutable std::mutex mutex_;
  std::map<const Heartbeat *, int> numbers_;
  std::vector<std::vector<int>> batches_;
  std::set<std::thread::id> threads_;
  std::atomic<int> idles_{0};
  std::shared_ptr<HeartbeatGroup> group_;
};

// Answers every lock of the batch as renewed, from the batch's send time.
FakeGroup::Answerer AllRenewed(JumpingClock &clock) {
  return [&clock](HeartbeatGroup::Round &round, const std::vector<int> &numbers, int) {
    const Clock::time_point sent = clock.Now();
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      round.Answer(i, sent, Heartbeat::Renewal::kRenewed);
    }
  };
}

// Ten locks, added a few ms apart: one thread renews them, in batches (all
// ten in one once they fell into step), about once a period rather than
// once a period per lock, and each is held throughout.
TEST(HeartbeatGroupTest, OneThreadRenewsEveryLockInBatches) {
  JumpingClock clock;
  FakeGroup fake(clock, AllRenewed(clock));
  std::vector<Probe> probes(10);
  std::vector<std::unique_ptr<Heartbeat>> locks;
  for (int i = 0; i < 10; ++i) {
    locks.push_back(fake.Add(i, 300ms, probes[i]));  // a renewal every 100 ms
    std::this_thread::sleep_for(7ms);
  }
  EXPECT_EQ(fake.group().size(), 10u);
  for (int look = 0; look < 10; ++look) {
    std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 10; ++i)
      ASSERT_TRUE(locks[i]->held()) << i << ": " << locks[i]->lost_reason();
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_GE(fake.renewals(i), 5) << i;
    EXPECT_EQ(probes[i].lost_calls(), 0) << probes[i].reason();
  }
  const std::vector<std::vector<int>> batches = fake.batches();
  EXPECT_LE(batches.size(), 25u) << "about one batch a period, not one per lock";
  EXPECT_EQ(batches.back().size(), 10u) << "not all in one batch";
  EXPECT_EQ(fake.threads(), 1u);
}

// A refusal, or a failure of one lock's renewal, is that lock's loss alone,
// reported once with the Heartbeat's words; the others are renewed on.
TEST(HeartbeatGroupTest, ARefusalOrAFailureIsTheLossOfThatLockAlone) {
  JumpingClock clock;
  FakeGroup fake(clock,
                 [&clock](HeartbeatGroup::Round &round, const std::vector<int> &numbers, int) {
                   const Clock::time_point sent = clock.Now();
                   for (std::size_t i = 0; i < numbers.size(); ++i) {
                     if (numbers[i] == 3) {
                       round.Answer(i, sent, Heartbeat::Renewal::kRefused);
                     } else if (numbers[i] == 5) {
                       round.Answer(i, sent, Heartbeat::Renewal::kRefused, "boom");
                     } else {
                       round.Answer(i, sent, Heartbeat::Renewal::kRenewed);
                     }
                   }
                 });
  std::vector<Probe> probes(8);
  std::vector<std::unique_ptr<Heartbeat>> locks;
  for (int i = 0; i < 8; ++i) locks.push_back(fake.Add(i, 300ms, probes[i]));
  ASSERT_TRUE(probes[3].WaitLost(2s));
  ASSERT_TRUE(probes[5].WaitLost(2s));
  std::this_thread::sleep_for(600ms);  // two ttls
  for (int i = 0; i < 8; ++i) {
    if (i == 3 || i == 5) {
      EXPECT_FALSE(locks[i]->held());
      EXPECT_EQ(probes[i].lost_calls(), 1) << i;
    } else {
      EXPECT_TRUE(locks[i]->held()) << i << ": " << locks[i]->lost_reason();
      EXPECT_EQ(probes[i].lost_calls(), 0) << i << ": " << probes[i].reason();
    }
  }
  EXPECT_EQ(probes[3].reason(), "renewal refused: the fake service said no");
  EXPECT_EQ(probes[5].reason(), "renewal failed: boom");
  EXPECT_EQ(fake.renewals(3), 1) << "a lost lock is never renewed again";
}

// A batch of a short-lived lock (A) and a longer one (B) that gets no
// answer: it is given until A's deadline, when A is reported lost; B, whose
// deadline has not come, is renewed in the next round at once.
TEST(HeartbeatGroupTest, NoAnswerLosesTheLocksPastTheirDeadlineAtItAndAsksTheRestAgain) {
  JumpingClock clock;
  std::atomic<long long> first_deadline_ns{0};
  FakeGroup fake(clock, [&clock, &first_deadline_ns](HeartbeatGroup::Round &round,
                                                     const std::vector<int> &numbers, int call) {
    if (call == 1) {
      const Clock::time_point deadline = round.deadline();
      first_deadline_ns = deadline.time_since_epoch().count();
      std::this_thread::sleep_until(deadline);  // the offset stays zero: real time
      round.TimedOut();
      return;
    }
    const Clock::time_point sent = clock.Now();
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      round.Answer(i, sent, Heartbeat::Renewal::kRenewed);
    }
  });
  Probe a_lost, b_lost;
  const Clock::time_point start = clock.Now();
  // A: renewal every 100 ms, deadline 250 ms; B: every 150 ms, deadline
  // 400 ms, due 50 ms after A, within half its period: the same batch.
  std::unique_ptr<Heartbeat> a = fake.Add(0, 300ms, a_lost);
  std::unique_ptr<Heartbeat> b = fake.Add(1, 450ms, b_lost);
  ASSERT_TRUE(a_lost.WaitLost(2s));
  const Clock::time_point lost_at = clock.Now();
  EXPECT_NE(a_lost.reason().find("no answer before the lock's safe deadline"), std::string::npos)
      << a_lost.reason();
  EXPECT_EQ(Clock::time_point(Clock::duration(first_deadline_ns.load())), a->deadline());
  EXPECT_LT(lost_at - start, 400ms) << "reported long after A's deadline";
  std::this_thread::sleep_for(700ms);
  EXPECT_TRUE(b->held()) << b->lost_reason();
  EXPECT_EQ(b_lost.lost_calls(), 0) << b_lost.reason();
  const std::vector<std::vector<int>> batches = fake.batches();
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(batches[1], (std::vector<int>{1}));
  EXPECT_EQ(a_lost.lost_calls(), 1);
}

// A request that fails (throws) is the loss of every lock of the batch it
// had not answered; the next round goes on with the rest.
TEST(HeartbeatGroupTest, AFailedRequestIsTheLossOfTheLocksItDidNotAnswer) {
  JumpingClock clock;
  FakeGroup fake(clock,
                 [&clock](HeartbeatGroup::Round &round, const std::vector<int> &numbers, int call) {
                   const Clock::time_point sent = clock.Now();
                   for (std::size_t i = 0; i < numbers.size(); ++i) {
                     if (call == 1 && numbers[i] != 0)
                       throw std::runtime_error("the fake connection broke");
                     round.Answer(i, sent, Heartbeat::Renewal::kRenewed);
                   }
                 });
  std::vector<Probe> probes(3);
  std::vector<std::unique_ptr<Heartbeat>> locks;
  for (int i = 0; i < 3; ++i) locks.push_back(fake.Add(i, 300ms, probes[i]));
  ASSERT_TRUE(probes[1].WaitLost(2s));
  ASSERT_TRUE(probes[2].WaitLost(2s));
  EXPECT_EQ(probes[1].reason(), "renewal failed: the fake connection broke");
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(locks[0]->held()) << locks[0]->lost_reason();
  EXPECT_EQ(probes[0].lost_calls(), 0) << probes[0].reason();
  EXPECT_EQ(probes[1].lost_calls(), 1);
  EXPECT_EQ(probes[2].lost_calls(), 1);
}

// A paused process wakes up to every lock lost, each reported once, none
// renewed again.
TEST(HeartbeatGroupTest, APausedProcessWakesUpToEveryLockLostOnce) {
  JumpingClock clock;
  FakeGroup fake(clock, AllRenewed(clock));
  std::vector<Probe> probes(3);
  std::vector<std::unique_ptr<Heartbeat>> locks;
  for (int i = 0; i < 3; ++i) locks.push_back(fake.Add(i, 300ms, probes[i]));
  std::this_thread::sleep_for(150ms);
  clock.Jump(10s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(locks[i]->held());
    ASSERT_TRUE(probes[i].WaitLost(2s)) << i;
  }
  const std::size_t batches = fake.batches().size();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fake.batches().size(), batches);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(probes[i].reason().find("was the process paused?"), std::string::npos)
        << probes[i].reason();
    EXPECT_EQ(probes[i].lost_calls(), 1);
  }
}

// Answers lock 0 as refused, the others as renewed.
FakeGroup::Answerer RefuseTheFirst(JumpingClock &clock) {
  return [&clock](HeartbeatGroup::Round &round, const std::vector<int> &numbers, int) {
    const Clock::time_point sent = clock.Now();
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      round.Answer(i, sent,
                   numbers[i] == 0 ? Heartbeat::Renewal::kRefused : Heartbeat::Renewal::kRenewed);
    }
  };
}

// Stop() of one lock does not wait for another lock's on_lost in progress
// (the holder's thread may hold what that on_lost waits for), but does wait
// for its own: on_lost is never called after Stop() returned.  The last
// lock to leave makes the group idle (its connection closed), once; a new
// one is renewed again, by the same thread.
TEST(HeartbeatGroupTest, StopWaitsForItsOwnOnLostOnlyAndTheLastToLeaveMakesItIdle) {
  JumpingClock clock;
  FakeGroup fake(clock, RefuseTheFirst(clock));
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;
  std::atomic<int> x_lost{0};
  Probe y_probe;
  std::unique_ptr<Heartbeat> y = fake.Add(1, 300ms, y_probe);
  std::unique_ptr<Heartbeat> x = fake.Add(0, 300ms, [&](const std::string &) {
    std::unique_lock<std::mutex> lock(mutex);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    ++x_lost;
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, 2s, [&] { return entered; })) << "x's on_lost not called";
  }
  Clock::time_point start = Clock::now();
  EXPECT_TRUE(y->Stop());
  EXPECT_LT(Clock::now() - start, 100ms) << "y's Stop() waited for x's on_lost";
  std::thread opener([&] {
    std::this_thread::sleep_for(200ms);
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    cv.notify_all();
  });
  start = Clock::now();
  EXPECT_TRUE(x->Stop());
  EXPECT_GE(Clock::now() - start, 150ms) << "x's Stop() returned while its on_lost ran";
  EXPECT_EQ(x_lost.load(), 1);
  opener.join();
  EXPECT_EQ(fake.group().size(), 0u);

  for (int i = 0; i < 100 && fake.idles() == 0; ++i) std::this_thread::sleep_for(10ms);
  const std::size_t batches = fake.batches().size();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fake.idles(), 1);
  EXPECT_EQ(fake.batches().size(), batches) << "renewals with no lock left";

  Probe z_probe;
  std::unique_ptr<Heartbeat> z = fake.Add(2, 300ms, z_probe);
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(z->held()) << z->lost_reason();
  EXPECT_GE(fake.renewals(2), 2);
  EXPECT_EQ(fake.threads(), 1u);
  EXPECT_EQ(y_probe.lost_calls(), 0) << y_probe.reason();
}

// An on_lost may stop and destroy another lock of the group (from the
// group's thread, which is in the middle of its round); the rest go on.
TEST(HeartbeatGroupTest, OnLostMayDestroyAnotherLockOfTheGroup) {
  JumpingClock clock;
  FakeGroup fake(clock, RefuseTheFirst(clock));
  Probe y_probe, z_probe;
  std::unique_ptr<Heartbeat> y = fake.Add(1, 300ms, y_probe);
  std::unique_ptr<Heartbeat> z = fake.Add(2, 300ms, z_probe);
  std::atomic<bool> destroyed{false};
  std::unique_ptr<Heartbeat> x = fake.Add(0, 300ms, [&](const std::string &) {
    y.reset();
    destroyed = true;
  });
  for (int i = 0; i < 200 && !destroyed; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(destroyed.load());
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(z->held()) << z->lost_reason();
  EXPECT_EQ(z_probe.lost_calls(), 0) << z_probe.reason();
  EXPECT_EQ(y_probe.lost_calls(), 0) << y_probe.reason();
  EXPECT_EQ(fake.group().size(), 2u);  // x (lost, not stopped yet) and z
}

}  // namespace
}  // namespace pg_fencing::client
