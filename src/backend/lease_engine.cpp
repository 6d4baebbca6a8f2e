// The lease engine: fencing_acquire (without a wait), the attempt that the
// waiting acquire repeats (fencing_try_acquire), fencing_renew and
// fencing_release.
//
// 1.2 ran these as PL/pgSQL over SECURITY DEFINER functions with pinned
// search_paths; most of a lease cycle's cost was machinery (a GUC save and
// restore per call, executor start-up per statement, SQL function bodies
// read from the catalog per call).  Here a public function runs as its
// caller, checks who that is, and then acts on the extension's tables as
// their owner (as SECURITY DEFINER would) through lease_tables.hpp: index
// probes and in-place row updates, no SQL on the common paths.
//
//   acquire  the lock's row (owner, users, lock-delay) and its lease's row,
//            no row locks -> decide (src/core/lease_decision.hpp) -> take the
//            waiting room -> a token -> replace the lease row looked at (a
//            race lost to another writer shows as such, and the look is
//            made again) -> raise the lock's mark
//   renew,   the caller's live lease row, replaced with its new end
//   release
//
// The rules are those of 1.2's SQL (extension/pg_fencing--1.1--1.2.sql):
// who may use a lock is fencing_role_may_use()'s rule, applied here in C;
// a lock that must be created, or a caller that must be refused, goes to
// fencing_lock_authorize(), which creates it or raises the usual 42501.
// The first lease of a lock and its first mark are inserted with SQL
// (INSERT ... ON CONFLICT), once per lock.
#include <algorithm>

#include "boundary.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "durable_commit.hpp"
#include "expiry_worker.hpp"
#include "extension_objects.hpp"
#include "fences.hpp"
#include "grant.hpp"
#include "kept_statements.hpp"
#include "lease_arguments.hpp"
#include "lease_decision.hpp"
#include "slot_decision.hpp"
#include "lease_engine.hpp"
#include "lease_events.hpp"
#include "lease_line.hpp"
#include "lease_tables.hpp"
#include "lease_wait.hpp"
#include "lease_wakeup.hpp"
#include "lease_writers.hpp"
#include "locks.hpp"
#include "pg_compat.hpp"  // VARSIZE_ANY_EXHDR: varatt.h from 16 on
#include "shared_stats.hpp"

namespace pg_fencing {
namespace {

// ---- The tables, as their owner -----------------------------------------------

// The tables of one call and the indexes their rows are found by, opened
// as their owner (the lock's mark, fencing_fence, only by a grant: see
// RaiseMark).  An error on the way needs no clean-up: the abort of the
// (sub)transaction closes them, drops the snapshots and puts back the user
// it started with, as for SECURITY DEFINER.
struct Tables {
  const LeaseTableIds *ids;
  Relation lock;
  Relation lock_probe;
  Relation lease;
  Relation lease_probe;
  Oid saved_user;
  int saved_security_context;
};

Tables OpenTables(Oid schema) {
  Tables t;
  t.ids = &LeaseTablesOf(schema);
  GetUserIdAndSecContext(&t.saved_user, &t.saved_security_context);
  SetUserIdAndSecContext(ExtensionTableOwner(schema),
                         t.saved_security_context | SECURITY_LOCAL_USERID_CHANGE);
  t.lock = table_open(t.ids->lock, AccessShareLock);
  t.lock_probe = index_open(t.ids->lock_probe, AccessShareLock);
  t.lease = table_open(t.ids->lease, RowExclusiveLock);
  t.lease_probe = index_open(t.ids->lease_probe, AccessShareLock);
  return t;
}

void CloseTables(const Tables &t) {
  index_close(t.lease_probe, NoLock);
  table_close(t.lease, NoLock);
  index_close(t.lock_probe, NoLock);
  table_close(t.lock, NoLock);
  SetUserIdAndSecContext(t.saved_user, t.saved_security_context);
}

// A snapshot that sees what has committed so far (in READ COMMITTED; the
// transaction's in REPEATABLE READ) and this transaction's own changes, as
// the next SQL statement would.
Snapshot TakeSnapshot() {
  CommandCounterIncrement();
  return RegisterSnapshot(GetTransactionSnapshot());
}

HeapTuple FetchLock(const Tables &t, Datum lock_name, Snapshot snapshot) {
  return FetchRow(t.lock, t.lock_probe, t.ids->name_collation, lock_name, snapshot);
}

HeapTuple FetchLease(const Tables &t, Datum lock_name, Snapshot snapshot) {
  return FetchRow(t.lease, t.lease_probe, t.ids->name_collation, lock_name, snapshot);
}

bool CallerMayUse(const Tables &t, HeapTuple lock_row, Oid caller) {
  bool is_null = false, users_null = false;
  const Oid owner = DatumGetObjectId(RowColumn(t.lock, lock_row, t.ids->lock_owner, &is_null));
  const Datum users = RowColumn(t.lock, lock_row, t.ids->lock_users, &users_null);
  return RoleMayUseLock(caller, owner, users, users_null);
}

int64 LockIdOf(const Tables &t, HeapTuple lock_row) {
  bool is_null = false;
  return DatumGetInt64(RowColumn(t.lock, lock_row, t.ids->lock_id, &is_null));
}

// Whether the lock's owner asked for its events to be announced (1.4).
bool LockIsAnnounced(const Tables &t, HeapTuple lock_row) {
  if (t.ids->lock_announce == InvalidAttrNumber) return false;
  bool is_null = false;
  const Datum announce = RowColumn(t.lock, lock_row, t.ids->lock_announce, &is_null);
  return !is_null && DatumGetBool(announce);
}

// A semaphore is taken only with fencing_acquire_permit (1.4).
void RefuseSemaphore(const char *lock_name) {
  ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                  errmsg("fencing lock \"%s\" is a semaphore, not an exclusive lock", lock_name),
                  errhint("Take one of its permits with fencing_acquire_permit().")));
}

// Whether a place has ever joined the lock's line (1.10): only then is the
// line looked at by a grant (LineTurnOf).
bool LockHasLine(const Tables &t, HeapTuple lock_row) {
  if (t.ids->lock_has_line == InvalidAttrNumber) return false;
  bool is_null = false;
  const Datum has_line = RowColumn(t.lock, lock_row, t.ids->lock_has_line, &is_null);
  return !is_null && DatumGetBool(has_line);
}

// Before an exclusive grant of a shared lock, in the waiting room: whether
// its shared holders are all gone (fencing_end_shared_holders, which marks
// their rows ended so that a renew racing the grant loses).  Judged as
// committed now, hence READ COMMITTED only.
bool SharedHoldersGone(const Tables &t, Oid schema, HeapTuple lock_row, const char *lock_name) {
  if (XactIsoLevel != XACT_READ_COMMITTED) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_TRANSACTION_STATE),
                    errmsg("fencing_acquire of shared lock \"%s\" needs READ COMMITTED", lock_name),
                    errhint("Call it in its own transaction, or in one at READ COMMITTED.")));
  }
  static const Oid kArgTypes[] = {INT8OID, INTERVALOID};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_end_shared_holders", 2, kArgTypes);
  bool is_null = false;
  const Datum args[] = {Int64GetDatum(LockIdOf(t, lock_row)),
                        RowColumn(t.lock, lock_row, t.ids->lock_delay, &is_null)};
  const Datum gone = CallExtensionFunction(fn, 2, args, nullptr, &is_null);
  return !is_null && DatumGetBool(gone);
}

// Equality of two names (bitwise, as the name type's).
bool SameName(Datum a, Datum b) {
  return strncmp(NameStr(*DatumGetName(a)), NameStr(*DatumGetName(b)), NAMEDATALEN) == 0;
}

// Whether a text Datum is exactly `word`.
bool TextIs(Datum value, const char *word) {
  text *t = DatumGetTextPP(value);
  const size_t length = VARSIZE_ANY_EXHDR(t);
  return length == strlen(word) && memcmp(VARDATA_ANY(t), word, length) == 0;
}

Datum TimestampPlus(TimestampTz at, Datum interval) {
  return DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(at), interval);
}

// The role a lease records and renew and release compare with: the
// session's login role, an identity the server verified.
Datum SessionUserName() {
  Name name = static_cast<Name>(palloc0(NAMEDATALEN));
  namestrcpy(name, GetUserNameFromId(GetSessionUserId(), false));
  return NameGetDatum(name);
}

// ---- First rows, in SQL -----------------------------------------------------------

// Runs an INSERT ... ON CONFLICT for a lock's first lease or first mark.
// Returns the number of rows inserted.
uint64 InsertFirst(const char *query, int count, Oid *types, const Datum *values,
                   const char *nulls) {
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  const int rc =
      ExecuteKept(query, count, types, const_cast<Datum *>(values), nulls, false, 0);
  if (rc != SPI_OK_INSERT) {
    elog(ERROR, "pg_fencing: inserting a first lease row failed: %s", SPI_result_code_string(rc));
  }
  const uint64 inserted = SPI_processed;
  SPI_finish();
  return inserted;
}

// ---- Leases in a session (1.8) ----------------------------------------------------

// The end of a lease row as a grant must judge it.  For a lease in a
// session whose look found it ended (end <= now), the session's row is
// locked FOR SHARE until this transaction ends: that waits for a renewal of
// the session that is committing, and the end returned is the session's as
// it then stands (READ COMMITTED sees the renewal; REPEATABLE READ fails
// with 40001, as for any row changed under it).  A plain lease's renewal
// writes the lease's own row, which the grant locks; a session's writes
// the session's, hence this.  Afterwards no renewal can revive the session
// under the grant (it waits for the grant's commit, and then finds the
// session ended).  A session closed or swept meanwhile has written its
// leases' ends: the row's own end stands.
TimestampTz EndForGrant(const Tables &t, Oid schema, HeapTuple lease, TimestampTz end,
                        TimestampTz now) {
  const int64 session = LeaseRowSession(*t.ids, t.lease, lease);
  if (session == 0 || end > now) return end;
  bool ended_null = false;
  (void)RowColumn(t.lease, lease, t.ids->lease_ended, &ended_null);
  if (!ended_null) return end;
  Oid types[] = {INT8OID};
  Datum values[] = {Int64GetDatum(session)};
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  const int rc = ExecuteKept(
      // Run as the tables' owner, under the caller's search_path: the
      // operator is named with its schema, so that no object of the
      // caller's can stand in for it.
      psprintf("SELECT expires_at FROM %s.fencing_session "
               "WHERE session_id OPERATOR(pg_catalog.=) $1 FOR SHARE",
               quote_identifier(get_namespace_name(schema))),
      1, types, values, nullptr, false, 1);
  if (rc != SPI_OK_SELECT) {
    elog(ERROR, "pg_fencing: locking a session failed: %s", SPI_result_code_string(rc));
  }
  TimestampTz session_end = end;
  if (SPI_processed == 1) {
    bool is_null = false;
    session_end = DatumGetTimestampTz(
        SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null));
  }
  SPI_finish();
  return session_end;
}

// A write into a lease's row waits for a transaction that holds the row
// (heap_update waits), and that one may end without changing it (a
// rollback): the look before the wait said the lease lived at `end`, and
// it may have run out meanwhile.  Such a lease is neither renewed,
// extended nor released by this call: 40001, which undoes the write, and a
// retry sees the lease ended.
void RefuseIfEndedWhileWaiting(TimestampTz end, const char *lock_name) {
  if (end > GetCurrentTimestamp()) return;
  ereport(ERROR,
          (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
           errmsg("the lease of fencing lock \"%s\" ended while this call waited for its row",
                  lock_name),
           errdetail("Another transaction held the lease's row until after the lease ran out (at "
                     "%s).",
                     timestamptz_to_str(end)),
           errhint("An ended lease is neither renewed, extended nor released: acquire the lock "
                   "again.")));
}

// ---- The lock's mark --------------------------------------------------------------

// Raises the lock's mark to token (if it is lower): a grant fences out
// every older token under the lock at once, even before the new holder
// writes anything.  Waits for the transactions writing under the lock
// (they hold its fence gate, or before 1.4 the mark's row) to end.
void RaiseMark(const Tables &t, Oid schema, int64 lock_id, Datum lock_name, int64 token) {
  // First the gate: every transaction writing under the current mark has
  // it shared, and the raise waits for them (fences.hpp).
  TakeFenceGateExclusively(schema, lock_id);
  Relation fence = table_open(t.ids->fence, RowExclusiveLock);
  Relation fence_probe = index_open(t.ids->fence_probe, AccessShareLock);
  bool raised = false;
  while (!raised) {
    Snapshot snapshot = TakeSnapshot();
    HeapTuple mark = FetchRow(fence, fence_probe, t.ids->name_collation, lock_name, snapshot);
    UnregisterSnapshot(snapshot);
    if (mark == nullptr) {
      const char *s = quote_identifier(get_namespace_name(schema));
      Oid types[] = {TEXTOID, TokenTypeOid(schema)};
      const Datum values[] = {lock_name, Int64GetDatum(token)};
      (void)InsertFirst(psprintf("INSERT INTO %s.fencing_fence AS f VALUES ($1, $2) "
                                 "ON CONFLICT (lock_name) DO UPDATE "
                                 "SET high_water = GREATEST(f.high_water, EXCLUDED.high_water)",
                                 s),
                        2, types, values, nullptr);
      break;
    }
    bool is_null = false;
    const int64 high_water =
        DatumGetInt64(RowColumn(fence, mark, t.ids->fence_high_water, &is_null));
    if (high_water >= token) break;
    const int columns[] = {t.ids->fence_high_water};
    const Datum values[] = {Int64GetDatum(token)};
    const bool nulls[] = {false};
    // False: a writer under the lock raised the mark meanwhile; look again.
    raised = ReplaceRow(fence, mark, 1, columns, values, nulls);
  }
  index_close(fence_probe, NoLock);
  table_close(fence, NoLock);
}

// ---- One attempt ------------------------------------------------------------------

struct AttemptRequest {
  Oid schema;
  Datum lock_name;  // text
  Datum holder;     // text
  Datum holder_role;
  Datum ttl;  // interval
  Datum payload;
  bool payload_null;
  // The session the lease goes into (1.8; fencing_session_acquire), 0 for
  // none: a grant or an extension outside one takes the lease out of its.
  int64 session;
};

// Why an attempt could not be made.
enum class Access { kChecked, kMissing, kRefused };

// Whether the lock has a lease row now, under a new snapshot.
bool LeaseExistsNow(const Tables &t, const AttemptRequest &request) {
  Snapshot snapshot = TakeSnapshot();
  HeapTuple lease = FetchLease(t, request.lock_name, snapshot);
  UnregisterSnapshot(snapshot);
  return lease != nullptr;
}

// What an attempt looked at: the lock's row, its lease's row (none before
// the first grant) and what the lease says.
struct Look {
  HeapTuple lock;
  HeapTuple lease;
  LeaseSeen seen;
  bool expiry_announced;  // ended = 'expired': the expiry has been announced
};

// The grant's news: the lease it replaces goes into the history (how it
// ended: released, revoked, expired, or taken over by another holder), its
// expiry is announced if nobody did yet, and the grant is announced.
void PublishGrant(const Tables &t, const AttemptRequest &request, const Look &look, TimestampTz now,
                  int64 granted) {
  const LeaseTableIds &ids = *t.ids;
  const bool announce = LockIsAnnounced(t, look.lock);
  const char *lock_name = text_to_cstring(DatumGetTextPP(request.lock_name));
  LeaseEvent grant = {};
  grant.lock_name = lock_name;
  grant.lock_id = LockIdOf(t, look.lock);
  grant.kind = LeaseEventKind::kGranted;
  grant.holder = request.holder;
  grant.has_token = true;
  grant.token = granted;
  if (look.lease != nullptr) {
    bool is_null = false, ended_null = false;
    EndedLease ended = {};
    ended.lock_id = grant.lock_id;
    ended.lock_name = request.lock_name;
    ended.holder = RowColumn(t.lease, look.lease, ids.lease_holder, &is_null);
    ended.holder_role = RowColumn(t.lease, look.lease, ids.lease_holder_role, &is_null);
    ended.token = DatumGetInt64(RowColumn(t.lease, look.lease, ids.lease_token, &is_null));
    ended.granted_at =
        DatumGetTimestampTz(RowColumn(t.lease, look.lease, ids.lease_granted_at, &is_null));
    ended.ended_at = look.seen.expires_at;
    const Datum how = RowColumn(t.lease, look.lease, ids.lease_ended, &ended_null);
    const bool expired = !look.seen.ended;  // ran out (announced or not)
    ended.end_reason =
        expired ? ExpiredEndReason(look.seen.ours) : text_to_cstring(DatumGetTextPP(how));
    ended.grant_count =
        ids.lease_grant_count != InvalidAttrNumber
            ? DatumGetInt64(RowColumn(t.lease, look.lease, ids.lease_grant_count, &is_null))
            : 0;
    if (ids.lease_grant_count != InvalidAttrNumber) RecordEndedLease(request.schema, ended);
    if (expired && !look.expiry_announced) {
      LeaseEvent expiry = {};
      expiry.lock_name = lock_name;
      expiry.lock_id = grant.lock_id;
      expiry.kind = LeaseEventKind::kExpired;
      expiry.holder = ended.holder;
      expiry.has_token = true;
      expiry.token = ended.token;
      PublishLeaseEvent(expiry, announce);
    }
    grant.takeover = expired && !look.seen.ours;
    grant.has_previous = true;
    grant.previous_holder = ended.holder;
    grant.previous_token = ended.token;
  }
  PublishLeaseEvent(grant, announce);
  ScheduleExpiryCheckAtCommit(DatumGetTimestampTz(TimestampPlus(now, request.ttl)));
}

// Carries out a decision other than kBusy on the lease row looked at (none
// for kGrantFirst).  Returns whether the lease is the caller's now (*token
// its token); false when the row changed since the look, or a waiter is
// first in line.
bool CarryOut(const Tables &t, const AttemptRequest &request, const Look &look,
              LeaseAttempt attempt, TimestampTz now, int64 *token) {
  const LeaseTableIds &ids = *t.ids;
  const int64 lock_id = LockIdOf(t, look.lock);
  HeapTuple lease = look.lease;
  const Datum expires_at = TimestampPlus(now, request.ttl);
  bool is_null = false;
  const int64 seen_token =
      lease != nullptr ? DatumGetInt64(RowColumn(t.lease, lease, ids.lease_token, &is_null)) : 0;

  if (attempt == LeaseAttempt::kExtendOwn) {
    // The live holder again (say, a retry after a lost reply): the same
    // token, the lease extended, the payload replaced.
    // In the request's session, or out of any: its end is then the one
    // written here.
    const bool sessions = ids.lease_session_id != InvalidAttrNumber;
    const int columns[] = {ids.lease_expires_at, ids.lease_payload, ids.lease_session_id};
    const Datum values[] = {expires_at, request.payload, Int64GetDatum(request.session)};
    const bool nulls[] = {false, request.payload_null, request.session == 0};
    if (!ReplaceRow(t.lease, lease, sessions ? 3 : 2, columns, values, nulls)) return false;
    RefuseIfEndedWhileWaiting(look.seen.expires_at,
                              text_to_cstring(DatumGetTextPP(request.lock_name)));
    *token = seen_token;
    RequireDurableCommit();
    CountLeaseEventAtCommit(text_to_cstring(DatumGetTextPP(request.lock_name)),
                            LeaseCounter::kRenewals);
    ScheduleExpiryCheckAtCommit(DatumGetTimestampTz(expires_at));
    return true;
  }

  // Nobody takes a free lock from under the first waiter in line: the
  // waiting room's (which this transaction may hold already, as the waiting
  // acquires do), then the line's first place (lease_line.hpp), unless this
  // transaction is the room's waiter, which is served first until every
  // wait is a place in line.  Every grant takes the room, so none can come
  // between another's look and its write.
  LOCKTAG room = WaitingRoomTag(request.schema, lock_id);
  const LockAcquireResult in_room = LockAcquire(&room, ExclusiveLock, false, true);
  if (in_room == LOCKACQUIRE_NOT_AVAIL) return false;
  const auto give_back_room = [&] { (void)LockRelease(&room, ExclusiveLock, false); };
  int64 line_place = 0;
  const bool room_waiter = in_room != LOCKACQUIRE_OK && WaitsInRoom(room);
  const LineTurn turn = LockHasLine(t, look.lock) && !room_waiter
                            ? LineTurnOf(ids, lock_id, request.session, &line_place)
                            : LineTurn::kFree;
  if (turn == LineTurn::kOthers) {
    give_back_room();
    return false;
  }

  // How the lock is leased changes only in the room (1.4): as it stands now.
  if (t.ids->lock_kind != InvalidAttrNumber) {
    const char *name = text_to_cstring(DatumGetTextPP(request.lock_name));
    HeapTuple lock_now = FetchRowCommittedNow(t.lock, t.lock_probe, t.ids->name_collation, name);
    const LockKind kind =
        lock_now != nullptr ? LockKindOfRow(t.lock, lock_now) : LockKind::kExclusive;
    if (kind == LockKind::kSemaphore) RefuseSemaphore(name);
    if (kind == LockKind::kShared && !SharedHoldersGone(t, request.schema, lock_now, name)) {
      give_back_room();
      return false;  // busy: no row lock taken
    }
  }
  // The lease as looked at must still be the lease: its row locked (a
  // renew committed at the instant of expiry shows here), or, for a first
  // grant, still no row.  Another grant cannot come between: it would need
  // the room.  So from here on the grant cannot fail, and the mark may be
  // raised before the lease row is written -- in this order, as in 1.2, so
  // that the lease row changes only once the transaction holds the lock's
  // mark (the stress harness reads commit order off it).
  // A lease whose session has ended: the session's row held and its end
  // read again (EndForGrant), only here, where nothing but a renewal
  // committing at this instant can still refuse the grant -- so that a
  // refused acquire (a lock-delay, a room taken, a shared holder) holds no
  // row of the session's role.  Renewed meanwhile: looked at again.
  const bool unchanged =
      lease != nullptr
          ? EndForGrant(t, request.schema, lease, look.seen.expires_at, now) ==
                    look.seen.expires_at &&
                LockRow(t.lease, lease)
          : !LeaseExistsNow(t, request);
  if (!unchanged) {
    give_back_room();
    return false;
  }
  const int64 granted = GrantToken(request.schema);
  // Waits for the transactions writing under the lock (they hold its fence gate).
  RaiseMark(t, request.schema, lock_id, request.lock_name, granted);
  ForgetLockFence(text_to_cstring(DatumGetTextPP(request.lock_name)));
  bool written = false;
  if (attempt == LeaseAttempt::kGrantFirst) {
    const char *s = quote_identifier(get_namespace_name(request.schema));
    Oid types[] = {TEXTOID,        TEXTOID,        NAMEOID,  TokenTypeOid(request.schema),
                   TIMESTAMPTZOID, TIMESTAMPTZOID, JSONBOID, INT8OID};
    const Datum values[] = {request.lock_name,        request.holder,
                            request.holder_role,      Int64GetDatum(granted),
                            TimestampTzGetDatum(now), expires_at,
                            request.payload,          Int64GetDatum(request.session)};
    const char nulls[] = {' ', ' ', ' ', ' ', ' ', ' ', request.payload_null ? 'n' : ' ',
                          ' ', '\0'};
    // session_id only in a session (a database before 1.8 has no such column).
    const bool in_session = request.session != 0;
    written = InsertFirst(psprintf("INSERT INTO %s.fencing_lease "
                                   "(lock_name, holder, holder_role, token, granted_at, "
                                   "expires_at, payload%s) VALUES ($1, $2, $3, $4, $5, $6, $7%s) "
                                   "ON CONFLICT (lock_name) DO NOTHING",
                                   s, in_session ? ", session_id" : "", in_session ? ", $8" : ""),
                          in_session ? 8 : 7, types, values, nulls) == 1;
  } else {
    // The lease's number among the lock's grants (1.4): the previous plus one.
    const bool counted = ids.lease_grant_count != InvalidAttrNumber;
    const int64 grant_count =
        counted ? DatumGetInt64(RowColumn(t.lease, lease, ids.lease_grant_count, &is_null)) + 1 : 0;
    // In the request's session, or in none; session_id comes after
    // grant_count (1.8 after 1.4).
    const bool sessions = ids.lease_session_id != InvalidAttrNumber;
    const int columns[] = {ids.lease_holder,     ids.lease_holder_role, ids.lease_token,
                           ids.lease_granted_at, ids.lease_expires_at,  ids.lease_payload,
                           ids.lease_ended,      ids.lease_end_reason,  ids.lease_grant_count,
                           ids.lease_session_id};
    const Datum values[] = {request.holder,
                            request.holder_role,
                            Int64GetDatum(granted),
                            TimestampTzGetDatum(now),
                            expires_at,
                            request.payload,
                            Datum(0),
                            Datum(0),
                            Int64GetDatum(grant_count),
                            Int64GetDatum(request.session)};
    const bool nulls[] = {false, false,
                          false, false,
                          false, request.payload_null,
                          true,  true,
                          false, request.session == 0};
    written = ReplaceRow(t.lease, lease, counted ? (sessions ? 10 : 9) : 8, columns, values, nulls);
  }
  if (!written) {
    // Cannot happen while the room and the row lock hold; if it did, the
    // error undoes the mark just raised, which would fence out whoever
    // holds the lease instead.
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("lease row of fencing lock \"%s\" changed while it was locked",
                           text_to_cstring(DatumGetTextPP(request.lock_name)))));
  }
  RequireDurableCommit();
  PublishGrant(t, request, look, now, granted);
  // The first place's lease, however its session asked for it: the place
  // waits no more.
  if (turn == LineTurn::kYours) RecordLineGrant(request.schema, line_place, granted);
  *token = granted;
  return true;
}

// One attempt to take the lock: looks, decides, carries out; the look is
// made again (a few times at most) when the row changed between the look
// and the write, as when a lease was taken or renewed just then.  caller:
// the role to check the lock's permissions for, or InvalidOid when they
// were checked already (the waiting acquire).  Returns whether the lease is
// the caller's (*token: its token).
bool TryAcquire(const Tables &t, const AttemptRequest &request, Oid caller, Access *access,
                int64 *token) {
  constexpr int kMaxLooks = 3;
  *access = Access::kChecked;
  for (int looks = 0; looks < kMaxLooks; ++looks) {
    Snapshot snapshot = TakeSnapshot();
    const TimestampTz now = GetCurrentTimestamp();
    HeapTuple lock = FetchLock(t, request.lock_name, snapshot);
    HeapTuple lease = lock != nullptr ? FetchLease(t, request.lock_name, snapshot) : nullptr;
    const TimestampTz lease_end =
        lease != nullptr ? LeaseRowEnd(*t.ids, t.lease, lease, snapshot) : 0;
    UnregisterSnapshot(snapshot);
    if (lock == nullptr) {
      *access = Access::kMissing;
      return false;
    }
    if (OidIsValid(caller) && looks == 0 && !CallerMayUse(t, lock, caller)) {
      *access = Access::kRefused;
      return false;
    }
    if (LockKindOfRow(t.lock, lock) == LockKind::kSemaphore) {
      RefuseSemaphore(text_to_cstring(DatumGetTextPP(request.lock_name)));
    }
    Look look = {lock, lease, {}, false};
    LeaseSeen &seen = look.seen;
    if (lease != nullptr) {
      const LeaseTableIds &ids = *t.ids;
      bool is_null = false, ended_null = false;
      seen.exists = true;
      seen.expires_at = lease_end;
      const Datum ended = RowColumn(t.lease, lease, ids.lease_ended, &ended_null);
      // 'expired': an expiry already announced, still an expiry (it
      // starts the lock-delay); 'released' and 'revoked' end a lease early.
      look.expiry_announced = !ended_null && TextIs(ended, "expired");
      seen.ended = !ended_null && !look.expiry_announced;
      seen.ours =
          DatumGetBool(DirectFunctionCall2Coll(
              texteq, DEFAULT_COLLATION_OID, RowColumn(t.lease, lease, ids.lease_holder, &is_null),
              request.holder)) &&
          SameName(RowColumn(t.lease, lease, ids.lease_holder_role, &is_null), request.holder_role);
      // The lock-delay counts only after an expiry; computed only then.
      seen.available_at = seen.expires_at;
      if (!seen.ended && seen.expires_at <= now) {  // expired
        seen.available_at = DatumGetTimestampTz(
            TimestampPlus(seen.expires_at, RowColumn(t.lock, lock, ids.lock_delay, &is_null)));
      }
    }
    const LeaseAttempt attempt = PGF_CORE(DecideAttempt(seen, now));
    if (attempt == LeaseAttempt::kBusy) return false;
    PreventCommandIfReadOnly("fencing_acquire()");
    if (CarryOut(t, request, look, attempt, now, token)) return true;
  }
  return false;
}

// One attempt for the caller, without a wait (fencing_acquire,
// fencing_session_acquire): whether it took the lock (*token).
bool AcquireForCaller(const AttemptRequest &request, const char *lock_name, Oid caller,
                      int64 *token) {
  bool taken = false;
  for (int round = 0; round < 2; ++round) {
    Access access = Access::kChecked;
    const Tables t = OpenTables(request.schema);
    taken = TryAcquire(t, request, caller, &access, token);
    CloseTables(t);
    if (access == Access::kChecked) break;
    // A lock that does not exist yet, or one the caller may not use: the
    // lock model's own function creates it if the caller may, or raises
    // the usual 42501.  Then once more.
    (void)AuthorizeLock(request.schema, lock_name, caller, true, InvalidOid);
  }
  return taken;
}

AttemptRequest RequestFrom(FunctionCallInfo fcinfo, Oid schema, int payload_arg) {
  AttemptRequest request;
  request.schema = schema;
  // Detoasted: the values go into the lease row as they are.
  request.lock_name = PointerGetDatum(PG_GETARG_TEXT_PP(0));
  request.holder = PointerGetDatum(PG_GETARG_TEXT_PP(1));
  request.holder_role = SessionUserName();
  request.ttl = PG_GETARG_DATUM(2);
  request.payload_null = PG_ARGISNULL(payload_arg);
  request.payload = request.payload_null
                        ? Datum(0)
                        : PointerGetDatum(PG_DETOAST_DATUM(PG_GETARG_DATUM(payload_arg)));
  request.session = 0;
  return request;
}

// ---- Renew and release ------------------------------------------------------------

// What moving a lease's end did: whether it moved, and whether the lock's
// first waiter must look again.
struct EndMoved {
  bool moved;
  bool wake;
  // A renewal of a lease in a session (1.8): the session, which the caller
  // renews instead (nothing moved).
  int64 session;
};

// What a moved end tells, for an exclusive lease, a permit or a shared
// lease alike: a release is announced, a renewal counted and scheduled for
// the expiry worker; returns whether the lock's first waiter must look
// again.  A release frees the lock and a renew that brings the end closer
// makes it free sooner; a renew that moves the end later need not wake it:
// it sleeps until the old end at most, then sees the new one.
bool PublishMovedEnd(const char *lock_name, int64 lock_id, bool announced, Datum holder, int64 token,
                     const char *ended, TimestampTz old_end, TimestampTz new_end) {
  if (ended != nullptr) {
    LeaseEvent release = {};
    release.lock_name = lock_name;
    release.lock_id = lock_id;
    release.kind = LeaseEventKind::kReleased;
    release.holder = holder;
    release.has_token = true;
    release.token = token;
    PublishLeaseEvent(release, announced);
  } else {
    CountLeaseEventAtCommit(lock_name, LeaseCounter::kRenewals);
    ScheduleExpiryCheckAtCommit(new_end);
  }
  return ended != nullptr || new_end < old_end;
}

// The part of fencing_renew and fencing_release for a permit or a shared
// lease of lock_id (the row of fencing_permit whose token is token): as for
// the exclusive lease, only the live one of the caller's login role moves,
// a race lost is judged again on the newer version, a release is announced
// and a renewal counted and scheduled.  1.4 did this in SQL
// (fencing_move_permit_end).
EndMoved MovePermitEnd(const LeaseTableIds &ids, const char *lock_name, int64 lock_id, int64 token,
                       Datum holder_role, Datum remaining, const char *ended, bool announced) {
  EndMoved result = {false, false, 0};
  Relation permit = table_open(ids.permit, RowExclusiveLock);
  Relation probe = index_open(ids.permit_token, AccessShareLock);
  for (;;) {
    Snapshot snapshot = TakeSnapshot();
    const TimestampTz now = GetCurrentTimestamp();
    HeapTuple row = FetchRowByNumber(permit, probe, token, snapshot);
    const TimestampTz old_end = row != nullptr ? LeaseRowEnd(ids, permit, row, snapshot) : 0;
    UnregisterSnapshot(snapshot);
    if (row == nullptr) break;
    bool is_null = false;
    bool ended_null = false;
    (void)RowColumn(permit, row, ids.permit_ended, &ended_null);
    const bool theirs =
        DatumGetInt64(RowColumn(permit, row, ids.permit_lock_id, &is_null)) == lock_id &&
        SameName(RowColumn(permit, row, ids.permit_holder_role, &is_null), holder_role) &&
        ended_null && old_end > now;
    if (!theirs) break;
    PreventCommandIfReadOnly(ended != nullptr ? "fencing_release()" : "fencing_renew()");
    // In a session (1.8), as for an exclusive lease: a renewal is the
    // session's; a release ends this one at its own end and leaves its
    // session_id, for the HOT update (see MoveLeaseEnd).
    const int64 in_session = LeaseRowSession(ids, permit, row);
    if (in_session != 0 && ended == nullptr) {
      result.session = in_session;
      break;
    }
    const Datum new_end = TimestampPlus(now, remaining);
    const int columns[] = {ids.permit_expires_at, ids.permit_ended};
    const Datum values[] = {new_end, ended != nullptr ? CStringGetTextDatum(ended) : Datum(0)};
    const bool nulls[] = {false, ended == nullptr};
    if (ReplaceRow(permit, row, 2, columns, values, nulls)) {
      RefuseIfEndedWhileWaiting(old_end, lock_name);
      if (ended != nullptr) NoteLeaseEndedHere(token);
      result.moved = true;
      result.wake = PublishMovedEnd(lock_name, lock_id, announced,
                                    RowColumn(permit, row, ids.permit_holder, &is_null), token,
                                    ended, old_end, DatumGetTimestampTz(new_end));
      break;
    }
    // Renewed, released or revoked meanwhile: judge the newer version.
  }
  index_close(probe, NoLock);
  table_close(permit, NoLock);
  return result;
}

// Renews the session (1.8) to now + ttl (its own ttl when ttl_null), as
// the caller, writing its one row whatever the number of its leases: true,
// or false when there is no such session, it has ended (an ended session
// stays ended), or the caller may not act in it (the role that opened it,
// a role with its privileges, or a superuser): another role's session
// answers as one that does not exist.  In C, as a lease's renewal is: the
// PL/pgSQL it replaced cost a third of the renewals' rate (BENCHMARKS.md,
// "Sessions").
bool RenewSession(Oid schema, Oid caller, int64 session, Datum ttl, bool ttl_null) {
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  if (!OidIsValid(ids.session)) elog(ERROR, "pg_fencing: no fencing_session table (before 1.8)");
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(ExtensionTableOwner(schema), saved_context | SECURITY_LOCAL_USERID_CHANGE);
  Relation table = table_open(ids.session, RowExclusiveLock);
  Relation key = index_open(ids.session_key, AccessShareLock);
  bool renewed = false;
  for (;;) {
    Snapshot snapshot = TakeSnapshot();
    HeapTuple row = FetchRowByNumber(table, key, session, snapshot);
    UnregisterSnapshot(snapshot);
    if (row == nullptr) break;
    bool is_null = false;
    const Oid role = DatumGetObjectId(RowColumn(table, row, ids.session_holder_role, &is_null));
    // Another role's session answers as one that does not exist.
    if (!has_privs_of_role(caller, role)) break;
    const TimestampTz old_end =
        DatumGetTimestampTz(RowColumn(table, row, ids.session_expires_at, &is_null));
    const TimestampTz now = GetCurrentTimestamp();
    if (old_end <= now) break;
    PreventCommandIfReadOnly("fencing_session_renew()");
    const Datum new_end =
        TimestampPlus(now, ttl_null ? RowColumn(table, row, ids.session_ttl, &is_null) : ttl);
    const int columns[] = {ids.session_expires_at};
    const Datum values[] = {new_end};
    const bool nulls[] = {false};
    // Renewed or closed meanwhile: judged again on the newer look.
    if (!ReplaceRow(table, row, 1, columns, values, nulls)) continue;
    // The update may have waited for a transaction holding the row: a
    // grant that found the session ended holds it FOR SHARE while it gives
    // the lock to another (EndForGrant).  Judged again after the wait, as
    // SELECT ... FOR NO KEY UPDATE and then a look would judge it, without
    // paying for a row lock on every renewal: a session that ended before
    // the renewal could be written is put back as it was.
    if (old_end <= GetCurrentTimestamp()) {
      snapshot = TakeSnapshot();
      HeapTuple mine = FetchRowByNumber(table, key, session, snapshot);
      UnregisterSnapshot(snapshot);
      const Datum back[] = {TimestampTzGetDatum(old_end)};
      if (mine == nullptr || !ReplaceRow(table, mine, 1, columns, back, nulls)) {
        elog(ERROR, "pg_fencing: putting back the end of fencing session %lld failed",
             static_cast<long long>(session));
      }
      break;
    }
    renewed = true;
    break;
  }
  index_close(key, NoLock);
  table_close(table, NoLock);
  SetUserIdAndSecContext(saved_user, saved_context);
  if (renewed) RequireDurableCommit();
  return renewed;
}

// The session's hold: a lock-manager lock on the session's hold key, held
// until the transaction ends.  Everything that puts a lease into the
// session (its acquires, in C and in SQL) holds it shared; its close and
// its sweep take it exclusively, so that they wait for (the sweep: skip)
// an acquire in flight and then see the lease it granted, which they end
// with the others.  A lock-manager lock rather than a lock on the
// session's row: it writes no WAL and dirties no page, on the acquire's
// hot path; a renewal, which writes the row, does not wait for it.  Tagged
// as an advisory lock in a field SQL's advisory locks cannot name (pg_locks
// objsubid 5), so that no role can hold it from SQL.  Keyed by the
// session's hold_key, a random number only the roles that may see the
// session can read, not by its id: pg_locks, which every role reads, shows
// the key, and a session's id is what acts in it.
LOCKTAG SessionHoldTag(int64 hold_key) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(hold_key) >> 32),
                       static_cast<uint32>(hold_key), 5);
  return tag;
}

// Takes the session's hold (exclusively or shared; without waiting when
// nowait): whether it got it.
bool HoldSession(int64 hold_key, bool exclusive, bool nowait) {
  LOCKTAG tag = SessionHoldTag(hold_key);
  return LockAcquire(&tag, exclusive ? ExclusiveLock : ShareLock, false, nowait) !=
         LOCKACQUIRE_NOT_AVAIL;
}

// A live session the caller may act in, held (HoldSession, shared) against
// its close and its sweep, as fencing_session_for() holds it: its holder
// and its end.  55Z05 when there is no such session, it has ended, or the
// caller may not act in it (the role that opened it, a role with its
// privileges, or a superuser): another role's session answers as one that
// does not exist, and takes no hold that its own acquires would queue
// behind.
struct SessionInUse {
  Datum holder;  // text, copied
  TimestampTz expires_at;
};

namespace {

// The session's row in the latest snapshot, if the caller may act in it
// and it has not ended: its hold key (the id before 1.9) in *hold_key.
HeapTuple LiveSessionOfCaller(const LeaseTableIds &ids, Relation table, Relation key, Oid caller,
                              int64 session, int64 *hold_key) {
  Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
  HeapTuple row = FetchRowByNumber(table, key, session, snapshot);
  UnregisterSnapshot(snapshot);
  if (row == nullptr) return nullptr;
  bool is_null = false;
  const Oid role = DatumGetObjectId(RowColumn(table, row, ids.session_holder_role, &is_null));
  const TimestampTz end =
      DatumGetTimestampTz(RowColumn(table, row, ids.session_expires_at, &is_null));
  if (!has_privs_of_role(caller, role) || end <= GetCurrentTimestamp()) return nullptr;
  *hold_key = ids.session_hold_key != InvalidAttrNumber
                  ? DatumGetInt64(RowColumn(table, row, ids.session_hold_key, &is_null))
                  : session;
  return row;
}

void RefuseSession(int64 session) {
  ereport(ERROR, (errcode(PGF_ERRCODE_SESSION_ENDED),
                  errmsg("fencing session %lld does not exist or has ended",
                         static_cast<long long>(session)),
                  errhint("Open a new session with fencing_session_open(holder, ttl); the "
                          "leases of an ended session have ended with it.")));
}

}  // namespace

SessionInUse SessionForUse(const LeaseTableIds &ids, Oid caller, int64 session) {
  Relation table = table_open(ids.session, AccessShareLock);
  Relation key = index_open(ids.session_key, AccessShareLock);
  // The caller first, then the hold, then the look again, in the latest
  // snapshot (not the transaction's: at REPEATABLE READ that one may
  // predate a close that committed while the hold was waited for, and a
  // lease would be granted into a session that no longer exists).
  int64 hold_key = 0;
  if (LiveSessionOfCaller(ids, table, key, caller, session, &hold_key) == nullptr) {
    RefuseSession(session);
  }
  (void)HoldSession(hold_key, false, false);
  HeapTuple row = LiveSessionOfCaller(ids, table, key, caller, session, &hold_key);
  if (row == nullptr) RefuseSession(session);
  bool is_null = false;
  const SessionInUse found = {
      PointerGetDatum(DatumGetTextPCopy(RowColumn(table, row, ids.session_holder, &is_null))),
      DatumGetTimestampTz(RowColumn(table, row, ids.session_expires_at, &is_null))};
  index_close(key, NoLock);
  table_close(table, NoLock);
  return found;
}

// The end of the session as committed now (0: no row any more), whatever
// the transaction's isolation level.
TimestampTz SessionEndNow(const LeaseTableIds &ids, int64 session) {
  Relation table = table_open(ids.session, AccessShareLock);
  Relation key = index_open(ids.session_key, AccessShareLock);
  Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
  HeapTuple row = FetchRowByNumber(table, key, session, snapshot);
  UnregisterSnapshot(snapshot);
  bool is_null = false;
  const TimestampTz end =
      row != nullptr ? DatumGetTimestampTz(RowColumn(table, row, ids.session_expires_at, &is_null))
                     : 0;
  index_close(key, NoLock);
  table_close(table, NoLock);
  return end;
}

// SessionForUse() as the tables' owner.
SessionInUse SessionOfCaller(Oid schema, Oid caller, int64 session) {
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(ExtensionTableOwner(schema), saved_context | SECURITY_LOCAL_USERID_CHANGE);
  const SessionInUse in_use = SessionForUse(LeaseTablesOf(schema), caller, session);
  SetUserIdAndSecContext(saved_user, saved_context);
  return in_use;
}

// An attempt at lock_name (text) for a lease in the session: the session's
// holder, its end as it stands for the lease's own (the session's later).
AttemptRequest SessionRequest(Oid schema, int64 session, const SessionInUse &in_use,
                              Datum lock_name, bool payload_null, Datum payload) {
  AttemptRequest request;
  request.schema = schema;
  request.lock_name = lock_name;
  request.holder = in_use.holder;
  request.holder_role = SessionUserName();
  request.ttl = DirectFunctionCall2(timestamp_mi, TimestampTzGetDatum(in_use.expires_at),
                                    TimestampTzGetDatum(GetCurrentTimestamp()));
  request.payload_null = payload_null;
  request.payload = payload;
  request.session = session;
  return request;
}

// A lease's end is its session's: one that passed while the grant was
// made (not renewed meanwhile) undoes the grant (55Z05).  in_use is the
// session as the acquire found it, locked against its close and its sweep
// since: while the end it read lies ahead, the session has not ended by
// that end, and only a renewal can have moved it -- one with a ttl shorter
// than the time since it ran would have ended it already, which is no
// different from a session that ends the moment after the acquire
// returns.  So the session's row is read again only once that end has
// passed (saving a look-up on the acquire's hot path).
void CheckSessionOutlived(Oid schema, int64 session, const SessionInUse &in_use,
                          const char *lock_name) {
  if (in_use.expires_at > GetCurrentTimestamp()) return;
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(ExtensionTableOwner(schema), saved_context | SECURITY_LOCAL_USERID_CHANGE);
  const TimestampTz end = SessionEndNow(LeaseTablesOf(schema), session);
  SetUserIdAndSecContext(saved_user, saved_context);
  if (end <= GetCurrentTimestamp()) {
    ereport(ERROR, (errcode(PGF_ERRCODE_SESSION_ENDED),
                    errmsg("fencing session %lld ended while lock \"%s\" was being taken",
                           static_cast<long long>(session), lock_name)));
  }
}

// Moves the end of a live lease the caller's login role holds under token
// to now + remaining; ended 'released' marks a release (which spares the
// lock its lock-delay).  False for any lease that is not the caller's, and
// for a lock that does not exist; 42501 for a lock the caller may not use.
// holder_role: the login role whose lease it must be (name).
bool MoveLeaseEndOf(Oid schema, Oid caller, Datum name, bool token_null, int64 token,
                    Datum holder_role, const char *lock_name, Datum remaining, const char *ended) {
  const Tables t = OpenTables(schema);
  const LeaseTableIds &ids = *t.ids;
  bool lock_exists = false;
  bool may_use = true;
  bool moved = false;
  bool wake = false;
  bool has_line = false;
  int64 lock_id = 0;
  LockKind kind = LockKind::kExclusive;
  bool announced = false;
  int64 in_session = 0;
  for (;;) {
    Snapshot snapshot = TakeSnapshot();
    const TimestampTz now = GetCurrentTimestamp();
    HeapTuple lock = FetchLock(t, name, snapshot);
    HeapTuple lease = lock != nullptr ? FetchLease(t, name, snapshot) : nullptr;
    const TimestampTz old_end = lease != nullptr ? LeaseRowEnd(ids, t.lease, lease, snapshot) : 0;
    UnregisterSnapshot(snapshot);
    lock_exists = lock != nullptr;
    if (!lock_exists) break;
    may_use = CallerMayUse(t, lock, caller);
    kind = LockKindOfRow(t.lock, lock);
    lock_id = LockIdOf(t, lock);
    announced = LockIsAnnounced(t, lock);
    has_line = LockHasLine(t, lock);
    if (!may_use || lease == nullptr || token_null) break;
    bool is_null = false;
    const bool theirs =
        DatumGetInt64(RowColumn(t.lease, lease, ids.lease_token, &is_null)) == token &&
        SameName(RowColumn(t.lease, lease, ids.lease_holder_role, &is_null), holder_role) &&
        old_end > now;
    if (!theirs) break;
    PreventCommandIfReadOnly(ended != nullptr ? "fencing_release()" : "fencing_renew()");
    // A lease in a session (1.8) renews with its session, which its
    // function renews below.  A release ends it at its own end, as any
    // lease ended early (LeaseRowEnd), and leaves session_id as it is: the
    // session it was taken in, which no longer decides its end.  Clearing
    // it would change an indexed column and cost the release its HOT
    // update (an index entry in each of the table's indexes per release).
    in_session = LeaseRowSession(ids, t.lease, lease);
    if (in_session != 0 && ended == nullptr) break;
    const Datum new_end = TimestampPlus(now, remaining);
    const int columns[] = {ids.lease_expires_at, ids.lease_ended};
    const Datum values[] = {new_end, ended != nullptr ? CStringGetTextDatum(ended) : Datum(0)};
    const bool nulls[] = {false, ended == nullptr};
    if (ReplaceRow(t.lease, lease, 2, columns, values, nulls)) {
      RefuseIfEndedWhileWaiting(old_end, lock_name);
      // Released while it lived: a transaction that wrote under it ends it
      // with its own commit.
      if (ended != nullptr) NoteLeaseEndedHere(token);
      moved = true;
      wake = PublishMovedEnd(lock_name, lock_id, announced,
                             RowColumn(t.lease, lease, ids.lease_holder, &is_null), token, ended,
                             old_end, DatumGetTimestampTz(new_end));
      break;
    }
    // Renewed, released or revoked meanwhile: judge the newer version.
  }
  // Not the exclusive lease: a permit or a shared lease (1.4).
  if (lock_exists && may_use && !moved && in_session == 0 && !token_null &&
      kind != LockKind::kExclusive && OidIsValid(ids.permit)) {
    const EndMoved slot = MovePermitEnd(ids, lock_name, lock_id, token, holder_role, remaining,
                                        ended, announced);
    moved = slot.moved;
    wake = slot.wake;
    in_session = slot.session;
  }
  CloseTables(t);
  if (!lock_exists) return false;  // no lock, no lease: as for any lease not the caller's
  // A role that may not use the lock learns nothing else: the usual 42501.
  if (!may_use) (void)AuthorizeLock(schema, lock_name, caller, false, InvalidOid);
  if (in_session != 0 && ended == nullptr)
    return RenewSession(schema, caller, in_session, remaining, false);
  if (!moved) return false;
  RequireDurableCommit();
  if (wake) WakeWaitersAtCommit(schema, lock_id, has_line);
  return true;
}

// MoveLeaseEndOf() for fencing_renew(lock_name, token, ...) and
// fencing_release(lock_name, token): the caller's lease, under its login
// role.
bool MoveLeaseEnd(FunctionCallInfo fcinfo, const char *lock_name, Datum remaining,
                  const char *ended) {
  return MoveLeaseEndOf(ExtensionSchema(fcinfo), GetUserId(), PointerGetDatum(PG_GETARG_TEXT_PP(0)),
                        PG_ARGISNULL(1), PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1),
                        SessionUserName(), lock_name, remaining, ended);
}

// ---- Permits and shared leases (1.4; their attempt in C from 1.7) ---------------

// fencing_acquire_permits_as(caller, lock_name, holder, permits, ttl, wait):
// the SQL that checks an acquire of a permit or of a shared lease (permits
// NULL) and, with a wait, waits for it (fencing_wait_to_acquire), called
// with the caller's role as the gates call the _as functions (locks.cpp).
// The attempt it makes is fencing_try_permit, AttemptSlot() below.  Taken
// for a lock that does not exist yet, one the caller may not use, one whose
// kind is not what is asked (its error, or the first permit or shared lease
// that decides its kind), and for every wait.
Datum AcquireSlotInSql(FunctionCallInfo fcinfo, Datum permits, bool permits_null, int ttl_arg,
                       int wait_arg) {
  const Oid schema = ExtensionSchema(fcinfo);
  static const Oid kArgTypes[] = {OIDOID, TEXTOID, TEXTOID, INT4OID, INTERVALOID, INTERVALOID};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_acquire_permits_as", 6, kArgTypes);
  const Datum args[] = {ObjectIdGetDatum(GetUserId()),
                        PG_GETARG_DATUM(0),
                        PG_GETARG_DATUM(1),
                        permits,
                        PG_GETARG_DATUM(ttl_arg),
                        PG_ARGISNULL(wait_arg) ? Datum(0) : PG_GETARG_DATUM(wait_arg)};
  const bool nulls[] = {false, false, false, permits_null, false, PG_ARGISNULL(wait_arg)};
  bool is_null = false;
  const Datum token = CallExtensionFunction(fn, 6, args, nulls, &is_null);
  if (is_null) PG_RETURN_NULL();
  // For a database whose fencing_try_permit is still 1.4's SQL (which sets
  // the permit's end to its clock_timestamp() + ttl, before now): the
  // worker's look at now + ttl finds it ended, and announces it.
  ScheduleExpiryCheckAtCommit(
      DatumGetTimestampTz(TimestampPlus(GetCurrentTimestamp(), PG_GETARG_DATUM(ttl_arg))));
  return token;
}

// An acquire of a permit of a semaphore (want kSemaphore, with permits) or
// of a shared lease (kShared).
struct SlotRequest {
  AttemptRequest lease;  // lock_name, holder, holder_role, ttl; no payload
  LockKind want;
  int permits;
  const char *what;  // the acquire function, for messages
};

SlotRequest SlotRequestOf(Oid schema, Datum lock_name, Datum holder, Datum ttl, LockKind want,
                          int permits) {
  SlotRequest request;
  request.lease.schema = schema;
  request.lease.lock_name = lock_name;
  request.lease.holder = holder;
  request.lease.holder_role = SessionUserName();
  request.lease.ttl = ttl;
  request.lease.payload = Datum(0);
  request.lease.payload_null = true;
  request.want = want;
  request.permits = permits;
  request.what =
      want == LockKind::kSemaphore ? "fencing_acquire_permit()" : "fencing_acquire_shared()";
  return request;
}

// The slots of a lock as an attempt found them: the rows of fencing_permit
// (its latest grant of each slot) and what each says, in slot order.
struct SlotLook {
  int count;
  HeapTuple *rows;
  SlotSeen *seen;
  // The highest number among the lock's slot grants (1.7; 0 before): the
  // next grant's is one more, its place in the history.
  int64 highest_count;
};

bool IsZeroInterval(Datum interval) {
  const Interval *i = DatumGetIntervalP(interval);
  return i->time == 0 && i->day == 0 && i->month == 0;
}

SlotLook LookAtSlots(Relation permit, Relation key, const LeaseTableIds &ids,
                     const SlotRequest &request, int64 lock_id, Datum lock_delay,
                     Snapshot snapshot) {
  List *rows = FetchRowsByNumber(permit, key, lock_id, snapshot);
  SlotLook look;
  look.count = list_length(rows);
  look.rows = static_cast<HeapTuple *>(palloc(sizeof(HeapTuple) * (look.count + 1)));
  look.seen = static_cast<SlotSeen *>(palloc(sizeof(SlotSeen) * (look.count + 1)));
  look.highest_count = 0;
  const bool no_delay = IsZeroInterval(lock_delay);
  int i = 0;
  ListCell *cell;
  foreach (cell, rows) {
    HeapTuple row = static_cast<HeapTuple>(lfirst(cell));
    bool is_null = false, ended_null = false;
    SlotSeen &seen = look.seen[i];
    seen.slot = DatumGetInt32(RowColumn(permit, row, ids.permit_slot, &is_null));
    seen.expires_at = LeaseRowEnd(ids, permit, row, snapshot);  // a session's (1.8) is its own
    const Datum ended = RowColumn(permit, row, ids.permit_ended, &ended_null);
    seen.ended = !ended_null;
    // Released or revoked: free at its end; expired (marked or not): after
    // the lock-delay too.
    const bool ended_early = seen.ended && !TextIs(ended, "expired");
    seen.free_at = ended_early || no_delay
                       ? seen.expires_at
                       : DatumGetTimestampTz(TimestampPlus(seen.expires_at, lock_delay));
    // A slot in a session is the session's: a plain acquire by the same
    // holder takes another slot rather than renew it out of its session.
    seen.ours = LeaseRowSession(ids, permit, row) == 0 &&
                SameName(RowColumn(permit, row, ids.permit_holder_role, &is_null),
                         request.lease.holder_role) &&
                DatumGetBool(DirectFunctionCall2Coll(
                    texteq, DEFAULT_COLLATION_OID,
                    RowColumn(permit, row, ids.permit_holder, &is_null), request.lease.holder));
    if (ids.permit_grant_count != InvalidAttrNumber) {
      look.highest_count =
          Max(look.highest_count,
              DatumGetInt64(RowColumn(permit, row, ids.permit_grant_count, &is_null)));
    }
    look.rows[i++] = row;
  }
  return look;
}

// The error fencing_lock_of_kind() raises for a lock that is not of the
// kind asked for (its messages are the SQL's, one definition of them); or,
// with convert, a lock still exclusive made the kind asked for, which that
// function first checks it may become.
void CheckLockKindInSql(Oid schema, int64 lock_id, const SlotRequest &request, bool convert) {
  static const Oid kArgTypes[] = {INT8OID, TEXTOID, INT4OID, BOOLOID};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_lock_of_kind", 4, kArgTypes);
  const bool semaphore = request.want == LockKind::kSemaphore;
  const Datum args[] = {Int64GetDatum(lock_id),
                        CStringGetTextDatum(semaphore ? "semaphore" : "shared"),
                        Int32GetDatum(request.permits), BoolGetDatum(convert)};
  const bool nulls[] = {false, false, !semaphore, false};
  bool is_null = false;
  (void)CallExtensionFunction(fn, 4, args, nulls, &is_null);
}

enum class SlotOutcome {
  kGranted,    // a new grant of a slot
  kExtended,   // the caller's own live slot, its end moved
  kBusy,       // nothing can be granted now
  kLookAgain,  // a row changed between the look and the write
  kNeedsSql,   // the lock must first become a semaphore or a shared lock
};

// The caller's own live slot (a retry after a lost reply, say): the same
// token, its end moved, counted as a renewal.
SlotOutcome ExtendOwnSlot(Relation permit, const LeaseTableIds &ids, const SlotRequest &request,
                          HeapTuple row, TimestampTz old_end, TimestampTz now, int64 *token) {
  PreventCommandIfReadOnly(request.what);
  const Datum expires_at = TimestampPlus(now, request.lease.ttl);
  const int columns[] = {ids.permit_expires_at};
  const Datum values[] = {expires_at};
  const bool nulls[] = {false};
  if (!ReplaceRow(permit, row, 1, columns, values, nulls)) return SlotOutcome::kLookAgain;
  RefuseIfEndedWhileWaiting(old_end, text_to_cstring(DatumGetTextPP(request.lease.lock_name)));
  bool is_null = false;
  *token = DatumGetInt64(RowColumn(permit, row, ids.permit_token_column, &is_null));
  RequireDurableCommit();
  CountLeaseEventAtCommit(text_to_cstring(DatumGetTextPP(request.lease.lock_name)),
                          LeaseCounter::kRenewals);
  ScheduleExpiryCheckAtCommit(DatumGetTimestampTz(expires_at));
  return SlotOutcome::kExtended;
}

// The slot's gate for a permit's grant: the first free slot whose old
// holder has no write in flight, else the first free slot, waiting for its
// writes (at most lock_timeout: the waiting acquire sets it to what is left
// of its wait).  0 when that wait ran out.
int32 GatedPermitSlot(int64 lock_id, const int32 *free, int free_count) {
  for (int i = 0; i < free_count; ++i) {
    if (TryTakePermitGate(lock_id, free[i])) return free[i];
  }
  const int32 slot = free[0];
  const bool taken = UnlessLockTimeout([&] { TakePermitGate(lock_id, slot); }, [](bool) {});
  return taken ? slot : 0;
}

// A new grant of the slot: the row of its latest grant replaced (previous),
// or its first row.
void WriteSlotGrant(Relation permit, const LeaseTableIds &ids, const SlotRequest &request,
                    int64 lock_id, int32 slot, HeapTuple previous, int64 granted, int64 grant_count,
                    TimestampTz now, Datum expires_at) {
  const bool counted = ids.permit_grant_count != InvalidAttrNumber;
  if (previous != nullptr) {
    // The new grant is in no session (1.8): an acquire in one ties it after.
    int columns[] = {ids.permit_holder,
                     ids.permit_holder_role,
                     ids.permit_token_column,
                     ids.permit_granted_at,
                     ids.permit_expires_at,
                     ids.permit_ended,
                     0,
                     0};
    Datum values[] = {request.lease.holder,
                      request.lease.holder_role,
                      Int64GetDatum(granted),
                      TimestampTzGetDatum(now),
                      expires_at,
                      Datum(0),
                      Datum(0),
                      Datum(0)};
    bool nulls[] = {false, false, false, false, false, true, true, true};
    int replaced = 6;
    if (counted) {
      columns[replaced] = ids.permit_grant_count;
      values[replaced] = Int64GetDatum(grant_count);
      nulls[replaced++] = false;
    }
    if (ids.permit_session_id != InvalidAttrNumber) columns[replaced++] = ids.permit_session_id;
    if (!ReplaceRow(permit, previous, replaced, columns, values, nulls)) {
      // Cannot happen while the room and the row lock hold.
      ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                      errmsg("slot %d of fencing lock \"%s\" changed while it was locked", slot,
                             text_to_cstring(DatumGetTextPP(request.lease.lock_name)))));
    }
    return;
  }
  const int natts = RelationGetDescr(permit)->natts;
  Datum *values = static_cast<Datum *>(palloc0(sizeof(Datum) * natts));
  bool *nulls = static_cast<bool *>(palloc(sizeof(bool) * natts));
  for (int i = 0; i < natts; ++i) nulls[i] = true;
  const auto set = [&](AttrNumber column, Datum value) {
    values[column - 1] = value;
    nulls[column - 1] = false;
  };
  set(ids.permit_lock_id, Int64GetDatum(lock_id));
  set(ids.permit_slot, Int32GetDatum(slot));
  set(ids.permit_lock_name, request.lease.lock_name);
  set(ids.permit_holder, request.lease.holder);
  set(ids.permit_holder_role, request.lease.holder_role);
  set(ids.permit_token_column, Int64GetDatum(granted));
  set(ids.permit_granted_at, TimestampTzGetDatum(now));
  set(ids.permit_expires_at, expires_at);
  if (counted) set(ids.permit_grant_count, Int64GetDatum(grant_count));
  InsertRow(permit, values, nulls);
}

// The first shared grant after an exclusive one fences the exclusive
// holder: the lock's mark goes just above its token (shared holders' own
// tokens are all above it, and no shared grant raises it further).  A mark
// already there is not touched, so that the grant does not wait for the
// shared holders writing under the lock.
void FenceExclusiveHolder(const Tables &t, int64 lock_id, Datum lock_name, int64 exclusive_token) {
  Relation fence = table_open(t.ids->fence, AccessShareLock);
  Relation fence_probe = index_open(t.ids->fence_probe, AccessShareLock);
  Snapshot snapshot = TakeSnapshot();
  HeapTuple mark = FetchRow(fence, fence_probe, t.ids->name_collation, lock_name, snapshot);
  UnregisterSnapshot(snapshot);
  bool is_null = false;
  const bool raise =
      mark == nullptr ||
      DatumGetInt64(RowColumn(fence, mark, t.ids->fence_high_water, &is_null)) <= exclusive_token;
  index_close(fence_probe, NoLock);
  table_close(fence, NoLock);
  if (raise) RaiseMark(t, t.ids->schema, lock_id, lock_name, exclusive_token + 1);
}

// The slot's last lease, which a new grant of the slot replaces, into the
// history, as an exclusive lease's (PublishGrant): how it ended (released,
// revoked, expired, or taken over by another holder once it ran out).
void RecordEndedSlot(Relation permit, const LeaseTableIds &ids, const SlotRequest &request,
                     int64 lock_id, HeapTuple previous, const SlotSeen *seen) {
  if (ids.permit_grant_count == InvalidAttrNumber) return;  // before 1.7
  bool is_null = false, ended_null = false;
  EndedLease ended = {};
  ended.lock_id = lock_id;
  ended.lock_name = request.lease.lock_name;
  ended.holder = RowColumn(permit, previous, ids.permit_holder, &is_null);
  ended.holder_role = RowColumn(permit, previous, ids.permit_holder_role, &is_null);
  ended.token = DatumGetInt64(RowColumn(permit, previous, ids.permit_token_column, &is_null));
  ended.granted_at =
      DatumGetTimestampTz(RowColumn(permit, previous, ids.permit_granted_at, &is_null));
  ended.ended_at = seen->expires_at;
  const Datum how = RowColumn(permit, previous, ids.permit_ended, &ended_null);
  const bool ran_out = ended_null || TextIs(how, "expired");
  ended.end_reason = ran_out ? ExpiredEndReason(seen->ours) : text_to_cstring(DatumGetTextPP(how));
  ended.grant_count = DatumGetInt64(RowColumn(permit, previous, ids.permit_grant_count, &is_null));
  ended.slot = seen->slot;
  RecordEndedLease(ids.schema, ended);
}

// Whether the lock, as its row stands, is of the kind the request wants.
KindFit FitOfLock(const Tables &t, HeapTuple lock, const SlotRequest &request) {
  bool is_null = false;
  const LockKind kind = LockKindOfRow(t.lock, lock);
  const int lock_permits =
      kind == LockKind::kSemaphore
          ? DatumGetInt32(RowColumn(t.lock, lock, t.ids->lock_permits, &is_null))
          : 0;
  return PGF_CORE(FitKind(kind, lock_permits, request.want, request.permits));
}

// One look at the lock and its slots, in its waiting room, and what it
// allows: the caller's own live slot extended, a free slot granted, or
// nothing.  may_convert: the lock may be made a semaphore or a shared lock
// here (the SQL that checked its owner asks for it).
SlotOutcome AttemptSlotOnce(const Tables &t, Relation permit, Relation key,
                            const SlotRequest &request, int64 lock_id, bool may_convert,
                            bool line_counts, int64 *token) {
  const LeaseTableIds &ids = *t.ids;
  Snapshot snapshot = TakeSnapshot();
  const TimestampTz now = GetCurrentTimestamp();
  HeapTuple lock = FetchLock(t, request.lease.lock_name, snapshot);
  if (lock == nullptr) {
    UnregisterSnapshot(snapshot);
    return SlotOutcome::kBusy;  // dropped since it was checked
  }
  bool is_null = false;
  const KindFit fit = FitOfLock(t, lock, request);
  if (fit == KindFit::kRefused) {
    UnregisterSnapshot(snapshot);
    CheckLockKindInSql(ids.schema, lock_id, request, false);
    elog(ERROR, "pg_fencing: fencing_lock_of_kind() accepted a lock of another kind");
  }
  if (fit == KindFit::kConvert && !may_convert) {
    UnregisterSnapshot(snapshot);
    return SlotOutcome::kNeedsSql;
  }
  const Datum lock_delay = RowColumn(t.lock, lock, ids.lock_delay, &is_null);
  const bool shared = request.want == LockKind::kShared;
  HeapTuple lease = shared ? FetchLease(t, request.lease.lock_name, snapshot) : nullptr;
  const TimestampTz lease_end = lease != nullptr ? LeaseRowEnd(ids, t.lease, lease, snapshot) : 0;
  const SlotLook slots = LookAtSlots(permit, key, ids, request, lock_id, lock_delay, snapshot);
  UnregisterSnapshot(snapshot);

  const int own = PGF_CORE(OwnLiveSlot(slots.seen, slots.count, now));
  if (own >= 0) {
    return ExtendOwnSlot(permit, ids, request, slots.rows[own], slots.seen[own].expires_at, now,
                         token);
  }

  // Not beside a live exclusive lease, nor in its lock-delay.
  // Judged on the look first: a shared acquire refused here holds no row
  // of the lease's session (EndForGrant locks it, and reads its end again,
  // only once the look says the lock is free).
  if (lease != nullptr) {
    bool ended_null = false;
    const Datum ended = RowColumn(t.lease, lease, ids.lease_ended, &ended_null);
    const bool ended_early = !ended_null && !TextIs(ended, "expired");
    const auto free_at = [&](TimestampTz end) {
      return ended_early ? end : DatumGetTimestampTz(TimestampPlus(end, lock_delay));
    };
    if (free_at(lease_end) > now) return SlotOutcome::kBusy;
    if (free_at(EndForGrant(t, ids.schema, lease, lease_end, now)) > now) return SlotOutcome::kBusy;
  }
  int32 slot = 0;
  int32 *free = nullptr;
  int free_count = 0;
  if (shared) {
    slot = PGF_CORE(SharedSlot(slots.seen, slots.count, now));
  } else {
    free = static_cast<int32 *>(palloc(sizeof(int32) * request.permits));
    free_count =
        PGF_CORE(FreePermitSlots(slots.seen, slots.count, request.permits, now, free));
    if (free_count == 0) return SlotOutcome::kBusy;
    // The free permits go to the places waiting for one first.
    if (line_counts && LineHoldsOffPermit(ids, lock_id, free_count)) return SlotOutcome::kBusy;
  }
  PreventCommandIfReadOnly(request.what);

  int64 exclusive_token = 0;
  if (shared) {
    // A revoke waits for this grant (it takes the gate exclusively).
    TakeFenceGateShared(lock_id);
    if (lease != nullptr) {
      // The free exclusive lease is written (to itself), so that a renew
      // racing this grant at the instant of expiry finds it changed and
      // looks again (it then sees the lease expired).
      const int columns[] = {ids.lease_expires_at};
      const Datum values[] = {RowColumn(t.lease, lease, ids.lease_expires_at, &is_null)};
      const bool nulls[] = {false};
      if (!ReplaceRow(t.lease, lease, 1, columns, values, nulls)) {
        // Changed since the look: marked expired by the worker (then the
        // lock is still free), or renewed at the instant of expiry.
        GiveBackFenceGateShared(lock_id);
        return SlotOutcome::kLookAgain;
      }
      exclusive_token = DatumGetInt64(RowColumn(t.lease, lease, ids.lease_token, &is_null));
    }
  }
  // The lock's first permit or shared lease decides its kind; nothing
  // after this can find it busy (a lock still exclusive has no slots, and
  // its exclusive lease, if any, is locked above).
  if (fit == KindFit::kConvert) CheckLockKindInSql(ids.schema, lock_id, request, true);
  if (!shared) {
    slot = GatedPermitSlot(lock_id, free, free_count);
    if (slot == 0) return SlotOutcome::kBusy;
  }
  // The slot's latest grant, locked as it stands: the expiry worker may be
  // marking it expired (and announcing that) at this instant; then this
  // waits for it and looks again, and announces the expiry no second time.
  HeapTuple previous = nullptr;
  const SlotSeen *slot_seen = nullptr;
  for (int i = 0; i < slots.count; ++i) {
    if (slots.seen[i].slot == slot) {
      previous = slots.rows[i];
      slot_seen = &slots.seen[i];
    }
  }
  if (previous != nullptr && !LockRow(permit, previous)) {
    if (shared) {
      GiveBackFenceGateShared(lock_id);
    } else {
      GiveBackPermitGate(lock_id, slot);
    }
    return SlotOutcome::kLookAgain;
  }

  const int64 granted = GrantToken(ids.schema);
  const Datum expires_at = TimestampPlus(now, request.lease.ttl);
  WriteSlotGrant(permit, ids, request, lock_id, slot, previous, granted, slots.highest_count + 1,
                 now, expires_at);
  if (exclusive_token != 0) {
    FenceExclusiveHolder(t, lock_id, request.lease.lock_name, exclusive_token);
  }
  // Announced (if the lock is) and counted at commit, as a lease's: a slot's
  // last grant that ran out is its expiry, then the grant.
  const char *lock_name = text_to_cstring(DatumGetTextPP(request.lease.lock_name));
  const bool announce = LockIsAnnounced(t, lock);
  if (previous != nullptr) {
    RecordEndedSlot(permit, ids, request, lock_id, previous, slot_seen);
    bool ended_null = false;
    (void)RowColumn(permit, previous, ids.permit_ended, &ended_null);
    if (ended_null) {
      LeaseEvent expiry = {};
      expiry.lock_name = lock_name;
      expiry.lock_id = lock_id;
      expiry.kind = LeaseEventKind::kExpired;
      expiry.holder = RowColumn(permit, previous, ids.permit_holder, &is_null);
      expiry.has_token = true;
      expiry.token = DatumGetInt64(RowColumn(permit, previous, ids.permit_token_column, &is_null));
      PublishLeaseEvent(expiry, announce);
    }
  }
  LeaseEvent grant = {};
  grant.lock_name = lock_name;
  grant.lock_id = lock_id;
  grant.kind = LeaseEventKind::kGranted;
  grant.holder = request.lease.holder;
  grant.has_token = true;
  grant.token = granted;
  PublishLeaseEvent(grant, announce);
  // This transaction judges its own next write under the lock afresh.
  ForgetLockFence(lock_name);
  RequireDurableCommit();
  ScheduleExpiryCheckAtCommit(DatumGetTimestampTz(expires_at));
  *token = granted;
  return SlotOutcome::kGranted;
}

// One attempt at a permit or a shared lease of lock_id (whose use the
// caller has checked).  Grants of one lock, of every kind, take turns in
// its waiting room, so that nobody takes one from under the first waiter in
// line, and a waiting exclusive acquirer, which sits in the room, holds off
// every new shared grant.  An attempt that grants nothing gives back the
// room and the gates it took, so that a caller that stays in its
// transaction holds up no other acquire and no writer.
SlotOutcome AttemptSlot(const Tables &t, const SlotRequest &request, int64 lock_id,
                        bool has_line, bool may_convert, int64 *token) {
  LOCKTAG room = WaitingRoomTag(request.lease.schema, lock_id);
  const LockAcquireResult in_room = LockAcquire(&room, ExclusiveLock, false, true);
  if (in_room == LOCKACQUIRE_NOT_AVAIL) return SlotOutcome::kBusy;
  // The lock's line (lease_line.hpp), but for the room's waiter, served
  // first: a place waiting for an exclusive lease holds off every new
  // shared lease (exclusive first); places waiting for permits take the
  // free ones first (judged with the free permits counted).
  const bool room_waiter = in_room != LOCKACQUIRE_OK && WaitsInRoom(room);
  const bool line_counts = has_line && !room_waiter;
  if (line_counts && request.want == LockKind::kShared && LineHoldsOffShared(*t.ids, lock_id)) {
    (void)LockRelease(&room, ExclusiveLock, false);
    return SlotOutcome::kBusy;
  }
  Relation permit = table_open(t.ids->permit, RowExclusiveLock);
  Relation key = index_open(t.ids->permit_key, AccessShareLock);
  constexpr int kMaxLooks = 3;
  SlotOutcome outcome = SlotOutcome::kLookAgain;
  for (int looks = 0; looks < kMaxLooks && outcome == SlotOutcome::kLookAgain; ++looks) {
    outcome = AttemptSlotOnce(t, permit, key, request, lock_id, may_convert,
                              line_counts && request.want == LockKind::kSemaphore, token);
  }
  index_close(key, NoLock);
  table_close(permit, NoLock);
  // A grant keeps the room until its commit, as an exclusive grant does.
  if (outcome != SlotOutcome::kGranted) (void)LockRelease(&room, ExclusiveLock, false);
  return outcome == SlotOutcome::kLookAgain ? SlotOutcome::kBusy : outcome;
}

// fencing_acquire_permit and fencing_acquire_shared without a wait: the
// attempt at once, here, for a lock that exists, that the caller may use
// and that is of the kind asked for, at READ COMMITTED; everything else in
// SQL (AcquireSlotInSql), which raises the error or makes the lock.
Datum AcquireSlot(FunctionCallInfo fcinfo, LockKind want, int permits, int ttl_arg, int wait_arg) {
  const bool semaphore = want == LockKind::kSemaphore;
  const Datum permits_datum = semaphore ? Int32GetDatum(permits) : Datum(0);
  if (!PG_ARGISNULL(wait_arg) || XactIsoLevel != XACT_READ_COMMITTED) {
    return AcquireSlotInSql(fcinfo, permits_datum, !semaphore, ttl_arg, wait_arg);
  }
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();  // before OpenTables() acts as the tables' owner
  // Detoasted: the values go into the slot's row as they are.
  const SlotRequest request =
      SlotRequestOf(schema, PointerGetDatum(PG_GETARG_TEXT_PP(0)),
                    PointerGetDatum(PG_GETARG_TEXT_PP(1)), PG_GETARG_DATUM(ttl_arg), want, permits);
  const Tables t = OpenTables(schema);
  Snapshot snapshot = TakeSnapshot();
  HeapTuple lock = FetchLock(t, request.lease.lock_name, snapshot);
  UnregisterSnapshot(snapshot);
  // The lock's kind is judged before the room too, so that an acquire of
  // the wrong kind is an error even while others hold the room (SQL raises
  // it), not a NULL; the judgement inside the room is the one that counts.
  const bool at_once = lock != nullptr && OidIsValid(t.ids->permit) &&
                       CallerMayUse(t, lock, caller) &&
                       FitOfLock(t, lock, request) == KindFit::kFits;
  int64 token = 0;
  SlotOutcome outcome = SlotOutcome::kNeedsSql;
  if (at_once) {
    outcome = AttemptSlot(t, request, LockIdOf(t, lock), LockHasLine(t, lock), false, &token);
  }
  CloseTables(t);
  if (outcome == SlotOutcome::kNeedsSql) {
    return AcquireSlotInSql(fcinfo, permits_datum, !semaphore, ttl_arg, wait_arg);
  }
  if (outcome == SlotOutcome::kBusy) PG_RETURN_NULL();
  PG_RETURN_INT64(token);
}

}  // namespace

void RefuseUnlessSessionOfCaller(Oid schema, Oid caller, int64 session) {
  (void)SessionOfCaller(schema, caller, session);
}

bool AcquireInSession(Oid schema, Oid caller, int64 session, bool lock_name_null, Datum lock_name,
                      bool payload_null, Datum payload, int64 *token) {
  // The caller first: another role's session answers as one that does not
  // exist, before anything else is looked at.
  const SessionInUse in_use = SessionOfCaller(schema, caller, session);
  const char *name = CheckLockNameValue(lock_name_null, lock_name);
  PreventCommandIfReadOnly("fencing_session_acquire()");
  const AttemptRequest request =
      SessionRequest(schema, session, in_use, PointerGetDatum(PG_DETOAST_DATUM_PACKED(lock_name)),
                     payload_null, payload_null ? Datum(0) : PointerGetDatum(PG_DETOAST_DATUM(payload)));
  if (!AcquireForCaller(request, name, caller, token)) return false;
  CheckSessionOutlived(schema, session, in_use, name);
  return true;
}

bool AcquireSlotInSession(Oid schema, Oid caller, int64 session, Datum lock_name, bool shared,
                          int permits, int64 *token) {
  static const Oid kArgTypes[] = {OIDOID, INT8OID, TEXTOID, INTERVALOID,
                                  JSONBOID, TEXTOID, INT4OID};
  FmgrInfo *in_sql = ExtensionFunction(schema, "fencing_session_acquire_as", 7, kArgTypes);
  const Datum args[] = {ObjectIdGetDatum(caller),
                        Int64GetDatum(session),
                        lock_name,
                        Datum(0),
                        Datum(0),
                        CStringGetTextDatum(shared ? "shared" : "permit"),
                        Int32GetDatum(permits)};
  const bool nulls[] = {false, false, false, true, true, false, shared};
  bool is_null = false;
  const Datum got = CallExtensionFunction(in_sql, 7, args, nulls, &is_null);
  if (is_null) return false;
  *token = DatumGetInt64(got);
  return true;
}

bool GiveBackLease(Oid schema, Oid caller, Datum lock_name, int64 token, Datum holder_role) {
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  return MoveLeaseEndOf(schema, caller, PointerGetDatum(PG_DETOAST_DATUM_PACKED(lock_name)), false,
                        token, holder_role, TextDatumGetCString(lock_name),
                        IntervalPGetDatum(zero), "released");
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_acquire(lock_name text, holder text, ttl interval, wait interval
// DEFAULT NULL, payload jsonb DEFAULT NULL) RETURNS fencing_token.  Without
// a wait, one attempt here; with one, the waiting acquire in SQL
// (fencing_acquire_as), which queues in the waiting room and repeats the
// attempt (fencing_try_acquire) as it is woken.
PG_FUNCTION_INFO_V1(fencing_acquire);
Datum fencing_acquire(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLeaseArguments(fcinfo, 1, 2);
  // A grant writes: refused in a read-only transaction (or on a standby)
  // before any look at the lease, so that a busy lock does not answer NULL
  // there, nor a waiting acquire wait for nothing.
  PreventCommandIfReadOnly("fencing_acquire()");
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  if (!PG_ARGISNULL(3)) {
    static const Oid kArgTypes[] = {OIDOID, TEXTOID, TEXTOID, INTERVALOID, INTERVALOID, JSONBOID};
    FmgrInfo *waiting = ExtensionFunction(schema, "fencing_acquire_as", 6, kArgTypes);
    const Datum args[] = {
        ObjectIdGetDatum(caller), PG_GETARG_DATUM(0),
        PG_GETARG_DATUM(1),       PG_GETARG_DATUM(2),
        PG_GETARG_DATUM(3),       PG_ARGISNULL(4) ? Datum(0) : PG_GETARG_DATUM(4)};
    const bool nulls[] = {false, false, false, false, false, PG_ARGISNULL(4)};
    bool is_null = false;
    const Datum token = CallExtensionFunction(waiting, 6, args, nulls, &is_null);
    if (is_null) PG_RETURN_NULL();
    return token;
  }

  const AttemptRequest request = RequestFrom(fcinfo, schema, 4);
  int64 token = 0;
  if (!AcquireForCaller(request, lock_name, caller, &token)) PG_RETURN_NULL();
  PG_RETURN_INT64(token);
}

// fencing_session_acquire(session bigint, lock_name text, wait interval
// DEFAULT NULL, payload jsonb DEFAULT NULL, kind text DEFAULT 'exclusive',
// permits integer DEFAULT NULL) RETURNS fencing_token (1.8): the lease in
// the session, with the session's holder, ending at its end.  Without a
// wait, in C as fencing_acquire is: the session held (HoldSession) and
// the caller checked (SessionForUse), one attempt whose grant or extension
// writes the session into the lease row, and the session's end read again
// after it (a grant as the session ends is undone with 55Z05).  A wait, or
// another kind, goes to the SQL (fencing_session_acquire_as), which waits
// as the waiting acquires do, cut at the session's end, and says which
// kinds a session holds.
PG_FUNCTION_INFO_V1(fencing_session_acquire);
Datum fencing_session_acquire(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  const bool exclusive =
      !PG_ARGISNULL(4) && strcmp(text_to_cstring(PG_GETARG_TEXT_PP(4)), "exclusive") == 0;
  if (!PG_ARGISNULL(2) || !exclusive || !PG_ARGISNULL(5) || PG_ARGISNULL(0)) {
    static const Oid kArgTypes[] = {OIDOID,   INT8OID, TEXTOID, INTERVALOID,
                                    JSONBOID, TEXTOID, INT4OID};
    FmgrInfo *in_sql = ExtensionFunction(schema, "fencing_session_acquire_as", 7, kArgTypes);
    Datum args[7];
    bool nulls[7];
    args[0] = ObjectIdGetDatum(caller);
    nulls[0] = false;
    for (int i = 0; i < 6; ++i) {
      nulls[i + 1] = PG_ARGISNULL(i);
      args[i + 1] = nulls[i + 1] ? Datum(0) : PG_GETARG_DATUM(i);
    }
    bool is_null = false;
    const Datum token = CallExtensionFunction(in_sql, 7, args, nulls, &is_null);
    if (is_null) PG_RETURN_NULL();
    return token;
  }
  int64 token = 0;
  if (!AcquireInSession(schema, caller, PG_GETARG_INT64(0), PG_ARGISNULL(1),
                        PG_ARGISNULL(1) ? Datum(0) : PG_GETARG_DATUM(1), PG_ARGISNULL(3), PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3),
                        &token)) {
    PG_RETURN_NULL();
  }
  PG_RETURN_INT64(token);
}

// fencing_session_acquire_all(session bigint, lock_names text[], wait
// interval DEFAULT NULL) RETURNS fencing_token[] (1.8): every lock or none.
// Without a wait, in C: one attempt per distinct name in byte order (the
// one order every acquire_all takes its locks in, so two cannot deadlock),
// inside a subtransaction that is rolled back, with every grant made in
// it, when one lock is busy: NULL then.  Tokens in the order of
// lock_names.  A wait goes to the SQL (fencing_session_acquire_all_as).
PG_FUNCTION_INFO_V1(fencing_session_acquire_all);
Datum fencing_session_acquire_all(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  Datum *names = nullptr;
  bool *name_nulls = nullptr;
  int count = 0;
  if (!PG_ARGISNULL(1)) {
    deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, -1, false, TYPALIGN_INT, &names,
                      &name_nulls, &count);
  }
  bool any_null = false;
  for (int i = 0; i < count; ++i) any_null = any_null || name_nulls[i];
  // The SQL for a wait, and for every refusal of its arguments.
  if (!PG_ARGISNULL(2) || PG_ARGISNULL(0) || count == 0 || any_null) {
    static const Oid kArgTypes[] = {OIDOID, INT8OID, TEXTARRAYOID, INTERVALOID};
    FmgrInfo *in_sql = ExtensionFunction(schema, "fencing_session_acquire_all_as", 4, kArgTypes);
    const Datum args[] = {ObjectIdGetDatum(caller), PG_ARGISNULL(0) ? Datum(0) : PG_GETARG_DATUM(0),
                          PG_ARGISNULL(1) ? Datum(0) : PG_GETARG_DATUM(1),
                          PG_ARGISNULL(2) ? Datum(0) : PG_GETARG_DATUM(2)};
    const bool nulls[] = {false, PG_ARGISNULL(0), PG_ARGISNULL(1), PG_ARGISNULL(2)};
    bool is_null = false;
    const Datum tokens = CallExtensionFunction(in_sql, 4, args, nulls, &is_null);
    if (is_null) PG_RETURN_NULL();
    return tokens;
  }
  const int64 session = PG_GETARG_INT64(0);
  const SessionInUse in_use = SessionOfCaller(schema, caller, session);
  PreventCommandIfReadOnly("fencing_session_acquire_all()");
  // Each distinct name once, in byte order (COLLATE "C"), with its token.
  struct Wanted {
    const char *name;
    Datum text;
    int64 token;
  };
  Wanted *wanted = static_cast<Wanted *>(palloc(sizeof(Wanted) * count));
  for (int i = 0; i < count; ++i) wanted[i] = {TextDatumGetCString(names[i]), names[i], 0};
  const auto by_name = [](const void *a, const void *b) {
    return strcmp(static_cast<const Wanted *>(a)->name, static_cast<const Wanted *>(b)->name);
  };
  qsort(wanted, count, sizeof(Wanted), by_name);
  int distinct = 0;
  for (int i = 0; i < count; ++i) {
    if (distinct == 0 || strcmp(wanted[distinct - 1].name, wanted[i].name) != 0) {
      wanted[distinct++] = wanted[i];
    }
  }
  // Every grant inside one subtransaction, as the SQL form's block: a busy
  // lock ends it as a lock wait that ran out would (55P03), and
  // UnlessLockTimeout rolls it back, every grant made in it with it, and
  // answers false.  Any other error rolls it back too before it goes on up
  // (to a PL/pgSQL handler, say, which must find its own subtransaction
  // the current one).
  const bool all = UnlessLockTimeout(
      [&] {
        for (int i = 0; i < distinct; ++i) {
          const char *lock_name = wanted[i].name;
          if (lock_name[0] == '\0') {
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("lock name must not be NULL or empty")));
          }
          const AttemptRequest request = SessionRequest(
              schema, session, in_use, PointerGetDatum(PG_DETOAST_DATUM_PACKED(wanted[i].text)),
              true, Datum(0));
          if (!AcquireForCaller(request, lock_name, caller, &wanted[i].token)) {
            ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                            errmsg("fencing lock \"%s\" is busy", lock_name)));
          }
        }
      },
      [](bool) {});
  if (!all) PG_RETURN_NULL();
  CheckSessionOutlived(schema, session, in_use, wanted[0].name);
  Datum *tokens = static_cast<Datum *>(palloc(sizeof(Datum) * count));
  for (int i = 0; i < count; ++i) {
    const Wanted key = {TextDatumGetCString(names[i]), Datum(0), 0};
    const auto *found =
        static_cast<const Wanted *>(bsearch(&key, wanted, distinct, sizeof(Wanted), by_name));
    tokens[i] = Int64GetDatum(found->token);
  }
  PG_RETURN_ARRAYTYPE_P(
      construct_array(tokens, count, TokenTypeOid(schema), sizeof(int64), true, TYPALIGN_DOUBLE));
}

// fencing_try_acquire(lock_name text, holder text, ttl interval, lock_id
// bigint, payload jsonb) RETURNS fencing_token: one attempt, for the
// waiting acquire (fencing_acquire_as), which has checked the arguments and
// the caller's permission.  NULL when the lock is busy.  PUBLIC may not
// call it.
PG_FUNCTION_INFO_V1(fencing_try_acquire);
Datum fencing_try_acquire(PG_FUNCTION_ARGS) {
  (void)CheckLeaseArguments(fcinfo, 1, 2);
  const Oid schema = ExtensionSchema(fcinfo);
  // Only from inside the waiting acquire, which runs as the tables' owner:
  // a role granted EXECUTE by mistake still cannot skip the permission
  // check that function makes.
  if (GetUserId() != ExtensionTableOwner(schema) && !superuser()) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("fencing_try_acquire() is internal to fencing_acquire()"),
                    errhint("Call fencing_acquire(lock_name, holder, ttl, wait).")));
  }
  const AttemptRequest request = RequestFrom(fcinfo, schema, 4);
  int64 token = 0;
  Access access = Access::kChecked;
  const Tables t = OpenTables(schema);
  const bool taken = TryAcquire(t, request, InvalidOid, &access, &token);
  CloseTables(t);
  if (!taken) PG_RETURN_NULL();
  PG_RETURN_INT64(token);
}

// fencing_renew(lock_name text, token fencing_token, ttl interval) RETURNS
// boolean: the caller's live lease now ends ttl from now.
PG_FUNCTION_INFO_V1(fencing_renew);
Datum fencing_renew(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLeaseArguments(fcinfo, -1, 2);
  PreventCommandIfReadOnly("fencing_renew()");  // also when the token turns out not to be live
  PG_RETURN_BOOL(MoveLeaseEnd(fcinfo, lock_name, PG_GETARG_DATUM(2), nullptr));
}

// fencing_session_hold(hold_key bigint, exclusive boolean, nowait boolean)
// RETURNS boolean (internal): HoldSession() for the SQL that acquires in a
// session (shared), closes it or sweeps it (exclusively, the sweep without
// waiting), by the session's hold_key.
PG_FUNCTION_INFO_V1(fencing_session_hold);
Datum fencing_session_hold(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("fencing_session_hold() needs a hold key and both flags, got NULL")));
  }
  PG_RETURN_BOOL(HoldSession(PG_GETARG_INT64(0), PG_GETARG_BOOL(1), PG_GETARG_BOOL(2)));
}

// fencing_note_ended_here(token fencing_token) RETURNS void (1.9;
// internal): NoteLeaseEndedHere() for the SQL that ends a live lease early
// (a session's close, a revoke), which calls it with each token it ended.
// PUBLIC may not call it: a role that could would declare any lease ended
// by its own transaction, and commit writes made after the lease ran out.
PG_FUNCTION_INFO_V1(fencing_note_ended_here);
Datum fencing_note_ended_here(PG_FUNCTION_ARGS) {
  // Only from inside the extension's own functions, which run as the
  // tables' owner: an EXECUTE granted by mistake still changes nothing.
  if (GetUserId() != ExtensionTableOwner(ExtensionSchema(fcinfo))) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("fencing_note_ended_here() is internal to pg_fencing")));
  }
  if (!PG_ARGISNULL(0)) NoteLeaseEndedHere(PG_GETARG_INT64(0));
  PG_RETURN_VOID();
}

// fencing_session_unhold(hold_key bigint) RETURNS void (1.9; internal):
// gives back the session's exclusive hold that the sweep took and then
// could not use (the session's lease rows are being written), so that a
// sweep holds only the sessions it ends, whatever it passes over.
PG_FUNCTION_INFO_V1(fencing_session_unhold);
Datum fencing_session_unhold(PG_FUNCTION_ARGS) {
  if (!PG_ARGISNULL(0)) {
    LOCKTAG tag = SessionHoldTag(PG_GETARG_INT64(0));
    (void)LockRelease(&tag, ExclusiveLock, false);
  }
  PG_RETURN_VOID();
}

// fencing_session_entries(role oid, most integer) RETURNS integer (1.10;
// internal): how many entries fencing_session's index on holder_role has
// for role, counting at most most -- at least as many as the role has
// sessions.  fencing_session_open counts a role's sessions exactly (and
// sweeps its ended ones) only when this reaches the limit: an exact count
// visits every session's row, which at 10,000 sessions of one role made
// each open cost 2 ms where a count of entries costs a tenth of that.
PG_FUNCTION_INFO_V1(fencing_session_entries);
Datum fencing_session_entries(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1)) PG_RETURN_NULL();
  const LeaseTableIds &ids = LeaseTablesOf(ExtensionSchema(fcinfo));
  Relation session = table_open(ids.session, AccessShareLock);
  Relation by_role = index_open(ids.session_role, AccessShareLock);
  const int64 entries =
      CountIndexEntries(session, by_role, PG_GETARG_OID(0), std::max(PG_GETARG_INT32(1), 0));
  index_close(by_role, NoLock);
  table_close(session, NoLock);
  PG_RETURN_INT32(static_cast<int32>(entries));
}

// fencing_session_renew(session bigint, ttl interval DEFAULT NULL) RETURNS
// boolean (1.8): the session, and so every lease in it, extended to now +
// ttl (the session's own ttl if NULL); false once it has ended.
PG_FUNCTION_INFO_V1(fencing_session_renew);
Datum fencing_session_renew(PG_FUNCTION_ARGS) {
  if (!PG_ARGISNULL(1)) CheckSessionTtl(PG_GETARG_DATUM(1));
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("fencing_session_renew() needs a session, got NULL")));
  }
  PG_RETURN_BOOL(RenewSession(ExtensionSchema(fcinfo), GetUserId(), PG_GETARG_INT64(0),
                              PG_ARGISNULL(1) ? Datum(0) : PG_GETARG_DATUM(1), PG_ARGISNULL(1)));
}

// fencing_release(lock_name text, token fencing_token) RETURNS boolean: the
// caller's live lease ends now, and the lock is free at once.
PG_FUNCTION_INFO_V1(fencing_release);
Datum fencing_release(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  PreventCommandIfReadOnly("fencing_release()");
  Interval *zero = static_cast<Interval *>(palloc0(sizeof(Interval)));
  PG_RETURN_BOOL(MoveLeaseEnd(fcinfo, lock_name, IntervalPGetDatum(zero), "released"));
}

// fencing_acquire_permit(lock_name text, holder text, permits integer, ttl
// interval, wait interval DEFAULT NULL) RETURNS fencing_token: one of the
// semaphore's permits (extension/pg_fencing--1.3--1.4.sql grants it).
PG_FUNCTION_INFO_V1(fencing_acquire_permit);
Datum fencing_acquire_permit(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLeaseArguments(fcinfo, 1, 3);
  if (PG_ARGISNULL(2) || PG_GETARG_INT32(2) < 1 || PG_GETARG_INT32(2) > kMaxPermits) {
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("permits must be between 1 and %d, got %s (semaphore \"%s\")", kMaxPermits,
                    PG_ARGISNULL(2) ? "NULL" : psprintf("%d", PG_GETARG_INT32(2)), lock_name)));
  }
  PreventCommandIfReadOnly("fencing_acquire_permit()");
  return AcquireSlot(fcinfo, LockKind::kSemaphore, PG_GETARG_INT32(2), 3, 4);
}

// fencing_acquire_shared(lock_name text, holder text, ttl interval, wait
// interval DEFAULT NULL) RETURNS fencing_token: the lock, shared.
PG_FUNCTION_INFO_V1(fencing_acquire_shared);
Datum fencing_acquire_shared(PG_FUNCTION_ARGS) {
  (void)CheckLeaseArguments(fcinfo, 1, 2);
  PreventCommandIfReadOnly("fencing_acquire_shared()");
  return AcquireSlot(fcinfo, LockKind::kShared, 0, 2, 3);
}

// fencing_try_permit(lock_id bigint, holder text, permits integer, ttl
// interval) RETURNS fencing_token: one attempt at a permit (permits given)
// or a shared lease (NULL), for the SQL that checked the acquire
// (fencing_acquire_permits_as) and its waiting loop
// (fencing_wait_to_acquire); NULL when none can be granted now.  It makes a
// lock still exclusive what is asked for.  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_try_permit);
Datum fencing_try_permit(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  // Only from inside those functions, which run as the tables' owner: a
  // role granted EXECUTE by mistake still cannot skip their checks.
  if (GetUserId() != ExtensionTableOwner(schema) && !superuser()) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("fencing_try_permit() is internal to fencing_acquire_permit() and "
                           "fencing_acquire_shared()"),
                    errhint("Call fencing_acquire_permit() or fencing_acquire_shared().")));
  }
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(3)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("fencing_try_permit() needs a lock_id, a holder and a ttl")));
  }
  const int64 lock_id = PG_GETARG_INT64(0);
  const bool semaphore = !PG_ARGISNULL(2);
  if (semaphore && (PG_GETARG_INT32(2) < 1 || PG_GETARG_INT32(2) > kMaxPermits)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("permits must be between 1 and %d, got %d (lock %lld)", kMaxPermits,
                           PG_GETARG_INT32(2), static_cast<long long>(lock_id))));
  }
  const Tables t = OpenTables(schema);
  Relation by_id = index_open(t.ids->lock_by_id, AccessShareLock);
  Snapshot snapshot = TakeSnapshot();
  HeapTuple lock = FetchRowByNumber(t.lock, by_id, lock_id, snapshot);
  UnregisterSnapshot(snapshot);
  index_close(by_id, NoLock);
  SlotOutcome outcome = SlotOutcome::kBusy;
  int64 token = 0;
  if (lock != nullptr) {
    bool is_null = false;
    const Datum lock_name =
        PointerGetDatum(PG_DETOAST_DATUM(RowColumn(t.lock, lock, t.ids->lock_name, &is_null)));
    const SlotRequest request =
        SlotRequestOf(schema, lock_name, PointerGetDatum(PG_GETARG_TEXT_PP(1)), PG_GETARG_DATUM(3),
                      semaphore ? LockKind::kSemaphore : LockKind::kShared,
                      semaphore ? PG_GETARG_INT32(2) : 0);
    outcome = AttemptSlot(t, request, lock_id, LockHasLine(t, lock), true, &token);
  }
  CloseTables(t);
  if (outcome != SlotOutcome::kGranted && outcome != SlotOutcome::kExtended) PG_RETURN_NULL();
  PG_RETURN_INT64(token);
}

}  // extern "C"
