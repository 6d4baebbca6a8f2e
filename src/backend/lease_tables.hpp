// Direct access to the extension's lease tables (fencing_lock,
// fencing_lease, fencing_fence) for the lease engine: a row found by its
// lock name through the table's hash index on it (fencing_permit's by
// lock_id and slot, through its primary key), and a row replaced in place,
// without the executor.  See lease_tables.cpp.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "access/htup.h"
#include "datatype/timestamp.h"
#include "nodes/lockoptions.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
}

namespace pg_fencing {

// The tables, their primary keys and the columns the engine reads or
// writes, found by name in the extension's schema (cached).
struct LeaseTableIds {
  Oid schema;
  // The tables and the indexes their rows are found by, a hash index on
  // lock_name: a probe costs the same with ten locks or a million (a
  // B-tree's grows with its depth).
  Oid lock, lock_probe, lease, lease_probe, fence, fence_probe;
  Oid name_collation;  // of lock_name, in all three tables and their primary keys
  AttrNumber lock_name, lock_id, lock_owner, lock_users, lock_delay;
  AttrNumber lease_holder, lease_holder_role, lease_token, lease_granted_at, lease_expires_at,
      lease_payload, lease_ended, lease_end_reason;
  AttrNumber fence_high_water;
  // Columns added in 1.4: InvalidAttrNumber in a database whose extension
  // is older (the library serves it as that version did).
  AttrNumber lock_announce, lease_grant_count, lock_kind, lock_permits;
  // Added in 1.5 (InvalidAttrNumber before): where the lock's tokens come from.
  AttrNumber lock_token_source;
  // fencing_permit, its index on token and its primary key (lock_id, slot)
  // (1.4; InvalidOid before), and its columns.
  Oid permit, permit_token, permit_key;
  AttrNumber permit_lock_id, permit_slot, permit_lock_name, permit_expires_at, permit_ended,
      permit_holder, permit_holder_role, permit_token_column, permit_granted_at;
  // The slot's number among the lock's slot grants (1.7; InvalidAttrNumber
  // before): where its lease goes in the history.
  AttrNumber permit_grant_count;
  // fencing_lock's unique index on lock_id: a lock found by its id.
  Oid lock_by_id;
  // fencing_lease's index on token (1.6; InvalidOid before): which lease a
  // token written under belongs to (src/backend/lease_writers.cpp).
  Oid lease_token_index;
  AttrNumber lease_lock_name;
  // fencing_grant_history and its primary key (1.4; InvalidOid before), and
  // its columns.
  Oid history, history_probe;
  AttrNumber history_entry, history_lock_name, history_grant_count, history_token, history_holder,
      history_holder_role, history_granted_at, history_ended_at, history_end_reason;
  AttrNumber history_slot;  // 1.7 (InvalidAttrNumber before): a permit's or shared lease's slot
  // fencing_session and its primary key (1.8; InvalidOid before), its end,
  // and the session a lease, a permit or a shared lease is in
  // (InvalidAttrNumber before 1.8).
  Oid session, session_key;
  // fencing_session's B-tree on holder_role: a role's sessions.
  Oid session_role;
  AttrNumber session_expires_at, session_holder, session_holder_role, session_ttl, lease_session_id,
      permit_session_id;
  // The session's hold key (1.9; InvalidAttrNumber before: the hold is
  // keyed by the session's id).
  AttrNumber session_hold_key;
  // fencing_line and its index on (lock_id, kind, place) (1.10;
  // InvalidOid before), and the columns a look at the line reads.
  Oid line, line_order;
  AttrNumber lock_has_line;
  AttrNumber line_place, line_session_id, line_wait_until, line_token, line_by_call;
};

const LeaseTableIds &LeaseTablesOf(Oid schema);

// The version of the row of table whose lock_name (its first column, which
// index, open, covers) is name that snapshot sees, copied into the current
// memory context (t_self is where it lives); nullptr if there is none.
HeapTuple FetchRow(Relation table, Relation index, Oid collation, Datum name, Snapshot snapshot);

// FetchRow() as committed now (the latest snapshot, whatever the isolation
// level), for a row judged as it stands, as a row lock would judge it; in
// parallel mode, as the statement's snapshot sees it.
HeapTuple FetchRowCommittedNow(Relation table, Relation index, Oid collation,
                               const char *lock_name);

// The same for a table whose first column is a bigint with a B-tree
// (fencing_grant_history's entry).
HeapTuple FetchRowByNumber(Relation table, Relation btree, int64 number, Snapshot snapshot);

// Every row version that snapshot sees through btree for number on its
// first column (fencing_permit's slots of a lock, through its primary key),
// copied, in the index's order; NIL if none.
List *FetchRowsByNumber(Relation table, Relation btree, int64 number, Snapshot snapshot);

// How many entries btree (over table) has for number on its first column
// (an oid), counting at most most: dead and uncommitted rows' entries
// included, so at least as many as any snapshot sees rows, and read
// without a visit to the table.
int64 CountIndexEntries(Relation table, Relation btree, Oid number, int64 most);

// Inserts a row, as an INSERT would (WAL, TOAST, index entries; triggers
// through an INSERT when the table has any).  values and nulls have one
// entry per column of the table (its natts, dropped columns included).
void InsertRow(Relation table, const Datum *values, const bool *nulls);

// How a fetched row of fencing_lock is leased (its kind; kExclusive before
// 1.4).
LockKind LockKindOfRow(Relation lock, HeapTuple row);

// Where a fetched row of fencing_lock says its tokens come from (kUnknown
// before 1.5, whose locks accept any token).
TokenSource TokenSourceOfRow(Relation lock, HeapTuple row);

// A column of a fetched row.
Datum RowColumn(Relation table, HeapTuple row, AttrNumber column, bool *is_null);
// The end of a fetched row of fencing_lease or of fencing_permit (`table`)
// as every judge takes it: its expires_at, or, for a lease in a session
// (1.8) that has not ended early, the session's end as committed now (the
// statement's snapshot in parallel mode).
// The SQL side has the same rule, fencing_lease_end() (and the view
// fencing_permit_ends).
TimestampTz LeaseRowEnd(const LeaseTableIds &ids, Relation table, HeapTuple row, Snapshot snapshot);
// The session a fetched row of fencing_lease or of fencing_permit is in, 0
// if none.
int64 LeaseRowSession(const LeaseTableIds &ids, Relation table, HeapTuple row);

// Locks the row version `row` (as fetched) for an update to come, as
// SELECT ... FOR NO KEY UPDATE would, waiting for a transaction that is
// still writing it.  False, with no lock taken, when another transaction
// updated or deleted it after it was fetched (40001 in REPEATABLE READ or
// SERIALIZABLE).
bool LockRow(Relation table, HeapTuple row);

// LockRow() in another mode: LockTupleKeyShare as SELECT ... FOR KEY
// SHARE, which a renewal (an update of no key) does not wait for.
bool LockRowIn(Relation table, HeapTuple row, LockTupleMode mode);

// Replaces the row version `row` (as fetched) by a copy with columns
// changed, as an UPDATE of that one row would (WAL, HOT, index entries,
// TOAST).  Waits for a transaction that is still writing the row.  Returns
// false when another transaction updated or deleted it after it was
// fetched -- a race lost, to be judged again on a newer look -- and, in
// REPEATABLE READ or SERIALIZABLE, raises 40001 then, as UPDATE does.  No
// row lock is left behind either way.
bool ReplaceRow(Relation table, HeapTuple row, int count, const int *columns, const Datum *values,
                const bool *nulls);

}  // namespace pg_fencing
