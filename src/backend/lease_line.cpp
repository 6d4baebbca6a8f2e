// See lease_line.hpp.
//
// A lock's line is its rows of fencing_line in place order, one kind at a
// time (the index fencing_line_order on (lock_id, kind, place)).  A place
// counts while it waits: no token yet, its wait not run out, its session
// live, its session's role allowed to use the lock.  Places that wait no
// more are stepped over; they go with their session's row (ON DELETE
// CASCADE, when the session is closed or swept), when their candidate
// polls or leaves, or when a poll of the same lock finds them in its way.
// Whose turn it is:
//   exclusive  the first exclusive place, before any shared place (as
//              waiting writers go before readers in the waiting room)
//   shared     every shared place, once no exclusive place waits and the
//              exclusive lease has ended: shared leases exclude nobody
//   permit     the permit places in order, as many as permits are free
//
// Every call reads at READ COMMITTED (the line as committed now).
//
//   join    fencing_line_join(session, lock_name, wait, payload, kind,
//           permits): the caller's session checked (55Z05 for anything
//           else) and the lock's use (created as any acquire creates it,
//           or 42501); the place inserted, or the one the session already
//           has; then, if the place is in its turn, the lease taken at once
//   poll    fencing_line_poll(places): each place's state; a place in its
//           turn takes the lease, in the caller's transaction, through the
//           one acquire in a session there is for its kind
//           (AcquireInSession, AcquireSlotInSession)
//   leave   fencing_line_leave(place): the place deleted, and a lease it
//           had taken given back as fencing_release() gives one back
//
// Nobody grants a lease to someone else: the candidate takes it in its own
// transaction, with its own permissions, when it joins or polls.  What the
// line adds to every grant of a lock that has had a line (fencing_lock.
// has_line) is one check, in the engine's attempt, in the lock's waiting
// room: an exclusive lease goes to the first exclusive place's session or
// to nobody (LineTurnOf), a shared lease to nobody while an exclusive
// place waits (LineHoldsOffShared), a permit only to a taker with fewer
// permit places ahead of it than permits are free (LineHoldsOffPermit).
// The waiters of the lock's waiting room (the waiting functions,
// fencing_await) hold the room and are served first (WaitsInRoom), until
// every wait is a place in line.
//
// The changes that may free a lock (a release, a revoke, a session's close,
// an expiry the worker marks, a place's leave, a permit place's grant)
// call TellLineAtCommit: just before the commit, NOTIFY fencing_line with
// the numbers of the places that may be in their turn, which tells a
// listener nothing but numbers.
#include "lease_line.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_collation.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "extension_objects.hpp"
#include "kept_statements.hpp"
#include "lease_arguments.hpp"
#include "lease_engine.hpp"
#include "locks.hpp"
#include "pg_compat.hpp"  // IndexBeginScan, LockHeldByMe, ProcOfVirtualTransaction
#include "post_commit.hpp"

namespace pg_fencing {
namespace {

constexpr const char *kChannel = "fencing_line";

// The kinds of place (fencing_line.kind).
constexpr const char *kExclusive = "exclusive";
constexpr const char *kShared = "shared";
constexpr const char *kPermit = "permit";

// A place kept by a waiting CALL fencing_await (fencing_line.by_call) is
// kept while the CALL holds its tag (PlaceTag), a session lock: the CALL
// gives it up on every way out, and the lock manager on its backend's exit.
bool PlaceKept(int64 place) {
  LOCKTAG tag = PlaceTag(place);
  if (compat::LockHeldByMe(tag, ExclusiveLock)) return true;
  // GetLockConflicts leaves out this backend, which was looked at above.
  const VirtualTransactionId *holders = GetLockConflicts(&tag, ExclusiveLock, nullptr);
  return VirtualTransactionIdIsValid(*holders);
}

// Sets the latch of the CALL waiting on place, if one does.
void WakePlaceHolder(int64 place) {
  LOCKTAG tag = PlaceTag(place);
  const VirtualTransactionId *holders = GetLockConflicts(&tag, ExclusiveLock, nullptr);
  for (; VirtualTransactionIdIsValid(*holders); ++holders) {
    PGPROC *proc = compat::ProcOfVirtualTransaction(*holders);
    if (proc != nullptr) SetLatch(&proc->procLatch);
  }
}

// Walks the places of lock_id of one kind that wait, as committed now, in
// place order (the index fencing_line_order on (lock_id, kind, place)),
// calling on_live(place, session) for each that is live, until it answers
// false.  Returns how many places it stepped over on the way: places that
// wait no more (their session or wait ended, or their role may no longer
// use the lock).
template <typename OnLive>
int WalkLine(const LeaseTableIds &ids, int64 lock_id, const char *kind, OnLive on_live) {
  int stepped = 0;
  if (!OidIsValid(ids.line)) return stepped;
  Relation line = table_open(ids.line, AccessShareLock);
  Relation order = index_open(ids.line_order, AccessShareLock);
  Relation sessions = nullptr;
  Relation session_key = nullptr;
  Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
  ScanKeyData keys[2];
  ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid, F_INT8EQ,
                         Int64GetDatum(lock_id));
  ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid, C_COLLATION_OID,
                         F_TEXTEQ, CStringGetTextDatum(kind));
  IndexScanDesc scan = compat::IndexBeginScan(line, order, snapshot, 2);
  index_rescan(scan, keys, 2, nullptr, 0);
  TupleTableSlot *slot = table_slot_create(line, nullptr);
  const TimestampTz now = GetCurrentTimestamp();
  // The lock's owner and users, read at the first place that is live.
  bool lock_read = false;
  Oid owner = InvalidOid;
  Datum users = Datum(0);
  bool users_null = true;
  bool go_on = true;
  while (go_on && index_getnext_slot(scan, ForwardScanDirection, slot)) {
    bool is_null = false;
    (void)slot_getattr(slot, ids.line_token, &is_null);
    if (!is_null) continue;  // has taken its lease: waits no more
    const Datum until = slot_getattr(slot, ids.line_wait_until, &is_null);
    if (!is_null && DatumGetTimestampTz(until) <= now) {
      ++stepped;
      continue;
    }
    const int64 place = DatumGetInt64(slot_getattr(slot, ids.line_place, &is_null));
    if (DatumGetBool(slot_getattr(slot, ids.line_by_call, &is_null)) && !PlaceKept(place)) {
      ++stepped;  // its CALL is over
      continue;
    }
    const int64 in_session = DatumGetInt64(slot_getattr(slot, ids.line_session_id, &is_null));
    if (sessions == nullptr) {
      sessions = table_open(ids.session, AccessShareLock);
      session_key = index_open(ids.session_key, AccessShareLock);
    }
    HeapTuple row = FetchRowByNumber(sessions, session_key, in_session, snapshot);
    if (row == nullptr ||
        DatumGetTimestampTz(RowColumn(sessions, row, ids.session_expires_at, &is_null)) <= now) {
      ++stepped;
      continue;
    }
    if (!lock_read) {
      Relation locks = table_open(ids.lock, AccessShareLock);
      Relation by_id = index_open(ids.lock_by_id, AccessShareLock);
      HeapTuple lock = FetchRowByNumber(locks, by_id, lock_id, snapshot);
      if (lock != nullptr) {
        owner = DatumGetObjectId(RowColumn(locks, lock, ids.lock_owner, &is_null));
        users = RowColumn(locks, lock, ids.lock_users, &users_null);
      }
      index_close(by_id, NoLock);
      table_close(locks, NoLock);
      lock_read = true;
    }
    // A role that may no longer use the lock (its use revoked, the lock
    // given to another owner) holds no place in its line.
    const Oid role = DatumGetObjectId(RowColumn(sessions, row, ids.session_holder_role, &is_null));
    if (!OidIsValid(owner) || !RoleMayUseLock(role, owner, users, users_null)) {
      ++stepped;
      continue;
    }
    go_on = on_live(place, in_session);
  }
  index_endscan(scan);
  ExecDropSingleTupleTableSlot(slot);
  UnregisterSnapshot(snapshot);
  if (sessions != nullptr) {
    index_close(session_key, NoLock);
    table_close(sessions, NoLock);
  }
  index_close(order, NoLock);
  table_close(line, NoLock);
  return stepped;
}

// The first place that waits for an exclusive lease of lock_id as
// committed now.
struct FirstPlace {
  int64 place;    // 0: no place waits
  int64 session;  // its session
  int stepped;    // places before it that wait no more
};

FirstPlace FirstWaitingPlace(const LeaseTableIds &ids, int64 lock_id) {
  FirstPlace first = {0, 0, 0};
  first.stepped = WalkLine(ids, lock_id, kExclusive, [&](int64 place, int64 session) {
    first.place = place;
    first.session = session;
    return false;
  });
  return first;
}

// How many live places wait for a permit of lock_id before `before` (0:
// all of them), counted up to `most`.
int PermitPlacesAhead(const LeaseTableIds &ids, int64 lock_id, int64 before, int most) {
  int ahead = 0;
  if (most <= 0) return ahead;
  (void)WalkLine(ids, lock_id, kPermit, [&](int64 place, int64) {
    if (before != 0 && place >= before) return false;
    return ++ahead < most;
  });
  return ahead;
}

// The place this backend is taking a permit or a shared lease for, inside
// the engine's attempt (TakeInTurn): a grant then counts the places ahead
// of it, not itself.  Cleared when the attempt returns, and at the end of
// the (sub)transaction that an error leaves it set in.
struct Served {
  int64 lock_id;
  int64 place;  // 0: none
};
Served served = {0, 0};

// Whether the transaction reads what has committed now, as the line must:
// 25000 at REPEATABLE READ or SERIALIZABLE, whose snapshot would show a
// place's state, and a lease, as they were when it was taken.
void RequireReadCommitted(const char *what) {
  if (!IsolationUsesXactSnapshot()) return;
  ereport(ERROR, (errcode(ERRCODE_INVALID_TRANSACTION_STATE),
                  errmsg("%s needs READ COMMITTED, not %s", what,
                         IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
                  errhint("Call it in its own transaction at READ COMMITTED (the default): the "
                          "line is judged as committed now.")));
}

// The line's statements run as the tables' owner with search_path pinned
// to pg_catalog (as a SECURITY DEFINER function with SET search_path
// would), so that no object of the caller's can stand in for one they
// name; the extension's own are qualified with its schema.
struct AsOwner {
  Oid saved_user;
  int saved_context;
  int guc_level;
};

AsOwner BecomeOwner(Oid schema) {
  AsOwner as = {};
  GetUserIdAndSecContext(&as.saved_user, &as.saved_context);
  SetUserIdAndSecContext(ExtensionTableOwner(schema),
                         as.saved_context | SECURITY_LOCAL_USERID_CHANGE);
  as.guc_level = NewGUCNestLevel();
  (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                          GUC_ACTION_SAVE, true, 0, false);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  return as;
}

void BecomeCaller(const AsOwner &as) {
  SPI_finish();
  AtEOXact_GUC(true, as.guc_level);
  SetUserIdAndSecContext(as.saved_user, as.saved_context);
}

// Runs one statement of the line (inside BecomeOwner); rc is what it must
// answer.
void Run(const char *query, int count, Oid *types, Datum *values, const char *nulls, int rc) {
  const int got = ExecuteKept(query, count, types, values, nulls, false, 0);
  if (got != rc) {
    elog(ERROR, "pg_fencing: a statement on fencing_line failed: %s", SPI_result_code_string(got));
  }
}

// The place as it stands, read inside BecomeOwner.
struct Place {
  bool found;         // exists, and is a session the caller may act in
  int64 place;
  int64 lock_id;
  int64 session;
  Datum lock_name;    // text, in the caller's memory
  bool payload_null;
  Datum payload;      // jsonb, in the caller's memory
  bool has_token;
  int64 token;
  bool ran_out;       // its wait is over
  bool session_live;
  bool may_use;       // its session's role may still use the lock
  bool lease_live;    // has_token, and that lease lives in the session
  const char *kind;   // kExclusive, kShared or kPermit
  int permits;        // for kPermit: the semaphore's number of permits
  bool exclusive_held;  // the lock's exclusive lease lives, now
  bool by_call;       // kept by a waiting CALL fencing_await
};

// Reads the places of `places` (an int8[] datum), in its order.  A place
// of a session the caller may not act in reads as none: another role's
// place answers as one that does not exist.
Place *ReadPlaces(const char *s, Oid caller, Datum places, int *count) {
  Oid types[] = {INT8ARRAYOID};
  Datum values[] = {places};
  Run(psprintf("SELECT q.place, l.place IS NOT NULL, l.lock_id, l.session_id, k.lock_name, "
               "l.payload, l.token, l.wait_until <= clock_timestamp(), x.holder_role, "
               "x.expires_at > clock_timestamp(), "
               "CASE WHEN l.kind = 'exclusive' THEN e.token OPERATOR(%s.=) l.token "
               "AND e.ended IS NULL AND e.session_id = l.session_id "
               "ELSE EXISTS (SELECT FROM %s.fencing_permit p WHERE p.token OPERATOR(%s.=) l.token "
               "AND p.ended IS NULL AND p.session_id = l.session_id) END, "
               "%s.fencing_role_may_use(x.holder_role::oid, k.owner, k.users), "
               "l.kind, l.permits, l.by_call, "
               "%s.fencing_lease_end(e.expires_at, e.ended, ex.expires_at) > clock_timestamp() "
               "FROM unnest($1) WITH ORDINALITY AS q(place, n) "
               "LEFT JOIN %s.fencing_line l ON l.place = q.place "
               "LEFT JOIN %s.fencing_lock k ON k.lock_id = l.lock_id "
               "LEFT JOIN %s.fencing_session x ON x.session_id = l.session_id "
               "LEFT JOIN %s.fencing_lease e ON e.lock_name = k.lock_name "
               "LEFT JOIN %s.fencing_session ex ON ex.session_id = e.session_id "
               "ORDER BY q.n",
               s, s, s, s, s, s, s, s, s, s),
      1, types, values, nullptr, SPI_OK_SELECT);
  *count = static_cast<int>(SPI_processed);
  Place *read = static_cast<Place *>(SPI_palloc(sizeof(Place) * Max(*count, 1)));
  for (int i = 0; i < *count; ++i) {
    HeapTuple row = SPI_tuptable->vals[i];
    TupleDesc desc = SPI_tuptable->tupdesc;
    bool is_null = false;
    Place &p = read[i];
    p = {};
    p.place = DatumGetInt64(SPI_getbinval(row, desc, 1, &is_null));
    if (is_null) continue;  // a NULL in the array: no place
    p.found = DatumGetBool(SPI_getbinval(row, desc, 2, &is_null));
    if (!p.found) continue;
    const Oid role = DatumGetObjectId(SPI_getbinval(row, desc, 9, &is_null));
    if (is_null || !has_privs_of_role(caller, role)) {
      p.found = false;
      continue;
    }
    p.lock_id = DatumGetInt64(SPI_getbinval(row, desc, 3, &is_null));
    p.session = DatumGetInt64(SPI_getbinval(row, desc, 4, &is_null));
    p.lock_name = SPI_datumTransfer(SPI_getbinval(row, desc, 5, &is_null), false, -1);
    const Datum payload = SPI_getbinval(row, desc, 6, &p.payload_null);
    p.payload = p.payload_null ? Datum(0) : SPI_datumTransfer(payload, false, -1);
    const Datum token = SPI_getbinval(row, desc, 7, &is_null);
    p.has_token = !is_null;
    p.token = p.has_token ? DatumGetInt64(token) : 0;
    const Datum ran_out = SPI_getbinval(row, desc, 8, &is_null);
    p.ran_out = !is_null && DatumGetBool(ran_out);
    const Datum live = SPI_getbinval(row, desc, 10, &is_null);
    p.session_live = !is_null && DatumGetBool(live);
    const Datum lease_live = SPI_getbinval(row, desc, 11, &is_null);
    p.lease_live = p.has_token && !is_null && DatumGetBool(lease_live);
    const Datum may_use = SPI_getbinval(row, desc, 12, &is_null);
    p.may_use = !is_null && DatumGetBool(may_use);
    const char *kind = TextDatumGetCString(SPI_getbinval(row, desc, 13, &is_null));
    p.kind = strcmp(kind, kShared) == 0 ? kShared : strcmp(kind, kPermit) == 0 ? kPermit : kExclusive;
    const Datum permits = SPI_getbinval(row, desc, 14, &is_null);
    p.permits = is_null ? 0 : DatumGetInt32(permits);
    const Datum by_call = SPI_getbinval(row, desc, 15, &is_null);
    p.by_call = !is_null && DatumGetBool(by_call);
    const Datum held = SPI_getbinval(row, desc, 16, &is_null);
    p.exclusive_held = !is_null && DatumGetBool(held);
  }
  return read;
}

void DeletePlace(const char *s, int64 place) {
  Oid types[] = {INT8OID};
  Datum values[] = {Int64GetDatum(place)};
  Run(psprintf("DELETE FROM %s.fencing_line WHERE place = $1", s), 1, types, values, nullptr,
      SPI_OK_DELETE);
}

// The place took the lease under token (the engine's grant records it; a
// poll whose attempt extended the session's own lease, too).
void RecordToken(const char *s, Oid token_type, int64 place, int64 token) {
  Oid types[] = {INT8OID, token_type};
  Datum values[] = {Int64GetDatum(place), Int64GetDatum(token)};
  Run(psprintf("UPDATE %s.fencing_line SET token = $2 WHERE place = $1 "
               "AND (token IS NULL OR NOT token OPERATOR(%s.=) $2)",
               s, s),
      2, types, values, nullptr, SPI_OK_UPDATE);
}

// Deletes, a batch at a time, the places of lock_id before `before` (0:
// all) that wait no more, so that nobody steps over them again; places a
// transaction in flight holds are left for the next time.  A place ends
// when its session or its wait does: what is deleted is already over.
void DeleteOverPlaces(const char *s, int64 lock_id, int64 before) {
  Oid types[] = {INT8OID, INT8OID};
  Datum values[] = {Int64GetDatum(lock_id), Int64GetDatum(before)};
  Run(psprintf("DELETE FROM %s.fencing_line l WHERE l.place IN ("
               "SELECT d.place FROM %s.fencing_line d "
               "LEFT JOIN %s.fencing_session x ON x.session_id = d.session_id "
               "JOIN %s.fencing_lock k ON k.lock_id = d.lock_id "
               "WHERE d.lock_id = $1 AND ($2 = 0 OR d.place < $2) AND d.token IS NULL "
               "AND (d.wait_until <= clock_timestamp() OR x.session_id IS NULL "
               "OR x.expires_at <= clock_timestamp() "
               "OR NOT %s.fencing_role_may_use(x.holder_role::oid, k.owner, k.users)) "
               "ORDER BY d.place LIMIT 100 FOR UPDATE OF d SKIP LOCKED)",
               s, s, s, s, s),
      2, types, values, nullptr, SPI_OK_DELETE);
}

// What a place's candidate is told.
enum class PlaceState { kWaiting, kGranted, kGone };

const char *StateName(PlaceState state) {
  switch (state) {
    case PlaceState::kWaiting:
      return "waiting";
    case PlaceState::kGranted:
      return "granted";
    case PlaceState::kGone:
      return "gone";
  }
  return "gone";
}

// The place's state as read, with the places that are over deleted
// (inside BecomeOwner).  kWaiting for a place that may take its lease now
// if it is in its turn (TakeInTurn, as the caller).
PlaceState Judge(const char *s, const Place &p) {
  if (!p.found || !p.session_live) return PlaceState::kGone;
  if (p.has_token) {
    if (p.lease_live) return PlaceState::kGranted;
    DeletePlace(s, p.place);  // its lease has ended: the place is over
    return PlaceState::kGone;
  }
  if (p.ran_out || !p.may_use || (p.by_call && !PlaceKept(p.place))) {
    DeletePlace(s, p.place);
    return PlaceState::kGone;
  }
  return PlaceState::kWaiting;
}

// The first place of the lock last looked at, over one call's places.
struct FirstOfLock {
  int64 lock_id;  // 0: none looked at yet
  FirstPlace first;
};

// Runs one statement of the line about one place ($1), the extension's
// schema in place of its %s, as the owner: the rows it found or changed.
uint64 RunOnPlace(Oid schema, const char *statement, int64 place, int rc) {
  const char *sql = psprintf(statement, quote_identifier(get_namespace_name(schema)));
  const AsOwner as = BecomeOwner(schema);
  Oid types[] = {INT8OID};
  Datum values[] = {Int64GetDatum(place)};
  Run(sql, 1, types, values, nullptr, rc);
  const uint64 rows = SPI_processed;
  BecomeCaller(as);
  return rows;
}

// Locks the place's row until this transaction ends, if it still waits: a
// leave of it waits for the grant's commit and finds the token, which it
// gives back.  False when it has been left or has taken its lease.
bool HoldPlace(Oid schema, int64 place) {
  return RunOnPlace(schema,
                    "SELECT 1 FROM %s.fencing_line WHERE place = $1 AND token IS NULL FOR UPDATE",
                    place, SPI_OK_SELECT) == 1;
}

// A waiting place whose turn it is takes its lease, as the caller, through
// the one acquire in a session there is for its kind; whether it did
// (p.token).  An exclusive place's turn is when it is the first exclusive
// place in line.  A shared place's, when no exclusive place waits and the
// lock's exclusive lease has ended; a permit place's, when fewer places
// than the semaphore has permits wait for one before it: those are looked
// at here, before the attempt, so that most polls of a long line make
// none, and the attempt judges again, in the lock's waiting room, with
// the free permits counted (LineHoldsOffPermit).
bool TakeInTurn(Oid schema, Oid caller, Place &p, FirstOfLock *cached, bool joining) {
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  if (cached->lock_id != p.lock_id) {
    cached->first = FirstWaitingPlace(ids, p.lock_id);
    cached->lock_id = p.lock_id;
  }
  int64 token = 0;
  if (p.kind == kExclusive) {
    if (cached->first.place != p.place || !HoldPlace(schema, p.place)) return false;
    if (!AcquireInSession(schema, caller, p.session, false, p.lock_name, p.payload_null,
                          p.payload, &token)) {
      return false;
    }
  } else if (!joining) {
    if (cached->first.place != 0) return false;  // exclusive first
    if (p.kind == kShared && p.exclusive_held) return false;
    if (p.kind == kPermit && PermitPlacesAhead(ids, p.lock_id, p.place, p.permits) >= p.permits) {
      return false;
    }
  }
  if (p.kind != kExclusive) {
    if (!HoldPlace(schema, p.place)) return false;
    served = {p.lock_id, p.place};
    const bool taken = AcquireSlotInSession(schema, caller, p.session, p.lock_name,
                                            p.kind == kShared, p.permits, &token);
    served = {0, 0};
    if (!taken) return false;
    // The next permit place may be in its turn too, with a permit left.
    if (p.kind == kPermit) TellLineAtCommit(schema, p.lock_id);
  }
  p.has_token = true;
  p.token = token;
  cached->lock_id = 0;  // the line has moved on
  return true;
}

// Settles places as read: those first in line take their leases
// (states[i] is what the candidate is told), and the places in the way of
// the callers' own, which wait no more, are deleted.
void Settle(Oid schema, Oid caller, Place *places, PlaceState *states, int count, bool joining) {
  FirstOfLock cached = {0, {0, 0, 0}};
  bool taken = false;
  int64 swept_lock = 0;
  for (int i = 0; i < count; ++i) {
    if (states[i] != PlaceState::kWaiting) continue;
    if (TakeInTurn(schema, caller, places[i], &cached, joining)) {
      states[i] = PlaceState::kGranted;
      taken = true;
    } else if (cached.lock_id == places[i].lock_id && cached.first.stepped > 0 &&
               swept_lock != places[i].lock_id) {
      swept_lock = places[i].lock_id;  // once per lock and call
      const AsOwner as = BecomeOwner(schema);
      DeleteOverPlaces(quote_identifier(get_namespace_name(schema)), places[i].lock_id,
                       cached.first.place);
      BecomeCaller(as);
    }
  }
  if (!taken) return;
  const AsOwner as = BecomeOwner(schema);
  const char *s = quote_identifier(get_namespace_name(schema));
  for (int i = 0; i < count; ++i) {
    if (states[i] == PlaceState::kGranted && places[i].has_token && !places[i].lease_live) {
      RecordToken(s, TokenTypeOid(schema), places[i].place, places[i].token);
    }
  }
  BecomeCaller(as);
}

// The kind of place fencing_line_join() was asked for (its arguments 3, 4
// and 5: payload, kind, permits), checked as fencing_session_acquire()
// checks them: 22023 for anything else.
const char *CheckPlaceKind(FunctionCallInfo fcinfo, const char *lock_name) {
  const char *asked = PG_ARGISNULL(4) ? "NULL" : TextDatumGetCString(PG_GETARG_DATUM(4));
  const char *kind = strcmp(asked, kExclusive) == 0 ? kExclusive
                     : strcmp(asked, kShared) == 0  ? kShared
                     : strcmp(asked, kPermit) == 0  ? kPermit
                                                    : nullptr;
  if (kind == nullptr) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("kind must be 'exclusive', 'shared' or 'permit', got %s (lock \"%s\")",
                           PG_ARGISNULL(4) ? "NULL" : quote_literal_cstr(asked), lock_name)));
  }
  if (kind == kPermit) {
    const int permits = PG_ARGISNULL(5) ? 0 : PG_GETARG_INT32(5);
    if (permits < 1 || permits > 1000) {
      ereport(ERROR,
              (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
               errmsg("permits must be between 1 and 1000, got %s (semaphore \"%s\")",
                      PG_ARGISNULL(5) ? "NULL" : psprintf("%d", permits), lock_name),
               errhint("kind => 'permit' takes permits => N, the semaphore's number of permits.")));
    }
  } else if (!PG_ARGISNULL(5)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("permits are for kind => 'permit', not '%s' (lock \"%s\")", kind,
                           lock_name)));
  }
  if (kind != kExclusive && !PG_ARGISNULL(3)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("a payload is for an exclusive lease, not kind '%s' (lock \"%s\")",
                           kind, lock_name)));
  }
  return kind;
}

// "an exclusive lease", "a shared lease" or "one of N permits", for messages.
const char *PlaceKindText(const char *kind, int permits) {
  if (kind == kExclusive) return "an exclusive lease";
  if (kind == kShared) return "a shared lease";
  return psprintf("one of %d permits", permits);
}

// The line's functions exist from 1.10 on, with their table.
void RequireLine(Oid schema) {
  if (!OidIsValid(LeaseTablesOf(schema).line)) {
    elog(ERROR, "pg_fencing: no fencing_line table (before 1.10)");
  }
}

// The locks whose lines are told at commit (TellLineAtCommit): a few per
// transaction at most; beyond kMostTold, the candidates learn by polling.
constexpr int kMostTold = 64;
struct ToTell {
  Oid schema;
  int64 lock_id;
};
ToTell to_tell[kMostTold];
int to_tell_count = 0;

// The places of a lock told at once when no exclusive place waits: the
// first shared and permit places, each of which may be in its turn.
constexpr int kMostToldPlaces = 16;

// The places told at this commit, whose waiting CALLs (if any) are woken
// once it is done; beyond kMostWoken, they see it at their next recheck.
constexpr int kMostWoken = 64;
int64 to_wake[kMostWoken];
int to_wake_count = 0;

void TellPlace(int64 place) {
  Async_Notify(kChannel, psprintf("%lld", static_cast<long long>(place)));
  if (to_wake_count < kMostWoken) to_wake[to_wake_count++] = place;
}

// Just before the commit (before PostgreSQL queues the transaction's
// NOTIFYs): the places of each lock that may take their lease now, as
// committed now, told -- the first exclusive place, or, when none waits,
// the first shared and permit places.
void TellLines() {
  for (int i = 0; i < to_tell_count; ++i) {
    // The extension dropped in the same transaction: nobody to tell.
    if (!OidIsValid(get_relname_relid("fencing_line", to_tell[i].schema))) continue;
    const LeaseTableIds &ids = LeaseTablesOf(to_tell[i].schema);
    const int64 lock_id = to_tell[i].lock_id;
    const FirstPlace first = FirstWaitingPlace(ids, lock_id);
    if (first.place != 0) {
      TellPlace(first.place);
      continue;
    }
    int told = 0;
    for (const char *kind : {kShared, kPermit}) {
      (void)WalkLine(ids, lock_id, kind, [&](int64 place, int64) {
        TellPlace(place);
        return ++told < kMostToldPlaces;
      });
    }
  }
}

void OnTransactionEvent(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      if (to_tell_count > 0) TellLines();
      to_tell_count = 0;
      break;
    case XACT_EVENT_COMMIT:
      // After the commit record, so that a woken CALL sees what it tells.
      if (to_wake_count > 0) {
        IgnoringErrorsAfterCommit([] {
          for (int i = 0; i < to_wake_count; ++i) WakePlaceHolder(to_wake[i]);
        });
      }
      to_tell_count = 0;
      break;
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PRE_PREPARE:
    case XACT_EVENT_PREPARE:
      to_tell_count = 0;
      break;
    default:
      break;
  }
  if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PRE_PREPARE) to_wake_count = 0;
  served = {0, 0};
}

// An error inside a place's attempt, caught by a subtransaction: the
// attempt is over.
void OnSubTransactionEvent(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
  if (event == SUBXACT_EVENT_ABORT_SUB) served = {0, 0};
}

}  // namespace

LineTurn LineTurnOf(const LeaseTableIds &ids, int64 lock_id, int64 session, int64 *place) {
  const FirstPlace first = FirstWaitingPlace(ids, lock_id);
  *place = first.place;
  if (first.place == 0) return LineTurn::kFree;
  return session != 0 && first.session == session ? LineTurn::kYours : LineTurn::kOthers;
}

void RecordLineGrant(Oid schema, int64 place, int64 token) {
  const AsOwner as = BecomeOwner(schema);
  RecordToken(quote_identifier(get_namespace_name(schema)), TokenTypeOid(schema), place, token);
  BecomeCaller(as);
}

void TellLineAtCommit(Oid schema, int64 lock_id) {
  // Looked up first: before 1.3 LeaseTablesOf() cannot serve the schema.
  if (!OidIsValid(get_relname_relid("fencing_line", schema))) return;
  for (int i = 0; i < to_tell_count; ++i) {
    if (to_tell[i].schema == schema && to_tell[i].lock_id == lock_id) return;
  }
  if (to_tell_count < kMostTold) to_tell[to_tell_count++] = {schema, lock_id};
}

void RegisterLineCallbacks() {
  RegisterXactCallback(OnTransactionEvent, nullptr);
  RegisterSubXactCallback(OnSubTransactionEvent, nullptr);
}

LOCKTAG PlaceTag(int64 place) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(place) >> 32),
                       static_cast<uint32>(place), kPlaceField);
  return tag;
}

bool SessionHasPlace(Oid schema, int64 session, Datum lock_name) {
  if (!OidIsValid(get_relname_relid("fencing_line", schema))) return true;
  const AsOwner as = BecomeOwner(schema);
  Oid types[] = {INT8OID, TEXTOID};
  Datum values[] = {Int64GetDatum(session), lock_name};
  const char *s = quote_identifier(get_namespace_name(schema));
  Run(psprintf("SELECT 1 FROM %s.fencing_line l JOIN %s.fencing_lock k ON k.lock_id = l.lock_id "
               "WHERE l.session_id = $1 AND k.lock_name = $2",
               s, s),
      2, types, values, nullptr, SPI_OK_SELECT);
  const bool has = SPI_processed > 0;
  BecomeCaller(as);
  return has;
}

void MarkPlaceKeptByCall(Oid schema, int64 place) {
  (void)RunOnPlace(schema, "UPDATE %s.fencing_line SET by_call = true WHERE place = $1", place,
                   SPI_OK_UPDATE);
}

bool LineHoldsOffShared(const LeaseTableIds &ids, int64 lock_id) {
  return FirstWaitingPlace(ids, lock_id).place != 0;
}

bool LineHoldsOffPermit(const LeaseTableIds &ids, int64 lock_id, int free_count) {
  const int64 before = served.lock_id == lock_id ? served.place : 0;
  return PermitPlacesAhead(ids, lock_id, before, free_count) >= free_count;
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_line_join(session bigint, lock_name text, wait interval DEFAULT
// NULL, payload jsonb DEFAULT NULL, OUT place bigint, OUT token
// fencing_token).
PG_FUNCTION_INFO_V1(fencing_line_join);
Datum fencing_line_join(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 1);
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("fencing_line_join() needs a session, got NULL (lock \"%s\")",
                           lock_name),
                    errhint("Open one with fencing_session_open(holder, ttl).")));
  }
  if (!PG_ARGISNULL(2)) CheckWait(PG_GETARG_DATUM(2), lock_name);
  PreventCommandIfReadOnly("fencing_line_join()");
  RequireReadCommitted("fencing_line_join()");
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  const int64 session = PG_GETARG_INT64(0);
  RequireLine(schema);
  // The caller's live session, or 55Z05 as for any acquire in it.
  RefuseUnlessSessionOfCaller(schema, caller, session);
  int64 lock_id = 0;
  LockTraits traits;
  if (!LockUsableBy(schema, lock_name, caller, &lock_id, &traits)) {
    lock_id = AuthorizeLock(schema, lock_name, caller, true, InvalidOid);
    traits = LockTraitsOf(schema, lock_name);
  }
  const char *kind = CheckPlaceKind(fcinfo, lock_name);
  if (kind == kExclusive && traits.kind == LockKind::kSemaphore) {
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("fencing lock \"%s\" is a semaphore, not an exclusive lock", lock_name),
                    errhint("Wait for one of its permits: kind => 'permit', permits => N.")));
  }

  // In the call's memory: what is palloc'd inside BecomeOwner goes with it.
  const char *s = quote_identifier(get_namespace_name(schema));
  const char *sequence = quote_literal_cstr(psprintf("%s.fencing_line_place_seq", s));
  AsOwner as = BecomeOwner(schema);
  Oid types[] = {INT8OID, INT8OID, JSONBOID, INTERVALOID, TEXTOID, INT4OID};
  Datum values[] = {Int64GetDatum(lock_id),
                    Int64GetDatum(session),
                    PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3),
                    PG_ARGISNULL(2) ? Datum(0) : PG_GETARG_DATUM(2),
                    CStringGetTextDatum(kind),
                    PG_ARGISNULL(5) ? Datum(0) : PG_GETARG_DATUM(5)};
  const char nulls[] = {' ', ' ', PG_ARGISNULL(3) ? 'n' : ' ', PG_ARGISNULL(2) ? 'n' : ' ', ' ',
                        PG_ARGISNULL(5) ? 'n' : ' ', '\0'};
  // Joined again (a retry after a lost answer): the place it has, unless
  // that one is over, when it joins anew at the back.
  Place p = {};
  for (int tries = 0; tries < 2; ++tries) {
    Run(psprintf("INSERT INTO %s.fencing_line "
                 "(place, lock_id, session_id, payload, joined_at, wait_until, kind, permits) "
                 "VALUES (nextval(%s), $1, $2, $3, clock_timestamp(), NULL, $5, $6) "
                 "ON CONFLICT ON CONSTRAINT fencing_line_once DO NOTHING",
                 s, sequence),
        6, types, values, nulls, SPI_OK_INSERT);
    // The lock has a line from now on: its grants look at it.
    Run(psprintf("UPDATE %s.fencing_lock SET has_line = true WHERE lock_id = $1 AND NOT has_line",
                 s),
        1, types, values, nulls, SPI_OK_UPDATE);
    Run(psprintf("SELECT pg_catalog.array_agg(place) FROM %s.fencing_line "
                 "WHERE lock_id = $1 AND session_id = $2",
                 s),
        2, types, values, nulls, SPI_OK_SELECT);
    bool is_null = false;
    const Datum place_array =
        SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null),
                          false, -1);
    if (is_null) elog(ERROR, "pg_fencing: the place just taken in line is not there");
    int count = 0;
    p = ReadPlaces(s, caller, place_array, &count)[0];
    const bool over = p.found && p.has_token && !p.lease_live;
    if (!over) break;
    DeletePlace(s, p.place);
  }
  // Joined again for something else: the place it has is not that.
  if (p.found && (p.kind != kind || p.permits != (PG_ARGISNULL(5) ? 0 : PG_GETARG_INT32(5)))) {
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("fencing session %lld already has place %lld in the line of lock \"%s\", "
                    "for %s",
                    static_cast<long long>(session), static_cast<long long>(p.place), lock_name,
                    PlaceKindText(p.kind, p.permits)),
             errhint("Leave that place first (fencing_line_leave(%lld)), or join as it did.",
                     static_cast<long long>(p.place))));
  }
  PlaceState state = Judge(s, p);
  BecomeCaller(as);
  // The place's attempt, its wait not yet counted (a new place has no end
  // yet, so that a wait of 0 makes its one attempt here); then the end of
  // its wait, from when it joined, and a place whose wait is over leaves.
  Settle(schema, caller, &p, &state, 1, true);
  if (state == PlaceState::kWaiting && !PG_ARGISNULL(2)) {
    as = BecomeOwner(schema);
    Oid wait_types[] = {INT8OID, INTERVALOID};
    Datum wait_values[] = {Int64GetDatum(p.place), PG_GETARG_DATUM(2)};
    Run(psprintf("UPDATE %s.fencing_line SET wait_until = joined_at + $2 "
                 "WHERE place = $1 AND wait_until IS NULL AND token IS NULL "
                 "RETURNING wait_until <= clock_timestamp()",
                 s),
        2, wait_types, wait_values, nullptr, SPI_OK_UPDATE_RETURNING);
    bool is_null = true;
    const bool over = SPI_processed == 1 && DatumGetBool(SPI_getbinval(
                                                SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
                                                &is_null));
    if (over) DeletePlace(s, p.place);
    BecomeCaller(as);
  }

  TupleDesc desc;
  if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
    elog(ERROR, "pg_fencing: fencing_line_join() must return a record");
  }
  desc = BlessTupleDesc(desc);
  Datum out[] = {Int64GetDatum(p.place), Int64GetDatum(p.token)};
  bool out_nulls[] = {false, state != PlaceState::kGranted};
  PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, out, out_nulls)));
}

// fencing_line_poll(places bigint[]) RETURNS TABLE (place bigint,
// lock_name text, state text, token fencing_token): one row per element,
// in order.
PG_FUNCTION_INFO_V1(fencing_line_poll);
Datum fencing_line_poll(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  RequireLine(schema);
  PreventCommandIfReadOnly("fencing_line_poll()");
  RequireReadCommitted("fencing_line_poll()");
  InitMaterializedSRF(fcinfo, 0);
  ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
  const AsOwner as = BecomeOwner(schema);
  const char *s = quote_identifier(get_namespace_name(schema));
  int count = 0;
  Place *places = ReadPlaces(s, caller, PG_GETARG_DATUM(0), &count);
  // In the call's memory: SPI_finish frees what is palloc'd inside SPI.
  PlaceState *states = static_cast<PlaceState *>(SPI_palloc(sizeof(PlaceState) * Max(count, 1)));
  for (int i = 0; i < count; ++i) states[i] = Judge(s, places[i]);
  BecomeCaller(as);
  Settle(schema, caller, places, states, count, false);
  for (int i = 0; i < count; ++i) {
    const Place &p = places[i];
    const bool shown = p.found && states[i] != PlaceState::kGone;
    Datum out[] = {Int64GetDatum(p.place), shown ? p.lock_name : Datum(0),
                   CStringGetTextDatum(StateName(states[i])), Int64GetDatum(p.token)};
    bool out_nulls[] = {p.place == 0 && !p.found, !shown, false,
                        states[i] != PlaceState::kGranted};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, out_nulls);
  }
  return Datum(0);
}

// fencing_line_leave(place bigint) RETURNS boolean.
PG_FUNCTION_INFO_V1(fencing_line_leave);
Datum fencing_line_leave(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  const Oid caller = GetUserId();
  RequireLine(schema);
  PreventCommandIfReadOnly("fencing_line_leave()");
  RequireReadCommitted("fencing_line_leave()");
  const AsOwner as = BecomeOwner(schema);
  const char *s = quote_identifier(get_namespace_name(schema));
  Datum one = PG_GETARG_DATUM(0);
  ArrayType *array = construct_array(&one, 1, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE);
  int count = 0;
  const Place p = ReadPlaces(s, caller, PointerGetDatum(array), &count)[0];
  bool left = false;
  bool has_token = false;
  int64 token = 0;
  Datum holder_role = Datum(0);
  if (p.found) {
    // The token as the delete finds it: a poll that took the lease and
    // committed while this call waited for the place's row has set it.
    Oid types[] = {INT8OID};
    Datum values[] = {Int64GetDatum(p.place)};
    Run(psprintf("DELETE FROM %s.fencing_line WHERE place = $1 RETURNING token", s), 1, types,
        values, nullptr, SPI_OK_DELETE_RETURNING);
    left = SPI_processed == 1;
    if (left) {
      bool is_null = false;
      const Datum got = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
      has_token = !is_null;
      token = has_token ? DatumGetInt64(got) : 0;
    }
    // Its lease's login role, read in a new statement (which sees that
    // commit): the release is made for it.
    if (has_token) {
      Oid lease_types[] = {TEXTOID, TokenTypeOid(schema)};
      Datum lease_values[] = {p.lock_name, Int64GetDatum(token)};
      Run(p.kind == kExclusive
              ? psprintf("SELECT e.holder_role FROM %s.fencing_lease e WHERE e.lock_name = $1 "
                         "AND e.token OPERATOR(%s.=) $2 AND e.ended IS NULL",
                         s, s)
              : psprintf("SELECT p.holder_role FROM %s.fencing_permit p WHERE p.lock_name = $1 "
                         "AND p.token OPERATOR(%s.=) $2 AND p.ended IS NULL",
                         s, s),
          2, lease_types, lease_values, nullptr, SPI_OK_SELECT);
      bool is_null = true;
      if (SPI_processed == 1) {
        const Datum role = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
        if (!is_null) holder_role = SPI_datumTransfer(role, false, NAMEDATALEN);
      }
      has_token = !is_null;
    }
  }
  BecomeCaller(as);
  if (!left) PG_RETURN_BOOL(false);
  // A lease the place took and its candidate never used: given back, as
  // fencing_release() gives it back (announced, the next place told).
  if (has_token) (void)GiveBackLease(schema, caller, p.lock_name, token, holder_role);
  // The next place may be first now.
  TellLineAtCommit(schema, p.lock_id);
  PG_RETURN_BOOL(true);
}

}  // extern "C"
