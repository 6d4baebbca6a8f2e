// Where a worker's lock and its fencing token come from: the extension's own
// leases (pg), a Redis lock plus fencing_grant() (redis), or an etcd lease
// whose key revision is the token (etcd).  The scenarios only see HeldLock:
// a token, held(), CheckHeld() and Release(), whichever service granted it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "options.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::demo {

// What a worker asks for.
struct LockRequest {
  std::string lock_name;
  std::string holder;  // unique per process; what the service records as the holder
  std::chrono::milliseconds ttl{0};
  // Wait up to this long for a busy lock; nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // Called once, from the lock's heartbeat thread, when the lock is known lost.
  std::function<void(const std::string &reason)> on_lost;
};

// A lock this process holds, kept alive by a heartbeat until released.
// Destroying it releases it if it is still held, and never throws.
class HeldLock {
 public:
  virtual ~HeldLock() = default;

  // The fencing token to send with every write made under the lock.
  virtual Token token() const = 0;
  // The lock in the service's terms, for the timeline: "Redis key lock:x";
  // empty for the pg service, whose leases need no introduction.
  virtual std::string Describe() const = 0;
  // False once the lock is known lost, judged on the client's monotonic clock
  // as pg_fencing::client::Lease::held() is (see client.hpp): a paused
  // process wakes up to held() = false, but only if it looks.
  virtual bool held() const = 0;
  // Throws pg_fencing::client::LeaseLostError unless held().
  virtual void CheckHeld() const = 0;
  // Gives the lock back now; whether the service still had it as ours.
  // Idempotent: later calls return false.
  virtual bool Release() = 0;
};

class LockService {
 public:
  virtual ~LockService() = default;

  // Takes the lock, waiting up to request.wait; throws
  // pg_fencing::client::LeaseUnavailableError if it is still held by another
  // then, and other exceptions when the service or database fails.
  virtual std::unique_ptr<HeldLock> Acquire(const LockRequest &request) = 0;
};

// The service `kind` at `address` (HOST:PORT for redis, a URL for etcd,
// unused for pg).  conninfo is the database's: the pg service takes its
// leases there, the redis service its tokens (fencing_grant()).  Connects
// lazily: constructing one never fails for an unreachable service.
std::unique_ptr<LockService> MakeLockService(LockServiceKind kind, const std::string &address,
                                             const std::string &conninfo);

// Throws, with a message naming the service and address, unless the service
// answers.  The orchestrator calls it once before any run, so that a service
// that is not running is a setup error, not a failed run.
void CheckLockServiceReachable(LockServiceKind kind, const std::string &address);

// The lock's name in the service: the Redis key or etcd key that stands for
// lock_name.  (The pg service uses lock_name itself.)
std::string LockKeyOf(LockServiceKind kind, const std::string &lock_name);

}  // namespace pg_fencing::demo
