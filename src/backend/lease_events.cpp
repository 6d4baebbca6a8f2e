// See lease_events.hpp.
//
// The announcement is a NOTIFY (Async_Notify): PostgreSQL queues it with
// the transaction and delivers it when the transaction commits, in commit
// order, and never when it rolls back.  PostgreSQL has no privilege on
// LISTEN -- any role of the database reads every payload -- so only the
// locks whose owner set fencing_set_announce(lock, true) are announced.
#include "lease_events.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "expiry_worker.hpp"
#include "extension_objects.hpp"
#include "kept_statements.hpp"
#include "lease_tables.hpp"
#include "lease_writers.hpp"
#include "locks.hpp"
#include "settings.hpp"
#include "shared_stats.hpp"

namespace pg_fencing {
namespace {

constexpr const char *kChannel = "fencing_events";
// NOTIFY refuses a payload of this many bytes or more (async.c).
constexpr size_t kMaxPayload = BLCKSZ - NAMEDATALEN - 128;

const char *EventName(LeaseEventKind kind) {
  switch (kind) {
    case LeaseEventKind::kGranted:
      return "granted";
    case LeaseEventKind::kReleased:
      return "released";
    case LeaseEventKind::kExpired:
      return "expired";
    case LeaseEventKind::kRevoked:
      return "revoked";
  }
  return "unknown";
}

LeaseCounter CounterOf(LeaseEventKind kind) {
  switch (kind) {
    case LeaseEventKind::kGranted:
      return LeaseCounter::kGrants;
    case LeaseEventKind::kReleased:
      return LeaseCounter::kReleases;
    case LeaseEventKind::kExpired:
      return LeaseCounter::kExpiries;
    case LeaseEventKind::kRevoked:
      return LeaseCounter::kRevokes;
  }
  return LeaseCounter::kGrants;
}

void AppendJsonText(StringInfo buf, Datum text_value) {
  if (text_value == Datum(0)) {
    appendStringInfoString(buf, "null");
    return;
  }
  escape_json(buf, text_to_cstring(DatumGetTextPP(text_value)));
}

void AppendJsonToken(StringInfo buf, bool has_token, Token token) {
  if (has_token) {
    appendStringInfo(buf, "\"" INT64_FORMAT "\"", token);
  } else {
    appendStringInfoString(buf, "null");
  }
}

// The payload: a JSON object whose tokens are strings (a JSON number
// loses precision past 2^53 in most readers).
char *Payload(const LeaseEvent &event) {
  StringInfoData buf;
  initStringInfo(&buf);
  appendStringInfoString(&buf, "{\"lock_name\": ");
  escape_json(&buf, event.lock_name);
  appendStringInfo(&buf, ", \"lock_id\": \"" INT64_FORMAT "\", \"event\": \"%s\", \"holder\": ",
                   event.lock_id, EventName(event.kind));
  AppendJsonText(&buf, event.holder);
  appendStringInfoString(&buf, ", \"token\": ");
  AppendJsonToken(&buf, event.has_token, event.token);
  char at[MAXDATELEN + 1];
  appendStringInfo(
      &buf, ", \"at\": \"%s\"",
      JsonEncodeDateTime(at, TimestampTzGetDatum(GetCurrentTimestamp()), TIMESTAMPTZOID, nullptr));
  if (event.kind == LeaseEventKind::kGranted) {
    appendStringInfo(
        &buf, ", \"takeover\": %s, \"previous_holder\": ", event.takeover ? "true" : "false");
    AppendJsonText(&buf, event.has_previous ? event.previous_holder : Datum(0));
    appendStringInfoString(&buf, ", \"previous_token\": ");
    AppendJsonToken(&buf, event.has_previous, event.previous_token);
  }
  appendStringInfoChar(&buf, '}');
  if (buf.len < static_cast<int>(kMaxPayload)) return buf.data;
  // A name or holder too long for NOTIFY: what fits, and where to read
  // the rest (fencing_locks.lock_id, fencing_leases).
  resetStringInfo(&buf);
  appendStringInfo(&buf, "{\"lock_id\": \"" INT64_FORMAT "\", \"event\": \"%s\", \"token\": ",
                   event.lock_id, EventName(event.kind));
  AppendJsonToken(&buf, event.has_token, event.token);
  appendStringInfoString(&buf, ", \"truncated\": true}");
  return buf.data;
}

}  // namespace

void PublishLeaseEvent(const LeaseEvent &event, bool announce) {
  if (announce) Async_Notify(kChannel, Payload(event));
  CountLeaseEventAtCommit(event.lock_name, CounterOf(event.kind));
  // A lease ended early: the transactions still writing under it are
  // ended at once, not at its old end (src/backend/lease_writers.cpp).
  if (event.kind == LeaseEventKind::kReleased || event.kind == LeaseEventKind::kRevoked) {
    if (event.has_token) {
      EndWritersOfLeaseAtCommit(event.token);
    } else {
      ScheduleExpiryCheckAtCommit(GetCurrentTimestamp());
    }
  }
  if (event.takeover) CountLeaseEventAtCommit(event.lock_name, LeaseCounter::kTakeovers);
}

void RecordEndedLease(Oid schema, const EndedLease &lease) {
  if (settings::history_size <= 0) return;
  const LeaseTableIds &ids = LeaseTablesOf(schema);
  if (!OidIsValid(ids.history)) return;  // an extension not yet updated to 1.4
  // The lease's entry in its lock's ring: lock_id * 2^20 + grant_count %
  // pg_fencing.history_size (below 2^20), negated for the ring of the slots'
  // leases (1.7).
  if (lease.slot != 0 && ids.history_slot == InvalidAttrNumber) return;
  const int64 position = (lease.lock_id << 20) | (lease.grant_count % settings::history_size);
  const int64 entry = lease.slot != 0 ? -position : position;
  Relation history = table_open(ids.history, RowExclusiveLock);
  Relation probe = index_open(ids.history_probe, AccessShareLock);
  CommandCounterIncrement();
  Snapshot snapshot = RegisterSnapshot(GetTransactionSnapshot());
  HeapTuple used = FetchRowByNumber(history, probe, entry, snapshot);
  UnregisterSnapshot(snapshot);
  // Every column of the table, found by name; any other (a DBA's) NULL.
  const int natts = RelationGetDescr(history)->natts;
  auto *values = static_cast<Datum *>(palloc0(sizeof(Datum) * natts));
  auto *nulls = static_cast<bool *>(palloc(sizeof(bool) * natts));
  for (int i = 0; i < natts; ++i) nulls[i] = true;
  // The slot last: only a slot's lease has one.
  const int columns[] = {ids.history_entry,      ids.history_lock_name, ids.history_grant_count,
                         ids.history_token,      ids.history_holder,    ids.history_holder_role,
                         ids.history_granted_at, ids.history_ended_at,  ids.history_end_reason,
                         ids.history_slot};
  const Datum column_values[] = {Int64GetDatum(entry),
                                 lease.lock_name,
                                 Int64GetDatum(lease.grant_count),
                                 Int64GetDatum(lease.token),
                                 lease.holder,
                                 lease.holder_role,
                                 TimestampTzGetDatum(lease.granted_at),
                                 TimestampTzGetDatum(lease.ended_at),
                                 CStringGetTextDatum(lease.end_reason),
                                 Int32GetDatum(lease.slot)};
  const int written = lease.slot != 0 ? lengthof(columns) : lengthof(columns) - 1;
  const bool column_nulls[lengthof(columns)] = {};
  for (int i = 0; i < written; ++i) {
    values[columns[i] - 1] = column_values[i];
    nulls[columns[i] - 1] = false;
  }
  bool is_null = false;
  if (used != nullptr &&
      DatumGetInt64(RowColumn(history, used, ids.history_grant_count, &is_null)) >
          lease.grant_count) {
    // A newer lease of the ring holds the entry: this one is too old to keep.
  } else if (used == nullptr) {
    InsertRow(history, values, nulls);
  } else if (!ReplaceRow(history, used, written - 2, columns + 2, column_values + 2,
                         column_nulls + 2)) {
    // Nobody else writes this lock's entries: its grants take turns.
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("history entry of fencing lock \"%s\" changed while it was written",
                           text_to_cstring(DatumGetTextPP(lease.lock_name)))));
  }
  index_close(probe, NoLock);
  table_close(history, NoLock);
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

// fencing_lease_event(lock_name text, event text, holder text, token
// fencing_token) RETURNS void: PublishLeaseEvent() for the SQL that changes
// a lease (the revoke; the grants and releases of permits and shared
// leases, 1.4).  A lock that does not exist has no events.  PUBLIC may not
// call it.
PG_FUNCTION_INFO_V1(fencing_lease_event);
Datum fencing_lease_event(PG_FUNCTION_ARGS) {
  const char *lock_name = CheckLockName(fcinfo, 0);
  const char *event_name = PG_ARGISNULL(1) ? "NULL" : text_to_cstring(PG_GETARG_TEXT_PP(1));
  LeaseEvent event = {};
  event.lock_name = lock_name;
  if (strcmp(event_name, "granted") == 0) {
    event.kind = LeaseEventKind::kGranted;
  } else if (strcmp(event_name, "released") == 0) {
    event.kind = LeaseEventKind::kReleased;
  } else if (strcmp(event_name, "expired") == 0) {
    event.kind = LeaseEventKind::kExpired;
  } else if (strcmp(event_name, "revoked") == 0) {
    event.kind = LeaseEventKind::kRevoked;
  } else {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("lease event must be granted, released, expired or revoked, got %s "
                           "(lock \"%s\")",
                           event_name, lock_name)));
  }
  event.holder = PG_ARGISNULL(2) ? Datum(0) : PointerGetDatum(PG_GETARG_TEXT_PP(2));
  event.has_token = !PG_ARGISNULL(3);
  event.token = event.has_token ? PG_GETARG_INT64(3) : 0;

  const Oid schema = ExtensionSchema(fcinfo);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  Oid types[] = {TEXTOID};
  Datum args[] = {CStringGetTextDatum(lock_name)};
  const int rc = ExecuteKept(
      psprintf("SELECT k.lock_id, k.announce FROM %s.fencing_lock k "
               "WHERE k.lock_name OPERATOR(pg_catalog.=) $1",
               quote_identifier(get_namespace_name(schema))),
      1, types, args, nullptr, true, 1);
  if (rc != SPI_OK_SELECT) elog(ERROR, "pg_fencing: reading fencing_lock failed");
  bool found = SPI_processed == 1;
  bool announce = false;
  if (found) {
    bool is_null = false;
    event.lock_id =
        DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null));
    announce =
        DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &is_null));
  }
  SPI_finish();
  if (found) PublishLeaseEvent(event, announce);
  PG_RETURN_VOID();
}

}  // extern "C"
