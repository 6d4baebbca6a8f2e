// Fenced writes: the guard's SQLSTATEs as C++ exception types.
#include <exception>
#include <string>

#include "pg_fencing/client.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::client {

namespace {
// Raised by the extension's fencing_guard trigger (see the install script).
constexpr const char kStaleTokenState[] = "55Z01";
constexpr const char kMissingTokenState[] = "55Z02";
constexpr const char kNeverGrantedTokenState[] = "55Z03";
constexpr const char kLeaseEndedState[] = "55Z04";
}  // namespace

void RethrowMapped(const pqxx::sql_error &error) {
  const std::string &state = pqxx_compat::SqlState(error);
  if (state == kStaleTokenState) throw StaleTokenError(error.what());
  if (state == kMissingTokenState) throw MissingTokenError(error.what());
  if (state == kNeverGrantedTokenState) throw NeverGrantedTokenError(error.what());
  if (state == kLeaseEndedState) throw LeaseEndedError(error.what());

  // Anything else goes on unchanged.  When error is the exception being
  // handled (the usual call, from a catch block), rethrow that very object,
  // so a pqxx::unique_violation stays a pqxx::unique_violation.  "throw;"
  // alone would do that, but would terminate the process if we were called
  // outside a handler, or rethrow some other exception if the one being
  // handled is not error.
  if (std::current_exception()) {
    try {
      throw;
    } catch (const pqxx::sql_error &current) {
      if (&current == &error) throw;
    } catch (...) {
      // Handling something else: fall through to a copy of error.
    }
  }
  throw error;  // a copy, of static type pqxx::sql_error
}

}  // namespace pg_fencing::client
