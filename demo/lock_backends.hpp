// The Redis and etcd lock services, behind MakeLockService and
// CheckLockServiceReachable (lock_service.hpp).  Internal to the demo.
#pragma once

#include <memory>
#include <string>

#include "lock_service.hpp"

namespace pg_fencing::demo {

// address: HOST:PORT.  Tokens come from fencing_grant() on conninfo's database.
std::unique_ptr<LockService> MakeRedisLockService(const std::string &address,
                                                  const std::string &conninfo);
void CheckRedisReachable(const std::string &address);

// url: the client URL, http://HOST:PORT, of etcd's v3 JSON gateway.
std::unique_ptr<LockService> MakeEtcdLockService(const std::string &url);
void CheckEtcdReachable(const std::string &url);

}  // namespace pg_fencing::demo
