// A Redis lock with a token from fencing_grant() (see redis_lock.hpp): the
// single-instance Redis lock
//   SET <key> <random id> NX PX <ttl>
// with the fencing token from the database's fencing_grant(), taken right
// after the SET succeeds.  Renewal and release are Lua scripts that act only
// while the key still holds our id.  Client: hiredis.
#include "pg_fencing/redis_lock.hpp"

#include <hiredis/hiredis.h>
#include <sys/random.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "busy_retry.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::client {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Bound on one command while acquiring and releasing; renewals get what is
// left before the lock's deadline, if that is less.
constexpr milliseconds kCommandTimeout{2000};
constexpr std::size_t kIdBytes = 16;

// Extends the key's expiry only while it holds our id: otherwise the lock
// expired and may be someone else's now, and is not ours to extend.
constexpr char kRenewScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
// Deletes the key only while it holds our id: a plain DEL after our lock
// expired would delete the next holder's lock.
constexpr char kReleaseScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

struct RedisAddress {
  std::string host;
  int port = 0;

  std::string text() const { return host + ":" + std::to_string(port); }
};

RedisAddress ParseRedisAddress(const std::string &address) {
  const std::size_t colon = address.rfind(':');
  RedisAddress parsed;
  if (colon != std::string::npos && colon > 0) {
    parsed.host = address.substr(0, colon);
    const char *first = address.data() + colon + 1;
    const char *last = address.data() + address.size();
    const auto [end, error] = std::from_chars(first, last, parsed.port);
    if (error == std::errc() && end == last && first != last && parsed.port > 0 &&
        parsed.port < 65536) {
      return parsed;
    }
  }
  throw std::invalid_argument("a Redis address is HOST:PORT, got '" + address + "'");
}

// A value no other holder can have: 128 random bits, in hex.
std::string RandomId() {
  unsigned char bytes[kIdBytes];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t got = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(got);
  }
  std::string id;
  for (const unsigned char byte : bytes) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", byte);
    id += hex;
  }
  return id;
}

timeval ToTimeval(milliseconds timeout) {
  // hiredis takes a zero timeout as "none": at least a millisecond.
  const long long ms = std::max<long long>(timeout.count(), 1);
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
}

struct ContextDeleter {
  void operator()(redisContext *context) const { redisFree(context); }
};
struct ReplyDeleter {
  void operator()(redisReply *reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// One connection, used by one thread at a time.  A command that fails (say,
// a timeout) leaves hiredis's context unusable; the next one reconnects.
class RedisConnection {
 public:
  explicit RedisConnection(RedisAddress address) : address_(std::move(address)) {}

  // Runs one command, arguments passed as they are (binary-safe).  Throws on
  // a transport failure or an error reply.
  ReplyPtr Run(const std::vector<std::string> &args, milliseconds timeout) {
    if (!context_ || context_->err) Connect(timeout);
    if (redisSetTimeout(context_.get(), ToTimeval(timeout)) != REDIS_OK) {
      throw std::runtime_error(Where() + ": cannot set a timeout: " + context_->errstr);
    }
    std::vector<const char *> argv;
    std::vector<std::size_t> lengths;
    for (const std::string &arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    void *raw = redisCommandArgv(context_.get(), static_cast<int>(args.size()), argv.data(),
                                 lengths.data());
    if (raw == nullptr)
      throw std::runtime_error(Where() + ": " + args[0] + ": " + context_->errstr);
    ReplyPtr reply(static_cast<redisReply *>(raw));
    if (reply->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error(Where() + ": " + args[0] + ": " + reply->str);
    }
    return reply;
  }

  std::string Where() const { return "Redis at " + address_.text(); }

 private:
  void Connect(milliseconds timeout) {
    context_.reset(
        redisConnectWithTimeout(address_.host.c_str(), address_.port, ToTimeval(timeout)));
    if (!context_) throw std::bad_alloc();
    if (context_->err) {
      const std::string why = context_->errstr;
      context_.reset();
      throw std::runtime_error("cannot connect to " + Where() + ": " + why);
    }
  }

  RedisAddress address_;
  std::unique_ptr<redisContext, ContextDeleter> context_;
};

// An integer reply's value; throws for any other kind of reply.
long long IntegerOf(const ReplyPtr &reply, const char *what) {
  if (reply->type != REDIS_REPLY_INTEGER) {
    throw std::runtime_error(std::string("unexpected Redis reply to ") + what);
  }
  return reply->integer;
}

class RedisLockSession final : public LockSession {
 public:
  RedisLockSession(std::unique_ptr<RedisConnection> connection, std::string key, std::string id,
                   milliseconds ttl)
      : connection_(std::move(connection)), key_(std::move(key)), id_(std::move(id)), ttl_(ttl) {}

  std::string Describe() const override { return "Redis key " + key_; }

  bool Renew(milliseconds budget) override {
    return IntegerOf(connection_->Run(
                         {"EVAL", kRenewScript, "1", key_, id_, std::to_string(ttl_.count())},
                         std::min(budget, kCommandTimeout)),
                     "the renewal script") == 1;
  }

  bool Release() override {
    return IntegerOf(connection_->Run({"EVAL", kReleaseScript, "1", key_, id_}, kCommandTimeout),
                     "the release script") == 1;
  }

 private:
  std::unique_ptr<RedisConnection> connection_;
  const std::string key_;
  const std::string id_;
  const milliseconds ttl_;
};

}  // namespace

// The token comes from the database the writes go to, not from Redis.  A
// Redis counter (INCR fencing:<name>) looks simpler but is weaker:
//  - it is not durable: with the usual persistence (RDB snapshots, or AOF
//    with appendfsync everysec) a Redis restart loses the increments since
//    the last snapshot or fsync, and a failover to a replica loses those the
//    replica had not received yet (replication is asynchronous).  The counter
//    then hands out values it has handed out before, and a new holder's token
//    can be at or below a stale holder's: fencing silently stops working.
//    Only appendfsync always on a single node avoids it;
//  - it is not ordered with the database's own state: it lives in another
//    system, so nothing ties it to the highest token a row has seen (a
//    restored or rolled-back Redis has no idea what the tables hold).
// fencing_grant() is flushed to WAL before it returns, survives crashes and
// pg_dump/restore, and with synchronous replication failover too (see
// docs/functions.md).  The Redis lock stays what it is good at: keeping two holders
// from working at once most of the time, cheaply.
//
// A holder that pauses between its SET and this grant gets a token above the
// next holder's: then it fences out that holder, rather than the other way
// round, and the guard still accepts writes only in token order.
std::unique_ptr<RenewedLock> AcquireRedisLock(const RedisLockOptions &options,
                                              pqxx::connection &db) {
  const std::string id = RandomId();
  auto connection = std::make_unique<RedisConnection>(ParseRedisAddress(options.address));
  const BusyRetry retry(options.wait, "Redis key " + options.key);
  Clock::time_point sent;
  for (;;) {
    sent = Clock::now();
    const ReplyPtr reply = connection->Run(
        {"SET", options.key, id, "NX", "PX", std::to_string(options.ttl.count())}, kCommandTimeout);
    if (reply->type == REDIS_REPLY_STATUS) break;  // OK: the key is ours for ttl
    if (reply->type != REDIS_REPLY_NIL) {
      throw std::runtime_error("unexpected reply from " + connection->Where() + " to SET NX");
    }
    retry.AfterBusy();
  }
  auto session =
      std::make_unique<RedisLockSession>(std::move(connection), options.key, id, options.ttl);
  Token token;
  try {
    pqxx::work tx(db);
    token = pqxx_compat::Exec1(tx, "SELECT fencing_grant()::bigint")[0].as<Token>();
    tx.commit();
  } catch (...) {
    try {
      session->Release();  // rather than leave the lock to run out
    } catch (...) {
    }
    throw;
  }
  return std::make_unique<RenewedLock>(std::move(session), token, options.ttl, sent,
                                       options.on_lost);
}

void CheckRedisReachable(const std::string &address) {
  RedisConnection connection(ParseRedisAddress(address));
  const ReplyPtr reply = connection.Run({"PING"}, kCommandTimeout);
  if (reply->type != REDIS_REPLY_STATUS) {
    throw std::runtime_error(connection.Where() + " did not answer PING with PONG");
  }
}

}  // namespace pg_fencing::client
