// Backend support for the lease functions (extension/pg_fencing--1.0.sql).
//
// The lease logic itself is SQL; only the argument checks are here, in C,
// because every lease call makes them and a PL/pgSQL helper would cost a
// function call through the SQL executor each time.
#include "boundary.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/timestamp.h"
}

namespace pg_fencing {
namespace {

[[noreturn]] void ReportBadArgument(const char *message) {
  ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg_internal("%s", message)));
  pg_unreachable();
}

bool IsNullOrEmpty(FunctionCallInfo fcinfo, int arg) {
  return PG_ARGISNULL(arg) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(arg)) == 0;
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_check_lease_args(lock_name text, holder text, ttl interval,
// check_holder boolean) RETURNS boolean: true, or an error (22023) naming
// what is wrong.  Not strict: NULLs are among the things it rejects.
PG_FUNCTION_INFO_V1(fencing_check_lease_args);
Datum fencing_check_lease_args(PG_FUNCTION_ARGS) {
  if (IsNullOrEmpty(fcinfo, 0)) ReportBadArgument("lock name must not be NULL or empty");
  const char *lock_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  const bool check_holder = !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);
  if (check_holder && IsNullOrEmpty(fcinfo, 1)) {
    ReportBadArgument(
        psprintf("lease holder must not be NULL or empty (lock \"%s\")", lock_name));
  }
  if (PG_ARGISNULL(2)) {
    ReportBadArgument(psprintf("lease ttl must be positive, got NULL (lock \"%s\")", lock_name));
  }
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  const Datum ttl = PG_GETARG_DATUM(2);
  if (!DatumGetBool(DirectFunctionCall2(interval_gt, ttl, IntervalPGetDatum(zero)))) {
    ReportBadArgument(psprintf("lease ttl must be positive, got %s (lock \"%s\")",
                               DatumGetCString(DirectFunctionCall1(interval_out, ttl)), lock_name));
  }
  PG_RETURN_BOOL(true);
}

}  // extern "C"
