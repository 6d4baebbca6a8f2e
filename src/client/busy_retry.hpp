// Waiting for a busy lock in another service (Redis, etcd): try again every
// 10 ms until the wait is over, then LeaseUnavailableError.  Internal to the
// client library.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "pg_fencing/client.hpp"

namespace pg_fencing::client {

class BusyRetry {
 public:
  using Clock = std::chrono::steady_clock;

  // `lock`: the lock in the service's terms, "Redis key lock:x".
  BusyRetry(std::optional<std::chrono::milliseconds> wait, std::string lock)
      : wait_(wait), lock_(std::move(lock)), give_up_(Clock::now() + wait.value_or(kNoWait)) {}

  // After a try that found the lock taken: sleeps until the next try, or
  // throws LeaseUnavailableError once the wait is over.
  void AfterBusy() const {
    const Clock::time_point now = Clock::now();
    if (now >= give_up_) {
      throw LeaseUnavailableError(
          lock_ + " is held by another holder" +
          (wait_ ? " (waited " + std::to_string(wait_->count()) + " ms)" : ""));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(kInterval, give_up_ - now));
  }

 private:
  static constexpr std::chrono::milliseconds kNoWait{0};
  static constexpr std::chrono::milliseconds kInterval{10};

  const std::optional<std::chrono::milliseconds> wait_;
  const std::string lock_;
  const Clock::time_point give_up_;
};

}  // namespace pg_fencing::client
