// Uses the installed headers and both archives: the core (ParseToken), the
// client (RethrowMapped, Lease) and, through them, libpqxx and threads.
// Needs no server: the Lease is only constructed when a conninfo is given.
#include <cstdio>
#include <pg_fencing/client.hpp>
#include <pg_fencing/token.hpp>
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
