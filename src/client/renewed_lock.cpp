// RenewedLock: a LockSession kept alive by a Heartbeat (see renewed_lock.hpp).
#include "pg_fencing/renewed_lock.hpp"

#include <utility>

namespace pg_fencing::client {

namespace {

Heartbeat::Options HeartbeatOptions(LockSession &session, std::chrono::milliseconds ttl,
                                    std::function<void(const std::string &)> on_lost) {
  Heartbeat::Options options;
  options.ttl = ttl;
  // A session bounds its own wait by the budget it is given; a renewal that
  // runs out of it throws, which the heartbeat reports as a failure.
  options.renew = [&session](Heartbeat::Clock::time_point deadline) {
    const auto budget =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Heartbeat::Clock::now());
    return session.Renew(budget) ? Heartbeat::Renewal::kRenewed : Heartbeat::Renewal::kRefused;
  };
  options.refused = session.Describe() + " is no longer ours (it expired or was taken over)";
  options.on_lost = std::move(on_lost);
  return options;
}

}  // namespace

RenewedLock::RenewedLock(std::unique_ptr<LockSession> session, Token token,
                         std::chrono::milliseconds ttl, Heartbeat::Clock::time_point sent,
                         std::function<void(const std::string &)> on_lost)
    : session_(std::move(session)),
      token_(token),
      heartbeat_(HeartbeatOptions(*session_, ttl, std::move(on_lost)), sent) {
  heartbeat_.Start();
}

RenewedLock::~RenewedLock() {
  if (!heartbeat_.Stop()) return;  // released already
  try {
    session_->Release();
  } catch (...) {
    // A destructor must not throw; the service ends the lock after its ttl.
  }
}

void RenewedLock::CheckHeld() const {
  if (held()) return;
  throw LeaseLostError(Describe() + " (token " + std::to_string(token_) +
                       ") is no longer held: " + lost_reason());
}

bool RenewedLock::Release() {
  if (!heartbeat_.Stop()) return false;
  return session_->Release();
}

}  // namespace pg_fencing::client
