// CALL fencing_await(lock_name, holder, ttl, wait [, kind, permits,
// payload]) (1.7): the waiting acquire as a procedure, which holds no
// snapshot and no transaction id while it waits.  CALL
// fencing_await(lock_name, session, wait [, kind, permits, payload]) (1.8):
// the same for a lease in a session, whose attempts are
// fencing_session_acquire and whose sleeps end at the session's end.
//
// A waiting function (fencing_acquire(..., wait) and the permit and shared
// forms) runs inside one statement: its snapshot is the database's xmin
// horizon for the whole wait, and VACUUM can remove nothing that died
// since, in any table.  A procedure called on its own may end its
// transaction.  So fencing_await makes each attempt in a short transaction
// of its own and commits it before it sleeps:
//
//   attempt      the acquire function without a wait (fencing_acquire,
//                fencing_acquire_permit or fencing_acquire_shared), as the
//                caller, with all of its checks; a token: commit, done
//   queue        the lock's waiting room, first come first served, as a
//                session lock (lease_wakeup.hpp), so that it stays held
//                across the commits; an acquire of someone else's gives
//                way to it as to any waiter in the room (writer priority
//                included: a shared grant gives way to an exclusive waiter)
//   loop         attempt; when the lock may next be free (its lease's end,
//                plus the lock-delay, as the function forms judge it);
//                commit; sleep on the latch until then, the deadline or a
//                release's commit (lease_wakeup.cpp sets the latch of the
//                room's holder, whichever transaction it is in)
//   leave        after the grant's commit, so that the next in line sees it
//
// The transactions it commits are its own: inside a transaction block (or
// a function, or a procedure called from one) it cannot commit, and says
// so.  Each runs at READ COMMITTED, as the waiting acquires require.
//
// The waiting functions' own loop is here too (fencing_wait_to_acquire, C
// from 1.10): the same attempts and the same judgement of when the lock
// may come free (NextFreeAt), inside one statement, the room held until
// the transaction ends.  The room itself is lease_wakeup.cpp's.
#include "boundary.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "extension_objects.hpp"
#include "kept_statements.hpp"
#include "lease_arguments.hpp"
#include "lease_decision.hpp"
#include "lease_engine.hpp"
#include "lease_line.hpp"
#include "lease_wait.hpp"
#include "lease_wakeup.hpp"
#include "locks.hpp"
#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR: varatt.h from 16 on

namespace pg_fencing {
namespace {

// The procedure's arguments, in the order of its signature.
enum AwaitArg { kLockName, kHolder, kTtl, kWait, kKind, kPermits, kPayload, kSession, kArgCount };

struct AwaitRequest {
  Oid schema;
  const char *lock_name;
  AwaitKind kind;
  bool in_session;
  Datum args[kArgCount];
  bool nulls[kArgCount];
};

void RefuseAtomicCall(FunctionCallInfo fcinfo, const char *lock_name) {
  const bool atomic = fcinfo->context == nullptr || !IsA(fcinfo->context, CallContext) ||
                      castNode(CallContext, fcinfo->context)->atomic;
  if (!atomic) return;
  ereport(ERROR,
          (errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
           errmsg("fencing_await() cannot wait for fencing lock \"%s\" inside a transaction block",
                  lock_name),
           errdetail("It commits each attempt before it sleeps, so that its wait holds no "
                     "snapshot; inside BEGIN ... COMMIT, a function, or a procedure called from "
                     "one, it cannot commit."),
           errhint("CALL it on its own, outside a transaction block; inside one, "
                   "fencing_acquire(lock_name, holder, ttl, wait) waits, holding the "
                   "transaction's snapshot while it does.")));
}

AwaitRequest RequestFrom(FunctionCallInfo fcinfo) {
  AwaitRequest request = {};
  // 1.7's procedure has no session argument: its INOUT token is where 1.8
  // has the session.
  const bool has_session_arg = PG_NARGS() > kArgCount;
  request.in_session = has_session_arg && !PG_ARGISNULL(kSession);
  if (request.in_session) {
    // A lease in a session has the session's holder and end.
    request.lock_name = CheckLockName(fcinfo, kLockName);
    if (!PG_ARGISNULL(kHolder) || !PG_ARGISNULL(kTtl)) {
      ereport(ERROR,
              (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
               errmsg("fencing_await() takes no holder and no ttl with a session (lock \"%s\")",
                      request.lock_name),
               errdetail("A lease in a session has the session's holder, and ends when the "
                         "session does."),
               errhint("CALL fencing_await(lock_name, session => id, wait => interval).")));
    }
  } else {
    request.lock_name = CheckLeaseArguments(fcinfo, kHolder, kTtl);
  }
  RefuseAtomicCall(fcinfo, request.lock_name);
  request.schema = ExtensionSchema(fcinfo);
  for (int i = 0; i < kArgCount; ++i) {
    request.nulls[i] = (i == kSession && !has_session_arg) || PG_ARGISNULL(i);
    request.args[i] = request.nulls[i] ? Datum(0) : PG_GETARG_DATUM(i);
  }
  // Detoasted now, in the CALL's memory, which outlives the commits below.
  request.args[kLockName] = PointerGetDatum(PG_GETARG_TEXT_PP(kLockName));
  if (!request.in_session) request.args[kHolder] = PointerGetDatum(PG_GETARG_TEXT_PP(kHolder));
  if (!request.nulls[kPayload]) {
    request.args[kPayload] = PointerGetDatum(PG_DETOAST_DATUM_COPY(PG_GETARG_DATUM(kPayload)));
  }

  // NULL is no kind (left out, the argument is 'exclusive').
  const char *kind_name = request.nulls[kKind] ? "NULL" : text_to_cstring(PG_GETARG_TEXT_PP(kKind));
  request.kind = request.nulls[kKind] ? AwaitKind::kUnknown
                                      : PGF_CORE(AwaitKindNamed(kind_name, strlen(kind_name)));
  switch (PGF_CORE(
      CheckAwaitArguments(request.kind, !request.nulls[kPermits], !request.nulls[kPayload]))) {
    case AwaitArgumentProblem::kNone:
      break;
    case AwaitArgumentProblem::kUnknownKind:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("kind must be 'exclusive', 'shared' or 'permit', got %s (lock \"%s\")",
                             request.nulls[kKind] ? "NULL" : quote_literal_cstr(kind_name),
                             request.lock_name)));
      break;
    case AwaitArgumentProblem::kPermitsMissing:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("permits must be between 1 and %d, got NULL (semaphore \"%s\")",
                             kMaxPermits, request.lock_name),
                      errhint("kind => 'permit' takes permits => N, the semaphore's number of "
                              "permits.")));
      break;
    case AwaitArgumentProblem::kPermitsNotForKind:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("permits are for kind => 'permit', not '%s' (lock \"%s\")", kind_name,
                             request.lock_name)));
      break;
    case AwaitArgumentProblem::kPayloadNotForKind:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("a payload is for kind => 'exclusive', not '%s' (lock \"%s\")",
                             kind_name, request.lock_name),
                      errdetail("Permits and shared leases carry no payload.")));
      break;
  }

  if (request.nulls[kWait]) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("wait must not be NULL (lock \"%s\")", request.lock_name),
                    errhint("Give how long to wait; '0' makes one attempt.")));
  }
  CheckWait(request.args[kWait], request.lock_name);
  return request;
}

// One attempt, under the active snapshot a statement would have: the
// acquire function of the kind, without a wait, as the caller (with its permission checks, the lock's creation, its kind's
// checks).  Returns whether it granted a token (*token).
bool Attempt(const AwaitRequest &r, int64 *token) {
  FmgrInfo *fn = nullptr;
  Datum args[6];
  bool nulls[6];
  int nargs = 0;
  const auto arg = [&](AwaitArg which) {
    args[nargs] = r.args[which];
    nulls[nargs] = r.nulls[which];
    ++nargs;
  };
  const auto no_wait = [&]() {
    args[nargs] = Datum(0);
    nulls[nargs] = true;
    ++nargs;
  };
  if (r.in_session) {
    // Every kind through one function, which says which it takes.
    static const Oid kTypes[] = {INT8OID, TEXTOID, INTERVALOID, JSONBOID, TEXTOID, INT4OID};
    fn = ExtensionFunction(r.schema, "fencing_session_acquire", 6, kTypes);
    arg(kSession), arg(kLockName), no_wait(), arg(kPayload), arg(kKind), arg(kPermits);
  } else if (r.kind == AwaitKind::kExclusive) {
    static const Oid kTypes[] = {TEXTOID, TEXTOID, INTERVALOID, INTERVALOID, JSONBOID};
    fn = ExtensionFunction(r.schema, "fencing_acquire", 5, kTypes);
    arg(kLockName), arg(kHolder), arg(kTtl), no_wait(), arg(kPayload);
  } else if (r.kind == AwaitKind::kPermit) {
    static const Oid kTypes[] = {TEXTOID, TEXTOID, INT4OID, INTERVALOID, INTERVALOID};
    fn = ExtensionFunction(r.schema, "fencing_acquire_permit", 5, kTypes);
    arg(kLockName), arg(kHolder), arg(kPermits), arg(kTtl), no_wait();
  } else {  // kShared (kUnknown is refused by RequestFrom)
    static const Oid kTypes[] = {TEXTOID, TEXTOID, INTERVALOID, INTERVALOID};
    fn = ExtensionFunction(r.schema, "fencing_acquire_shared", 4, kTypes);
    arg(kLockName), arg(kHolder), arg(kTtl), no_wait();
  }
  bool is_null = false;
  const Datum granted = CallExtensionFunction(fn, nargs, args, nulls, &is_null);
  if (is_null) return false;
  *token = DatumGetInt64(granted);
  return true;
}

// Attempt(), its lock waits (a lease row, the lock's fence gate while
// writes under the old token finish, a permit's gate) bounded by what is
// left of the wait, as the function forms bound theirs: a 55P03 is "not
// granted", whatever lock_timeout the session set.  In a subtransaction,
// so that an attempt cut short keeps nothing.  While it waits the attempt
// holds its snapshot, behind a transaction that is itself open.
bool AttemptWithin(const AwaitRequest &r, TimestampTz deadline, int64 *token) {
  bool granted = false;
  int64 got = 0;
  const TimestampTz now = GetCurrentTimestamp();
  const bool finished = WithLockTimeout(
      PGF_CORE(QueueTimeoutMs(now, deadline)),
      [&] { granted = Attempt(r, &got); }, [](bool) {});
  *token = got;
  return finished && granted;
}

// The end of the request's session, read as the tables' owner: false when
// it has no row any more (closed, or swept after its end).
bool SessionEnd(const AwaitRequest &r, TimestampTz *at) {
  Oid types[] = {INT8OID};
  Datum values[] = {r.args[kSession]};
  // As the owner, under the caller's search_path: the operator named with
  // its schema, so that no object of the caller's can stand in for it.
  const char *sql = psprintf("SELECT expires_at FROM %s.fencing_session "
                             "WHERE session_id OPERATOR(pg_catalog.=) $1",
                             quote_identifier(get_namespace_name(r.schema)));
  if (ExecuteKept(sql, 1, types, values, nullptr, true, 1) != SPI_OK_SELECT) {
    elog(ERROR, "pg_fencing: reading the end of fencing session failed");
  }
  if (SPI_processed == 0) return false;
  bool is_null = false;
  const Datum end = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
  *at = DatumGetTimestampTz(end);
  return true;
}

// When the lock may next be granted as things stand, for an exclusive
// lease (its lease's end, plus the lock-delay after an expiry; on a shared
// lock its shared holders' too) or for a permit or a shared lease (a
// semaphore's first slot to come free): fencing_available_at and
// fencing_permit_available_at, under the active snapshot, by a role that
// reads the tables.  False: not known (no lease yet).
bool NextFreeAt(Oid schema, bool exclusive, Datum lock_name, int64 lock_id, TimestampTz *at) {
  bool is_null = false;
  Datum next;
  if (exclusive) {
    static const Oid kTypes[] = {TEXTOID};
    FmgrInfo *fn = ExtensionFunction(schema, "fencing_available_at", 1, kTypes);
    const Datum args[] = {lock_name};
    next = CallExtensionFunction(fn, 1, args, nullptr, &is_null);
  } else {
    static const Oid kTypes[] = {INT8OID};
    FmgrInfo *fn = ExtensionFunction(schema, "fencing_permit_available_at", 1, kTypes);
    const Datum args[] = {Int64GetDatum(lock_id)};
    next = CallExtensionFunction(fn, 1, args, nullptr, &is_null);
  }
  *at = is_null ? 0 : DatumGetTimestampTz(next);
  return !is_null;
}

// When the next attempt should be made: when the lock may next be granted
// (NextFreeAt), or at the session's end, when the attempt says the session
// has ended (and leaves the lock's room to the next in line).  Read as the
// tables' owner, in the attempt's transaction.  False: not known.
bool NextChance(const AwaitRequest &r, int64 lock_id, TimestampTz *at) {
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(ExtensionTableOwner(r.schema),
                         saved_context | SECURITY_LOCAL_USERID_CHANGE);
  TimestampTz chance = 0;
  bool known = NextFreeAt(r.schema, r.kind == AwaitKind::kExclusive, r.args[kLockName], lock_id,
                          &chance);
  if (r.in_session) {
    TimestampTz session_end = 0;
    // No row: it was closed or swept; the next attempt says so at once.
    if (!SessionEnd(r, &session_end)) session_end = GetCurrentTimestamp();
    if (!known || session_end < chance) chance = session_end;
    known = true;
  }
  SetUserIdAndSecContext(saved_user, saved_context);
  *at = chance;
  return known;
}

// Commits the current transaction and starts the next, at READ COMMITTED
// whatever default_transaction_isolation says (every waiting acquire needs
// to see the others' commits), with no snapshot yet.
void CommitAndBegin() {
  SPI_commit();
  XactIsoLevel = XACT_READ_COMMITTED;
}

// The wait, once the first attempt found the lock taken: queue, then
// attempt each time the lock may have come free, until the deadline.
// Leaves the room on every way out.
bool WaitAndAttempt(const AwaitRequest &r, TimestampTz deadline, int64 *token) {
  const int64 lock_id = AuthorizeLock(r.schema, r.lock_name, GetUserId(), false, InvalidOid);
  const LOCKTAG room = WaitingRoomTag(r.schema, lock_id);
  MemoryContext attempts = AllocSetContextCreate(CurrentMemoryContext, "fencing_await attempts",
                                                 ALLOCSET_SMALL_SIZES);
  CommitAndBegin();
  volatile bool in_room = false;
  bool granted = false;
  PG_TRY();
  {
    InvalidateCatalogSnapshot();
    in_room = QueueForRoomAcrossTransactions(room, deadline);
    while (in_room) {
      MemoryContextReset(attempts);
      const MemoryContext saved = MemoryContextSwitchTo(attempts);
      PushActiveSnapshot(GetTransactionSnapshot());
      granted = AttemptWithin(r, deadline, token);
      TimestampTz next = 0;
      const bool next_known = !granted && NextChance(r, lock_id, &next);
      PopActiveSnapshot();
      MemoryContextSwitchTo(saved);
      // The grant commits before the next in line is let in, so that it
      // sees the lease taken.
      CommitAndBegin();
      if (granted) break;
      const TimestampTz now = GetCurrentTimestamp();
      if (now >= deadline) break;
      // No snapshot, no transaction id: the catalog snapshot the lookups
      // may have left would hold the horizon too.
      InvalidateCatalogSnapshot();
      SleepUntilWoken(true, next_known && next < deadline ? next : deadline);
    }
    if (in_room) LeaveRoomAcrossTransactions(room);
    in_room = false;
  }
  PG_CATCH();
  {
    if (in_room) LeaveRoomAcrossTransactions(room);
    PG_RE_THROW();
  }
  PG_END_TRY();
  MemoryContextDelete(attempts);
  return granted;
}

// One statement of the line, as the caller (its functions check it), in
// the current transaction: its first row's column 1 (a bigint) and 2 (a
// bigint or a text), each NULL when there is none.
struct LineAnswer {
  bool has_first;
  int64 first;
  bool has_second;
  Datum second;  // in the caller's memory
};

LineAnswer RunLineStatement(const char *sql, int count, Oid *types, Datum *values,
                            const char *nulls) {
  if (ExecuteKept(sql, count, types, values, nulls, false, 1) != SPI_OK_SELECT) {
    elog(ERROR, "pg_fencing: a statement of fencing_await's line failed");
  }
  LineAnswer answer = {false, 0, false, Datum(0)};
  if (SPI_processed == 0) return answer;
  bool is_null = false;
  const Datum first = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
  answer.has_first = !is_null;
  answer.first = is_null ? 0 : DatumGetInt64(first);
  if (SPI_tuptable->tupdesc->natts > 1) {
    const Datum second = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &is_null);
    const Form_pg_attribute type = TupleDescAttr(SPI_tuptable->tupdesc, 1);
    answer.has_second = !is_null;
    if (!is_null) answer.second = SPI_datumTransfer(second, type->attbyval, type->attlen);
  }
  return answer;
}

// The wait of a CALL with a session as a place in the lock's line (1.10):
// joined, then polled after each wake-up, each in a short transaction of
// its own, so that it keeps its turn among the candidates that poll from
// outside and holds no snapshot between.  The CALL holds the place's tag
// (lease_line.hpp) while it waits, so that the commit that tells the place
// wakes it, and so that the place waits no more once the CALL is over,
// whichever way it ends.  A place gone (its session ended, or closed) is
// said with the session's 55Z05, as an attempt would; the wait run out,
// with NULL.
bool WaitInLine(const AwaitRequest &r, TimestampTz deadline, int64 *token) {
  const char *s = quote_identifier(get_namespace_name(r.schema));
  Interval *left = static_cast<Interval *>(palloc0(sizeof(Interval)));
  left->time = Max(deadline - GetCurrentTimestamp(), 0);
  Oid join_types[] = {INT8OID, TEXTOID, INTERVALOID, JSONBOID, TEXTOID, INT4OID};
  Datum join_values[] = {r.args[kSession], r.args[kLockName], IntervalPGetDatum(left),
                         r.args[kPayload],  r.args[kKind],     r.args[kPermits]};
  const char join_nulls[] = {' ', ' ', ' ', r.nulls[kPayload] ? 'n' : ' ',
                             r.nulls[kKind] ? 'n' : ' ', r.nulls[kPermits] ? 'n' : ' ', '\0'};
  const LineAnswer joined = RunLineStatement(
      psprintf("SELECT place, token::bigint FROM %s.fencing_line_join($1, $2, $3, $4, "
               "kind => coalesce($5, 'exclusive'), permits => $6)",
               s),
      6, join_types, join_values, join_nulls);
  if (!joined.has_first) elog(ERROR, "pg_fencing: fencing_line_join() answered no place");
  const int64 place = joined.first;
  if (joined.has_second) {
    *token = DatumGetInt64(joined.second);
    CommitAndBegin();
    return true;
  }
  LOCKTAG tag = PlaceTag(place);
  (void)LockAcquire(&tag, ExclusiveLock, true, true);
  MarkPlaceKeptByCall(r.schema, place);
  const int64 lock_id = AuthorizeLock(r.schema, r.lock_name, GetUserId(), false, InvalidOid);
  CommitAndBegin();

  MemoryContext polls = AllocSetContextCreate(CurrentMemoryContext, "fencing_await polls",
                                              ALLOCSET_SMALL_SIZES);
  bool granted = false;
  bool gone = false;
  PG_TRY();
  {
    Oid place_types[] = {INT8OID};
    Datum place_values[] = {Int64GetDatum(place)};
    for (;;) {
      MemoryContextReset(polls);
      const MemoryContext saved = MemoryContextSwitchTo(polls);
      const LineAnswer polled = RunLineStatement(
          psprintf("SELECT token::bigint, state FROM %s.fencing_line_poll(ARRAY[$1])", s), 1,
          place_types, place_values, nullptr);
      const char *state = polled.has_second ? TextDatumGetCString(polled.second) : "gone";
      granted = strcmp(state, "granted") == 0;
      gone = strcmp(state, "gone") == 0;
      if (granted) *token = polled.first;
      TimestampTz next = 0;
      bool next_known = false;
      if (!granted && !gone) {
        PushActiveSnapshot(GetTransactionSnapshot());
        next_known = NextChance(r, lock_id, &next);
        PopActiveSnapshot();
      }
      MemoryContextSwitchTo(saved);
      CommitAndBegin();
      if (granted || gone) break;
      if (GetCurrentTimestamp() >= deadline) {
        (void)RunLineStatement(psprintf("SELECT 1::bigint FROM %s.fencing_line_leave($1)", s), 1,
                               place_types, place_values, nullptr);
        CommitAndBegin();
        break;
      }
      InvalidateCatalogSnapshot();
      SleepUntilWoken(true, next_known && next < deadline ? next : deadline);
    }
  }
  PG_CATCH();
  {
    (void)LockRelease(&tag, ExclusiveLock, true);
    PG_RE_THROW();
  }
  PG_END_TRY();
  (void)LockRelease(&tag, ExclusiveLock, true);
  MemoryContextDelete(polls);
  // Its session ended or was closed: said as an attempt says it.
  if (gone) RefuseUnlessSessionOfCaller(r.schema, GetUserId(), DatumGetInt64(r.args[kSession]));
  return granted;
}

// Both forms of the procedure: the attempts and the wait; the row of its
// INOUT token, the grant's or NULL when the wait ran out.
Datum Await(FunctionCallInfo fcinfo, const AwaitRequest &request) {
  // On a standby, or with default_transaction_read_only, no attempt could
  // write: say so at once rather than wait out the wait.
  PreventCommandIfReadOnly("fencing_await()");
  TupleDesc row_type;
  if (get_call_result_type(fcinfo, nullptr, &row_type) != TYPEFUNC_COMPOSITE) {
    elog(ERROR, "pg_fencing: fencing_await() must be declared with INOUT token");
  }
  row_type = BlessTupleDesc(row_type);
  const TimestampTz deadline = DatumGetTimestampTz(DirectFunctionCall2(
      timestamptz_pl_interval, TimestampTzGetDatum(GetCurrentTimestamp()), request.args[kWait]));

  if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT) {
    elog(ERROR, "pg_fencing: SPI_connect failed");
  }
  // The CALL's own transaction may have taken a snapshot, and has the
  // session's isolation level: the attempts start in a fresh one.
  CommitAndBegin();
  int64 token = 0;
  // In a session, a place in the lock's line, unless the session has one
  // there already (a second permit or shared lease of one lock, which the
  // line, one place per session and lock, cannot hold): that waits in the
  // lock's waiting room, as every wait did before 1.10.
  if (request.in_session &&
      !SessionHasPlace(request.schema, DatumGetInt64(request.args[kSession]),
                       request.args[kLockName])) {
    const bool granted = WaitInLine(request, deadline, &token);
    SPI_finish();
    Datum value = Int64GetDatum(token);
    bool is_null = !granted;
    return HeapTupleGetDatum(heap_form_tuple(row_type, &value, &is_null));
  }
  PushActiveSnapshot(GetTransactionSnapshot());
  bool granted = AttemptWithin(request, deadline, &token);
  PopActiveSnapshot();
  if (granted) {
    CommitAndBegin();
  } else {
    granted = WaitAndAttempt(request, deadline, &token);
  }
  SPI_finish();

  Datum value = Int64GetDatum(token);
  bool is_null = !granted;
  return HeapTupleGetDatum(heap_form_tuple(row_type, &value, &is_null));
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_await(lock_name text, holder text DEFAULT NULL, ttl interval
// DEFAULT NULL, wait interval DEFAULT NULL, kind text DEFAULT 'exclusive',
// permits integer DEFAULT NULL, payload jsonb DEFAULT NULL, session bigint
// DEFAULT NULL, INOUT token fencing_token DEFAULT NULL): a procedure; its
// row's token is the grant's, or NULL when the wait ran out.  With a
// session (1.8), the lease is taken in it (fencing_session_acquire), with
// no holder and no ttl of its own.
PG_FUNCTION_INFO_V1(fencing_await);
Datum fencing_await(PG_FUNCTION_ARGS) { return Await(fcinfo, RequestFrom(fcinfo)); }

// fencing_wait_to_acquire(lock_name text, lock_id bigint, holder text,
// permits integer, ttl interval, wait interval, payload jsonb, exclusive
// boolean) RETURNS fencing_token (in C from 1.10; PL/pgSQL with
// fencing_queue_for before): the waiting loop of the waiting functions
// (fencing_acquire, fencing_acquire_permit and fencing_acquire_shared
// with a wait), which have checked the lock and its use.  It queues in the
// lock's waiting room until the end of the transaction, then, first in
// line, makes an attempt (fencing_try_acquire for an exclusive lease,
// fencing_try_permit for a permit or a shared one) whenever it is woken
// (a release's commit), the lock may have come free (NextFreeAt) or the
// wait is over.  Each attempt's lock waits end at the deadline too.  The
// whole wait is one statement, so it holds its snapshot: CALL
// fencing_await is the same wait between commits.  NULL when the wait ran
// out; the room is then given back, so that the caller's transaction
// holds up nobody.  Not PUBLIC's.
PG_FUNCTION_INFO_V1(fencing_wait_to_acquire);
Datum fencing_wait_to_acquire(PG_FUNCTION_ARGS) {
  for (int arg : {0, 1, 2, 4, 5, 7}) {
    if (PG_ARGISNULL(arg)) elog(ERROR, "pg_fencing: fencing_wait_to_acquire() got a NULL argument");
  }
  const Oid schema = ExtensionSchema(fcinfo);
  const Datum lock_name = PointerGetDatum(PG_GETARG_TEXT_PP(0));
  const char *name = TextDatumGetCString(lock_name);
  const int64 lock_id = PG_GETARG_INT64(1);
  const bool exclusive = PG_GETARG_BOOL(7);
  CheckWait(PG_GETARG_DATUM(5), name);
  const TimestampTz deadline = DatumGetTimestampTz(DirectFunctionCall2(
      timestamptz_pl_interval, TimestampTzGetDatum(GetCurrentTimestamp()), PG_GETARG_DATUM(5)));
  const LOCKTAG room = WaitingRoomTag(schema, lock_id);
  // Still queued behind others at the deadline: nothing.
  if (!QueueForRoomInTransaction(room, deadline)) PG_RETURN_NULL();

  FmgrInfo *attempt = nullptr;
  Datum args[5];
  bool nulls[5] = {false, false, false, false, false};
  int nargs = 0;
  if (exclusive) {
    static const Oid kTypes[] = {TEXTOID, TEXTOID, INTERVALOID, INT8OID, JSONBOID};
    attempt = ExtensionFunction(schema, "fencing_try_acquire", 5, kTypes);
    args[0] = lock_name;
    args[1] = PG_GETARG_DATUM(2);
    args[2] = PG_GETARG_DATUM(4);
    args[3] = Int64GetDatum(lock_id);
    args[4] = PG_ARGISNULL(6) ? Datum(0) : PG_GETARG_DATUM(6);
    nulls[4] = PG_ARGISNULL(6);
    nargs = 5;
  } else {
    static const Oid kTypes[] = {INT8OID, TEXTOID, INT4OID, INTERVALOID};
    attempt = ExtensionFunction(schema, "fencing_try_permit", 4, kTypes);
    args[0] = Int64GetDatum(lock_id);
    args[1] = PG_GETARG_DATUM(2);
    args[2] = PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3);
    nulls[2] = PG_ARGISNULL(3);
    args[3] = PG_GETARG_DATUM(4);
    nargs = 4;
  }
  MemoryContext loop = AllocSetContextCreate(CurrentMemoryContext, "fencing_wait_to_acquire",
                                             ALLOCSET_SMALL_SIZES);
  for (;;) {
    MemoryContextReset(loop);
    const MemoryContext saved = MemoryContextSwitchTo(loop);
    bool granted = false;
    int64 token = 0;
    const TimestampTz now = GetCurrentTimestamp();
    (void)WithLockTimeout(
        PGF_CORE(QueueTimeoutMs(now, deadline)),
        [&] {
          bool is_null = false;
          const Datum got = CallExtensionFunction(attempt, nargs, args, nulls, &is_null);
          granted = !is_null;
          token = granted ? DatumGetInt64(got) : 0;
        },
        [](bool) {});
    MemoryContextSwitchTo(saved);
    if (granted) {
      MemoryContextDelete(loop);
      PG_RETURN_INT64(token);
    }
    if (GetCurrentTimestamp() >= deadline) break;
    // The lock as committed now, not as the statement's snapshot saw it.
    MemoryContextSwitchTo(loop);
    PushActiveSnapshot(GetTransactionSnapshot());
    TimestampTz next = 0;
    const bool known = NextFreeAt(schema, exclusive, lock_name, lock_id, &next);
    PopActiveSnapshot();
    MemoryContextSwitchTo(saved);
    SleepUntilWoken(true, known && next < deadline ? next : deadline);
  }
  MemoryContextDelete(loop);
  LeaveRoomInTransaction(room);
  PG_RETURN_NULL();
}

}  // extern "C"
