// The one place where C++ meets the PostgreSQL backend.
//
// Rules (see CONTRIBUTING.md):
//  * PostgreSQL headers are included here, inside extern "C", postgres.h first.
//  * ereport(ERROR) longjmps: in any frame that can reach it, keep only
//    trivially destructible objects.
//  * No C++ exception may reach PostgreSQL's C frames.  The code that could
//    throw is the PostgreSQL-free core (src/core/), and it is noexcept by
//    design: it allocates nothing and calls nothing that throws.  Every call
//    into it goes through PGF_CORE(), which makes the compiler prove that
//    the call is noexcept; a core function that lost its noexcept would not
//    compile here, instead of ending in std::terminate at run time.
#pragma once

extern "C" {
#include "postgres.h"

#include "fmgr.h"
}

#include "guard_decision.hpp"
#include "pg_fencing/token.hpp"
#include "transaction_fences.hpp"

namespace pg_fencing {

// SQLSTATE class 55 (object not in prerequisite state), our own subclass.
#define PGF_ERRCODE_STALE_TOKEN MAKE_SQLSTATE('5', '5', 'Z', '0', '1')
#define PGF_ERRCODE_MISSING_TOKEN MAKE_SQLSTATE('5', '5', 'Z', '0', '2')
// A token this database never granted, where its tokens are its grants (1.5).
#define PGF_ERRCODE_NEVER_GRANTED_TOKEN MAKE_SQLSTATE('5', '5', 'Z', '0', '3')
// A COMMIT of a transaction that wrote under a lease that has ended (1.6).
#define PGF_ERRCODE_LEASE_ENDED MAKE_SQLSTATE('5', '5', 'Z', '0', '4')
// 55Z05 (1.8): the fencing session does not exist or has ended.
#define PGF_ERRCODE_SESSION_ENDED MAKE_SQLSTATE('5', '5', 'Z', '0', '5')

// Calls into the core: PGF_CORE(DecideGuard(in, options)).  A macro, so
// that the static_assert sees the very expression that is called.
#define PGF_CORE(call)                                                              \
  ([&]() noexcept -> decltype(auto) {                                               \
    static_assert(noexcept(call), "a call into the core must be noexcept: " #call); \
    return call;                                                                    \
  }())

}  // namespace pg_fencing
