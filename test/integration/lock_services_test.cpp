// Integration tests of the client library's Redis and etcd locks
// (redis_lock.hpp, etcd_lock.hpp) against real, throwaway servers:
// test/integration/run-inside.sh starts them (demo/services.sh) and sets
// PG_FENCING_TEST_REDIS (HOST:PORT) and PG_FENCING_TEST_ETCD (a URL); the
// Redis tests also need the database (PG_FENCING_TEST_DSN) for their tokens.
// Without them, the tests skip.  Every test uses keys of its own.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "pg_fencing/etcd_lock.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "pg_fencing/redis_lock.hpp"

namespace pg_fencing::client {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

const char *Env(const char *name) { return std::getenv(name); }

// A unique key per test run, so that reruns against one server never meet.
std::string Key(const std::string &prefix, const std::string &name) {
  return prefix + name + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Counts on_lost calls; must outlive the lock it is given to.
struct LostCounter {
  std::atomic<int> calls{0};
  std::function<void(const std::string &)> Callback() {
    return [this](const std::string &) { ++calls; };
  }
  bool WaitFor(milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (calls == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(10ms);
    }
    return calls > 0;
  }
};

class RedisLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Env("PG_FENCING_TEST_REDIS") == nullptr || Env("PG_FENCING_TEST_DSN") == nullptr) {
      GTEST_SKIP() << "PG_FENCING_TEST_REDIS and PG_FENCING_TEST_DSN not set";
    }
    db_ = std::make_unique<pqxx::connection>(Env("PG_FENCING_TEST_DSN"));
  }
  RedisLockOptions Options(const std::string &name, milliseconds ttl) const {
    RedisLockOptions options;
    options.address = Env("PG_FENCING_TEST_REDIS");
    options.key = Key("lock:", name);
    options.ttl = ttl;
    return options;
  }
  // Runs one command on the test's own connection to Redis.
  long long RedisInteger(const std::string &command, const std::string &key) {
    const std::string address = Env("PG_FENCING_TEST_REDIS");
    const std::size_t colon = address.rfind(':');
    redisContext *context =
        redisConnect(address.substr(0, colon).c_str(), std::stoi(address.substr(colon + 1)));
    EXPECT_TRUE(context != nullptr && context->err == 0);
    auto *reply =
        static_cast<redisReply *>(redisCommand(context, "%s %s", command.c_str(), key.c_str()));
    const long long value = reply != nullptr ? reply->integer : -99;
    freeReplyObject(reply);
    redisFree(context);
    return value;
  }
  std::unique_ptr<pqxx::connection> db_;
};

TEST_F(RedisLockTest, TokensComeFromFencingGrantAndTheKeyIsExclusive) {
  RedisLockOptions options = Options("exclusive", 2000ms);
  auto first = AcquireRedisLock(options, *db_);
  EXPECT_TRUE(first->held());
  EXPECT_EQ(first->Describe(), "Redis key " + options.key);
  EXPECT_THROW(AcquireRedisLock(options, *db_), LeaseUnavailableError);
  EXPECT_TRUE(first->Release());
  EXPECT_FALSE(first->Release()) << "Release is idempotent";
  EXPECT_FALSE(first->held());
  EXPECT_EQ(RedisInteger("EXISTS", options.key), 0) << "released: the key is gone";
  auto second = AcquireRedisLock(options, *db_);
  EXPECT_GT(second->token(), first->token());
  pqxx::work tx(*db_);
  const auto highest =
      pqxx_compat::Exec1(tx, "SELECT last_value FROM fencing_token_seq")[0].as<long long>();
  EXPECT_EQ(second->token(), highest) << "the token is the database's latest grant";
}

TEST_F(RedisLockTest, WaitingAcquireGetsTheKeyWhenItsHolderLetsGo) {
  RedisLockOptions options = Options("wait", 2000ms);
  auto first = AcquireRedisLock(options, *db_);
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    first.reset();  // the destructor releases
  });
  options.wait = 5000ms;
  const auto start = std::chrono::steady_clock::now();
  auto second = AcquireRedisLock(options, *db_);
  releaser.join();
  EXPECT_TRUE(second->held());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms) << "took the whole ttl";
}

TEST_F(RedisLockTest, HeartbeatKeepsTheKeyAliveAcrossSeveralTtls) {
  LostCounter lost;
  RedisLockOptions options = Options("heartbeat", 300ms);
  options.on_lost = lost.Callback();
  auto lock = AcquireRedisLock(options, *db_);
  std::this_thread::sleep_for(1200ms);
  EXPECT_TRUE(lock->held()) << lock->lost_reason();
  EXPECT_GT(RedisInteger("PTTL", options.key), 0);
  EXPECT_EQ(lost.calls, 0);
}

TEST_F(RedisLockTest, KeyDeletedBehindItsBackIsReportedLost) {
  LostCounter lost;
  RedisLockOptions options = Options("deleted", 600ms);
  options.on_lost = lost.Callback();
  auto lock = AcquireRedisLock(options, *db_);
  EXPECT_EQ(RedisInteger("DEL", options.key), 1);
  ASSERT_TRUE(lost.WaitFor(2000ms));
  EXPECT_FALSE(lock->held());
  EXPECT_NE(lock->lost_reason().find("renewal refused"), std::string::npos) << lock->lost_reason();
  EXPECT_THROW(lock->CheckHeld(), LeaseLostError);
  EXPECT_EQ(lost.calls, 1);
}

TEST(RedisAddressTest, MalformedAddressIsRefused) {
  EXPECT_THROW(CheckRedisReachable("no-port"), std::invalid_argument);
  EXPECT_THROW(CheckRedisReachable("127.0.0.1:0"), std::invalid_argument);
}

class EtcdLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Env("PG_FENCING_TEST_ETCD") == nullptr) GTEST_SKIP() << "PG_FENCING_TEST_ETCD not set";
  }
  EtcdLockOptions Options(const std::string &name, milliseconds ttl) const {
    EtcdLockOptions options;
    options.url = Env("PG_FENCING_TEST_ETCD");
    options.key = Key("lock/", name);
    options.holder = "lock_services_test";
    options.ttl = ttl;
    return options;
  }
  // POSTs body to the gateway, as a client other than the lock would.
  static std::string Post(const std::string &path, const std::string &body) {
    CURL *curl = curl_easy_init();
    std::string response;
    const std::string url = std::string(Env("PG_FENCING_TEST_ETCD")) + path;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(
        curl, CURLOPT_WRITEFUNCTION,
        +[](char *data, std::size_t size, std::size_t count, void *out) {
          static_cast<std::string *>(out)->append(data, size * count);
          return size * count;
        });
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
    EXPECT_EQ(curl_easy_perform(curl), CURLE_OK);
    curl_easy_cleanup(curl);
    return response;
  }
};

TEST_F(EtcdLockTest, TokensAreIncreasingCreateRevisionsAndTheKeyIsExclusive) {
  CheckEtcdReachable(Env("PG_FENCING_TEST_ETCD"));
  EtcdLockOptions options = Options("exclusive", 1000ms);
  auto first = AcquireEtcdLock(options);
  EXPECT_TRUE(first->held());
  EXPECT_EQ(first->Describe().rfind("etcd key " + options.key + " under lease ", 0), 0u)
      << first->Describe();
  EXPECT_THROW(AcquireEtcdLock(options), LeaseUnavailableError);
  EXPECT_TRUE(first->Release());
  EXPECT_FALSE(first->Release());
  auto second = AcquireEtcdLock(options);
  EXPECT_GT(second->token(), first->token());
}

TEST_F(EtcdLockTest, WaitingAcquireGetsTheKeyWhenItsHolderLetsGo) {
  EtcdLockOptions options = Options("wait", 1000ms);
  auto first = AcquireEtcdLock(options);
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    first.reset();
  });
  options.wait = 5000ms;
  auto second = AcquireEtcdLock(options);
  releaser.join();
  EXPECT_TRUE(second->held());
}

TEST_F(EtcdLockTest, HeartbeatKeepsTheLeaseAliveAcrossSeveralTtls) {
  LostCounter lost;
  EtcdLockOptions options = Options("heartbeat", 1000ms);
  options.on_lost = lost.Callback();
  auto lock = AcquireEtcdLock(options);
  std::this_thread::sleep_for(2500ms);
  EXPECT_TRUE(lock->held()) << lock->lost_reason();
  EXPECT_EQ(lost.calls, 0);
  EXPECT_THROW(AcquireEtcdLock(options), LeaseUnavailableError);
}

TEST_F(EtcdLockTest, LeaseRevokedBehindItsBackIsReportedLost) {
  LostCounter lost;
  EtcdLockOptions options = Options("revoked", 1000ms);
  options.on_lost = lost.Callback();
  auto lock = AcquireEtcdLock(options);
  const std::string describe = lock->Describe();
  const std::string lease = describe.substr(describe.rfind(' ') + 1);
  Post("/v3/lease/revoke", "{\"ID\": \"" + lease + "\"}");
  ASSERT_TRUE(lost.WaitFor(2000ms));
  EXPECT_FALSE(lock->held());
  EXPECT_NE(lock->lost_reason().find("renewal refused"), std::string::npos) << lock->lost_reason();
  EXPECT_FALSE(lock->Release()) << "the lease was already gone";
}

}  // namespace
}  // namespace pg_fencing::client
