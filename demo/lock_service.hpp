// Where a worker's lock and its fencing token come from: the extension's own
// leases (pg), a Redis lock plus fencing_grant() (redis), or an etcd lease
// whose key revision is the token (etcd) — all from the client library.  The
// scenarios only see client::HeldLock: a token, held(), CheckHeld() and
// Release(), whichever service granted it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "options.hpp"
#include "pg_fencing/client.hpp"

namespace pg_fencing::demo {

using client::HeldLock;

// What a worker asks for.
struct LockRequest {
  std::string lock_name;
  std::string holder;  // unique per process; what the service records as the holder
  std::chrono::milliseconds ttl{0};
  // Wait up to this long for a busy lock; nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // > 0: one permit of a semaphore of this many (the pg service only).
  int permits = 0;
  // Called once, from the lock's heartbeat thread, when the lock is known lost.
  std::function<void(const std::string &reason)> on_lost;
};

// Takes the lock from the service `kind` at `address` (HOST:PORT for redis,
// a URL for etcd, unused for pg), waiting up to request.wait; throws
// client::LeaseUnavailableError if it is still held by another then.
// conninfo is the database's: the pg service takes its leases there, the
// redis service its tokens (fencing_grant()).
std::unique_ptr<HeldLock> AcquireFromService(LockServiceKind kind, const std::string &address,
                                             const std::string &conninfo,
                                             const LockRequest &request);

// Throws, with a message naming the service and address, unless the service
// answers.  The orchestrator calls it once before any run, so that a service
// that is not running is a setup error, not a failed run.
void CheckLockServiceReachable(LockServiceKind kind, const std::string &address);

// The lock's name in the service: the Redis key or etcd key that stands for
// lock_name.  (The pg service uses lock_name itself.)
std::string LockKeyOf(LockServiceKind kind, const std::string &lock_name);

}  // namespace pg_fencing::demo
