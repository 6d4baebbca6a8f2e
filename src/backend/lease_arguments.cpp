// Argument checks of the lease functions (fencing_check_lease_args).
//
// The lease logic itself is SQL (the _as functions in
// extension/pg_fencing--1.1--1.2.sql); the checks are here, in C, because
// every lease call makes them and a PL/pgSQL helper would cost a function
// call through the SQL executor each time.
#include "locks.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/timestamp.h"
}

#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR (varatt.h from 16 on), infinite intervals (17)

extern "C" {

// fencing_check_lease_args(lock_name text, holder text, ttl interval,
// check_holder boolean) RETURNS boolean: true, or an error (22023) naming
// what is wrong.  Not strict: NULLs are among the things it rejects.
PG_FUNCTION_INFO_V1(fencing_check_lease_args);
Datum fencing_check_lease_args(PG_FUNCTION_ARGS) {
  const char *lock_name = pg_fencing::CheckLockName(fcinfo, 0);
  const bool check_holder = !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);
  if (check_holder && (PG_ARGISNULL(1) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1)) == 0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease holder must not be NULL or empty (lock \"%s\")", lock_name)));
  }
  if (PG_ARGISNULL(2)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be positive, got NULL (lock \"%s\")", lock_name)));
  }
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  const Datum ttl = PG_GETARG_DATUM(2);
  // A lease that never expires is no lease: its holder could vanish and
  // keep the lock forever.  Only 17 and later can express one.
  if (!pg_fencing::compat::IntervalIsFinite(DatumGetIntervalP(ttl))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be finite, got %s (lock \"%s\")",
                           DatumGetCString(DirectFunctionCall1(interval_out, ttl)), lock_name)));
  }
  if (!DatumGetBool(DirectFunctionCall2(interval_gt, ttl, IntervalPGetDatum(zero)))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be positive, got %s (lock \"%s\")",
                           DatumGetCString(DirectFunctionCall1(interval_out, ttl)), lock_name)));
  }
  PG_RETURN_BOOL(true);
}

}  // extern "C"
