// The one place where C++ meets the PostgreSQL backend.
//
// Rules (see CONTRIBUTING.md):
//  * PostgreSQL headers are included here, inside extern "C", postgres.h first.
//  * ereport(ERROR) longjmps: in any frame that can reach it, keep only
//    trivially destructible objects.
//  * No C++ exception may reach PostgreSQL's C frames: C++ work that could
//    throw runs through RunCxx(), which turns an exception into an ereport
//    after the try block has ended.
#pragma once

extern "C" {
#include "postgres.h"

#include "fmgr.h"
}

#include <exception>
#include <type_traits>

#include "pg_fencing/core.hpp"

namespace pg_fencing {

// SQLSTATE class 55 (object not in prerequisite state), our own subclass.
#define PGF_ERRCODE_STALE_TOKEN MAKE_SQLSTATE('5', '5', 'Z', '0', '1')
#define PGF_ERRCODE_MISSING_TOKEN MAKE_SQLSTATE('5', '5', 'Z', '0', '2')

// Raises the ERROR for an exception that escaped C++ code.  Defined in
// module.cpp; never returns.
[[noreturn]] void ReportCxxException(const char *what);

// Runs fn, which must call no PostgreSQL API, and converts any exception it
// throws into an ERROR.  The message is copied out of the exception inside
// the catch block; the ereport happens after the exception object is gone.
template <typename Fn>
void RunCxx(Fn &&fn) {
  static_assert(std::is_trivially_destructible_v<std::decay_t<Fn>>,
                "a closure passed to RunCxx must capture only by reference or trivially");
  static char what[256];
  bool failed = false;
  try {
    fn();
  } catch (const std::exception &e) {
    failed = true;
    const char *src = e.what();
    std::size_t i = 0;
    for (; src[i] != '\0' && i + 1 < sizeof what; ++i) what[i] = src[i];
    what[i] = '\0';
  } catch (...) {
    failed = true;
    what[0] = '\0';
  }
  if (failed) ReportCxxException(what);
}

}  // namespace pg_fencing
