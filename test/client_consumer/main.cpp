// Uses every installed header and all archives: the core (ParseToken), the
// client (RethrowMapped, Lease, Session, Heartbeat, LeaderWatch), the Redis and etcd
// locks and, through them, libpqxx, hiredis, libcurl and threads.  check.sh fails if a
// header is installed that this file does not include.  Needs no server:
// nothing connects unless a conninfo is given.
#include <pg_fencing/client.hpp>
#include <pg_fencing/etcd_lock.hpp>
#include <pg_fencing/heartbeat.hpp>
#include <pg_fencing/pqxx_compat.hpp>
#include <pg_fencing/redis_lock.hpp>
#include <pg_fencing/renewed_lock.hpp>
#include <pg_fencing/session.hpp>
#include <pg_fencing/token.hpp>
#include <pg_fencing/watch.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace pfc = pg_fencing::client;

int main(int argc, char **argv) {
  const pg_fencing::ParseResult parsed = pg_fencing::ParseToken(" 42 ");
  if (parsed.status != pg_fencing::ParseStatus::kOk || parsed.value != 42) {
    std::fprintf(stderr, "ParseToken is broken\n");
    return 1;
  }

  try {
    pfc::RethrowMapped(pqxx::sql_error("stale", "UPDATE", "55Z01"));
  } catch (const pfc::StaleTokenError &) {
    // expected
  } catch (...) {
    std::fprintf(stderr, "RethrowMapped did not map 55Z01\n");
    return 1;
  }

  if (pfc::Heartbeat::SafetyMargin(std::chrono::seconds(10)) != std::chrono::seconds(1)) {
    std::fprintf(stderr, "Heartbeat::SafetyMargin is broken\n");
    return 1;
  }

  // Links the Redis part without a server: the address is checked first.
  try {
    pfc::CheckRedisReachable("not an address");
    std::fprintf(stderr, "CheckRedisReachable accepted a malformed address\n");
    return 1;
  } catch (const std::invalid_argument &) {
    // expected
  }
  // Links the etcd part: nothing listens on port 1.
  try {
    pfc::CheckEtcdReachable("http://127.0.0.1:1");
    std::fprintf(stderr, "CheckEtcdReachable reached nothing\n");
    return 1;
  } catch (const std::runtime_error &) {
    // expected
  }

  // Links the watch: its options are checked before it connects.
  try {
    pfc::LeaderWatchOptions watch_options;
    watch_options.lock_name = "client_consumer";
    pfc::LeaderWatch watch(watch_options);
    std::fprintf(stderr, "LeaderWatch accepted options without on_change\n");
    return 1;
  } catch (const std::invalid_argument &) {
    // expected
  }

  try {
    pfc::SessionOptions session_options;
    session_options.holder = "client_consumer";
    session_options.ttl = std::chrono::milliseconds(0);
    pfc::Session session(session_options);
    std::fprintf(stderr, "Session accepted a ttl of 0\n");
    return 1;
  } catch (const std::invalid_argument &) {
    // expected
  }

  if (argc > 1) {
    pfc::LeaseOptions options;
    options.conninfo = argv[1];
    options.lock_name = "client_consumer";
    options.holder = "client_consumer";
    pfc::Lease lease(options);
    std::printf("token %lld\n", static_cast<long long>(lease.token()));
  }
  std::printf("pg_fencing_client consumer: ok\n");
  return 0;
}
