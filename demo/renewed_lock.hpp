// A lock from a service other than the extension's leases (Redis, etcd),
// kept alive by a heartbeat thread.  The service-specific half is a
// LockSession: renew and release one granted lock.  RenewedLock adds what
// every such lock needs, with the rules of pg_fencing::client::Lease:
//  - held() is judged on the client's monotonic clock alone: the lock counts
//    as lost once (send time of the request that last set its expiry) + ttl
//    - Lease::SafetyMargin(ttl) has passed, so a process that was paused
//    (SIGSTOP, a GC pause) never believes a lock the service may already
//    have given away is still its own;
//  - the heartbeat renews every ttl / 3, and reports the loss (on_lost) once
//    a renewal is refused or fails, or can no longer land before that deadline;
//  - a lock that was lost is never renewed again: acquire anew, with a new token.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "events.hpp"
#include "lock_service.hpp"

namespace pg_fencing::demo {

// One granted lock, in the service's terms.  Used by one thread at a time:
// the heartbeat thread while it runs, then Release().
class LockSession {
 public:
  virtual ~LockSession() = default;

  // "Redis key lock:x", "etcd key lock/x under lease 7587...", for messages.
  virtual std::string Describe() const = 0;
  // Extends the lock to its ttl from now.  False if the service no longer
  // has it as ours (expired, taken over); throws when the service cannot be
  // asked.  No answer may take longer than `budget`.
  virtual bool Renew(std::chrono::milliseconds budget) = 0;
  // Gives the lock up if it is still ours; whether it was.
  virtual bool Release() = 0;
};

class RenewedLock final : public HeldLock {
 public:
  // `sent`: when the request that started the lock's ttl was sent.  Starts
  // the heartbeat.
  RenewedLock(std::unique_ptr<LockSession> session, Token token, std::chrono::milliseconds ttl,
              Clock::time_point sent, std::function<void(const std::string &)> on_lost);
  ~RenewedLock() override;

  RenewedLock(const RenewedLock &) = delete;
  RenewedLock &operator=(const RenewedLock &) = delete;

  Token token() const override { return token_; }
  std::string Describe() const override { return session_->Describe(); }
  bool held() const override;
  void CheckHeld() const override;
  bool Release() override;

 private:
  Clock::time_point DeadlineLocked() const;
  // Stops the heartbeat and waits for it; true the first time.
  bool StopHeartbeat();
  void HeartbeatLoop();
  void RenewUntilStoppedOrLost();
  void MarkLost(const std::string &reason);

  const std::unique_ptr<LockSession> session_;
  const Token token_;
  const std::chrono::milliseconds ttl_;
  const std::function<void(const std::string &)> on_lost_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string lost_reason_;
  Clock::time_point valid_from_;  // send time of the request that last set the expiry
  std::thread heartbeat_;
};

}  // namespace pg_fencing::demo
