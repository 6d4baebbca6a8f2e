// The choice among the lock services (see lock_service.hpp); the services
// themselves are the client library's.
#include "lock_service.hpp"

#include "pg_fencing/etcd_lock.hpp"
#include "pg_fencing/redis_lock.hpp"

namespace pg_fencing::demo {

std::unique_ptr<HeldLock> AcquireFromService(LockServiceKind kind, const std::string &address,
                                             const std::string &conninfo,
                                             const LockRequest &request) {
  switch (kind) {
    case LockServiceKind::kRedis: {
      client::RedisLockOptions redis;
      redis.address = address;
      redis.key = LockKeyOf(kind, request.lock_name);
      redis.ttl = request.ttl;
      redis.wait = request.wait;
      redis.on_lost = request.on_lost;
      pqxx::connection db(conninfo);  // for the token: fencing_grant()
      return client::AcquireRedisLock(redis, db);
    }
    case LockServiceKind::kEtcd: {
      client::EtcdLockOptions etcd;
      etcd.url = address;
      etcd.key = LockKeyOf(kind, request.lock_name);
      etcd.holder = request.holder;
      etcd.ttl = request.ttl;  // whole seconds: the demo's options insist on it
      etcd.wait = request.wait;
      etcd.on_lost = request.on_lost;
      return client::AcquireEtcdLock(etcd);
    }
    case LockServiceKind::kPg:
      break;
  }
  client::LeaseOptions lease;
  lease.conninfo = conninfo;
  lease.lock_name = request.lock_name;
  lease.holder = request.holder;
  lease.ttl = request.ttl;
  lease.wait = request.wait;
  lease.on_lost = request.on_lost;
  if (request.permits > 0) {
    lease.mode = client::LeaseOptions::Mode::kPermit;
    lease.permits = request.permits;
  }
  return std::make_unique<client::Lease>(std::move(lease));
}

void CheckLockServiceReachable(LockServiceKind kind, const std::string &address) {
  switch (kind) {
    case LockServiceKind::kRedis:
      client::CheckRedisReachable(address);
      break;
    case LockServiceKind::kEtcd:
      client::CheckEtcdReachable(address);
      break;
    case LockServiceKind::kPg:
      break;  // the database itself, which the demo has just prepared
  }
}

std::string LockKeyOf(LockServiceKind kind, const std::string &lock_name) {
  switch (kind) {
    case LockServiceKind::kRedis:
      return "lock:" + lock_name;
    case LockServiceKind::kEtcd:
      return "lock/" + lock_name;
    case LockServiceKind::kPg:
      break;
  }
  return lock_name;
}

}  // namespace pg_fencing::demo
