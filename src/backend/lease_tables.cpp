// See lease_tables.hpp.
//
// Why not SQL: each statement the lease engine ran through SPI cost
// 60,000-90,000 instructions, most of it executor start-up (ModifyTable,
// scans, projections), for a one-row change by primary key.  These
// functions do what those statements did -- an index probe under an MVCC
// snapshot, heap_update() and the index entries of a non-HOT update -- and
// nothing else.  The tables have no CHECK constraints, no row-level
// security and no partitions (the extension creates them, and only their
// owner could add any): an UPDATE would do nothing more.  Triggers, which a
// DBA may add to audit grants, fire: a table that has any that would fire
// is written with an UPDATE instead (ReplaceRowWithTriggers).
#include "lease_tables.hpp"
#include "kept_statements.hpp"

#include "pg_compat.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/relcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace pg_fencing {
namespace {

LeaseTableIds cached_ids = {};
bool ids_valid = false;
bool callback_registered = false;

void ForgetIds(Datum, int, uint32) { ids_valid = false; }

Oid RelationIn(Oid schema, const char *name) {
  const Oid relid = get_relname_relid(name, schema);
  if (!OidIsValid(relid)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("relation \"%s\" of extension pg_fencing does not exist in schema "
                           "\"%s\"",
                           name, get_namespace_name(schema)),
                    errhint("Update the extension: ALTER EXTENSION pg_fencing UPDATE.")));
  }
  return relid;
}

AttrNumber ColumnOf(Oid relid, const char *column) {
  const AttrNumber attnum = get_attnum(relid, column);
  if (attnum == InvalidAttrNumber) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                    errmsg("column \"%s\" of table %s of extension pg_fencing does not exist",
                           column, get_rel_name(relid)),
                    errhint("Update the extension: ALTER EXTENSION pg_fencing UPDATE.")));
  }
  return attnum;
}

// Enters the index entries of a row version that heap_update could not
// make a HOT update, as the executor does after an UPDATE.
void InsertIndexEntries(Relation table, HeapTuple tuple, bool summarizing_only) {
  List *indexes = RelationGetIndexList(table);
  if (indexes == NIL) return;
  EState *estate = CreateExecutorState();
  TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(table), &TTSOpsHeapTuple);
  ExecStoreHeapTuple(tuple, slot, false);
  GetPerTupleExprContext(estate)->ecxt_scantuple = slot;
  ListCell *cell;
  foreach (cell, indexes) {
    Relation index = index_open(lfirst_oid(cell), RowExclusiveLock);
    IndexInfo *info = BuildIndexInfo(index);
    if (summarizing_only && !compat::IndexIsSummarizing(info)) {
      index_close(index, NoLock);
      continue;
    }
    if (info->ii_ExclusionOps != nullptr) {
      ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                      errmsg("exclusion constraint \"%s\" on table %s is not supported",
                             RelationGetRelationName(index), RelationGetRelationName(table)),
                      errdetail("pg_fencing writes its own tables directly.")));
    }
    bool wanted = true;
    if (info->ii_Predicate != NIL) {
      ExprState *predicate = ExecPrepareQual(info->ii_Predicate, estate);
      wanted = ExecQual(predicate, GetPerTupleExprContext(estate));
    }
    if (wanted) {
      Datum values[INDEX_MAX_KEYS];
      bool nulls[INDEX_MAX_KEYS];
      FormIndexDatum(info, slot, estate, values, nulls);
      (void)index_insert(index, values, nulls, &tuple->t_self, table,
                         index->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, false,
                         info);
    }
    index_close(index, NoLock);
  }
  ExecDropSingleTupleTableSlot(slot);
  FreeExecutorState(estate);
  list_free(indexes);
}

// ReplaceRow for a table that has triggers (a DBA's audit trigger, the
// stress harness's record of grants): an UPDATE of that row version by its
// ctid, so that the triggers fire as for any UPDATE.  0 rows: the version
// is gone (a race lost).  Only here can a race lost to a writer still
// running leave a row lock behind, until the transaction ends (PostgreSQL
// keeps the lock it took to re-check the newer version).
bool ReplaceRowWithTriggers(Relation table, HeapTuple row, int count, const int *columns,
                            const Datum *values, const bool *nulls) {
  TupleDesc desc = RelationGetDescr(table);
  StringInfoData query;
  initStringInfo(&query);
  appendStringInfo(&query, "UPDATE %s.%s SET ",
                   quote_identifier(get_namespace_name(RelationGetNamespace(table))),
                   quote_identifier(RelationGetRelationName(table)));
  Oid types[MaxTupleAttributeNumber];
  Datum args[MaxTupleAttributeNumber];
  char arg_nulls[MaxTupleAttributeNumber + 1];
  for (int i = 0; i < count; ++i) {
    const Form_pg_attribute attribute = TupleDescAttr(desc, columns[i] - 1);
    appendStringInfo(&query, "%s%s = $%d", i > 0 ? ", " : "",
                     quote_identifier(NameStr(attribute->attname)), i + 1);
    types[i] = attribute->atttypid;
    args[i] = values[i];
    arg_nulls[i] = nulls[i] ? 'n' : ' ';
  }
  appendStringInfo(&query, " WHERE ctid OPERATOR(pg_catalog.=) $%d", count + 1);
  types[count] = TIDOID;
  args[count] = PointerGetDatum(&row->t_self);
  arg_nulls[count] = ' ';
  arg_nulls[count + 1] = '\0';
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  const int rc = ExecuteKept(query.data, count + 1, types, args, arg_nulls, false, 0);
  if (rc != SPI_OK_UPDATE) {
    elog(ERROR, "pg_fencing: updating a row of %s failed: %s", RelationGetRelationName(table),
         SPI_result_code_string(rc));
  }
  const bool replaced = SPI_processed == 1;
  SPI_finish();
  return replaced;
}

// InsertRow for a table that has triggers: an INSERT, so that they fire.
// Columns are named (dropped ones left out), the others take their values.
void InsertRowWithTriggers(Relation table, const Datum *values, const bool *nulls) {
  TupleDesc desc = RelationGetDescr(table);
  StringInfoData query, params;
  initStringInfo(&query);
  initStringInfo(&params);
  appendStringInfo(&query, "INSERT INTO %s.%s (",
                   quote_identifier(get_namespace_name(RelationGetNamespace(table))),
                   quote_identifier(RelationGetRelationName(table)));
  Oid types[MaxTupleAttributeNumber];
  Datum args[MaxTupleAttributeNumber];
  char arg_nulls[MaxTupleAttributeNumber + 1];
  int count = 0;
  for (int i = 0; i < desc->natts; ++i) {
    const Form_pg_attribute attribute = TupleDescAttr(desc, i);
    if (attribute->attisdropped) continue;
    appendStringInfo(&query, "%s%s", count > 0 ? ", " : "",
                     quote_identifier(NameStr(attribute->attname)));
    appendStringInfo(&params, "%s$%d", count > 0 ? ", " : "", count + 1);
    types[count] = attribute->atttypid;
    args[count] = values[i];
    arg_nulls[count] = nulls[i] ? 'n' : ' ';
    ++count;
  }
  arg_nulls[count] = '\0';
  appendStringInfo(&query, ") VALUES (%s)", params.data);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  const int rc = ExecuteKept(query.data, count, types, args, arg_nulls, false, 0);
  if (rc != SPI_OK_INSERT) {
    elog(ERROR, "pg_fencing: inserting a row into %s failed: %s", RelationGetRelationName(table),
         SPI_result_code_string(rc));
  }
  SPI_finish();
}

}  // namespace

const LeaseTableIds &LeaseTablesOf(Oid schema) {
  if (!callback_registered) {
    CacheRegisterSyscacheCallback(RELOID, ForgetIds, 0);
    CacheRegisterSyscacheCallback(ATTNUM, ForgetIds, 0);
    callback_registered = true;
  }
  if (ids_valid && cached_ids.schema == schema) return cached_ids;
  LeaseTableIds ids = {};
  ids.schema = schema;
  ids.lock = RelationIn(schema, "fencing_lock");
  ids.lock_probe = RelationIn(schema, "fencing_lock_name_hash");
  ids.lease = RelationIn(schema, "fencing_lease");
  ids.lease_probe = RelationIn(schema, "fencing_lease_name_hash");
  ids.fence = RelationIn(schema, "fencing_fence");
  ids.fence_probe = RelationIn(schema, "fencing_fence_name_hash");
  // The primary keys' collation, the column's: the probe descends the
  // index in its order.
  Oid name_type = InvalidOid;
  int32 name_typmod = -1;
  get_atttypetypmodcoll(ids.lock, ColumnOf(ids.lock, "lock_name"), &name_type, &name_typmod,
                        &ids.name_collation);
  ids.lock_name = ColumnOf(ids.lock, "lock_name");
  ids.lock_id = ColumnOf(ids.lock, "lock_id");
  ids.lock_owner = ColumnOf(ids.lock, "owner");
  ids.lock_users = ColumnOf(ids.lock, "users");
  ids.lock_delay = ColumnOf(ids.lock, "lock_delay");
  ids.lease_holder = ColumnOf(ids.lease, "holder");
  ids.lease_holder_role = ColumnOf(ids.lease, "holder_role");
  ids.lease_token = ColumnOf(ids.lease, "token");
  ids.lease_granted_at = ColumnOf(ids.lease, "granted_at");
  ids.lease_expires_at = ColumnOf(ids.lease, "expires_at");
  ids.lease_payload = ColumnOf(ids.lease, "payload");
  ids.lease_ended = ColumnOf(ids.lease, "ended");
  ids.lease_end_reason = ColumnOf(ids.lease, "end_reason");
  ids.fence_high_water = ColumnOf(ids.fence, "high_water");
  // From 1.4 on; InvalidAttrNumber in a database not yet updated.
  ids.lock_announce = get_attnum(ids.lock, "announce");
  ids.lease_grant_count = get_attnum(ids.lease, "grant_count");
  ids.lock_kind = get_attnum(ids.lock, "kind");
  ids.lock_permits = get_attnum(ids.lock, "permits");
  ids.lock_by_id = RelationIn(schema, "fencing_lock_lock_id_key");
  ids.lock_token_source = get_attnum(ids.lock, "token_source");
  ids.permit = get_relname_relid("fencing_permit", schema);
  ids.permit_token =
      OidIsValid(ids.permit) ? RelationIn(schema, "fencing_permit_token") : InvalidOid;
  ids.permit_key =
      OidIsValid(ids.permit) ? RelationIn(schema, "fencing_permit_pkey") : InvalidOid;
  if (OidIsValid(ids.permit)) {
    ids.permit_token_column = ColumnOf(ids.permit, "token");
    ids.permit_granted_at = ColumnOf(ids.permit, "granted_at");
    ids.permit_grant_count = get_attnum(ids.permit, "grant_count");
    ids.permit_lock_id = ColumnOf(ids.permit, "lock_id");
    ids.permit_slot = ColumnOf(ids.permit, "slot");
    ids.permit_lock_name = ColumnOf(ids.permit, "lock_name");
    ids.permit_expires_at = ColumnOf(ids.permit, "expires_at");
    ids.permit_ended = ColumnOf(ids.permit, "ended");
    ids.permit_holder = ColumnOf(ids.permit, "holder");
    ids.permit_holder_role = ColumnOf(ids.permit, "holder_role");
  }
  ids.lease_token_index = get_relname_relid("fencing_lease_token", schema);
  ids.lease_lock_name = ColumnOf(ids.lease, "lock_name");
  ids.history = get_relname_relid("fencing_grant_history", schema);
  ids.history_probe =
      OidIsValid(ids.history) ? RelationIn(schema, "fencing_grant_history_pkey") : InvalidOid;
  if (OidIsValid(ids.history)) {
    ids.history_entry = ColumnOf(ids.history, "entry");
    ids.history_lock_name = ColumnOf(ids.history, "lock_name");
    ids.history_grant_count = ColumnOf(ids.history, "grant_count");
    ids.history_token = ColumnOf(ids.history, "token");
    ids.history_holder = ColumnOf(ids.history, "holder");
    ids.history_holder_role = ColumnOf(ids.history, "holder_role");
    ids.history_granted_at = ColumnOf(ids.history, "granted_at");
    ids.history_ended_at = ColumnOf(ids.history, "ended_at");
    ids.history_end_reason = ColumnOf(ids.history, "end_reason");
    ids.history_slot = get_attnum(ids.history, "slot");
  }
  ids.session = get_relname_relid("fencing_session", schema);
  ids.session_key =
      OidIsValid(ids.session) ? RelationIn(schema, "fencing_session_pkey") : InvalidOid;
  ids.session_role =
      OidIsValid(ids.session) ? RelationIn(schema, "fencing_session_role") : InvalidOid;
  ids.session_expires_at =
      OidIsValid(ids.session) ? ColumnOf(ids.session, "expires_at") : InvalidAttrNumber;
  ids.session_holder_role =
      OidIsValid(ids.session) ? ColumnOf(ids.session, "holder_role") : InvalidAttrNumber;
  ids.session_ttl = OidIsValid(ids.session) ? ColumnOf(ids.session, "ttl") : InvalidAttrNumber;
  ids.session_holder =
      OidIsValid(ids.session) ? ColumnOf(ids.session, "holder") : InvalidAttrNumber;
  ids.session_hold_key =
      OidIsValid(ids.session) ? get_attnum(ids.session, "hold_key") : InvalidAttrNumber;
  ids.lease_session_id = get_attnum(ids.lease, "session_id");
  ids.permit_session_id =
      OidIsValid(ids.permit) ? get_attnum(ids.permit, "session_id") : InvalidAttrNumber;
  ids.line = get_relname_relid("fencing_line", schema);
  ids.lock_has_line = get_attnum(ids.lock, "has_line");
  if (OidIsValid(ids.line)) {
    ids.line_order = RelationIn(schema, "fencing_line_order");
    ids.line_place = ColumnOf(ids.line, "place");
    ids.line_session_id = ColumnOf(ids.line, "session_id");
    ids.line_wait_until = ColumnOf(ids.line, "wait_until");
    ids.line_token = ColumnOf(ids.line, "token");
    ids.line_by_call = ColumnOf(ids.line, "by_call");
  }
  cached_ids = ids;
  ids_valid = true;
  return cached_ids;
}

namespace {

// The first row version that snapshot sees through index for key (on the
// index's first column), copied; nullptr if none.  recheck_name: for a
// hash index on a text column, which matches hash codes, the name to check
// on the row (0: the index's match is exact).
HeapTuple FirstRowFor(Relation table, Relation index_rel, ScanKeyData *key, Snapshot snapshot,
                      Oid collation, Datum recheck_name) {
  IndexScanDesc scan = compat::IndexBeginScan(table, index_rel, snapshot, 1);
  index_rescan(scan, key, 1, nullptr, 0);
  TupleTableSlot *slot = table_slot_create(table, nullptr);
  HeapTuple row = nullptr;
  while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
    if (scan->xs_recheck && recheck_name != Datum(0)) {
      bool is_null = false;
      const Datum found = slot_getattr(slot, 1, &is_null);
      if (is_null ||
          !DatumGetBool(DirectFunctionCall2Coll(texteq, collation, found, recheck_name))) {
        continue;
      }
    }
    row = ExecCopySlotHeapTuple(slot);
    break;
  }
  index_endscan(scan);
  ExecDropSingleTupleTableSlot(slot);
  return row;
}

}  // namespace

HeapTuple FetchRow(Relation table, Relation index_rel, Oid collation, Datum name,
                   Snapshot snapshot) {
  // The probe's strategy is the index's equality: 1 in a hash index, 3 in
  // a B-tree.
  const StrategyNumber equal =
      index_rel->rd_rel->relam == HASH_AM_OID ? HTEqualStrategyNumber : BTEqualStrategyNumber;
  ScanKeyData key;
  ScanKeyEntryInitialize(&key, 0, 1, equal, InvalidOid, collation, F_TEXTEQ, name);
  return FirstRowFor(table, index_rel, &key, snapshot, collation, name);
}

TokenSource TokenSourceOfRow(Relation lock, HeapTuple row) {
  const LeaseTableIds &ids = LeaseTablesOf(RelationGetNamespace(lock));
  if (ids.lock_token_source == InvalidAttrNumber) return TokenSource::kUnknown;  // before 1.5
  bool is_null = false;
  const Datum source = RowColumn(lock, row, ids.lock_token_source, &is_null);
  if (is_null) return TokenSource::kUnknown;
  const char *word = TextDatumGetCString(source);
  if (strcmp(word, "granted") == 0) return TokenSource::kGranted;
  if (strcmp(word, "external") == 0) return TokenSource::kExternal;
  return TokenSource::kUnknown;
}

LockKind LockKindOfRow(Relation lock, HeapTuple row) {
  const LeaseTableIds &ids = LeaseTablesOf(RelationGetNamespace(lock));
  if (ids.lock_kind == InvalidAttrNumber) return LockKind::kExclusive;  // before 1.4
  bool is_null = false;
  const Datum kind = RowColumn(lock, row, ids.lock_kind, &is_null);
  if (is_null) return LockKind::kExclusive;
  const char *word = TextDatumGetCString(kind);
  if (strcmp(word, "semaphore") == 0) return LockKind::kSemaphore;
  if (strcmp(word, "shared") == 0) return LockKind::kShared;
  return LockKind::kExclusive;
}

HeapTuple FetchRowCommittedNow(Relation table, Relation index, Oid collation,
                               const char *lock_name) {
  // In parallel mode (a read-fence policy's initplan under a Gather, say)
  // no new snapshot may be taken: the statement's is the latest there is
  // for it, and only what a read judges runs there.
  Snapshot snapshot =
      RegisterSnapshot(IsInParallelMode() ? GetActiveSnapshot() : GetLatestSnapshot());
  HeapTuple row = FetchRow(table, index, collation, CStringGetTextDatum(lock_name), snapshot);
  UnregisterSnapshot(snapshot);
  return row;
}

HeapTuple FetchRowByNumber(Relation table, Relation btree, int64 number, Snapshot snapshot) {
  ScanKeyData key;
  ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid, F_INT8EQ,
                         Int64GetDatum(number));
  return FirstRowFor(table, btree, &key, snapshot, InvalidOid, Datum(0));
}

List *FetchRowsByNumber(Relation table, Relation btree, int64 number, Snapshot snapshot) {
  ScanKeyData key;
  ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid, F_INT8EQ,
                         Int64GetDatum(number));
  IndexScanDesc scan = compat::IndexBeginScan(table, btree, snapshot, 1);
  index_rescan(scan, &key, 1, nullptr, 0);
  TupleTableSlot *slot = table_slot_create(table, nullptr);
  List *rows = NIL;
  while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
    rows = lappend(rows, ExecCopySlotHeapTuple(slot));
  }
  index_endscan(scan);
  ExecDropSingleTupleTableSlot(slot);
  return rows;
}

int64 CountIndexEntries(Relation table, Relation btree, Oid number, int64 most) {
  ScanKeyData key;
  ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid, F_OIDEQ,
                         ObjectIdGetDatum(number));
  // SnapshotAny: index_getnext_tid() never looks at the table, and no
  // snapshot judges an entry, so every entry counts (those the index has
  // marked dead aside, which no snapshot sees).
  IndexScanDesc scan = compat::IndexBeginScan(table, btree, SnapshotAny, 1);
  index_rescan(scan, &key, 1, nullptr, 0);
  int64 entries = 0;
  while (entries < most && index_getnext_tid(scan, ForwardScanDirection) != nullptr) ++entries;
  index_endscan(scan);
  return entries;
}

void InsertRow(Relation table, const Datum *values, const bool *nulls) {
  TupleDesc desc = RelationGetDescr(table);
  if (table->trigdesc != nullptr) {
    InsertRowWithTriggers(table, values, nulls);
    return;
  }
  HeapTuple row = heap_form_tuple(desc, const_cast<Datum *>(values), const_cast<bool *>(nulls));
  simple_heap_insert(table, row);
  InsertIndexEntries(table, row, false);
  CommandCounterIncrement();
}

Datum RowColumn(Relation table, HeapTuple row, AttrNumber column, bool *is_null) {
  return heap_getattr(row, column, RelationGetDescr(table), is_null);
}

namespace {

// What a row changed by another transaction since it was fetched means: a
// race lost (false), or in REPEATABLE READ and SERIALIZABLE the error an
// UPDATE would raise.
bool RaceLost() {
  if (IsolationUsesXactSnapshot()) {
    ereport(ERROR, (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                    errmsg("could not serialize access due to concurrent update")));
  }
  return false;
}

}  // namespace

bool LockRow(Relation table, HeapTuple row) {
  return LockRowIn(table, row, LockTupleNoKeyExclusive);
}

bool LockRowIn(Relation table, HeapTuple row, LockTupleMode mode) {
  TupleTableSlot *slot = table_slot_create(table, nullptr);
  TM_FailureData failure;
  const TM_Result result =
      table_tuple_lock(table, &row->t_self, GetActiveSnapshot(), slot, GetCurrentCommandId(true),
                       mode, LockWaitBlock, 0, &failure);
  ExecDropSingleTupleTableSlot(slot);
  switch (result) {
    case TM_Ok:
      return true;
    case TM_Updated:
    case TM_Deleted:
      return RaceLost();
    default:
      elog(ERROR, "pg_fencing: unexpected result %d locking a row of %s", static_cast<int>(result),
           RelationGetRelationName(table));
  }
  return false;
}

namespace {

// Whether an UPDATE of `columns` would fire none of the table's triggers:
// every trigger on UPDATE is the referenced side of a foreign key into the
// table (fencing_line's into fencing_session and fencing_lock, 1.10), which
// acts only when a referenced key changes, and no column replaced is in a
// key a foreign key may reference.  Without this, the foreign key of 1.10
// sent every session renewal through an UPDATE: parsed and planned, it
// cost four times the renewal itself.
bool NoTriggerFires(Relation table, int count, const int *columns) {
  const TriggerDesc *triggers = table->trigdesc;
  for (int i = 0; i < triggers->numtriggers; ++i) {
    const Trigger &trigger = triggers->triggers[i];
    if (TRIGGER_FOR_UPDATE(trigger.tgtype) && RI_FKey_trigger_type(trigger.tgfoid) != RI_TRIGGER_PK) {
      return false;
    }
  }
  Bitmapset *keys = RelationGetIndexAttrBitmap(table, INDEX_ATTR_BITMAP_KEY);
  bool untouched = true;
  for (int i = 0; i < count && untouched; ++i) {
    untouched = !bms_is_member(columns[i] - FirstLowInvalidHeapAttributeNumber, keys);
  }
  bms_free(keys);
  return untouched;
}

}  // namespace

bool ReplaceRow(Relation table, HeapTuple row, int count, const int *columns, const Datum *values,
                const bool *nulls) {
  if (table->trigdesc != nullptr && !NoTriggerFires(table, count, columns)) {
    return ReplaceRowWithTriggers(table, row, count, columns, values, nulls);
  }
  HeapTuple replacement =
      heap_modify_tuple_by_cols(row, RelationGetDescr(table), count, const_cast<int *>(columns),
                                const_cast<Datum *>(values), const_cast<bool *>(nulls));
  TM_FailureData failure;
  compat::IndexEntries entries = compat::IndexEntries::kNone;
  const TM_Result result = compat::HeapUpdate(table, &row->t_self, replacement, &failure, &entries);
  switch (result) {
    case TM_Ok:
      break;
    case TM_Updated:
    case TM_Deleted:
      return RaceLost();
    default:
      elog(ERROR, "pg_fencing: unexpected result %d updating a row of %s", static_cast<int>(result),
           RelationGetRelationName(table));
  }
  if (entries != compat::IndexEntries::kNone) {
    InsertIndexEntries(table, replacement, entries == compat::IndexEntries::kSummarizingOnly);
  }
  // Later looks in this transaction see the new version.
  CommandCounterIncrement();
  return true;
}

namespace {

// The columns of a lease's end in `table`, fencing_lease or fencing_permit.
struct EndColumns {
  AttrNumber expires_at, ended, session_id;
};

EndColumns EndColumnsOf(const LeaseTableIds &ids, Relation table) {
  if (RelationGetRelid(table) == ids.permit) {
    return {ids.permit_expires_at, ids.permit_ended, ids.permit_session_id};
  }
  return {ids.lease_expires_at, ids.lease_ended, ids.lease_session_id};
}

}  // namespace

int64 LeaseRowSession(const LeaseTableIds &ids, Relation table, HeapTuple row) {
  const AttrNumber column = EndColumnsOf(ids, table).session_id;
  if (column == InvalidAttrNumber || !OidIsValid(ids.session_key)) return 0;
  bool is_null = false;
  const Datum session = RowColumn(table, row, column, &is_null);
  return is_null ? 0 : DatumGetInt64(session);
}

TimestampTz LeaseRowEnd(const LeaseTableIds &ids, Relation table, HeapTuple row,
                        Snapshot snapshot) {
  const EndColumns columns = EndColumnsOf(ids, table);
  bool is_null = false;
  const TimestampTz own = DatumGetTimestampTz(RowColumn(table, row, columns.expires_at, &is_null));
  const int64 session = LeaseRowSession(ids, table, row);
  if (session == 0) return own;
  bool ended_null = false;
  (void)RowColumn(table, row, columns.ended, &ended_null);
  if (!ended_null) return own;  // released or revoked: ended at its own end
  Relation sessions = table_open(ids.session, AccessShareLock);
  Relation key = index_open(ids.session_key, AccessShareLock);
  // The session's end as committed now: at REPEATABLE READ the
  // transaction's snapshot may predate a renewal that shortened the
  // session, which ended it, and a release or an own acquire would take
  // the lease for live (no write of the session's row would tell them:
  // they write the lease's).  At READ COMMITTED (and in parallel mode) the
  // caller's snapshot is the statement's or the latest, and is used as it
  // is, so that the lease's row and the session's are read in one.
  Snapshot now = !IsInParallelMode() && IsolationUsesXactSnapshot()
                     ? RegisterSnapshot(GetLatestSnapshot())
                     : snapshot;
  HeapTuple found = FetchRowByNumber(sessions, key, session, now);
  if (now != snapshot) UnregisterSnapshot(now);
  // No row: the session was closed or swept, which wrote the lease's end
  // too (in a newer version of the lease's row than the one at hand, when
  // the two were read in different snapshots): ended, at the latest now.
  const TimestampTz end =
      found != nullptr
          ? DatumGetTimestampTz(RowColumn(sessions, found, ids.session_expires_at, &is_null))
          : Min(own, GetCurrentTimestamp());
  index_close(key, NoLock);
  table_close(sessions, NoLock);
  return end;
}

}  // namespace pg_fencing
