// See expiry_worker.hpp.
//
// A lease that runs out changes nothing in the tables: the expiry is a
// moment, not a write.  To announce it, something must look at that
// moment.  With the library preloaded:
//
//   the schedule  shared memory: per database, the earliest lease end that
//                 someone must look at (0: none).  Each commit that grants,
//                 extends or renews a lease moves it earlier if its lease
//                 ends sooner, and wakes the launcher.
//   the launcher  a background worker connected to no database: sleeps
//                 until the earliest time in the schedule, then starts the
//                 database's worker.  At start it puts every database in
//                 the schedule once (leases granted before a restart).
//   a worker      connects to one database, calls
//                 fencing_announce_expiries() (announce and mark every
//                 lease that ran out, return the next end), puts that end
//                 into the schedule, and exits.  It lives for one look, so
//                 it never keeps a database from being dropped.
//
// No end is missed: the worker clears its database's entry before it takes
// its snapshot, and a commit moves the entry only after it is visible; so
// a lease either is in the worker's snapshot or moves the entry after the
// clearing.  A worker that fails leaves a retry ten seconds later.
#include "expiry_worker.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "extension_objects.hpp"
#include "lease_counts.hpp"  // EarlierEnd
#include "lease_events.hpp"
#include "lease_tables.hpp"
#include "lease_wakeup.hpp"
#include "lease_writers.hpp"

#include <dlfcn.h>

namespace pg_fencing {
namespace {

// Databases the schedule can hold; a database beyond them has its
// expiries announced only when its locks are next acted on.
constexpr int kMaxDatabases = 256;
constexpr int64 kRetryUs = 10 * USECS_PER_SEC;
// A database with the extension is looked at this often even when no
// commit scheduled a look (a lease granted by a prepared transaction, a
// lease row changed by hand).
constexpr int64 kPeriodicUs = 60 * USECS_PER_SEC;
// An expired lease the worker could not mark (its row locked by a
// transaction still running) is looked at again this soon.
constexpr int64 kRelookUs = 100 * 1000;

// How many expired sessions one pass ends (fencing_end_expired_sessions):
// each is held by a lock-manager lock until the pass commits.
constexpr int kSessionsPerSweep = 100;
// The launcher's longest sleep: it also notices a lost wake-up this way.
constexpr long kMaxSleepMs = 60 * 1000;

struct ScheduledDatabase {
  Oid database;
  TimestampTz next_look;  // 0: nothing to look at
  bool running;           // a worker is looking (the launcher's flag)
};

struct Schedule {
  slock_t mutex;
  Latch *launcher;  // nullptr while no launcher runs
  int count;
  ScheduledDatabase databases[kMaxDatabases];
};

Schedule *schedule = nullptr;

}  // namespace

void RequestExpiryMemory() { RequestAddinShmemSpace(MAXALIGN(sizeof(Schedule))); }

void AttachExpiryMemory() {
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  schedule = static_cast<Schedule *>(
      ShmemInitStruct("pg_fencing expiry schedule", sizeof(Schedule), &found));
  if (!found) {
    SpinLockInit(&schedule->mutex);
    schedule->launcher = nullptr;
    schedule->count = 0;
  }
  LWLockRelease(AddinShmemInitLock);
}

namespace {

// With the mutex held: the database's entry, made if need be (nullptr when
// the schedule is full).
ScheduledDatabase *EntryOf(Oid database) {
  ScheduledDatabase *free_slot = nullptr;
  for (int i = 0; i < schedule->count; ++i) {
    ScheduledDatabase *entry = &schedule->databases[i];
    if (entry->database == database) return entry;
    if (entry->database == InvalidOid && !entry->running && free_slot == nullptr) {
      free_slot = entry;  // a dropped database's
    }
  }
  if (free_slot == nullptr) {
    if (schedule->count == kMaxDatabases) return nullptr;
    free_slot = &schedule->databases[schedule->count++];
  }
  *free_slot = {database, 0, false};
  return free_slot;
}

// Moves the database's next look to `at` if that is earlier; wakes the
// launcher when it did.
void LookNoLaterThan(Oid database, TimestampTz at) {
  if (schedule == nullptr || at == 0) return;
  Latch *wake = nullptr;
  SpinLockAcquire(&schedule->mutex);
  if (ScheduledDatabase *entry = EntryOf(database)) {
    const TimestampTz before = entry->next_look;
    entry->next_look = EarlierEnd(before, at);
    if (entry->next_look != before) wake = schedule->launcher;
  }
  SpinLockRelease(&schedule->mutex);
  if (wake != nullptr) SetLatch(wake);
}

// ---- The lease ends of the current transaction ----------------------------------

TimestampTz pending_end = 0;

void OnTransactionEvent(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_COMMIT:
      // After the commit record, and nothing here can fail.
      LookNoLaterThan(MyDatabaseId, pending_end);
      pending_end = 0;
      break;
    case XACT_EVENT_PREPARE:
      // Its leases are visible only once COMMIT PREPARED runs, maybe after
      // this look: the worker's periodic look (kPeriodicUs) catches them.
      LookNoLaterThan(MyDatabaseId, pending_end);
      pending_end = 0;
      break;
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      pending_end = 0;
      break;
    default:
      break;
  }
}

// ---- The launcher -----------------------------------------------------------------

// Every database that accepts connections, into the schedule, due now.
void ScheduleEveryDatabase() {
  StartTransactionCommand();
  (void)GetTransactionSnapshot();
  Relation databases = table_open(DatabaseRelationId, AccessShareLock);
  TableScanDesc scan = table_beginscan_catalog(databases, 0, nullptr);
  const TimestampTz now = GetCurrentTimestamp();
  while (HeapTuple tuple = heap_getnext(scan, ForwardScanDirection)) {
    const auto *form = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
    if (form->datallowconn && !form->datistemplate) LookNoLaterThan(form->oid, now);
  }
  table_endscan(scan);
  table_close(databases, AccessShareLock);
  CommitTransactionCommand();
}

bool DatabaseExists(Oid database) {
  StartTransactionCommand();
  const bool exists = SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(database));
  CommitTransactionCommand();
  return exists;
}

// The library the workers load: the file the postmaster preloaded, so that
// they run the same build (shared_preload_libraries may name it by its path,
// with Debian's extension_destdir say, while another build sits in $libdir;
// by name, a worker would load that one, which fails on redefining the
// settings).  "pg_fencing" when the path is unknown or too long.
void SetWorkerLibrary(char *name, size_t size) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&SetWorkerLibrary), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/' && strlen(info.dli_fname) < size) {
    strlcpy(name, info.dli_fname, size);
  } else {
    strlcpy(name, "pg_fencing", size);
  }
}

BackgroundWorkerHandle *StartWorker(Oid database) {
  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = BGW_NEVER_RESTART;
  SetWorkerLibrary(worker.bgw_library_name, sizeof worker.bgw_library_name);
  snprintf(worker.bgw_function_name, BGW_MAXLEN, "pg_fencing_expiry_worker_main");
  snprintf(worker.bgw_name, BGW_MAXLEN, "pg_fencing expiry worker for database %u", database);
  snprintf(worker.bgw_type, BGW_MAXLEN, "pg_fencing expiry worker");
  worker.bgw_main_arg = ObjectIdGetDatum(database);
  worker.bgw_notify_pid = MyProcPid;
  BackgroundWorkerHandle *handle = nullptr;
  if (!RegisterDynamicBackgroundWorker(&worker, &handle)) return nullptr;
  return handle;
}

void ClearLauncher(int, Datum) {
  SpinLockAcquire(&schedule->mutex);
  schedule->launcher = nullptr;
  SpinLockRelease(&schedule->mutex);
}

// One pass: starts the workers that are due, notes the ones that ended,
// and returns how long to sleep.
long LaunchDueWorkers(BackgroundWorkerHandle **handles) {
  const TimestampTz now = GetCurrentTimestamp();
  TimestampTz earliest = 0;
  for (int i = 0;; ++i) {
    SpinLockAcquire(&schedule->mutex);
    if (i >= schedule->count) {
      SpinLockRelease(&schedule->mutex);
      break;
    }
    ScheduledDatabase entry = schedule->databases[i];
    SpinLockRelease(&schedule->mutex);

    if (entry.running) {
      pid_t pid = 0;
      if (GetBackgroundWorkerPid(handles[i], &pid) != BGWH_STOPPED) continue;
      pfree(handles[i]);
      handles[i] = nullptr;
      SpinLockAcquire(&schedule->mutex);
      schedule->databases[i].running = false;
      entry = schedule->databases[i];
      SpinLockRelease(&schedule->mutex);
    }
    if (entry.next_look == 0) continue;
    if (entry.next_look > now) {
      earliest = EarlierEnd(earliest, entry.next_look);
      continue;
    }
    if (!DatabaseExists(entry.database)) {
      SpinLockAcquire(&schedule->mutex);
      schedule->databases[i] = {InvalidOid, 0, false};  // the slot is free again
      SpinLockRelease(&schedule->mutex);
      continue;
    }
    BackgroundWorkerHandle *handle = StartWorker(entry.database);
    SpinLockAcquire(&schedule->mutex);
    // If the worker fails before it has looked, it is tried again later.
    schedule->databases[i].next_look = now + kRetryUs;
    schedule->databases[i].running = handle != nullptr;
    SpinLockRelease(&schedule->mutex);
    handles[i] = handle;
    earliest = EarlierEnd(earliest, now + kRetryUs);
  }
  if (earliest == 0) return kMaxSleepMs;
  const int64 sleep_ms = (earliest - now + 999) / 1000;
  return sleep_ms < 1 ? 1 : Min(sleep_ms, (int64)kMaxSleepMs);
}

}  // namespace

void RegisterExpiryWorker() {
  RegisterXactCallback(OnTransactionEvent, nullptr);
  if (!process_shared_preload_libraries_in_progress) return;

  BackgroundWorker launcher;
  memset(&launcher, 0, sizeof launcher);
  launcher.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  launcher.bgw_start_time = BgWorkerStart_RecoveryFinished;
  launcher.bgw_restart_time = 10;
  SetWorkerLibrary(launcher.bgw_library_name, sizeof launcher.bgw_library_name);
  snprintf(launcher.bgw_function_name, BGW_MAXLEN, "pg_fencing_expiry_launcher_main");
  snprintf(launcher.bgw_name, BGW_MAXLEN, "pg_fencing expiry launcher");
  snprintf(launcher.bgw_type, BGW_MAXLEN, "pg_fencing expiry launcher");
  RegisterBackgroundWorker(&launcher);
}

void ScheduleLookNoLaterThan(Oid database, TimestampTz at) { LookNoLaterThan(database, at); }

void ScheduleExpiryCheckAtCommit(TimestampTz lease_end) {
  if (schedule == nullptr) return;
  pending_end = EarlierEnd(pending_end, lease_end);
}

}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PGDLLEXPORT void pg_fencing_expiry_launcher_main(Datum);
void pg_fencing_expiry_launcher_main(Datum) {
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);  // shared catalogs only

  SpinLockAcquire(&schedule->mutex);
  schedule->launcher = MyLatch;
  for (int i = 0; i < schedule->count; ++i) schedule->databases[i].running = false;
  SpinLockRelease(&schedule->mutex);
  before_shmem_exit(ClearLauncher, 0);

  BackgroundWorkerHandle *handles[kMaxDatabases] = {};
  ScheduleEveryDatabase();
  while (!ShutdownRequestPending) {
    const long sleep_ms = LaunchDueWorkers(handles);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, sleep_ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
  }
  // Not 0: the postmaster forgets a worker that exits with 0, and a
  // launcher stopped by pg_terminate_backend() must come back.
  proc_exit(1);
}

PGDLLEXPORT void pg_fencing_expiry_worker_main(Datum);
void pg_fencing_expiry_worker_main(Datum arg) {
  const Oid database = DatumGetObjectId(arg);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
  // The worker runs as a superuser, with the database's settings: its
  // statements name the extension's schema, and everything else resolves
  // in pg_catalog only, whatever search_path a database owner set (ALTER
  // DATABASE ... SET search_path), so that no object of theirs can stand
  // in for an operator or a function.
  SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

  // Cleared before the snapshot (see the top of the file).
  SpinLockAcquire(&schedule->mutex);
  for (int i = 0; i < schedule->count; ++i) {
    if (schedule->databases[i].database == database) schedule->databases[i].next_look = 0;
  }
  SpinLockRelease(&schedule->mutex);

  TimestampTz next = 0;
  PG_TRY();
  {
    // The transactions that outlived the leases they wrote under, first
    // and in a transaction of their own: nothing the announcing below
    // meets (a flood of expired sessions, an error) keeps them from being
    // ended.
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, "pg_fencing: ending transactions past their leases");
    next = EndTransactionsPastTheirLeases();
    PopActiveSnapshot();
    CommitTransactionCommand();

    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, "pg_fencing: announcing expired leases");
    // The extension, if this database has it at a version that announces.
    const int found = SPI_execute(
        "SELECT pg_catalog.format('%I.fencing_announce_expiries()', n.nspname) "
        "FROM pg_catalog.pg_extension e "
        "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
        "JOIN pg_catalog.pg_proc p ON p.pronamespace = n.oid "
        " AND p.proname = 'fencing_announce_expiries' AND p.pronargs = 0 "
        "WHERE e.extname = 'pg_fencing'",
        true, 1);
    if (found == SPI_OK_SELECT && SPI_processed == 1) {
      const char *call =
          psprintf("SELECT %s", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
      if (SPI_execute(call, false, 1) != SPI_OK_SELECT || SPI_processed != 1) {
        elog(ERROR, "pg_fencing: fencing_announce_expiries() failed");
      }
      bool is_null = false;
      const Datum end = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
      const TimestampTz now = GetCurrentTimestamp();
      // The next end, or soon when a lease it could not mark (or an
      // expired session beyond the batch it swept) is still due.
      if (!is_null) next = EarlierEnd(next, Max(DatumGetTimestampTz(end), now + kRelookUs));
      next = EarlierEnd(next, now + kPeriodicUs);
    }
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
  }
  PG_CATCH();
  {
    LookNoLaterThan(database, GetCurrentTimestamp() + kRetryUs);
    PG_RE_THROW();
  }
  PG_END_TRY();
  LookNoLaterThan(database, next);
  proc_exit(0);
}

}  // extern "C"

namespace pg_fencing {
namespace {

// Marks ended = 'expired' every row of `table` (fencing_lease, or
// fencing_permit: a semaphore's permits and a lock's shared leases) whose
// lease ran out unannounced, announcing (if its lock is announced) and
// counting each; `key` is the row's key, matched between the look and the
// update.  Rows locked by a transaction still running (a grant over this
// very lease, say) are skipped, not waited for: the worker must not stall a
// database's announcements behind one transaction.  READ COMMITTED
// re-checks a row changed meanwhile: a lease granted again is live, and
// left alone.
// also: a further condition on the look (d) and the update (l).
void MarkExpired(Oid schema_oid, const char *schema, const char *table, const char *key,
                 const char *lock_join, const char *also) {
  const int marked = SPI_execute(
      psprintf("WITH due AS (SELECT %s FROM %s.%s d "
               "WHERE d.ended IS NULL AND d.expires_at <= pg_catalog.clock_timestamp() %s "
               "FOR NO KEY UPDATE SKIP LOCKED) "
               "UPDATE %s.%s l SET ended = 'expired' FROM due, %s.fencing_lock k "
               "WHERE %s AND %s AND l.ended IS NULL "
               "RETURNING k.lock_name, k.lock_id, k.announce, l.holder, l.token",
               key, schema, table, also, schema, table, schema,
               strcmp(table, "fencing_lease") == 0
                   ? "l.lock_name = due.lock_name"
                   : "l.lock_id = due.lock_id AND l.slot = due.slot",
               lock_join),
      false, 0);
  if (marked != SPI_OK_UPDATE_RETURNING) {
    elog(ERROR, "pg_fencing: marking expired rows of %s failed", table);
  }
  SPITupleTable *expired = SPI_tuptable;
  for (uint64 i = 0; i < SPI_processed; ++i) {
    HeapTuple row = expired->vals[i];
    bool is_null = false;
    LeaseEvent event = {};
    event.lock_name = SPI_getvalue(row, expired->tupdesc, 1);
    event.lock_id = DatumGetInt64(SPI_getbinval(row, expired->tupdesc, 2, &is_null));
    const bool announce = DatumGetBool(SPI_getbinval(row, expired->tupdesc, 3, &is_null));
    event.kind = LeaseEventKind::kExpired;
    event.holder = SPI_getbinval(row, expired->tupdesc, 4, &is_null);
    event.has_token = true;
    event.token = DatumGetInt64(SPI_getbinval(row, expired->tupdesc, 5, &is_null));
    PublishLeaseEvent(event, announce);
    // The lock may be taken now: its waiters are told.
    WakeWaitersAtCommit(schema_oid, event.lock_id, true);
  }
}

}  // namespace
}  // namespace pg_fencing

extern "C" {

// fencing_announce_expiries() RETURNS timestamptz: every lease, permit and
// shared lease that ran out and was not announced is announced (if its lock
// is) and counted as an expiry, and marked ended = 'expired'; returns the
// end of the next live one (NULL: none).  PUBLIC may not call it.
PG_FUNCTION_INFO_V1(fencing_announce_expiries);
Datum fencing_announce_expiries(PG_FUNCTION_ARGS) {
  PreventCommandIfReadOnly("fencing_announce_expiries()");
  const Oid schema = ExtensionSchema(fcinfo);
  const char *s = quote_identifier(get_namespace_name(schema));
  // Permits and shared leases from 1.7 on, whose grants read a slot's last
  // lease under a row lock: the 1.4 to 1.6 ones do not, and would announce
  // an expiry the worker is marking a second time (and before 1.4 the
  // schema may hold a table of that name that is not ours).  'expired' on a
  // slot means what it means on a lease (1.4's grants mark a slot so when
  // they announce its expiry): it ran out, its lock-delay applies, and
  // nobody renews it any more.
  static const Oid kAwaitArgs[] = {TEXTOID,     TEXTOID, INTERVALOID, INTERVALOID,
                                   TEXTOID,     INT4OID, JSONBOID,    InvalidOid};
  Oid await_args[lengthof(kAwaitArgs)];
  memcpy(await_args, kAwaitArgs, sizeof kAwaitArgs);
  await_args[lengthof(kAwaitArgs) - 1] = TokenTypeOid(schema);
  // Sessions (1.8): an expired session's end goes into its leases, permits
  // and shared leases first, which are then marked as any; one still in a
  // session is the session's to end, whatever its own expires_at says.
  const bool has_sessions = OidIsValid(get_relname_relid("fencing_session", schema));
  // 1.7 exactly, by its fencing_await (1.8 gave it a session argument).  A
  // procedure: the function lookups (LookupFuncName) pass over it.
  const bool has_permits =
      has_sessions ||
      SearchSysCacheExists3(PROCNAMEARGSNSP, CStringGetDatum("fencing_await"),
                            PointerGetDatum(buildoidvector(await_args, lengthof(await_args))),
                            ObjectIdGetDatum(schema));
  // One batch of expired sessions per call, every role's (from 1.9: the
  // 1.8 sweep takes them all): a transaction holds each session it ends
  // with a lock-manager lock, and however many have piled up, the batch
  // fits in the lock table.  The rest keep the next end at or before now,
  // so the worker comes back for them at once (kRelookUs).
  const bool batched = LeaseTablesOf(schema).session_hold_key != InvalidAttrNumber;
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  if (has_sessions &&
      SPI_execute(batched ? psprintf("SELECT %s.fencing_end_expired_sessions(NULL, %d)", s,
                                     kSessionsPerSweep)
                          : psprintf("SELECT %s.fencing_end_expired_sessions()", s),
                  false, 0) != SPI_OK_SELECT) {
    elog(ERROR, "pg_fencing: ending expired sessions failed");
  }
  MarkExpired(schema, s, "fencing_lease", "d.lock_name", "k.lock_name = l.lock_name",
              has_sessions ? "AND d.session_id IS NULL" : "");
  if (has_permits) {
    MarkExpired(schema, s, "fencing_permit", "d.lock_id, d.slot", "k.lock_id = l.lock_id",
                has_sessions ? "AND d.session_id IS NULL" : "");
  }
  // The earliest end of a lease not marked, past or future: one that ended
  // after the marking's look (or was skipped) is due at once, so none falls
  // between the statements.
  const int next =
      SPI_execute(has_sessions
                      // LEAST is a construct of the grammar, not a function of pg_catalog.
                      ? psprintf("SELECT LEAST("
                                 "(SELECT pg_catalog.min(l.expires_at) FROM %s.fencing_lease l "
                                 "WHERE l.ended IS NULL AND l.session_id IS NULL), "
                                 "(SELECT pg_catalog.min(p.expires_at) FROM %s.fencing_permit p "
                                 "WHERE p.ended IS NULL AND p.session_id IS NULL), "
                                 "(SELECT pg_catalog.min(x.expires_at) FROM %s.fencing_session x))",
                                 s, s, s)
                      : has_permits ? psprintf("SELECT LEAST("
                                               "(SELECT pg_catalog.min(l.expires_at) FROM "
                                               "%s.fencing_lease l WHERE l.ended IS NULL), "
                                               "(SELECT pg_catalog.min(p.expires_at) FROM "
                                               "%s.fencing_permit p WHERE p.ended IS NULL))",
                                               s, s)
                                    : psprintf("SELECT pg_catalog.min(l.expires_at) FROM "
                                               "%s.fencing_lease l WHERE l.ended IS NULL",
                                               s),
                  false, 1);  // not read-only: it must see the marks just made
  if (next != SPI_OK_SELECT || SPI_processed != 1) {
    elog(ERROR, "pg_fencing: reading the next lease end failed");
  }
  bool is_null = false;
  const Datum end = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &is_null);
  // Read before SPI_finish frees the row (a timestamptz is by reference
  // where int8 is).
  const TimestampTz next_end = is_null ? 0 : DatumGetTimestampTz(end);
  SPI_finish();
  if (is_null) PG_RETURN_NULL();
  PG_RETURN_TIMESTAMPTZ(next_end);
}

}  // extern "C"
