// Argument checks of the lease functions: the C functions of
// lease_engine.cpp call CheckLeaseArguments() directly, the SQL of the
// waiting acquire calls fencing_check_lease_args().
#include "lease_arguments.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/timestamp.h"
}

#include "locks.hpp"
#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR (varatt.h from 16 on), infinite intervals (17)

namespace pg_fencing {

const char *CheckLeaseArguments(FunctionCallInfo fcinfo, int holder_arg, int ttl_arg) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  if (holder_arg >= 0 &&
      (PG_ARGISNULL(holder_arg) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(holder_arg)) == 0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease holder must not be NULL or empty (lock \"%s\")", lock_name)));
  }
  if (PG_ARGISNULL(ttl_arg)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be positive, got NULL (lock \"%s\")", lock_name)));
  }
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  const Datum ttl = PG_GETARG_DATUM(ttl_arg);
  // A lease that never expires is no lease: its holder could vanish and
  // keep the lock forever.  Only 17 and later can express one.
  if (!compat::IntervalIsFinite(DatumGetIntervalP(ttl))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be finite, got %s (lock \"%s\")",
                           DatumGetCString(DirectFunctionCall1(interval_out, ttl)), lock_name)));
  }
  if (!DatumGetBool(DirectFunctionCall2(interval_gt, ttl, IntervalPGetDatum(zero)))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be positive, got %s (lock \"%s\")",
                           DatumGetCString(DirectFunctionCall1(interval_out, ttl)), lock_name)));
  }
  return lock_name;
}

}  // namespace pg_fencing

extern "C" {

// fencing_check_lease_args(lock_name text, holder text, ttl interval,
// check_holder boolean) RETURNS boolean: true, or an error (22023) naming
// what is wrong.  Not strict: NULLs are among the things it rejects.
PG_FUNCTION_INFO_V1(fencing_check_lease_args);
Datum fencing_check_lease_args(PG_FUNCTION_ARGS) {
  const bool check_holder = !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);
  (void)pg_fencing::CheckLeaseArguments(fcinfo, check_holder ? 1 : -1, 2);
  PG_RETURN_BOOL(true);
}

}  // extern "C"
