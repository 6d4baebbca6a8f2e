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
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace pg_fencing::client {

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
  // only, so that exactly one caller gives the lock back.
  bool Stop();
  // Whether the caller runs on the heartbeat thread (in on_lost or renew),
  // not the watch thread: Stop() from the watch thread waits for the
  // heartbeat thread, so what it used is free once Stop() returned.
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

}  // namespace pg_fencing::client
