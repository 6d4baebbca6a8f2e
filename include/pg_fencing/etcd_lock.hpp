// A lock in etcd, fenced by pg_fencing (pg_fencing_etcd; needs libcurl and
// nlohmann/json): a key put under an etcd lease if it is absent, in one
// transaction, and the key's create_revision as the fencing token.  The lease
// is kept alive every ttl / 3; a holder that stops sending keepalives loses
// it after its TTL, and etcd deletes the key with it.
//
//   pg_fencing::client::EtcdLockOptions opts;
//   opts.url = "http://127.0.0.1:2379";
//   opts.key = "lock/nightly-report";
//   opts.holder = "worker-17";
//   opts.ttl = std::chrono::seconds(10);
//   auto lock = pg_fencing::client::AcquireEtcdLock(opts);  // LeaseUnavailableError if busy
//   pqxx::connection db("dbname=app");
//   pg_fencing::client::ExecFenced(db, "UPDATE ... SET token = $1 ...", lock->token());
//
// Why a revision is a sound token, and what must never mix with it: see the
// docs/clients.md, "Using your existing lock service".
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pg_fencing/renewed_lock.hpp"

namespace pg_fencing::client {

struct EtcdLockOptions {
  std::string url;     // the client URL of etcd's v3 JSON gateway, http://HOST:PORT
  std::string key;     // the lock's key, e.g. "lock/nightly-report"
  std::string holder;  // the key's value: who holds it
  // Whole seconds (rounded up).  etcd raises TTLs below 1.5 x its election
  // timeout; a lease granted longer than asked is refused (the heartbeat
  // would judge the lock by the wrong ttl).
  std::chrono::milliseconds ttl{10000};
  // Wait up to this long for a busy key (looking every 10 ms); nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // Called once, from the heartbeat thread, when the lock is lost.
  std::function<void(const std::string &reason)> on_lost;
};

// Takes the lock and starts the heartbeat.  Throws LeaseUnavailableError if
// the key is still held by another after the wait, std::runtime_error when
// etcd fails or grants another TTL than asked.
std::unique_ptr<RenewedLock> AcquireEtcdLock(const EtcdLockOptions &options);

// Throws, with a message naming the URL, unless etcd answers.
void CheckEtcdReachable(const std::string &url);

}  // namespace pg_fencing::client
