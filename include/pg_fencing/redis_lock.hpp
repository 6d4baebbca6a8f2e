// A lock in Redis, fenced by pg_fencing (pg_fencing_redis; needs hiredis):
//   SET <key> <random id> NX PX <ttl>
// then the fencing token from the database's fencing_grant(), taken right
// after the SET succeeds.  Renewal (every ttl / 3) and release are Lua
// scripts that act only while the key still holds our id.
//
//   pg_fencing::client::RedisLockOptions opts;
//   opts.address = "127.0.0.1:6379";
//   opts.key = "lock:nightly-report";
//   opts.ttl = std::chrono::seconds(10);
//   pqxx::connection db("dbname=app");
//   auto lock = pg_fencing::client::AcquireRedisLock(opts, db);  // LeaseUnavailableError if busy
//   lock->CheckHeld();
//   pg_fencing::client::ExecFenced(db, "UPDATE ... SET token = $1 ...", lock->token());
//
// Why the token comes from the database and not from Redis (INCR): see the
// docs/clients.md, "Using your existing lock service".
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <pqxx/pqxx>

#include "pg_fencing/renewed_lock.hpp"

namespace pg_fencing::client {

struct RedisLockOptions {
  std::string address;  // HOST:PORT
  std::string key;      // the lock's key, e.g. "lock:nightly-report"
  std::chrono::milliseconds ttl{10000};
  // Wait up to this long for a busy lock (trying SET NX every 10 ms);
  // nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // Called once, from the heartbeat thread, when the lock is lost.
  std::function<void(const std::string &reason)> on_lost;
};

// Takes the lock, then a token from fencing_grant() on db (in a transaction
// of its own), and starts the heartbeat.  Throws LeaseUnavailableError if
// the key is still held by another after the wait, std::invalid_argument for
// a malformed address, std::runtime_error when Redis fails, pqxx errors when
// the database does (the key is then released again).
std::unique_ptr<RenewedLock> AcquireRedisLock(const RedisLockOptions &options,
                                              pqxx::connection &db);

// Throws, with a message naming the address, unless Redis answers PING.
void CheckRedisReachable(const std::string &address);

}  // namespace pg_fencing::client
