// fencing_grant(): a token from the extension's sequence, made durable
// before it leaves the function.
//
// nextval() writes a WAL record only every 32 values ("log ahead") and does
// not flush it: the record reaches disk with the next commit of a
// transaction that has an xid, or when the WAL writer gets to it.  If the
// transaction that fetched the value rolls back, or commits with
// synchronous_commit = off, and the server crashes first, recovery rewinds
// the sequence and the same value is handed out again.  A token handed out
// twice breaks fencing, so we flush the WAL up to the sequence page's LSN,
// which covers the record that logged the value we return (whichever
// backend wrote it).  When that record is already on disk -- 31 calls out of
// 32 without a checkpoint in between -- XLogFlush returns at once.
//
// The same goes for a failover: with synchronous replication configured, a
// standby promoted after a crash must not hand out a token the old primary
// already gave away.  So, like a commit, a grant waits until that WAL has
// been flushed by the synchronous standbys, and a cancel, statement_timeout
// or terminate during that wait fails the grant instead of handing out an
// unreplicated token.  Unlike a commit, a grant waits whatever the session's
// synchronous_commit says: a commit that skips the wait loses only its own
// data, but a token leaves the database at once and its holder acts on it.
//
// With the library preloaded (1.4, issue 15), tokens come from ranges
// reserved in shared memory: the backend that finds its database's range
// used up takes the next value from the sequence, moves the sequence on
// by kReservation - 1 with setval() (one WAL record), flushes that record,
// and publishes the rest of the range with the record's LSN.  Every token
// of the range is then covered by a durable record: after a crash the
// sequence is past the whole range, and the range itself, in shared
// memory, is gone.  Tokens still strictly increase in grant order (one
// counter per database, under a spinlock); a restart skips what was left of
// a range.  One flush per kReservation grants instead of one per 32 (the
// sequence's own log-ahead): nextval()'s speed, durable.
//
// Anchored to the clock (1.5, issue 23): the sequence goes back with the
// data when a base backup is restored, a standby that was behind is
// promoted or an older dump is restored, and would hand out again the
// tokens granted since.  So every reserved range, and without ranges every
// backend's first grant, starts at least at the clock's microseconds since
// 1970 (src/core/token_clock.hpp has the rule and what it rests on).  An
// anchor moves the sequence with setval(), which would undo a nextval()
// another backend ran in between: ranges are reserved under the refill
// lock, and grants from the sequence hold its token gate shared around
// their nextval() while an anchor holds it exclusively.
#include "grant.hpp"

#include "extension_objects.hpp"
#include "token_clock.hpp"

extern "C" {
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/elog.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

#include "pg_compat.hpp"
#include "settings.hpp"

namespace pg_fencing {
namespace {

// LSN of the last WAL record applied to the sequence's only page.
XLogRecPtr SequencePageLsn(Oid seq) {
  Relation rel = relation_open(seq, AccessShareLock);
  Buffer buf = ReadBuffer(rel, 0);
  const XLogRecPtr lsn = BufferGetLSNAtomic(buf);
  ReleaseBuffer(buf);
  relation_close(rel, AccessShareLock);
  return lsn;
}

// Whether synchronous standbys are configured, by this backend's own
// setting or by the shared state the checkpointer keeps (the two differ for
// a moment after a reload).  Either one is enough: judging "configured" when
// in doubt fails a grant that could have succeeded, never the reverse.
bool SynchronousStandbysConfigured() {
  if (max_wal_senders == 0) return false;  // no standby can connect
  if (SyncRepStandbyNames != nullptr && SyncRepStandbyNames[0] != '\0') return true;
  LWLockAcquire(SyncRepLock, LW_SHARED);
  const bool defined = compat::SyncStandbysDefinedInSharedState();
  LWLockRelease(SyncRepLock);
  return defined;
}

// Whether the synchronous standbys (FIRST n or ANY n, as configured) have
// flushed the WAL up to lsn.  The walsenders advance this position only
// when the synchronous standbys confirm, and it never goes back.
bool FlushedBySynchronousStandbys(XLogRecPtr lsn) {
  LWLockAcquire(SyncRepLock, LW_SHARED);
  const bool flushed = lsn <= compat::SynchronousStandbysFlushedUpTo();
  LWLockRelease(SyncRepLock);
  return flushed;
}

// Waits until the synchronous standbys have flushed the WAL up to lsn, and
// fails the grant if the wait ended any other way.
//
// SyncRepWaitForLSN() ends a wait on a cancel (statement_timeout, or
// pg_cancel_backend) or a terminate with only a WARNING, and returns as if
// it were over; nothing it leaves behind tells the two apart, and the
// WARNING reaches no hook when the server log is quieter than WARNING.  So
// the outcome is judged afterwards from the replication state itself: the
// position the synchronous standbys have confirmed.
void WaitForSynchronousStandbys(XLogRecPtr lsn) {
  // Most grants need WAL the standbys confirmed long ago: no GUC work.
  if (!SynchronousStandbysConfigured() || FlushedBySynchronousStandbys(lsn)) return;

  // SyncRepWaitForLSN() waits only as the session's synchronous_commit
  // asks; a grant always waits for remote flush.  The WARNING it gives on
  // a cancel says the transaction "has already committed locally", which is
  // wrong here: the ERROR below says what happened.  Both settings go back
  // at the end of this function, or with the ERROR's abort.
  const int guc_level = NewGUCNestLevel();
  (void)set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                          true, 0, false);
  (void)set_config_option("client_min_messages", "error", PGC_USERSET, PGC_S_SESSION,
                          GUC_ACTION_SAVE, true, 0, false);
  HOLD_INTERRUPTS();  // as for a commit: the wait itself watches for them
  SyncRepWaitForLSN(lsn, false);
  RESUME_INTERRUPTS();
  AtEOXact_GUC(true, guc_level);

  if (ProcDiePending) {
    // A terminate (or the postmaster's death) ended the wait, which has
    // already cut the client off; end the backend now, token unsent.
    InterruptPending = true;
    CHECK_FOR_INTERRUPTS();
  }
  if (SynchronousStandbysConfigured() && !FlushedBySynchronousStandbys(lsn)) {
    ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED),
                    errmsg("fencing_grant() canceled while waiting for synchronous replication"),
                    errdetail("The token was not handed out: its WAL may not have reached the "
                              "synchronous standbys, and a standby promoted now could grant it "
                              "again.")));
  }
  CHECK_FOR_INTERRUPTS();  // anything else that arrived while they were held
}

// ---- Anchored to the clock (1.5) ----------------------------------------------

// The clock an anchor starts at: now, in microseconds since 1970.
int64 ClockNow() {
  const TimestampTz now = GetCurrentTimestamp();
  return PGF_CORE(UnixMicros(now));
}

// Calls a function of the sequence's (setval(), pg_sequence_last_value())
// as the sequence's owner: they check privileges on it that only its owner
// has, and PUBLIC none (the abort of an error puts the user back).  The
// owner is the role that created the extension; 1.0 databases have no
// other extension table to ask.
Datum CallAsSequenceOwner(PGFunction fn, Oid seq, int64 value, bool *is_null) {
  HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(seq));
  if (!HeapTupleIsValid(tuple)) elog(ERROR, "cache lookup failed for relation %u", seq);
  const Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
  ReleaseSysCache(tuple);
  Oid saved_user = InvalidOid;
  int saved_context = 0;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
  LOCAL_FCINFO(call, 2);
  InitFunctionCallInfoData(*call, nullptr, 2, InvalidOid, nullptr, nullptr);
  call->args[0].value = ObjectIdGetDatum(seq);
  call->args[0].isnull = false;
  call->args[1].value = Int64GetDatum(value);
  call->args[1].isnull = false;
  const Datum result = fn(call);
  SetUserIdAndSecContext(saved_user, saved_context);
  *is_null = call->isnull;
  return result;
}

// Sets the sequence's last value (setval(), one WAL record).
void SetSequence(Oid seq, int64 last_value) {
  bool is_null = false;
  (void)CallAsSequenceOwner(setval_oid, seq, last_value, &is_null);
}

// The highest token the sequence has reserved (its last value); 0 when it
// has handed out none.
int64 HighestReserved(Oid seq) {
  bool is_null = false;
  const Datum last = CallAsSequenceOwner(pg_sequence_last_value, seq, 0, &is_null);
  return is_null ? 0 : DatumGetInt64(last);
}

// The token gate of a sequence: grants from it hold it shared around their
// nextval(), an anchor or a bump exclusively around its nextval() and
// setval().  An advisory lock's tag in a field SQL's advisory locks cannot
// set (pg_locks.objsubid 3, as the fence gates), so no role can hold it.
LOCKTAG TokenGateTag(Oid seq) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, kTokenGateTag, seq, 3);
  return tag;
}

// Without a reserved range: the sequence this backend has anchored its
// grants at, and the last token it handed out from it.
Oid anchored_sequence = InvalidOid;
int64 last_token_from_sequence = 0;

// A token from the sequence, anchored to the clock when this backend has
// not anchored there yet, or when the sequence went back under it (a
// restore into the live database, a superuser's setval()).  Returns the
// LSN that covers it, not yet flushed.
int64 GrantFromSequence(Oid schema, Oid seq, XLogRecPtr *lsn) {
  LOCKTAG gate = TokenGateTag(seq);
  LOCKMODE mode = anchored_sequence == seq ? ShareLock : ExclusiveLock;
  (void)LockAcquire(&gate, mode, false, false);
  int64 token = nextval_internal(seq, false);
  if (mode == ShareLock && token <= last_token_from_sequence) {
    LockRelease(&gate, mode, false);
    mode = ExclusiveLock;
    (void)LockAcquire(&gate, mode, false, false);
    token = nextval_internal(seq, false);
  }
  if (mode == ExclusiveLock) {
    const int64 clock = ClockNow();
    const int64 first = PGF_CORE(AnchoredFirstToken(token, clock));
    if (first > token) SetSequence(seq, first);
    token = first;
  }
  *lsn = SequencePageLsn(seq);
  LockRelease(&gate, mode, false);
  anchored_sequence = seq;
  last_token_from_sequence = token;
  return token;
}

// ---- Reserved ranges (preloaded) ----------------------------------------------

// Tokens reserved per WAL record and flush.
constexpr int64 kReservation = 1024;
// Databases with a range at once; beyond them grants take the sequence
// path, as without the preload.
constexpr int kMaxRanges = 64;

struct TokenRange {
  Oid database;
  Oid sequence;
  int64 next;      // the next token to hand out
  int64 limit;     // the first token not reserved
  XLogRecPtr lsn;  // the record that reserved them
};

struct ReservedTokens {
  slock_t mutex;
  LWLock *refill;  // one backend refills at a time
  TokenRange ranges[kMaxRanges];
};

ReservedTokens *reserved = nullptr;
constexpr const char *kTranche = "pg_fencing grants";

}  // namespace

void RequestGrantMemory() {
  if (!settings::reserve_tokens) return;
  RequestAddinShmemSpace(MAXALIGN(sizeof(ReservedTokens)));
  RequestNamedLWLockTranche(kTranche, 1);
}

void AttachGrantMemory() {
  if (!settings::reserve_tokens) return;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  reserved = static_cast<ReservedTokens *>(
      ShmemInitStruct("pg_fencing reserved tokens", sizeof(ReservedTokens), &found));
  if (!found) {
    memset(reserved, 0, sizeof(ReservedTokens));
    SpinLockInit(&reserved->mutex);
    reserved->refill = &GetNamedLWLockTranche(kTranche)->lock;
  }
  LWLockRelease(AddinShmemInitLock);
}

namespace {

// With the mutex held: the database's range for seq (made empty if need
// be), or nullptr when every slot is taken by another.
TokenRange *RangeOf(Oid seq) {
  TokenRange *free_slot = nullptr;
  for (TokenRange &range : reserved->ranges) {
    if (range.database == MyDatabaseId && range.sequence == seq) return &range;
    if (range.database == InvalidOid && free_slot == nullptr) free_slot = &range;
  }
  if (free_slot != nullptr) *free_slot = {MyDatabaseId, seq, 0, 0, InvalidXLogRecPtr};
  return free_slot;
}

enum class Taken { kToken, kEmpty, kNoSlot };

// The next reserved token and the LSN that covers it.
Taken TakeReserved(Oid seq, int64 *token, XLogRecPtr *lsn) {
  SpinLockAcquire(&reserved->mutex);
  TokenRange *range = RangeOf(seq);
  Taken taken = Taken::kNoSlot;
  if (range != nullptr) {
    taken = Taken::kEmpty;
    if (range->next < range->limit) {
      *token = range->next++;
      *lsn = range->lsn;
      taken = Taken::kToken;
    }
  }
  SpinLockRelease(&reserved->mutex);
  return taken;
}

// Reserves the next range, anchored to the clock: returns its first token
// (this caller's) and the LSN of the record that covers the range, flushed
// here.  Under the refill lock, so no other grant runs nextval() meanwhile.
int64 Reserve(Oid schema, Oid seq, XLogRecPtr *lsn) {
  const int64 next = nextval_internal(seq, false);
  const int64 clock = ClockNow();
  const int64 first = PGF_CORE(AnchoredFirstToken(next, clock));
  const int64 last = PGF_CORE(ReservedRangeLast(first, kReservation));
  SetSequence(seq, last);
  *lsn = SequencePageLsn(seq);
  XLogFlush(*lsn);
  SpinLockAcquire(&reserved->mutex);
  if (TokenRange *range = RangeOf(seq)) {
    range->next = first + 1;
    // Exclusive; the largest token itself is never handed out from a range.
    range->limit = last == PG_INT64_MAX ? last : last + 1;
    range->lsn = *lsn;
  }
  SpinLockRelease(&reserved->mutex);
  return first;
}

// A token from the database's reserved range, refilled when used up; false
// when no range can be had (no slot free): take the sequence path.
bool GrantReserved(Oid schema, Oid seq, int64 *token, XLogRecPtr *lsn) {
  Taken taken = TakeReserved(seq, token, lsn);
  if (taken == Taken::kNoSlot) return false;
  if (taken == Taken::kEmpty) {
    LWLockAcquire(reserved->refill, LW_EXCLUSIVE);
    // Another backend may have refilled it while this one waited.
    taken = TakeReserved(seq, token, lsn);
    if (taken == Taken::kEmpty) *token = Reserve(schema, seq, lsn);
    LWLockRelease(reserved->refill);
    if (taken == Taken::kNoSlot) return false;
  }
  XLogFlush(*lsn);  // at once when the refill flushed it already
  return true;
}

// The highest token handed out from seq: with a reserved range, the one
// before its next (the sequence's last value is the range's end, up to
// 1,023 tokens nobody was given); otherwise, or before this server's first
// range, the sequence's last value.
int64 HighestHandedOut(Oid seq) {
  if (reserved != nullptr) {
    int64 next = 0;
    SpinLockAcquire(&reserved->mutex);
    for (const TokenRange &range : reserved->ranges) {
      if (range.database == MyDatabaseId && range.sequence == seq) next = range.next;
    }
    SpinLockRelease(&reserved->mutex);
    if (next > 0) return next - 1;
  }
  return HighestReserved(seq);
}

// Empties this database's reserved range of seq, under the refill lock, so
// that the next grant reserves a new one from the sequence.
void DiscardReserved(Oid seq) {
  SpinLockAcquire(&reserved->mutex);
  for (TokenRange &range : reserved->ranges) {
    // Empty from here on; next stays, the last token handed out before it.
    if (range.database == MyDatabaseId && range.sequence == seq) range.limit = range.next;
  }
  SpinLockRelease(&reserved->mutex);
}

// fencing_bump_tokens(by): moves the sequence on to by above the highest
// token reserved, with every grant path held off meanwhile (the refill
// lock, and the token gate of grants from the sequence), and returns that
// floor, durable and replicated like a grant.
int64 BumpTokens(Oid schema, int64 by) {
  const Oid seq = TokenSequenceOid(schema);
  // The gate first: a lock-manager wait must not happen under an LWLock.
  LOCKTAG gate = TokenGateTag(seq);
  (void)LockAcquire(&gate, ExclusiveLock, false, false);
  if (reserved != nullptr) LWLockAcquire(reserved->refill, LW_EXCLUSIVE);
  // Every token handed out, from a range or from the sequence, is at most
  // the sequence's last value, and none moves it while both are held.
  const int64 highest = HighestReserved(seq);
  int64 floor = 0;
  const BumpStatus status = PGF_CORE(BumpedFloor(highest, by, &floor));
  if (status == BumpStatus::kOk) {
    if (reserved != nullptr) DiscardReserved(seq);
    SetSequence(seq, floor);
  }
  const XLogRecPtr lsn = SequencePageLsn(seq);
  if (reserved != nullptr) LWLockRelease(reserved->refill);
  LockRelease(&gate, ExclusiveLock, false);
  if (status == BumpStatus::kOutOfRange) {
    ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
                    errmsg("fencing_bump_tokens(%lld) would move tokens past the largest one",
                           static_cast<long long>(by)),
                    errdetail("The highest token reserved is %lld; tokens end at %lld.",
                              static_cast<long long>(highest),
                              static_cast<long long>(PG_INT64_MAX))));
  }
  XLogFlush(lsn);
  WaitForSynchronousStandbys(lsn);
  return floor;
}

void NoteGranted(Oid schema, int64 token) {
  if (highest_grant_known_schema != schema) {
    highest_grant_known_schema = schema;
    highest_grant_known = 0;
  }
  if (token > highest_grant_known) highest_grant_known = token;
}

}  // namespace

// The highest token reserved as this backend last read it (or granted it),
// for the database's extension in highest_grant_known_schema.  It only goes
// up on a running database; a database that went back starts new backends.
int64 highest_grant_known = 0;
Oid highest_grant_known_schema = InvalidOid;

int64 HighestGrantedFor(Oid schema, int64 token) {
  if (WithinKnownGrants(schema, token)) return highest_grant_known;
  NoteGranted(schema, HighestHandedOut(TokenSequenceOid(schema)));
  return highest_grant_known;
}

int64 GrantToken(Oid schema) {
  const Oid seq = TokenSequenceOid(schema);
  int64 token = 0;
  XLogRecPtr lsn = InvalidXLogRecPtr;
  if (reserved == nullptr || !GrantReserved(schema, seq, &token, &lsn)) {
    // Callers need EXECUTE on fencing_grant (or a lease function), not
    // USAGE on the sequence, which stays private to the extension.
    token = GrantFromSequence(schema, seq, &lsn);
    XLogFlush(lsn);
  }
  WaitForSynchronousStandbys(lsn);
  NoteGranted(schema, token);
  return token;
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PG_FUNCTION_INFO_V1(fencing_bump_tokens);
Datum fencing_bump_tokens(PG_FUNCTION_ARGS) {
  // PUBLIC may not execute it; a GRANT of EXECUTE by mistake still does not
  // let a role move every lock's tokens.
  if (!superuser()) {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("permission denied to bump fencing tokens"),
                    errdetail("Only a superuser may call fencing_bump_tokens().")));
  }
  PreventCommandIfReadOnly("fencing_bump_tokens()");
  const int64 by = PG_GETARG_INT64(0);
  if (by <= 0) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("fencing_bump_tokens() needs a positive number of tokens, not %lld",
                           static_cast<long long>(by))));
  }
  PG_RETURN_INT64(BumpTokens(ExtensionSchema(fcinfo), by));
}

// How far the highest token reserved runs ahead of the server's clock
// (NULL when no token was ever granted): fencing_audit() reports a lead.
PG_FUNCTION_INFO_V1(fencing_lead_over_clock);
Datum fencing_lead_over_clock(PG_FUNCTION_ARGS) {
  const Oid schema = ExtensionSchema(fcinfo);
  const int64 highest = HighestReserved(TokenSequenceOid(schema));
  if (highest == 0) PG_RETURN_NULL();
  const int64 clock = ClockNow();
  const int64 lead = PGF_CORE(LeadOverClock(highest, clock));
  Interval *result = static_cast<Interval *>(palloc0(sizeof(Interval)));
  result->time = lead;
  PG_RETURN_INTERVAL_P(result);
}

// The highest token the database has handed out (with reserved ranges, not
// the range's unused end); NULL before the first grant.  For
// fencing_reset_mark(), which must not set a mark above it.
PG_FUNCTION_INFO_V1(fencing_highest_granted);
Datum fencing_highest_granted(PG_FUNCTION_ARGS) {
  const int64 highest = HighestHandedOut(TokenSequenceOid(ExtensionSchema(fcinfo)));
  if (highest == 0) PG_RETURN_NULL();
  PG_RETURN_INT64(highest);
}

PG_FUNCTION_INFO_V1(fencing_grant);
Datum fencing_grant(PG_FUNCTION_ARGS) {
  // Checked here so the error names fencing_grant(), not nextval().
  PreventCommandIfReadOnly("fencing_grant()");
  PG_RETURN_INT64(GrantToken(ExtensionSchema(fcinfo)));
}

}  // extern "C"
