// The pg lock service, the extension's own leases through
// pg_fencing::client::Lease, and the choice among the services (see
// lock_service.hpp).
#include "lock_service.hpp"

#include <utility>

#include "lock_backends.hpp"
#include "pg_fencing/client.hpp"

namespace pg_fencing::demo {

namespace {

class PgHeldLock final : public HeldLock {
 public:
  explicit PgHeldLock(client::LeaseOptions options) : lease_(std::move(options)) {}

  Token token() const override { return lease_.token(); }
  std::string Describe() const override { return {}; }
  bool held() const override { return lease_.held(); }
  void CheckHeld() const override { lease_.CheckHeld(); }
  bool Release() override { return lease_.Release(); }

 private:
  client::Lease lease_;
};

class PgLockService final : public LockService {
 public:
  explicit PgLockService(std::string conninfo) : conninfo_(std::move(conninfo)) {}

  std::unique_ptr<HeldLock> Acquire(const LockRequest &request) override {
    client::LeaseOptions lease;
    lease.conninfo = conninfo_;
    lease.lock_name = request.lock_name;
    lease.holder = request.holder;
    lease.ttl = request.ttl;
    lease.wait = request.wait;
    lease.on_lost = request.on_lost;
    return std::make_unique<PgHeldLock>(std::move(lease));
  }

 private:
  std::string conninfo_;
};

}  // namespace

std::unique_ptr<LockService> MakeLockService(LockServiceKind kind, const std::string &address,
                                             const std::string &conninfo) {
  switch (kind) {
    case LockServiceKind::kRedis:
      return MakeRedisLockService(address, conninfo);
    case LockServiceKind::kEtcd:
      return MakeEtcdLockService(address);
    case LockServiceKind::kPg:
      break;
  }
  return std::make_unique<PgLockService>(conninfo);
}

void CheckLockServiceReachable(LockServiceKind kind, const std::string &address) {
  switch (kind) {
    case LockServiceKind::kRedis:
      CheckRedisReachable(address);
      break;
    case LockServiceKind::kEtcd:
      CheckEtcdReachable(address);
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
