// Argument checks of the lease and session functions: the C functions
// call them directly, the SQL through fencing_check_lease_args(),
// fencing_check_session_args() and fencing_check_wait().  Every ttl and
// wait is judged as the time from now to now plus it on the server's
// clock, the way the ends and deadlines they make are computed.
#include "lease_arguments.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/timestamp.h"
}

#include "lease_wait.hpp"  // kMaxWaitMs
#include "locks.hpp"
#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR (varatt.h from 16 on), infinite intervals (17)

namespace pg_fencing {

namespace {

const char *IntervalText(Datum interval) {
  return DatumGetCString(DirectFunctionCall1(interval_out, interval));
}

// Where interval, counted from now on the server's clock, ends: now +
// interval, as every lease's and session's end is computed
// (clock_timestamp() + ttl) and every wait's deadline.  Not the interval's
// own ordering, which counts a month as 30 days: '-1 year 360 days 1 sec'
// is greater than zero, yet ends five days before now.
struct FromNow {
  TimestampTz now;
  TimestampTz end;
};

FromNow CountFromNow(Datum interval) {
  const TimestampTz now = GetCurrentTimestamp();
  return {now, DatumGetTimestampTz(DirectFunctionCall2(
                   timestamptz_pl_interval, TimestampTzGetDatum(now), interval))};
}

// The detail of an interval that its own ordering (months of 30 days)
// takes for positive while the clock ends it at or before now; none for
// one that is plainly zero or negative.
int CalendarDetail(Datum interval, const FromNow &span) {
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  if (!DatumGetBool(DirectFunctionCall2(interval_gt, interval, IntervalPGetDatum(zero)))) return 0;
  return errdetail("Counted from now on the server's clock, %s ends at %s, %s.",
                   IntervalText(interval), timestamptz_to_str(span.end),
                   span.end < span.now ? "before now" : "which is now");
}

}  // namespace

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
  const Datum ttl = PG_GETARG_DATUM(ttl_arg);
  // A lease that never expires is no lease: its holder could vanish and
  // keep the lock forever.  Only 17 and later can express one.
  if (!compat::IntervalIsFinite(DatumGetIntervalP(ttl))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be finite, got %s (lock \"%s\")", IntervalText(ttl),
                           lock_name)));
  }
  const FromNow span = CountFromNow(ttl);
  if (span.end <= span.now) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease ttl must be positive, got %s (lock \"%s\")", IntervalText(ttl),
                           lock_name),
                    CalendarDetail(ttl, span)));
  }
  return lock_name;
}

void CheckSessionTtl(Datum ttl) {
  if (!compat::IntervalIsFinite(DatumGetIntervalP(ttl))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("session ttl must be positive and finite, got %s", IntervalText(ttl))));
  }
  const FromNow span = CountFromNow(ttl);
  if (span.end <= span.now) {
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("session ttl must be positive and finite, got %s", IntervalText(ttl)),
             CalendarDetail(ttl, span)));
  }
}

void CheckWait(Datum wait, const char *lock_name) {
  if (!compat::IntervalIsFinite(DatumGetIntervalP(wait))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("wait must be at most 2147483.647 seconds (24.8 days), got %s "
                           "(lock \"%s\")",
                           IntervalText(wait), lock_name),
                    errhint("Wait longer than that with repeated calls.")));
  }
  const FromNow span = CountFromNow(wait);
  if (span.end < span.now) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("wait must not be negative, got %s (lock \"%s\")", IntervalText(wait),
                           lock_name),
                    CalendarDetail(wait, span)));
  }
  if (span.end - span.now > kMaxWaitMs * 1000) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("wait must be at most 2147483.647 seconds (24.8 days), got %s "
                           "(lock \"%s\")",
                           IntervalText(wait), lock_name),
                    errhint("Wait longer than that with repeated calls.")));
  }
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

// fencing_check_session_args(holder text, ttl interval, check_holder
// boolean) RETURNS boolean (1.9 in C): true, or 22023.  Not strict.
PG_FUNCTION_INFO_V1(fencing_check_session_args);
Datum fencing_check_session_args(PG_FUNCTION_ARGS) {
  const bool check_holder = !PG_ARGISNULL(2) && PG_GETARG_BOOL(2);
  if (check_holder && (PG_ARGISNULL(0) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("session holder must not be NULL or empty")));
  }
  if (PG_ARGISNULL(1)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("session ttl must be positive and finite, got NULL")));
  }
  pg_fencing::CheckSessionTtl(PG_GETARG_DATUM(1));
  PG_RETURN_BOOL(true);
}

// fencing_check_wait(wait interval, lock_name text) RETURNS boolean (1.9):
// true, or 22023 for a negative or too long wait.  NULL waits are the
// caller's to judge (no wait, for the acquires).
PG_FUNCTION_INFO_V1(fencing_check_wait);
Datum fencing_check_wait(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0)) PG_RETURN_BOOL(true);
  pg_fencing::CheckWait(PG_GETARG_DATUM(0),
                        PG_ARGISNULL(1) ? "NULL" : text_to_cstring(PG_GETARG_TEXT_PP(1)));
  PG_RETURN_BOOL(true);
}

}  // extern "C"
