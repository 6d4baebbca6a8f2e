// fencing_guard(): the trigger that refuses stale, missing and never-granted
// fencing tokens -- a BEFORE row trigger on UPDATE (and INSERT) for a
// per-row fence, on INSERT, UPDATE and DELETE plus a BEFORE TRUNCATE
// statement trigger under a lock -- and the column/option resolution it
// shares with fencing_protect().
//
// Hot path: per row we read two attributes, test one bitmap bit and compare
// two integers.  Everything that needs the catalog (finding the column,
// checking its type, parsing the options) runs once per trigger per query
// and is cached in fn_extra.
#include "boundary.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#include "extension_objects.hpp"
#include "fences.hpp"
#include "lease_writers.hpp"
#include "grant.hpp"
#include "guard.hpp"
#include "locks.hpp"
#include "merge_actions.hpp"
#include "shared_stats.hpp"

namespace pg_fencing {
namespace {

constexpr const char *kKnownOptions =
    "allow_unset, skip, fence_reads, granted_tokens, external_tokens, lock=NAME";

// A column holds tokens when its type is fencing_token or a domain over it.
bool IsTokenColumn(Form_pg_attribute att, Oid token_type) {
  return !att->attisdropped && getBaseType(att->atttypid) == token_type;
}

// A generated column is recomputed after BEFORE row triggers run, so the
// guard would judge a value that is not the one stored.
void RefuseGeneratedColumn(Relation rel, Form_pg_attribute att) {
  if (att->attgenerated == '\0') return;
  ereport(ERROR, (errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
                  errmsg("generated column \"%s\" of table \"%s\" cannot hold fencing tokens",
                         NameStr(att->attname), RelationGetRelationName(rel)),
                  errdetail("A generated column is computed after the guard has judged the row, so "
                            "the guard would judge a value that is not the one stored."),
                  errtablecol(rel, att->attnum)));
}

AttrNumber ResolveNamedColumn(Relation rel, const char *column, Oid token_type) {
  TupleDesc desc = RelationGetDescr(rel);
  for (int i = 0; i < desc->natts; ++i) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (att->attisdropped || strcmp(NameStr(att->attname), column) != 0) continue;
    if (!IsTokenColumn(att, token_type)) {
      ereport(ERROR,
              (errcode(ERRCODE_DATATYPE_MISMATCH),
               errmsg("column \"%s\" of table \"%s\" is of type %s, not fencing_token", column,
                      RelationGetRelationName(rel), format_type_be(att->atttypid)),
               errhint("The guarded column must hold fencing tokens: ALTER TABLE %s ALTER "
                       "COLUMN %s TYPE fencing_token.",
                       quote_identifier(RelationGetRelationName(rel)), quote_identifier(column))));
    }
    RefuseGeneratedColumn(rel, att);
    return att->attnum;
  }
  ereport(ERROR,
          (errcode(ERRCODE_UNDEFINED_COLUMN), errmsg("column \"%s\" of table \"%s\" does not exist",
                                                     column, RelationGetRelationName(rel))));
  pg_unreachable();
}

AttrNumber FindOnlyTokenColumn(Relation rel, Oid token_type) {
  TupleDesc desc = RelationGetDescr(rel);
  AttrNumber found = InvalidAttrNumber;
  for (int i = 0; i < desc->natts; ++i) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (!IsTokenColumn(att, token_type)) continue;
    if (found != InvalidAttrNumber) {
      ereport(ERROR,
              (errcode(ERRCODE_AMBIGUOUS_COLUMN),
               errmsg("table \"%s\" has more than one fencing_token column (\"%s\", \"%s\")",
                      RelationGetRelationName(rel),
                      NameStr(TupleDescAttr(desc, found - 1)->attname), NameStr(att->attname)),
               errhint("Name the column to guard: fencing_protect('%s', 'column').",
                       RelationGetRelationName(rel))));
    }
    found = att->attnum;
  }
  if (found == InvalidAttrNumber) {
    ereport(ERROR,
            (errcode(ERRCODE_UNDEFINED_COLUMN),
             errmsg("table \"%s\" has no fencing_token column", RelationGetRelationName(rel)),
             errhint("Add one: ALTER TABLE %s ADD COLUMN token fencing_token.",
                     quote_identifier(RelationGetRelationName(rel)))));
  }
  RefuseGeneratedColumn(rel, TupleDescAttr(desc, found - 1));
  return found;
}

// Applies the option words to options, without raising; *word is the one
// an error is about.  The lock name, if any, points into words.
OptionStatus ApplyOptions(const char *const *words, int count, GuardOptions &options,
                          const char **word) {
  OptionStatus status = OptionStatus::kOk;
  *word = nullptr;
  for (int i = 0; i < count && status == OptionStatus::kOk; ++i) {
    *word = words[i];
    status = PGF_CORE(ApplyGuardOption(*word, options));
  }
  if (status == OptionStatus::kOk) status = PGF_CORE(FinishGuardOptions(options));
  return status;
}

// Raises the error for a status ApplyOptions returned (nothing for kOk);
// where names the trigger or function.
void ReportOptionError(OptionStatus status, const char *word, const char *where) {
  switch (status) {
    case OptionStatus::kOk:
      break;
    case OptionStatus::kUnknown:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("unknown fencing_guard option \"%s\" in %s", word, where),
                      errhint("Known options: %s.", kKnownOptions)));
      break;
    case OptionStatus::kEmptyLockName:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard option \"lock=\" in %s names no lock", where)));
      break;
    case OptionStatus::kConflictingLocks:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard options in %s name two different locks", where),
                      errdetail("The second is \"%s\".", word)));
      break;
    case OptionStatus::kUnsetUnderLock:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard option \"allow_unset\" cannot be combined with a lock "
                             "in %s",
                             where),
                      errhint("Under a lock-wide fence every write carries a token; a writer that "
                              "does not set the column can present its token with "
                              "fencing_present().")));
      break;
    case OptionStatus::kReadsWithoutLock:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard option \"fence_reads\" needs a lock in %s", where),
                      errhint("Reads are fenced under a lock-wide fence: give the lock's name "
                              "(lock_name => ...).")));
      break;
    case OptionStatus::kConflictingSources:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("fencing_guard options \"granted_tokens\" and \"external_tokens\" "
                             "contradict each other in %s",
                             where)));
      break;
    case OptionStatus::kSourceUnderLock:
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("a fencing_guard token source option (granted_tokens or "
                             "external_tokens) cannot be combined with a lock in %s",
                             where),
                      errhint("Under a lock-wide fence the lock says where its tokens come from: "
                              "fencing_set_token_source(lock_name, 'external').")));
      break;
  }
}

// Parses the option words, raising on a bad one; where names the trigger or
// function.  The lock name, if any, points into words.
GuardOptions ParseOptions(const char *const *words, int count, const char *where) {
  GuardOptions options;
  const char *word = nullptr;
  const OptionStatus status = ApplyOptions(words, count, options, &word);
  ReportOptionError(status, word, where);  // word is set by ApplyOptions: two statements
  return options;
}

// What a guard trigger needs per row; trivially destructible by design.
struct GuardCache {
  Oid trigger_oid;
  Oid relation_oid;
  AttrNumber attnum;
  GuardOptions options;   // options.lock_name points at lock_name below
  const char *lock_name;  // nullptr: per-row fence only; else in fn_mcxt
  Oid extension_schema;
  // The role this statement's writes under the lock were authorized for
  // (InvalidOid: none yet).  The cache lives as long as the statement's
  // executor state, so the lock's permissions are read once per statement
  // and role, not per row.
  Oid authorized_user;
  int64 lock_id;       // the lock's, once authorized (its fence gate); 0 before 1.2
  LockKind lock_kind;  // how the lock is leased, read with lock_id
  TokenSource lock_source;  // where the lock's tokens come from, read with lock_id
};

// How errors name a trigger: formatted only when one is raised.
const char *WhereTrigger(const Trigger *trigger, Relation rel) {
  return psprintf("trigger \"%s\" on table \"%s\"", trigger->tgname, RelationGetRelationName(rel));
}

const char *TriggerWhere(const TriggerData *td) {
  return WhereTrigger(td->tg_trigger, td->tg_relation);
}

// Per-row fences guard UPDATE only.  Lock-wide fences also guard INSERT and
// DELETE (row triggers) and TRUNCATE (a statement trigger: it fires no row
// triggers).
void CheckTriggerProtocol(const TriggerData *td, const GuardCache &guard) {
  const TriggerEvent event = td->tg_event;
  const bool under_lock = guard.lock_name != nullptr;
  const char *problem = nullptr;
  if (!TRIGGER_FIRED_BEFORE(event)) {
    problem = TRIGGER_FIRED_AFTER(event) ? "fired AFTER" : "fired INSTEAD OF";
  } else if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
    if (!under_lock) problem = "fired by TRUNCATE";
  } else if (!TRIGGER_FIRED_FOR_ROW(event)) {
    problem = "fired FOR EACH STATEMENT";
  } else if (!under_lock && TRIGGER_FIRED_BY_INSERT(event) &&
             guard.options.token_source != TokenSource::kGranted) {
    // (A per-row fence whose tokens are this database's grants judges an
    // INSERT's token too, 1.5: a made-up one would block the row.)
    problem = "fired by INSERT";
  } else if (!under_lock && TRIGGER_FIRED_BY_DELETE(event)) {
    problem = "fired by DELETE";
  }
  if (problem == nullptr) return;
  if (under_lock) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("fencing_guard() under a lock must be fired BEFORE INSERT, UPDATE or "
                           "DELETE FOR EACH ROW, or BEFORE TRUNCATE, but %s is %s",
                           TriggerWhere(td), problem),
                    errhint("Create the triggers with fencing_protect().")));
  }
  ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                  errmsg("fencing_guard() must be fired BEFORE UPDATE FOR EACH ROW, but %s is %s",
                         TriggerWhere(td), problem),
                  errhint("Create the trigger with fencing_protect(); a lock-wide fence (option "
                          "lock=NAME) also guards INSERT, DELETE and TRUNCATE.")));
}

// The guard's settings from its trigger: the column, the options, the lock
// (copied into context: the trigger's arguments may not outlive the query).
GuardCache ReadGuardTrigger(const Trigger *trigger, Relation rel, Oid extension_schema,
                            MemoryContext context) {
  if (trigger->tgnargs < 1) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("%s gives fencing_guard() no token column", WhereTrigger(trigger, rel)),
                    errhint("Pass the fencing_token column's name as the first trigger argument, "
                            "or create the trigger with fencing_protect().")));
  }
  GuardCache fresh;
  fresh.trigger_oid = trigger->tgoid;
  fresh.relation_oid = RelationGetRelid(rel);
  fresh.extension_schema = extension_schema;
  fresh.authorized_user = InvalidOid;
  fresh.lock_id = 0;
  fresh.lock_kind = LockKind::kExclusive;
  fresh.lock_source = TokenSource::kUnknown;
  fresh.attnum = ResolveNamedColumn(rel, trigger->tgargs[0], TokenTypeOid(extension_schema));
  const char *word = nullptr;
  const OptionStatus status =
      ApplyOptions(trigger->tgargs + 1, trigger->tgnargs - 1, fresh.options, &word);
  if (status != OptionStatus::kOk) ReportOptionError(status, word, WhereTrigger(trigger, rel));
  fresh.lock_name = nullptr;
  if (!fresh.options.lock_name.empty()) {
    const std::size_t length = fresh.options.lock_name.size();
    char *copy = static_cast<char *>(MemoryContextAlloc(context, length + 1));
    memcpy(copy, fresh.options.lock_name.data(), length);
    copy[length] = '\0';
    fresh.lock_name = copy;
    fresh.options.lock_name = std::string_view(copy, length);
  }
  return fresh;
}

GuardCache &LookupGuard(FunctionCallInfo fcinfo, const TriggerData *td) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  const Trigger *trigger = td->tg_trigger;
  const Oid relid = RelationGetRelid(td->tg_relation);
  auto *cache = static_cast<GuardCache *>(flinfo->fn_extra);
  if (cache != nullptr && cache->trigger_oid == trigger->tgoid && cache->relation_oid == relid) {
    return *cache;
  }
  const GuardCache fresh =
      ReadGuardTrigger(trigger, td->tg_relation, ExtensionSchema(fcinfo), flinfo->fn_mcxt);
  if (cache == nullptr) {
    cache = static_cast<GuardCache *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(GuardCache)));
    flinfo->fn_extra = cache;
  }
  *cache = fresh;
  return *cache;
}

Oid OwnerOfRelation(Oid relid) {
  HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
  if (!HeapTupleIsValid(tuple)) return InvalidOid;
  const Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
  ReleaseSysCache(tuple);
  return owner;
}

// ---- Reporting ---------------------------------------------------------------

// Every refused (or skipped) write is counted and recorded before the
// error rolls its transaction back (shared_stats.hpp).
void RecordStale(Oid relid, const char *lock_name, Token token, Token mark, bool raised) {
  RecordRefusedWrite(
      {relid, lock_name, token, true, mark, true, raised ? PGF_ERRCODE_STALE_TOKEN : 0});
}

void RecordMissing(Oid relid, const char *lock_name) {
  RecordRefusedWrite({relid, lock_name, 0, false, 0, false, PGF_ERRCODE_MISSING_TOKEN});
}

[[noreturn]] void ReportStaleForRow(Relation rel, const char *lock_name, AttrNumber attnum,
                                    Token token, Token row_mark) {
  RecordStale(RelationGetRelid(rel), lock_name, token, row_mark, true);
  ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                  errmsg("stale fencing token " INT64_FORMAT " for table \"%s\": the row has "
                         "already seen " INT64_FORMAT,
                         token, RelationGetRelationName(rel), row_mark),
                  errdetail("A holder with a newer token has written this row; the lock you held "
                            "has moved on."),
                  errtablecol(rel, attnum)));
  pg_unreachable();
}

[[noreturn]] void ReportStaleForLock(Relation rel, const GuardCache &guard, Token token,
                                     Token lock_mark) {
  RecordStale(RelationGetRelid(rel), guard.lock_name, token, lock_mark, true);
  if (guard.lock_kind == LockKind::kSemaphore) {
    ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                    errmsg("stale fencing token " INT64_FORMAT " for table \"%s\" under semaphore "
                           "\"%s\": it is not the latest grant of any of its permits",
                           token, RelationGetRelationName(rel), guard.lock_name),
                    errdetail("Its permit has been granted again or revoked since, or the token "
                              "was never a permit of this semaphore."),
                    errtablecol(rel, guard.attnum)));
  }
  ereport(ERROR, (errcode(PGF_ERRCODE_STALE_TOKEN),
                  errmsg("stale fencing token " INT64_FORMAT " for table \"%s\" under lock \"%s\": "
                         "the lock has already seen " INT64_FORMAT,
                         token, RelationGetRelationName(rel), guard.lock_name, lock_mark),
                  errdetail("A newer holder of the lock has been granted or has written under it; "
                            "the lock you held has moved on."),
                  errtablecol(rel, guard.attnum)));
  pg_unreachable();
}

// A token above every token the database has granted, on a per-row fence
// whose tokens are its grants (1.5).
[[noreturn]] void ReportNeverGrantedForRow(Relation rel, AttrNumber attnum, Token token,
                                           Token highest) {
  RecordRefusedWrite({RelationGetRelid(rel), nullptr, token, true, highest, true,
                      PGF_ERRCODE_NEVER_GRANTED_TOKEN});
  ereport(ERROR, (errcode(PGF_ERRCODE_NEVER_GRANTED_TOKEN),
                  errmsg("fencing token " INT64_FORMAT " for table \"%s\" was never granted: the "
                         "highest token this database has granted is " INT64_FORMAT,
                         token, RelationGetRelationName(rel), highest),
                  errdetail("A token above every grant is a mistake: a typo, a token of another "
                            "database or lock service, or made up."),
                  errhint("If the table's tokens come from another service, protect it with "
                          "option 'external_tokens'."),
                  errtablecol(rel, attnum)));
  pg_unreachable();
}

// A token new to a lock whose tokens are this database's grants, never
// granted (1.5): above the mark of a lock whose leases the database grants,
// or above every grant (highest).
[[noreturn]] void ReportNeverGrantedForLock(Relation rel, const GuardCache &guard,
                                            FenceVerdict verdict, Token token, Token mark,
                                            Token highest) {
  RecordRefusedWrite({RelationGetRelid(rel), guard.lock_name, token, true, mark, true,
                      PGF_ERRCODE_NEVER_GRANTED_TOKEN});
  if (verdict == FenceVerdict::kAboveLeasedMark) {
    ereport(ERROR,
            (errcode(PGF_ERRCODE_NEVER_GRANTED_TOKEN),
             errmsg("fencing token " INT64_FORMAT " for table \"%s\" under lock \"%s\" was never "
                    "granted: the lock's current token is " INT64_FORMAT,
                    token, RelationGetRelationName(rel), guard.lock_name, mark),
             errdetail("Every grant of a lock whose leases this database grants raises its mark "
                       "first, so no holder was ever given a token above it."),
             errhint("If the lock's tokens come from another service: "
                     "fencing_set_token_source('%s', 'external').",
                     guard.lock_name),
             errtablecol(rel, guard.attnum)));
  }
  ereport(ERROR,
          (errcode(PGF_ERRCODE_NEVER_GRANTED_TOKEN),
           errmsg("fencing token " INT64_FORMAT " for table \"%s\" under lock \"%s\" was never "
                  "granted: the highest token this database has granted is " INT64_FORMAT,
                  token, RelationGetRelationName(rel), guard.lock_name, highest),
           errdetail("A token above every grant is a mistake: a typo, a token of another "
                     "database or lock service, or made up."),
           errhint("If the lock's tokens come from another service: "
                   "fencing_set_token_source('%s', 'external').",
                   guard.lock_name),
           errtablecol(rel, guard.attnum)));
  pg_unreachable();
}

// A write under a lock that AdvanceLockFence() refused.
[[noreturn]] void ReportLockRefusal(Relation rel, const GuardCache &guard, FenceVerdict verdict,
                                    Token token, Token mark, Token highest) {
  if (verdict == FenceVerdict::kStale) ReportStaleForLock(rel, guard, token, mark);
  ReportNeverGrantedForLock(rel, guard, verdict, token, mark, highest);
}

// Why a write carries no token.  Each reason has its own complete message
// (PostgreSQL's style: no message assembled from fragments).
enum class MissingReason {
  kSetToNull,             // the UPDATE sets the token column to NULL
  kNotSet,                // per-row fence: the UPDATE does not set the column
  kNotSetNonePresented,   // lock-wide: the UPDATE does not set it, nothing presented
  kInsertNull,            // lock-wide: the new row's token is NULL, nothing presented
  kDeleteNonePresented,   // lock-wide: DELETE without a presented token
  kTruncateNonePresented  // lock-wide: TRUNCATE without a presented token
};

// The hints a refused token-less write under a lock gets (called inside
// ereport's argument list, as errhint itself is).
int HintSetOrPresent(const char *column, const char *lock) {
  return errhint(
      "Set \"%s\" to your token, or call fencing_present('%s', token) first in this "
      "transaction.",
      column, lock);
}

int HintPresent(const char *lock) {
  return errhint("Call fencing_present('%s', token) first in this transaction.", lock);
}

[[noreturn]] void ReportMissing(Relation rel, const GuardCache &guard, MissingReason reason) {
  const char *table = RelationGetRelationName(rel);
  const char *column = NameStr(TupleDescAttr(RelationGetDescr(rel), guard.attnum - 1)->attname);
  const char *lock = guard.lock_name;
  RecordMissing(RelationGetRelid(rel), lock);
#define PGF_MISSING(...) \
  ereport(ERROR, (errcode(PGF_ERRCODE_MISSING_TOKEN), __VA_ARGS__, errtablecol(rel, guard.attnum)))
  switch (reason) {
    case MissingReason::kSetToNull:
      if (lock != nullptr) {
        PGF_MISSING(errmsg("missing fencing token for table \"%s\" under lock \"%s\": column "
                           "\"%s\" is set to NULL",
                           table, lock, column),
                    HintSetOrPresent(column, lock));
      }
      PGF_MISSING(errmsg("missing fencing token for table \"%s\": column \"%s\" is set to NULL",
                         table, column),
                  errhint("Set \"%s\" to the fencing token of the lock you hold.", column));
      break;
    case MissingReason::kNotSet:
      PGF_MISSING(errmsg("missing fencing token for table \"%s\": the UPDATE does not set column "
                         "\"%s\"",
                         table, column),
                  errhint("Set \"%s\" to the fencing token of the lock you hold, or protect the "
                          "table with option 'allow_unset'.",
                          column));
      break;
    case MissingReason::kNotSetNonePresented:
      PGF_MISSING(errmsg("missing fencing token for table \"%s\" under lock \"%s\": the UPDATE "
                         "does not set column \"%s\" and the transaction presented no token",
                         table, lock, column),
                  HintSetOrPresent(column, lock));
      break;
    case MissingReason::kInsertNull:
      PGF_MISSING(errmsg("missing fencing token for table \"%s\" under lock \"%s\": the new row's "
                         "\"%s\" is NULL and the transaction presented no token",
                         table, lock, column),
                  HintSetOrPresent(column, lock));
      break;
    case MissingReason::kDeleteNonePresented:
      PGF_MISSING(errmsg("missing fencing token for table \"%s\" under lock \"%s\": DELETE needs "
                         "the token presented for the transaction",
                         table, lock),
                  HintPresent(lock));
      break;
    case MissingReason::kTruncateNonePresented:
      PGF_MISSING(errmsg("missing fencing token for table \"%s\" under lock \"%s\": TRUNCATE "
                         "needs the token presented for the transaction",
                         table, lock),
                  HintPresent(lock));
      break;
  }
#undef PGF_MISSING
  pg_unreachable();
}

// ---- The two kinds of fence ---------------------------------------------------

// One row written, as the guard judges it: the trigger reads it from its
// TriggerData, the check in an UPDATE's projection from its arguments.
struct RowWrite {
  Oid relid;
  Relation rel;  // nullptr: opened only to report a refusal
  WriteKind kind;
  Token old_token;  // UPDATE and DELETE
  bool old_is_null;
  Token new_token;  // INSERT and UPDATE
  bool new_is_null;
  bool column_assigned;  // UPDATE: whether it sets the token column
};

// The relation to name in a refusal.  Opened without a lock (the writer
// holds one); the error that follows releases the reference.
Relation RelationToReport(const RowWrite &row) {
  return row.rel != nullptr ? row.rel : relation_open(row.relid, NoLock);
}

// What to do with a row the guard did not refuse.
struct Judgement {
  bool skip;         // option skip: leave the row as it is
  bool fill;         // lock-wide: store fill_token (the presented token)
  Token fill_token;  // in the token column
};

// A token new to a row of a per-row fence whose tokens are this database's
// grants (granted_tokens), above every grant the backend knew of: refused
// with 55Z03 when above every grant.  Callers test WithinKnownGrants()
// first, inline: two comparisons on the per-row path.
void RefuseUngrantedRowToken(const RowWrite &row, const GuardCache &guard, Token token) {
  const Token highest = HighestGrantedFor(guard.extension_schema, token);
  if (PGF_CORE(JudgeTokenOrigin(TokenSource::kGranted, false, token, highest)) !=
      OriginVerdict::kAccept) {
    ReportNeverGrantedForRow(RelationToReport(row), guard.attnum, token, highest);
  }
}

// A write the guard let through under token: the transaction now writes
// under the token's lease, if it is one (lease_writers.hpp).  Not for
// tokens of another lock service (external_tokens), which are no lease of
// this database's.
inline void NoteRowToken(const GuardCache &guard, Token token) {
  if (guard.options.token_source != TokenSource::kExternal) {
    NoteWriteUnderToken(guard.extension_schema, token, nullptr);
  }
}

inline void NoteTokenUnderLock(const GuardCache &guard, Token token) {
  if (guard.lock_source != TokenSource::kExternal) {
    NoteWriteUnderToken(guard.extension_schema, token, guard.lock_name);
  }
}

// Per-row fence: an UPDATE must carry a token no lower than the row's.
Judgement JudgeRowFence(const RowWrite &row, const GuardCache &guard) {
  GuardInput in{};
  in.old_token = row.old_token;
  in.old_is_null = row.old_is_null;
  in.new_token = row.new_token;
  in.new_is_null = row.new_is_null;
  in.column_assigned = row.column_assigned;
  switch (PGF_CORE(DecideGuard(in, guard.options))) {
    case GuardVerdict::kAccept:
      // A token new to the row (1.5): one the database granted, where that
      // is where the table's tokens come from.  One comparison otherwise.
      if (guard.options.token_source == TokenSource::kGranted && !in.new_is_null &&
          (in.old_is_null || in.new_token > in.old_token) &&
          !WithinKnownGrants(guard.extension_schema, in.new_token)) {
        RefuseUngrantedRowToken(row, guard, in.new_token);
      }
      if (!in.new_is_null) NoteRowToken(guard, in.new_token);
      return {};
    case GuardVerdict::kSkip:
      RecordStale(row.relid, nullptr, in.new_token, in.old_token, false);
      return {true, false, 0};
    case GuardVerdict::kRejectStale:
      ReportStaleForRow(RelationToReport(row), nullptr, guard.attnum, in.new_token, in.old_token);
    case GuardVerdict::kRejectMissing:
      ReportMissing(RelationToReport(row), guard,
                    in.column_assigned ? MissingReason::kSetToNull : MissingReason::kNotSet);
  }
  pg_unreachable();
}

// Writes under a lock change the lock's state (its mark, its fence), so the
// writer must be allowed to use the lock, and so must the table's owner:
// a trigger with lock=NAME made by hand on a table of one's own must not
// reach a lock that fencing_protect() would have refused.  Checked once per
// statement and role.
void AuthorizeWritesUnderLock(Oid relid, Oid owner, GuardCache &guard) {
  const Oid writer = GetUserId();
  if (guard.authorized_user == writer) return;
  int64 lock_id = 0;
  LockTraits traits;
  // The common case in C; a lock to create, or a role to refuse, goes to
  // the lock model's SQL (fencing_lock_authorize), which raises 42501.
  const bool usable =
      LockUsableBy(guard.extension_schema, guard.lock_name, writer, &lock_id, &traits) &&
      (owner == writer || LockUsableBy(guard.extension_schema, guard.lock_name, owner, &lock_id));
  if (!usable) {
    lock_id = AuthorizeLock(guard.extension_schema, guard.lock_name, writer, true, InvalidOid);
    if (owner != writer) {
      AuthorizeLock(guard.extension_schema, guard.lock_name, owner, false, relid);
    }
    traits = LockTraitsOf(guard.extension_schema, guard.lock_name);
  }
  guard.lock_id = lock_id;
  guard.lock_kind = traits.kind;
  guard.lock_source = traits.source;
  guard.authorized_user = writer;
}

// Lock-wide fence: INSERT, UPDATE or DELETE must carry a token no lower
// than the row's and than the lock's high-water mark, which it raises.
// The writer must have been authorized (AuthorizeWritesUnderLock).
Judgement JudgeLockFence(const RowWrite &row, const GuardCache &guard) {
  LockWriteInput in{};
  in.kind = row.kind;
  in.old_token = row.old_token;
  in.old_is_null = row.old_is_null;
  in.new_token = row.new_token;
  in.new_is_null = row.new_is_null;
  in.column_assigned = row.column_assigned;
  in.lock_kind = guard.lock_kind;
  if (const LockFence *fence = FindTransactionFence(guard.lock_name)) {
    in.presented = fence->presented;
    in.presented_token = fence->presented_token;
  }

  const LockWriteDecision decision = PGF_CORE(DecideLockWrite(in, guard.options));
  switch (decision.verdict) {
    case GuardVerdict::kAccept:
      break;
    case GuardVerdict::kSkip:
      RecordStale(row.relid, guard.lock_name, decision.write_token, in.old_token, false);
      return {true, false, 0};
    case GuardVerdict::kRejectStale:
      ReportStaleForRow(RelationToReport(row), guard.lock_name, guard.attnum, decision.write_token,
                        in.old_token);
    case GuardVerdict::kRejectMissing:
      switch (in.kind) {
        case WriteKind::kInsert:
          ReportMissing(RelationToReport(row), guard, MissingReason::kInsertNull);
        case WriteKind::kUpdate:
          ReportMissing(
              RelationToReport(row), guard,
              in.column_assigned ? MissingReason::kSetToNull : MissingReason::kNotSetNonePresented);
        case WriteKind::kDelete:
          ReportMissing(RelationToReport(row), guard, MissingReason::kDeleteNonePresented);
      }
  }

  Token mark = 0;
  Token highest = 0;
  const FenceVerdict verdict =
      AdvanceLockFence(guard.extension_schema, guard.lock_id, guard.lock_kind, guard.lock_source,
                       guard.lock_name, decision.write_token, &mark, &highest);
  if (verdict != FenceVerdict::kAccept) {
    if (verdict == FenceVerdict::kStale && guard.options.skip) {
      RecordStale(row.relid, guard.lock_name, decision.write_token, mark, false);
      return {true, false, 0};
    }
    ReportLockRefusal(RelationToReport(row), guard, verdict, decision.write_token, mark, highest);
  }
  NoteTokenUnderLock(guard, decision.write_token);
  return {false, decision.fill_from_presented, decision.write_token};
}

// ---- As a trigger ---------------------------------------------------------------

// Whether the UPDATE assigned the token column, given the old and new
// tokens it has read.
bool ColumnAssigned(const TriggerData *td, const GuardCache &guard, const RowWrite &row) {
  const bool unchanged = row.old_is_null || row.new_is_null ? row.old_is_null == row.new_is_null
                                                            : row.old_token == row.new_token;
  return UpdateAssignsColumn(td, guard.attnum, unchanged);
}

Token ReadToken(HeapTuple tuple, const TriggerData *td, const GuardCache &guard, bool *is_null) {
  return DatumGetInt64(
      heap_getattr(tuple, guard.attnum, RelationGetDescr(td->tg_relation), is_null));
}

Datum GuardRow(const TriggerData *td, const GuardCache &guard) {
  if (TRIGGER_FIRED_BY_INSERT(td->tg_event)) {
    // A per-row fence's INSERT (granted_tokens): the new row's first token,
    // any or none, as long as the database granted it.
    RowWrite row{};
    row.relid = RelationGetRelid(td->tg_relation);
    row.rel = td->tg_relation;
    const Token token = ReadToken(td->tg_trigtuple, td, guard, &row.new_is_null);
    if (!row.new_is_null && !WithinKnownGrants(guard.extension_schema, token)) {
      RefuseUngrantedRowToken(row, guard, token);
    }
    if (!row.new_is_null) NoteRowToken(guard, token);
    return PointerGetDatum(td->tg_trigtuple);
  }
  RowWrite row{};
  row.relid = RelationGetRelid(td->tg_relation);
  row.rel = td->tg_relation;
  row.kind = WriteKind::kUpdate;
  row.old_token = ReadToken(td->tg_trigtuple, td, guard, &row.old_is_null);
  row.new_token = ReadToken(td->tg_newtuple, td, guard, &row.new_is_null);
  row.column_assigned = ColumnAssigned(td, guard, row);
  return PointerGetDatum(JudgeRowFence(row, guard).skip ? nullptr : td->tg_newtuple);
}

// An UPDATE that moves a row to another partition deletes it from the old
// one, and the old partition's BEFORE DELETE trigger fires for that half of
// the move: it is the same write, made under the token the UPDATE carried,
// which the guard has just judged.  The guard remembers the last row it let
// an UPDATE change under a lock, so that the delete half of a move is not
// refused for want of a presented token.
struct AcceptedUpdate {
  bool valid;
  Oid relid;
  ItemPointerData tid;
  CommandId command;
  SubTransactionId subxact;
};
AcceptedUpdate last_accepted_update{};

void RememberAcceptedUpdate(const TriggerData *td) {
  last_accepted_update.valid = true;
  last_accepted_update.relid = RelationGetRelid(td->tg_relation);
  last_accepted_update.tid = td->tg_trigtuple->t_self;
  last_accepted_update.command = GetCurrentCommandId(false);
  last_accepted_update.subxact = GetCurrentSubTransactionId();
}

// Whether this DELETE is the second half of the row movement the guard has
// just accepted (same row, same command); consumes the memory.
bool IsDeleteHalfOfAcceptedMove(const TriggerData *td) {
  const AcceptedUpdate &last = last_accepted_update;
  const bool match =
      last.valid && last.relid == RelationGetRelid(td->tg_relation) &&
      ItemPointerEquals(const_cast<ItemPointer>(&last.tid), &td->tg_trigtuple->t_self) &&
      last.command == GetCurrentCommandId(false) && last.subxact == GetCurrentSubTransactionId();
  last_accepted_update.valid = false;
  return match;
}

// TRUNCATE removes every row at once and fires no row triggers: it needs
// the lock's current token, presented for the transaction.
Datum GuardTruncate(const TriggerData *td, GuardCache &guard) {
  const LockFence *fence = FindTransactionFence(guard.lock_name);
  if (fence == nullptr || !fence->presented) {
    ReportMissing(td->tg_relation, guard, MissingReason::kTruncateNonePresented);
  }
  const Token token = fence->presented_token;
  Token mark = 0;
  Token highest = 0;
  const FenceVerdict verdict =
      AdvanceLockFence(guard.extension_schema, guard.lock_id, guard.lock_kind, guard.lock_source,
                       guard.lock_name, token, &mark, &highest);
  if (verdict != FenceVerdict::kAccept) {
    ReportLockRefusal(td->tg_relation, guard, verdict, token, mark, highest);
  }
  NoteTokenUnderLock(guard, token);
  return PointerGetDatum(nullptr);  // ignored for statement triggers
}

Datum GuardUnderLock(const TriggerData *td, GuardCache &guard) {
  AuthorizeWritesUnderLock(RelationGetRelid(td->tg_relation), td->tg_relation->rd_rel->relowner,
                           guard);
  if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) return GuardTruncate(td, guard);
  if (TRIGGER_FIRED_BY_DELETE(td->tg_event) && IsDeleteHalfOfAcceptedMove(td)) {
    return PointerGetDatum(td->tg_trigtuple);
  }

  RowWrite row{};
  row.relid = RelationGetRelid(td->tg_relation);
  row.rel = td->tg_relation;
  row.kind = TRIGGER_FIRED_BY_INSERT(td->tg_event)   ? WriteKind::kInsert
             : TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? WriteKind::kUpdate
                                                     : WriteKind::kDelete;
  // For INSERT tg_trigtuple is the new row; for UPDATE and DELETE the old.
  HeapTuple new_row = row.kind == WriteKind::kInsert   ? td->tg_trigtuple
                      : row.kind == WriteKind::kUpdate ? td->tg_newtuple
                                                       : nullptr;
  HeapTuple old_row = row.kind == WriteKind::kInsert ? nullptr : td->tg_trigtuple;
  row.new_is_null = true;
  row.old_is_null = true;
  if (new_row != nullptr) row.new_token = ReadToken(new_row, td, guard, &row.new_is_null);
  if (old_row != nullptr) row.old_token = ReadToken(old_row, td, guard, &row.old_is_null);
  row.column_assigned = row.kind == WriteKind::kUpdate && ColumnAssigned(td, guard, row);

  const Judgement judgement = JudgeLockFence(row, guard);
  if (judgement.skip) return PointerGetDatum(nullptr);
  if (row.kind == WriteKind::kDelete) return PointerGetDatum(old_row);
  if (row.kind == WriteKind::kUpdate) RememberAcceptedUpdate(td);
  if (!judgement.fill) return PointerGetDatum(new_row);
  int column_number = guard.attnum;
  Datum value = Int64GetDatum(judgement.fill_token);
  bool is_null = false;
  return PointerGetDatum(heap_modify_tuple_by_cols(new_row, RelationGetDescr(td->tg_relation), 1,
                                                   &column_number, &value, &is_null));
}

// ---- In an UPDATE's projection (update_check.cpp puts the call there) -----------

// What fencing_guard_check() keeps for the query, in fn_extra.
struct ProjectionGuard {
  GuardCache guard;
  Oid owner;   // the table's, for AuthorizeWritesUnderLock
  bool fires;  // whether the trigger would fire (session_replication_role)
};

// Whether the trigger would fire now, as PostgreSQL decides it for a
// trigger that is enabled in the usual way or ALWAYS (the only ones the
// planner hands to the projection).
bool TriggerFiresNow(const Trigger *trigger) {
  if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA) {
    return trigger->tgenabled == TRIGGER_FIRES_ON_REPLICA ||
           trigger->tgenabled == TRIGGER_FIRES_ALWAYS;
  }
  return trigger->tgenabled != TRIGGER_FIRES_ON_REPLICA && trigger->tgenabled != TRIGGER_DISABLED;
}

// Whether the current role may UPDATE column attnum of the table (any
// column: InvalidAttrNumber), by a grant on the table or on the column.
void RefuseUnlessMayUpdate(Oid relid, AttrNumber attnum) {
  const Oid role = GetUserId();
  const bool may =
      pg_class_aclcheck(relid, role, ACL_UPDATE) == ACLCHECK_OK ||
      (attnum == InvalidAttrNumber
           ? pg_attribute_aclcheck_all(relid, role, ACL_UPDATE, ACLMASK_ANY) == ACLCHECK_OK
           : pg_attribute_aclcheck(relid, attnum, role, ACL_UPDATE) == ACLCHECK_OK);
  if (may) return;
  ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                  errmsg("permission denied for table %s", get_rel_name(relid)),
                  errdetail("fencing_guard_check() judges a write for a role that may UPDATE the "
                            "table's token column.")));
}

// Reads the guard trigger's settings on the first call of the query.  The
// function is callable by any role (the planner puts it into their
// UPDATEs), so it may judge only for a role that may UPDATE the table: it
// then does nothing that role's own UPDATE would not do.
ProjectionGuard &LookupProjectionGuard(FunctionCallInfo fcinfo, Oid trigger_oid, Oid relid) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  auto *cache = static_cast<ProjectionGuard *>(flinfo->fn_extra);
  if (cache != nullptr && cache->guard.trigger_oid == trigger_oid &&
      cache->guard.relation_oid == relid) {
    return *cache;
  }
  RefuseUnlessMayUpdate(relid, InvalidAttrNumber);
  const Oid schema = ExtensionSchema(fcinfo);
  Relation rel = table_open(relid, AccessShareLock);
  const Trigger *trigger = nullptr;
  for (int i = 0; rel->trigdesc != nullptr && i < rel->trigdesc->numtriggers; ++i) {
    if (rel->trigdesc->triggers[i].tgoid == trigger_oid) trigger = &rel->trigdesc->triggers[i];
  }
  FmgrInfo *guard_function = ExtensionFunction(schema, "fencing_guard", 0, nullptr);
  if (trigger == nullptr || trigger->tgfoid != guard_function->fn_oid) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("trigger with OID %u is not a fencing_guard trigger of table \"%s\"",
                           trigger_oid, RelationGetRelationName(rel))));
  }
  ProjectionGuard fresh;
  fresh.guard = ReadGuardTrigger(trigger, rel, schema, flinfo->fn_mcxt);
  RefuseUnlessMayUpdate(relid, fresh.guard.attnum);
  if (fresh.guard.options.skip) {
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("fencing_guard_check() cannot judge for %s: it has option skip",
                           WhereTrigger(trigger, rel)),
                    errdetail("Only the trigger can leave a row unchanged.")));
  }
  fresh.owner = rel->rd_rel->relowner;
  fresh.fires = TriggerFiresNow(trigger);
  table_close(rel, NoLock);

  if (cache == nullptr) {
    cache = static_cast<ProjectionGuard *>(
        MemoryContextAlloc(flinfo->fn_mcxt, sizeof(ProjectionGuard)));
    flinfo->fn_extra = cache;
  }
  *cache = fresh;
  return *cache;
}

}  // namespace

AttrNumber ColumnCheckableInProjection(Relation rel, const Trigger *trigger, Oid token_type) {
  if (trigger->tgnargs < 1) return InvalidAttrNumber;
  GuardOptions options;
  const char *word = nullptr;
  if (ApplyOptions(trigger->tgargs + 1, trigger->tgnargs - 1, options, &word) !=
          OptionStatus::kOk ||
      options.skip) {
    return InvalidAttrNumber;
  }
  TupleDesc desc = RelationGetDescr(rel);
  for (int i = 0; i < desc->natts; ++i) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (att->attisdropped || strcmp(NameStr(att->attname), trigger->tgargs[0]) != 0) continue;
    const bool plain = att->atttypid == token_type && att->attgenerated == '\0';
    return plain ? att->attnum : InvalidAttrNumber;
  }
  return InvalidAttrNumber;
}

namespace {

// The checks fencing_protect() makes before it creates the triggers, with
// the same rules as the trigger itself so both fail alike: the options (and
// lock, if any) and the column.  Returns the column's name; *fence_reads
// (if given) gets whether the options ask for a read fence.
Name CheckProtection(FunctionCallInfo fcinfo, Oid relid, const char *lock_name,
                     bool *fence_reads = nullptr, GuardOptions *parsed = nullptr) {
  const Oid token_type = TokenTypeOid(ExtensionSchema(fcinfo));
  int count = 0;
  Datum *elems = nullptr;
  bool *nulls = nullptr;
  if (!PG_ARGISNULL(2)) {
    deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls,
                      &count);
  }
  const char **words = static_cast<const char **>(palloc(sizeof(char *) * (count + 1)));
  for (int i = 0; i < count; ++i) {
    if (nulls[i]) {
      ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                      errmsg("fencing_protect() options must not contain NULL")));
    }
    words[i] = TextDatumGetCString(elems[i]);
  }
  int word_count = count;
  if (lock_name != nullptr) words[word_count++] = psprintf("lock=%s", lock_name);
  const GuardOptions options = ParseOptions(words, word_count, "fencing_protect()");
  if (fence_reads != nullptr) *fence_reads = options.fence_reads;
  if (parsed != nullptr) *parsed = options;  // its lock_name points into words, palloc'd

  Relation rel = try_table_open(relid, AccessShareLock);
  if (rel == nullptr) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                    errmsg("relation with OID %u does not exist", relid)));
  }
  const AttrNumber attnum = PG_ARGISNULL(1)
                                ? FindOnlyTokenColumn(rel, token_type)
                                : ResolveNamedColumn(rel, NameStr(*PG_GETARG_NAME(1)), token_type);
  Name column = static_cast<Name>(palloc(sizeof(NameData)));
  namestrcpy(column, NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname));
  table_close(rel, NoLock);
  return column;
}

// The options array (a text[] Datum, or none) with one more word.
Datum WithOptionWord(Datum options, bool options_null, const char *word) {
  int count = 0;
  Datum *elems = nullptr;
  bool *nulls = nullptr;
  if (!options_null) {
    deconstruct_array(DatumGetArrayTypeP(options), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls,
                      &count);
  }
  Datum *words = static_cast<Datum *>(palloc(sizeof(Datum) * (count + 1)));
  for (int i = 0; i < count; ++i) words[i] = elems[i];  // CheckProtection refused NULLs
  words[count] = CStringGetTextDatum(word);
  return PointerGetDatum(construct_array(words, count + 1, TEXTOID, -1, false, TYPALIGN_INT));
}

// The options array (a text[] Datum, or none) without its lock=NAME word.
Datum WithoutLockWord(Datum options, bool options_null) {
  if (options_null) return options;
  int count = 0;
  Datum *elems = nullptr;
  bool *nulls = nullptr;
  deconstruct_array(DatumGetArrayTypeP(options), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls,
                    &count);
  Datum *words = static_cast<Datum *>(palloc(sizeof(Datum) * (count + 1)));
  int kept = 0;
  for (int i = 0; i < count; ++i) {  // CheckProtection refused NULLs
    if (strncmp(TextDatumGetCString(elems[i]), "lock=", 5) != 0) words[kept++] = elems[i];
  }
  return PointerGetDatum(construct_array(words, kept, TEXTOID, -1, false, TYPALIGN_INT));
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PG_FUNCTION_INFO_V1(fencing_guard);
Datum fencing_guard(PG_FUNCTION_ARGS) {
  if (!CALLED_AS_TRIGGER(fcinfo)) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("fencing_guard() can only be called as a trigger"),
                    errhint("Protect a table with fencing_protect().")));
  }
  const TriggerData *td = reinterpret_cast<TriggerData *>(fcinfo->context);
  GuardCache &guard = LookupGuard(fcinfo, td);
  CheckTriggerProtocol(td, guard);
  return guard.lock_name == nullptr ? GuardRow(td, guard) : GuardUnderLock(td, guard);
}

// fencing_guard_check(new_token, old_token, guard_trigger oid, guarded_table
// oid) RETURNS fencing_token: what a plain UPDATE of a guarded table evaluates for the
// token column in place of the BEFORE row trigger (see update_check.cpp).
// Judges the new token against the old row's (and, under a lock, the lock's
// mark) exactly as the trigger would, and returns the token to store.
PG_FUNCTION_INFO_V1(fencing_guard_check);
Datum fencing_guard_check(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(2) || PG_ARGISNULL(3)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("fencing_guard_check() needs the guard trigger's OID and its table's")));
  }
  ProjectionGuard &projection = LookupProjectionGuard(fcinfo, PG_GETARG_OID(2), PG_GETARG_OID(3));
  if (!projection.fires) {
    if (PG_ARGISNULL(0)) PG_RETURN_NULL();
    PG_RETURN_DATUM(PG_GETARG_DATUM(0));
  }
  GuardCache &guard = projection.guard;
  RowWrite row{};
  row.relid = guard.relation_oid;
  row.rel = nullptr;
  row.kind = WriteKind::kUpdate;
  row.new_is_null = PG_ARGISNULL(0);
  row.new_token = row.new_is_null ? 0 : DatumGetInt64(PG_GETARG_DATUM(0));
  row.old_is_null = PG_ARGISNULL(1);
  row.old_token = row.old_is_null ? 0 : DatumGetInt64(PG_GETARG_DATUM(1));
  row.column_assigned = true;  // the planner wraps the SET expression of the column
  Judgement judgement{};
  if (guard.lock_name == nullptr) {
    judgement = JudgeRowFence(row, guard);
  } else {
    AuthorizeWritesUnderLock(row.relid, projection.owner, guard);
    judgement = JudgeLockFence(row, guard);
  }
  // Neither happens here: skip is refused above, and a write that sets the
  // column is never filled from the presented token.
  if (judgement.skip || judgement.fill) elog(ERROR, "fencing_guard_check() cannot change a row");
  if (row.new_is_null) PG_RETURN_NULL();
  PG_RETURN_DATUM(PG_GETARG_DATUM(0));
}

// fencing_protect(tbl regclass, token_column name, options text[],
// lock_name text) RETURNS void: checks the table, the column and the
// options with the same rules as the trigger itself (so both fail alike),
// checks that the caller and the owners of the table and of its inheritance
// children may use the lock, then has fencing_protect_as() -- which runs as
// the caller, so CREATE TRIGGER checks the caller's rights -- create the
// triggers.
PG_FUNCTION_INFO_V1(fencing_protect);
Datum fencing_protect(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("table must not be NULL")));
  }
  const Oid relid = PG_GETARG_OID(0);
  const Oid schema = ExtensionSchema(fcinfo);
  // No lock_name: a per-row fence.
  const char *lock_name = PG_ARGISNULL(3) ? nullptr : CheckLockName(fcinfo, 3);
  bool fence_reads = false;
  GuardOptions parsed;
  Name column = CheckProtection(fcinfo, relid, lock_name, &fence_reads, &parsed);
  Datum options = PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2);
  bool options_null = PG_ARGISNULL(2);
  // A lock named by the option word lock=NAME is lock_name by another name
  // (1.7): the same checks of the lock, the same triggers on every write
  // path.  (Before, the word alone made a trigger on UPDATE only, which let
  // a stale INSERT and a token-less DELETE through.)  With both, the
  // options' parse has refused two locks.
  if (lock_name == nullptr && !parsed.lock_name.empty()) {
    lock_name = pnstrdup(parsed.lock_name.data(), parsed.lock_name.size());
    options = WithoutLockWord(options, options_null);
  }
  // A per-row fence's tokens are this database's grants unless it is told
  // otherwise (1.5): its guard gets the word that says so.  Not in a
  // database still on an older version, which guards as it did.
  static const Oid kBumpArgTypes[] = {INT8OID};
  if (lock_name == nullptr && parsed.token_source == TokenSource::kUnknown &&
      ExtensionFunctionIfExists(schema, "fencing_bump_tokens", 1, kBumpArgTypes) != nullptr) {
    options = WithOptionWord(options, options_null, "granted_tokens");
    options_null = false;
  }

  const Oid caller = GetUserId();
  if (lock_name != nullptr) {
    AuthorizeLock(schema, lock_name, caller, true, InvalidOid);
    // The guard checks each table's owner at write time; refuse now what it
    // would refuse then.  (find_all_inheritors lists partitions and
    // inheritance children, and the table itself.)
    ListCell *cell;
    foreach (cell, find_all_inheritors(relid, AccessShareLock, nullptr)) {
      const Oid table = lfirst_oid(cell);
      const Oid owner = OwnerOfRelation(table);
      if (OidIsValid(owner) && owner != caller)
        AuthorizeLock(schema, lock_name, owner, false, table);
    }
  }

  static const Oid kArgTypes[] = {OIDOID, REGCLASSOID, NAMEOID, TEXTARRAYOID, TEXTOID};
  FmgrInfo *fn = ExtensionFunction(schema, "fencing_protect_as", 5, kArgTypes);
  const Datum args[] = {ObjectIdGetDatum(caller), ObjectIdGetDatum(relid), NameGetDatum(column),
                        options, lock_name == nullptr ? (Datum)0 : CStringGetTextDatum(lock_name)};
  const bool arg_nulls[] = {false, false, false, options_null, lock_name == nullptr};
  bool is_null = false;
  CallExtensionFunction(fn, 5, args, arg_nulls, &is_null);

  // The read fence (1.4): set up with option fence_reads, taken down when the
  // table is protected again without it.  As the caller, like the triggers:
  // only the table's owner may change its policies.
  static const Oid kSetArgTypes[] = {REGCLASSOID, TEXTOID};
  static const Oid kRemoveArgTypes[] = {REGCLASSOID};
  FmgrInfo *read_fence =
      fence_reads
          ? ExtensionFunctionIfExists(schema, "fencing_set_read_fence", 2, kSetArgTypes)
          : ExtensionFunctionIfExists(schema, "fencing_remove_read_fence", 1, kRemoveArgTypes);
  if (read_fence == nullptr && fence_reads) {
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("fencing_protect() option \"fence_reads\" needs pg_fencing 1.4"),
                    errhint("ALTER EXTENSION pg_fencing UPDATE")));
  }
  if (read_fence != nullptr) {
    const Datum fence_args[] = {ObjectIdGetDatum(relid),
                                fence_reads ? CStringGetTextDatum(lock_name) : (Datum)0};
    CallExtensionFunction(read_fence, fence_reads ? 2 : 1, fence_args, nullptr, &is_null);
  }
  PG_RETURN_VOID();
}

// fencing_resolve_token_column(tbl, token_column, options) RETURNS name:
// what fencing_protect() of versions 1.0 and 1.1 calls before creating the
// trigger.  Version 1.2 drops the SQL function (PUBLIC could call it); the
// symbol stays for a database not yet updated to 1.2.
PG_FUNCTION_INFO_V1(fencing_resolve_token_column);
Datum fencing_resolve_token_column(PG_FUNCTION_ARGS) {
  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("table must not be NULL")));
  }
  PG_RETURN_NAME(CheckProtection(fcinfo, PG_GETARG_OID(0), nullptr));
}

}  // extern "C"
