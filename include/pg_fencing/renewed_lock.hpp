// pg_fencing::client::RenewedLock: a lock from a service other than the
// extension's leases (Redis, etcd: redis_lock.hpp, etcd_lock.hpp), kept alive
// by a Heartbeat with the same rules as Lease.  The service-specific half is
// a LockSession: renew and release one granted lock.  A service of your own
// fits by implementing LockSession.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "pg_fencing/client.hpp"
#include "pg_fencing/heartbeat.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::client {

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
  // the heartbeat (every ttl / 3).
  RenewedLock(std::unique_ptr<LockSession> session, Token token, std::chrono::milliseconds ttl,
              Heartbeat::Clock::time_point sent,
              std::function<void(const std::string &reason)> on_lost);
  ~RenewedLock() override;

  RenewedLock(const RenewedLock &) = delete;
  RenewedLock &operator=(const RenewedLock &) = delete;

  Token token() const noexcept override { return token_; }
  std::string Describe() const override { return session_->Describe(); }
  bool held() const override { return heartbeat_.held(); }
  void CheckHeld() const override;
  std::string lost_reason() const override { return heartbeat_.lost_reason(); }
  // Even a lock counted as lost may still be ours in the service (the safety
  // margin): this gives it back rather than let it run out.
  bool Release() override;

 private:
  const std::unique_ptr<LockSession> session_;
  const Token token_;
  Heartbeat heartbeat_;
};

}  // namespace pg_fencing::client
