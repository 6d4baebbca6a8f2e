// pg_fencing::client::Heartbeat: what keeps any lease-based lock alive.  The
// extension's leases (Lease, client.hpp) and the locks of other services
// (RenewedLock, renewed_lock.hpp: Redis, etcd) all use it:
//  - held() is judged on the client's monotonic clock alone: the lock counts
//    as lost once (send time of the request that last set its expiry) + ttl
//    - SafetyMargin(ttl) has passed, whether or not the heartbeat thread ran
//    meanwhile (it may have been paused with the rest of the process);
//  - a thread renews every period (ttl / 3 unless told otherwise), and gives
//    each renewal only until that deadline to answer;
//  - the loss is reported once (on_lost), as soon as a renewal is refused,
//    fails or gets no answer in time, or the thread wakes past the deadline;
//  - optionally, a warning comes first (on_at_risk): no renewal has
//    succeeded for a fraction of the ttl (a renewal hangs, the network is
//    slow), while the lock is still held;
//  - a lock that was lost is never renewed again: acquire anew, with a new
//    token.
//
// A HeartbeatGroup (below) renews many such locks from one thread, in
// batches, each lock with the clock and judgement above: a Client's
// (client.hpp) sessions and leases share one, and one connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pg_fencing::client {

class HeartbeatGroup;

class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Renewal {
    kRenewed,   // the service extended the lock to ttl from the request's send time
    kRefused,   // the service no longer has it as ours
    kTimedOut,  // no answer by the deadline the renewal was given
  };

  struct Options {
    std::chrono::milliseconds ttl{0};
    // Time between renewals; zero means ttl / 3.
    std::chrono::milliseconds period{0};
    // Sends one renewal and waits for its answer until `deadline` at the
    // latest; throws when the service cannot be asked.  Called on the
    // heartbeat thread only.
    std::function<Renewal(Clock::time_point deadline)> renew;
    // What a refusal means, for the reason: "renewal refused: " + refused.
    std::string refused = "the lock expired or was taken over";
    // Called once, from the heartbeat thread, when the lock is lost; never
    // after Stop() returned.  It may call Stop(), but must not destroy the
    // Heartbeat.
    std::function<void(const std::string &reason)> on_lost;
    // The monotonic clock; tests give their own.  Empty: Clock::now.
    std::function<Clock::time_point()> now;
    // Called when no renewal has succeeded for at_risk_fraction * ttl (the
    // last successful one's send time, as for held()) while the lock is
    // still held: the lock may be lost soon, say, stop starting new work.
    // Once per stall: again only after a renewal succeeded in between.
    // Never after on_lost began nor after Stop() returned, and on_lost waits
    // until it has returned.  Runs on a watch thread of its own (started
    // only when this is set), because the heartbeat thread may be stuck in
    // the very renewal that is late.  It may call Stop() (which then waits
    // for a renewal in flight to end, at the deadline at the latest), but
    // must not destroy the Heartbeat.
    std::function<void(const std::string &reason)> on_at_risk;
    // Must lie strictly between period / ttl and (ttl - SafetyMargin) / ttl,
    // so that a renewal that is merely due does not count, and the warning
    // comes while the lock is held.
    double at_risk_fraction = 0.5;
    // Given, the lock has no renewal thread of its own: the group's thread
    // renews it with the group's other locks (HeartbeatGroup), and `renew`
    // is not used.  The rules above hold as they are; on_lost is then
    // called from the group's thread.  The Heartbeat keeps the group.
    std::shared_ptr<HeartbeatGroup> group;
  };

  // `valid_from`: when the request that started the lock's ttl was sent.
  // Throws std::invalid_argument for a bad ttl or period (see CheckTiming).
  // Does not start the thread: Start() does.
  Heartbeat(Options options, Clock::time_point valid_from);
  // Stops the thread; never throws.
  ~Heartbeat();

  Heartbeat(const Heartbeat &) = delete;
  Heartbeat &operator=(const Heartbeat &) = delete;

  void Start();

  // False once the lock is lost, the deadline has passed, or after Stop().
  bool held() const;
  // Why held() is false; empty while it is true.
  std::string lost_reason() const;
  // When held() turns false unless a renewal lands first.
  Clock::time_point deadline() const;

  // Stops renewing (the holder let go): held() is false from now on.  Waits
  // for the thread, unless called on it (from on_lost).  True the first time
  // only, so that exactly one caller gives the lock back.  In a group, it
  // leaves the group, waiting only for a report to this lock in progress
  // (its on_lost), not for a batch renewal in flight: the group never uses
  // the lock again, and whatever the batch's answer, it is not applied.
  bool Stop();
  // Whether the caller runs on the heartbeat thread (in on_lost or renew),
  // not the watch thread: Stop() from the watch thread waits for the
  // heartbeat thread, so what it used is free once Stop() returned.  In a
  // group: on the group's thread.
  bool OnHeartbeatThread() const;

  // Reports a renewal that got no answer in time, now rather than when renew
  // returns: for a renew that must still clean up (cancel a query, say)
  // after giving up.  Once, like every loss.
  void ReportTimedOut();

  // How much earlier than the service the client gives the lock up:
  // max(ttl / 10, 50 ms), but at most ttl / 2.  It absorbs the client's and
  // the service's clocks running at slightly different rates, and leaves a
  // little room between a true held() and the write that follows it (the
  // token, not the margin, is what makes a late write harmless).
  static std::chrono::milliseconds SafetyMargin(std::chrono::milliseconds ttl) noexcept;
  // Throws std::invalid_argument unless ttl is positive and the period is
  // not negative and shorter than ttl - SafetyMargin(ttl); `what` names the
  // lock in the message.
  static void CheckTiming(std::chrono::milliseconds ttl, std::chrono::milliseconds period,
                          const std::string &what);
  // Throws std::invalid_argument unless at_risk_fraction * ttl lies strictly
  // between the period and ttl - SafetyMargin(ttl).
  static void CheckAtRiskFraction(std::chrono::milliseconds ttl, std::chrono::milliseconds period,
                                  double fraction, const std::string &what);

 private:
  friend class HeartbeatGroup;

  // Where the lock stands for a renewal loop (Run, or its group's): done
  // (stopped or lost), late (its deadline passed before a renewal could be
  // sent: lost, ReportLate), waiting until `next`, or due; with its
  // deadline and period.
  struct Due {
    enum State { kDone, kLate, kWaiting, kDue };
    State state = kDone;
    Clock::time_point next;
    Clock::time_point deadline;
    Clock::duration period{};
  };
  Due DueLocked(Clock::time_point now) const;
  Due Look(Clock::time_point now) const;
  // Reports a lock whose loop woke past its deadline.
  void ReportLate();
  // Applies the outcome of a renewal sent at `sent` (failure: why it could
  // not be had; the outcome is then ignored): whether the lock is still
  // renewed.
  bool Apply(Renewal outcome, Clock::time_point sent, const std::string &failure);

  Clock::time_point Now() const;
  Clock::time_point DeadlineLocked() const;
  std::chrono::milliseconds Period() const noexcept;
  Clock::duration AtRiskAfter() const noexcept;
  std::string MarginText() const;
  void MarkLost(const std::string &reason);
  void DeliverLost(const std::string &reason);
  void Run();
  void Watch();

  const Options options_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopped_ = false;
  std::string lost_reason_;
  Clock::time_point valid_from_;  // send time of the request that last set the expiry
  std::thread::id thread_id_;
  std::thread thread_;
  // The watch thread (on_at_risk): whether it warned about the current stall
  // (reset by a renewal that ends it), whether it is in on_at_risk now, and
  // a loss that came meanwhile, which it then reports itself once
  // on_at_risk returned.
  bool warned_ = false;
  bool in_at_risk_ = false;
  bool lost_pending_ = false;
  std::thread::id watcher_id_;
  std::thread watcher_;
};

// One thread that renews many Heartbeats (Heartbeat::Options::group), in
// batches: whenever one of its locks is due, one call of Options::renew
// renews every lock that is due, or due within half its period, and every
// lock whose deadline comes no later than the batch's earliest deadline
// (so that while a batch is on its way no other lock's deadline passes).
// Each lock keeps its own ttl, period, deadline and loss judgement
// (Heartbeat); the group only decides when to ask, and hands each lock its
// answer:
//  - renewed: valid from the batch's send time;
//  - refused, or failed (the request could not be made, or failed): lost,
//    with the Heartbeat's words, for the locks it concerns only;
//  - no answer by the batch's deadline (the earliest of its locks'): each
//    lock whose deadline has passed is lost ("renewal got no answer before
//    the lock's safe deadline"), reported at that deadline; the others are
//    asked again in the next round, at once.
// So one renewal that hangs delays no lock's loss past that lock's own
// deadline; it may cost the locks that share its batch their renewal, as
// one statement renews them all.  A lock added while a batch is on its way
// waits for that batch (at most until the batch's deadline).  on_lost runs
// on the group's thread: a long one holds up every lock's renewal.
class HeartbeatGroup {
 public:
  using Clock = Heartbeat::Clock;

  // One batch being renewed: what Options::renew is handed.
  class Round {
   public:
    // The locks to renew, by the Heartbeats that keep them.
    const std::vector<const Heartbeat *> &locks() const noexcept { return locks_; }
    // The earliest deadline of the locks not answered yet (that have not
    // left the group): renew must not wait past it.
    Clock::time_point deadline() const;
    // The answer for locks()[i]: kRenewed (renewed from `sent` on, the send
    // time of the request that renewed it) or kRefused; a non-empty
    // failure means the renewal of that lock alone failed.  Applied at once
    // (on_lost may run); later answers for the same lock are ignored.
    void Answer(std::size_t i, Clock::time_point sent, Heartbeat::Renewal renewal,
                const std::string &failure = std::string());
    // No answer came by deadline(): reports, now, each lock not answered
    // yet whose deadline has passed; the others are asked again in the
    // next round.  renew then returns without throwing.
    void TimedOut();

   private:
    friend class HeartbeatGroup;
    Round(HeartbeatGroup &group, std::vector<Heartbeat *> locks);
    void Fail(const std::string &failure);
    void Finish();

    HeartbeatGroup &group_;
    std::vector<Heartbeat *> heartbeats_;
    std::vector<const Heartbeat *> locks_;
    std::vector<bool> answered_;
  };

  struct Options {
    // Renews every lock of the round, in one request if it can, and
    // answers each (Round::Answer) or, at round.deadline() without an
    // answer, calls round.TimedOut() and returns.  Throws when the request
    // fails: each lock not answered yet is then lost ("renewal failed: " +
    // what()).  Called on the group's thread only.
    std::function<void(Round &round)> renew;
    // Called on the group's thread when its last lock has left, after the
    // renewals it made: say, to close the connection they used.
    std::function<void()> idle;
    // The monotonic clock; tests give their own (their locks' too).
    // Empty: Clock::now.
    std::function<Clock::time_point()> now;
  };

  explicit HeartbeatGroup(Options options);
  // Stops the thread.  Every lock must have left (Heartbeat::Stop()) or
  // be gone; the Heartbeats keep the group, so that is what happens.
  ~HeartbeatGroup();

  HeartbeatGroup(const HeartbeatGroup &) = delete;
  HeartbeatGroup &operator=(const HeartbeatGroup &) = delete;

  // How many locks the group renews now.
  std::size_t size() const;
  // Whether the caller runs on the group's thread.
  bool OnThread() const;

 private:
  friend class Heartbeat;
  // Heartbeat::Start and Stop: the thread starts with the first lock.
  void Add(Heartbeat *heartbeat);
  void Remove(Heartbeat *heartbeat);
  // Reports to one lock of the round in progress, unless it has left the
  // group: Claim() says whether it may, and Remove() waits for Unclaim().
  bool Claim(Heartbeat *heartbeat);
  void Unclaim();
  Clock::time_point Now() const;
  void Run();
  void Loop();

  const Options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;     // a lock came or left; the group ends
  std::condition_variable claimed_;  // a report ended
  std::vector<Heartbeat *> locks_;   // those in the group
  std::vector<Heartbeat *> round_;   // those of the round in progress
  Heartbeat *claim_ = nullptr;       // the one being reported to
  bool ending_ = false;
  std::thread::id thread_id_;
  std::thread thread_;
};

}  // namespace pg_fencing::client
