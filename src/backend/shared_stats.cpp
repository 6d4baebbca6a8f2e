// See shared_stats.hpp.
//
// Shared memory, sized at server start (the pg_fencing.max_tracked_* and
// rejections_kept settings), under one LWLock:
//   lock counters   hash (database, lock name) -> the LeaseCounter counts
//                   and the refused writes under the lock
//   table counters  hash (database, relid) -> refused writes
//   rejections      a ring of the last rejections_kept refused writes
// An entry, once made, stays until fencing_stats_reset() (as
// pg_stat_statements' do); a full table counts no new locks or tables.
//
// Across a restart the statistics follow PostgreSQL's own rule for its
// cumulative statistics: written to pg_stat/ at a clean shutdown, read back
// (and the file removed) at the next start, and so lost after a crash or an
// immediate shutdown, where the file is not written.
//
// Lease events count when their transaction commits (PendingLeaseCounts in
// the core, applied at XACT_EVENT_COMMIT); refused writes count at once,
// since their transaction is about to roll back.
#include "shared_stats.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inet.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#include "extension_objects.hpp"
#include "post_commit.hpp"
#include "settings.hpp"

namespace pg_fencing {
namespace {

// ---- Shared memory ----------------------------------------------------------------

struct LockKey {
  Oid database;
  char lock_name[kMaxCountedLockName + 1];  // zero-padded: the key is hashed as bytes
};

struct LockCounts {
  LockKey key;
  int64 counts[kLeaseCounterCount];
  int64 stale_rejections;
  int64 missing_rejections;
};

struct TableKey {
  Oid database;
  Oid relid;
};

struct TableCounts {
  TableKey key;
  int64 stale_rejections;
  int64 missing_rejections;
};

// One refused write.  Strings are cut to their fields (a lock name longer
// than kMaxCountedLockName shows cut).
struct RejectionEntry {
  TimestampTz at;
  Oid database;
  Oid relid;
  Oid role;
  int sqlerrcode;  // 0: skipped
  bool has_lock_name, has_token, has_mark, has_client_addr;
  Token token;
  Token mark;
  char lock_name[kMaxCountedLockName + 1];
  char application_name[NAMEDATALEN];
  char client_addr[64];
};

struct SharedHeader {
  LWLock *lock;
  TimestampTz reset_at;
  uint64 rejections_written;  // the ring's next slot is this modulo its capacity
  int rejections_capacity;
};

SharedHeader *shared = nullptr;
RejectionEntry *ring = nullptr;
HTAB *lock_counts = nullptr;
HTAB *table_counts = nullptr;

constexpr const char *kTranche = "pg_fencing";
constexpr const char *kStatsFile = "pg_stat/pg_fencing.stat";
constexpr const char *kStatsTempFile = "pg_stat/pg_fencing.stat.tmp";
constexpr uint32 kFileMagic = 0x46454e53;  // 'FENS'
constexpr uint32 kFileVersion = 1;

Size SharedSize() {
  Size size = MAXALIGN(sizeof(SharedHeader));
  size = add_size(size, mul_size(sizeof(RejectionEntry), settings::rejections_kept));
  size = add_size(size, hash_estimate_size(settings::max_tracked_locks, sizeof(LockCounts)));
  size = add_size(size, hash_estimate_size(settings::max_tracked_tables, sizeof(TableCounts)));
  return size;
}

}  // namespace

void RequestStatsMemory() {
  RequestAddinShmemSpace(SharedSize());
  RequestNamedLWLockTranche(kTranche, 1);
}

namespace {

// With the LWLock held exclusively: the entry of key in table, made (and
// zeroed past its key) if need be; nullptr when the table holds `limit`
// entries already.  A shared hash table would grow past its size into the
// server's spare shared memory: the limit is kept here.
template <typename Entry, typename Key>
Entry *EntryFor(HTAB *table, const Key &key, int limit) {
  auto *entry = static_cast<Entry *>(hash_search(table, &key, HASH_FIND, nullptr));
  if (entry != nullptr) return entry;
  if (hash_get_num_entries(table) >= limit) return nullptr;
  bool found = false;
  entry = static_cast<Entry *>(hash_search(table, &key, HASH_ENTER_NULL, &found));
  if (entry != nullptr && !found) {
    memset(reinterpret_cast<char *>(entry) + sizeof(Key), 0, sizeof(Entry) - sizeof(Key));
  }
  return entry;
}

// ---- The file ---------------------------------------------------------------------

// Writes the statistics at a clean shutdown of the postmaster (code 0); not
// after a crash, whose restart must start from zero.
void WriteStatsFile(int code, Datum) {
  if (code != 0 || shared == nullptr) return;
  FILE *file = AllocateFile(kStatsTempFile, PG_BINARY_W);
  if (file == nullptr) {
    ereport(LOG, (errcode_for_file_access(),
                  errmsg("pg_fencing: could not write \"%s\": %m", kStatsTempFile)));
    return;
  }
  bool ok = true;
  auto put = [&](const void *data, size_t size) {
    if (ok && fwrite(data, size, 1, file) != 1) ok = false;
  };
  const int64 locks = hash_get_num_entries(lock_counts);
  const int64 tables = hash_get_num_entries(table_counts);
  const uint64 kept = Min(shared->rejections_written, (uint64)shared->rejections_capacity);
  put(&kFileMagic, sizeof kFileMagic);
  put(&kFileVersion, sizeof kFileVersion);
  put(&shared->reset_at, sizeof shared->reset_at);
  put(&locks, sizeof locks);
  put(&tables, sizeof tables);
  put(&kept, sizeof kept);
  HASH_SEQ_STATUS scan;
  hash_seq_init(&scan, lock_counts);
  while (auto *entry = static_cast<LockCounts *>(hash_seq_search(&scan))) put(entry, sizeof *entry);
  hash_seq_init(&scan, table_counts);
  while (auto *entry = static_cast<TableCounts *>(hash_seq_search(&scan))) {
    put(entry, sizeof *entry);
  }
  // Oldest first, so that reading them back in order rebuilds the ring.
  for (uint64 i = shared->rejections_written - kept; i < shared->rejections_written; ++i) {
    put(&ring[i % shared->rejections_capacity], sizeof(RejectionEntry));
  }
  if (FreeFile(file) != 0) ok = false;
  if (!ok) {
    ereport(LOG, (errcode_for_file_access(),
                  errmsg("pg_fencing: could not write \"%s\": %m", kStatsTempFile)));
    unlink(kStatsTempFile);
    return;
  }
  (void)durable_rename(kStatsTempFile, kStatsFile, LOG);
}

// Reads back what the last clean shutdown wrote, and removes the file: a
// crash before the next clean shutdown leaves nothing to read.
void ReadStatsFile() {
  FILE *file = AllocateFile(kStatsFile, PG_BINARY_R);
  if (file == nullptr) {
    if (errno != ENOENT) {
      ereport(LOG, (errcode_for_file_access(),
                    errmsg("pg_fencing: could not read \"%s\": %m", kStatsFile)));
    }
    return;
  }
  bool ok = true;
  auto get = [&](void *data, size_t size) {
    if (ok && fread(data, size, 1, file) != 1) ok = false;
  };
  uint32 magic = 0, version = 0;
  int64 locks = 0, tables = 0;
  uint64 kept = 0;
  TimestampTz reset_at = 0;
  get(&magic, sizeof magic);
  get(&version, sizeof version);
  ok = ok && magic == kFileMagic && version == kFileVersion;
  get(&reset_at, sizeof reset_at);
  get(&locks, sizeof locks);
  get(&tables, sizeof tables);
  get(&kept, sizeof kept);
  if (ok) shared->reset_at = reset_at;
  for (int64 i = 0; ok && i < locks; ++i) {
    LockCounts read;
    get(&read, sizeof read);
    if (!ok) break;
    if (auto *entry = EntryFor<LockCounts>(lock_counts, read.key, settings::max_tracked_locks))
      *entry = read;
  }
  for (int64 i = 0; ok && i < tables; ++i) {
    TableCounts read;
    get(&read, sizeof read);
    if (!ok) break;
    if (auto *entry = EntryFor<TableCounts>(table_counts, read.key, settings::max_tracked_tables)) {
      *entry = read;
    }
  }
  for (uint64 i = 0; ok && i < kept; ++i) {
    RejectionEntry read;
    get(&read, sizeof read);
    if (!ok) break;
    ring[shared->rejections_written++ % shared->rejections_capacity] = read;
  }
  if (!ok)
    ereport(LOG, (errmsg("pg_fencing: ignoring the damaged statistics file \"%s\"", kStatsFile)));
  FreeFile(file);
  unlink(kStatsFile);
}

}  // namespace

void AttachStatsMemory() {
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  shared = static_cast<SharedHeader *>(ShmemInitStruct(
      "pg_fencing statistics",
      MAXALIGN(sizeof(SharedHeader)) + sizeof(RejectionEntry) * settings::rejections_kept, &found));
  ring = reinterpret_cast<RejectionEntry *>(reinterpret_cast<char *>(shared) +
                                            MAXALIGN(sizeof(SharedHeader)));
  if (!found) {
    shared->lock = &GetNamedLWLockTranche(kTranche)->lock;
    shared->reset_at = GetCurrentTimestamp();
    shared->rejections_written = 0;
    shared->rejections_capacity = settings::rejections_kept;
  }
  HASHCTL info;
  memset(&info, 0, sizeof info);
  info.keysize = sizeof(LockKey);
  info.entrysize = sizeof(LockCounts);
  lock_counts = ShmemInitHash("pg_fencing lock counters", settings::max_tracked_locks,
                              settings::max_tracked_locks, &info, HASH_ELEM | HASH_BLOBS);
  info.keysize = sizeof(TableKey);
  info.entrysize = sizeof(TableCounts);
  table_counts = ShmemInitHash("pg_fencing table counters", settings::max_tracked_tables,
                               settings::max_tracked_tables, &info, HASH_ELEM | HASH_BLOBS);
  LWLockRelease(AddinShmemInitLock);
  // The postmaster (and a single-user backend) reads the file once and
  // writes it at exit; backends only attach.
  if (!IsUnderPostmaster) {
    on_shmem_exit(WriteStatsFile, 0);
    if (!found) ReadStatsFile();
  }
}

namespace {

bool Available() { return shared != nullptr; }

void RequireAvailable() {
  if (Available()) return;
  ereport(ERROR,
          (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
           errmsg("pg_fencing statistics are not available"),
           errdetail("They are kept in shared memory, which the library sets up only when the "
                     "server loads it at start."),
           errhint("Add pg_fencing to shared_preload_libraries and restart the server.")));
}

LockKey KeyOf(const char *lock_name) {
  LockKey key;
  memset(&key, 0, sizeof key);
  key.database = MyDatabaseId;
  strlcpy(key.lock_name, lock_name, sizeof key.lock_name);
  return key;
}

LockCounts *LockCountsFor(const LockKey &key) {
  return EntryFor<LockCounts>(lock_counts, key, settings::max_tracked_locks);
}

// ---- Counting at commit ----------------------------------------------------------

// The counts of the current transaction: in a static array for the
// usual few locks, in the transaction's memory beyond them.
constexpr int kInlineLocks = 16;
PendingLockCounts inline_counts[kInlineLocks];
PendingLeaseCounts pending(inline_counts, kInlineLocks);

void ForgetPending() { PGF_CORE(pending.Reset(inline_counts, kInlineLocks)); }

// Runs after the commit record (post_commit.hpp): statistics are not
// worth a server.
void ApplyPending() {
  if (pending.Count() == 0 || !Available()) return;
  IgnoringErrorsAfterCommit([] {
    LWLockAcquire(shared->lock, LW_EXCLUSIVE);
    for (int i = 0; i < pending.Count(); ++i) {
      const PendingLockCounts &p = pending.At(i);
      LockCounts *entry = LockCountsFor(KeyOf(p.lock_name));
      if (entry == nullptr) continue;
      for (int c = 0; c < kLeaseCounterCount; ++c) entry->counts[c] += p.counts[c];
    }
    LWLockRelease(shared->lock);
  });
}

void OnTransactionEvent(XactEvent event, void *) {
  switch (event) {
    case XACT_EVENT_COMMIT:
      ApplyPending();
      ForgetPending();
      break;
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:  // a prepared transaction's events are not counted
      ForgetPending();
      break;
    default:
      break;
  }
}

void OnSubTransactionEvent(SubXactEvent event, SubTransactionId subxact, SubTransactionId parent,
                           void *) {
  if (event == SUBXACT_EVENT_ABORT_SUB) PGF_CORE(pending.AbortSubTransaction(subxact));
  if (event == SUBXACT_EVENT_COMMIT_SUB) PGF_CORE(pending.CommitSubTransaction(subxact, parent));
}

// ---- Who may see what -------------------------------------------------------------

bool ReadsAllStats() { return has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS); }

bool MaySelectFrom(Oid relid) {
  return pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

// The names of the locks the calling role may use, read from the
// extension's own view (fencing_locks applies the lock model's rule), as a
// set in the current memory context.  Names longer than a counted name are
// left out: nothing is counted under them.
struct VisibleName {
  char name[kMaxCountedLockName + 1];  // zero-padded: the key is hashed as bytes
};

HTAB *LocksTheCallerMayUse(Oid schema) {
  HASHCTL info;
  memset(&info, 0, sizeof info);
  info.keysize = sizeof(VisibleName);
  info.entrysize = sizeof(VisibleName);
  info.hcxt = CurrentMemoryContext;
  HTAB *visible =
      hash_create("pg_fencing visible locks", 64, &info, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_fencing: SPI_connect failed");
  const char *query = psprintf("SELECT k.lock_name FROM %s.fencing_locks k",
                               quote_identifier(get_namespace_name(schema)));
  if (SPI_execute(query, true, 0) != SPI_OK_SELECT) {
    elog(ERROR, "pg_fencing: reading fencing_locks failed");
  }
  for (uint64 i = 0; i < SPI_processed; ++i) {
    const char *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
    if (name == nullptr || strlen(name) > kMaxCountedLockName) continue;
    VisibleName key;
    memset(&key, 0, sizeof key);
    strlcpy(key.name, name, sizeof key.name);
    (void)hash_search(visible, &key, HASH_ENTER, nullptr);
  }
  SPI_finish();
  return visible;
}

bool IsVisible(HTAB *visible, const char *lock_name) {
  VisibleName key;
  memset(&key, 0, sizeof key);
  strlcpy(key.name, lock_name, sizeof key.name);
  return hash_search(visible, &key, HASH_FIND, nullptr) != nullptr;
}

}  // namespace

void RegisterSharedStats() {
  RegisterXactCallback(OnTransactionEvent, nullptr);
  RegisterSubXactCallback(OnSubTransactionEvent, nullptr);
}

void CountLeaseEventAtCommit(const char *lock_name, LeaseCounter counter) {
  if (!Available()) return;
  const SubTransactionId subxact = GetCurrentSubTransactionId();
  const std::string_view name(lock_name);
  if (PGF_CORE(pending.Add(name, counter, subxact)) != PendingLeaseCounts::Added::kFull) return;
  // More locks than fit: twice the room, in the transaction's memory (freed
  // with it; ForgetPending() goes back to the static array).
  const int capacity = pending.Capacity() * 2;
  auto *larger = static_cast<PendingLockCounts *>(
      MemoryContextAlloc(TopTransactionContext, sizeof(PendingLockCounts) * capacity));
  PGF_CORE(pending.MoveTo(larger, capacity));
  (void)PGF_CORE(pending.Add(name, counter, subxact));
}

void RecordRefusedWrite(const RefusedWrite &write) {
  if (!Available()) return;
  const bool stale = write.sqlerrcode != PGF_ERRCODE_MISSING_TOKEN;
  RejectionEntry record;
  memset(&record, 0, sizeof record);
  record.at = GetCurrentTimestamp();
  record.database = MyDatabaseId;
  record.relid = write.relid;
  record.role = GetUserId();
  record.sqlerrcode = write.sqlerrcode;
  record.has_lock_name = write.lock_name != nullptr;
  if (record.has_lock_name) strlcpy(record.lock_name, write.lock_name, sizeof record.lock_name);
  record.has_token = write.has_token;
  record.token = write.token;
  record.has_mark = write.has_mark;
  record.mark = write.mark;
  if (application_name != nullptr) {
    strlcpy(record.application_name, application_name, sizeof record.application_name);
  }
  // inet_client_addr(): NULL over a unix socket.  (Reading MyProcPort
  // here would need libpq-be.h, which needs the GSSAPI headers.)
  LOCAL_FCINFO(client, 0);
  InitFunctionCallInfoData(*client, nullptr, 0, InvalidOid, nullptr, nullptr);
  const Datum address = inet_client_addr(client);
  if (!client->isnull) {
    record.has_client_addr = true;
    strlcpy(record.client_addr, DatumGetCString(DirectFunctionCall1(inet_out, address)),
            sizeof record.client_addr);
  }

  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  ring[shared->rejections_written++ % shared->rejections_capacity] = record;
  const TableKey table_key{MyDatabaseId, write.relid};
  if (!OidIsValid(write.relid)) {
    // fencing_present(): no table yet, only the lock.
  } else if (auto *table =
                 EntryFor<TableCounts>(table_counts, table_key, settings::max_tracked_tables)) {
    ++(stale ? table->stale_rejections : table->missing_rejections);
  }
  if (write.lock_name != nullptr && strlen(write.lock_name) <= kMaxCountedLockName) {
    if (LockCounts *lock = LockCountsFor(KeyOf(write.lock_name))) {
      ++(stale ? lock->stale_rejections : lock->missing_rejections);
    }
  }
  LWLockRelease(shared->lock);
}

}  // namespace pg_fencing

using namespace pg_fencing;

namespace {

// Materialises the rows of one of the SRFs below.
Tuplestorestate *BeginRows(FunctionCallInfo fcinfo, TupleDesc *desc) {
  RequireAvailable();
  InitMaterializedSRF(fcinfo, 0);
  auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
  *desc = rsinfo->setDesc;
  return rsinfo->setResult;
}

}  // namespace

extern "C" {

// fencing_lock_counters(): (lock_name, grants, renewals, releases,
// expiries, takeovers, revokes, stale_rejections, missing_rejections) of
// the current database's locks that the caller may use (all of them for
// pg_read_all_stats).
PG_FUNCTION_INFO_V1(fencing_lock_counters);
Datum fencing_lock_counters(PG_FUNCTION_ARGS) {
  TupleDesc desc;
  Tuplestorestate *rows = BeginRows(fcinfo, &desc);
  const bool all = ReadsAllStats();
  HTAB *visible = all ? nullptr : LocksTheCallerMayUse(ExtensionSchema(fcinfo));
  LWLockAcquire(shared->lock, LW_SHARED);
  HASH_SEQ_STATUS scan;
  hash_seq_init(&scan, lock_counts);
  while (auto *entry = static_cast<LockCounts *>(hash_seq_search(&scan))) {
    if (entry->key.database != MyDatabaseId) continue;
    if (!all && !IsVisible(visible, entry->key.lock_name)) continue;
    Datum values[9];
    bool nulls[9] = {};
    values[0] = CStringGetTextDatum(entry->key.lock_name);
    for (int c = 0; c < kLeaseCounterCount; ++c) values[1 + c] = Int64GetDatum(entry->counts[c]);
    values[7] = Int64GetDatum(entry->stale_rejections);
    values[8] = Int64GetDatum(entry->missing_rejections);
    tuplestore_putvalues(rows, desc, values, nulls);
  }
  LWLockRelease(shared->lock);
  return Datum(0);
}

// fencing_table_counters(): (relid, stale_rejections, missing_rejections)
// of the current database's tables the caller may SELECT from (all of them
// for pg_read_all_stats).  A dropped table's counters show under its old
// oid to pg_read_all_stats only.
PG_FUNCTION_INFO_V1(fencing_table_counters);
Datum fencing_table_counters(PG_FUNCTION_ARGS) {
  TupleDesc desc;
  Tuplestorestate *rows = BeginRows(fcinfo, &desc);
  const bool all = ReadsAllStats();
  // Copied out first: the privilege checks read the catalog, which must
  // not happen under the LWLock.
  int count = 0;
  LWLockAcquire(shared->lock, LW_SHARED);
  const long entries = hash_get_num_entries(table_counts);
  auto *copy = static_cast<TableCounts *>(palloc(sizeof(TableCounts) * (entries + 1)));
  HASH_SEQ_STATUS scan;
  hash_seq_init(&scan, table_counts);
  while (auto *entry = static_cast<TableCounts *>(hash_seq_search(&scan))) {
    if (entry->key.database == MyDatabaseId && count < entries) copy[count++] = *entry;
  }
  LWLockRelease(shared->lock);
  for (int i = 0; i < count; ++i) {
    const Oid relid = copy[i].key.relid;
    const bool exists = get_rel_name(relid) != nullptr;
    if (!all && (!exists || !MaySelectFrom(relid))) continue;
    Datum values[3] = {ObjectIdGetDatum(relid), Int64GetDatum(copy[i].stale_rejections),
                       Int64GetDatum(copy[i].missing_rejections)};
    bool nulls[3] = {};
    tuplestore_putvalues(rows, desc, values, nulls);
  }
  return Datum(0);
}

// fencing_rejection_log(): the refused writes kept, oldest first, of the
// current database's tables the caller may SELECT from (a token refused by
// fencing_present(), on no table: of the locks the caller may use); the
// refused role, application and address only to a role with that role's
// privileges (as pg_stat_activity shows them).
PG_FUNCTION_INFO_V1(fencing_rejection_log);
Datum fencing_rejection_log(PG_FUNCTION_ARGS) {
  TupleDesc desc;
  Tuplestorestate *rows = BeginRows(fcinfo, &desc);
  const bool all = ReadsAllStats();
  const Oid caller = GetUserId();
  const int capacity = shared->rejections_capacity;
  auto *copy = static_cast<RejectionEntry *>(palloc(sizeof(RejectionEntry) * capacity));
  int count = 0;
  LWLockAcquire(shared->lock, LW_SHARED);
  const uint64 written = shared->rejections_written;
  const uint64 kept = Min(written, (uint64)capacity);
  for (uint64 i = written - kept; i < written; ++i) {
    if (ring[i % capacity].database == MyDatabaseId) copy[count++] = ring[i % capacity];
  }
  LWLockRelease(shared->lock);
  HTAB *visible = nullptr;
  for (int i = 0; i < count; ++i) {
    const RejectionEntry &r = copy[i];
    if (!all && OidIsValid(r.relid)) {
      if (get_rel_name(r.relid) == nullptr || !MaySelectFrom(r.relid)) continue;
    } else if (!all) {
      if (visible == nullptr) visible = LocksTheCallerMayUse(ExtensionSchema(fcinfo));
      if (!r.has_lock_name || !IsVisible(visible, r.lock_name)) continue;
    }
    const bool who = all || has_privs_of_role(caller, r.role);
    Datum values[9];
    bool nulls[9] = {};
    values[0] = TimestampTzGetDatum(r.at);
    values[1] = ObjectIdGetDatum(r.relid);
    nulls[1] = !OidIsValid(r.relid);
    values[2] = r.has_lock_name ? CStringGetTextDatum(r.lock_name) : Datum(0);
    nulls[2] = !r.has_lock_name;
    values[3] = Int64GetDatum(r.token);
    nulls[3] = !r.has_token;
    values[4] = Int64GetDatum(r.mark);
    nulls[4] = !r.has_mark;
    values[5] = r.sqlerrcode != 0 ? CStringGetTextDatum(unpack_sql_state(r.sqlerrcode)) : Datum(0);
    nulls[5] = r.sqlerrcode == 0;
    values[6] = ObjectIdGetDatum(r.role);
    nulls[6] = !who;
    values[7] = CStringGetTextDatum(r.application_name);
    nulls[7] = !who;
    values[8] = who && r.has_client_addr
                    ? DirectFunctionCall1(inet_in, CStringGetDatum(r.client_addr))
                    : Datum(0);
    nulls[8] = !(who && r.has_client_addr);
    tuplestore_putvalues(rows, desc, values, nulls);
  }
  return Datum(0);
}

// fencing_stats_reset() RETURNS void: the current database's counters and
// refused writes are forgotten.  EXECUTE is revoked from PUBLIC.
PG_FUNCTION_INFO_V1(fencing_stats_reset);
Datum fencing_stats_reset(PG_FUNCTION_ARGS) {
  RequireAvailable();
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  HASH_SEQ_STATUS scan;
  hash_seq_init(&scan, lock_counts);
  while (auto *entry = static_cast<LockCounts *>(hash_seq_search(&scan))) {
    if (entry->key.database == MyDatabaseId) {
      (void)hash_search(lock_counts, &entry->key, HASH_REMOVE, nullptr);
    }
  }
  hash_seq_init(&scan, table_counts);
  while (auto *entry = static_cast<TableCounts *>(hash_seq_search(&scan))) {
    if (entry->key.database == MyDatabaseId) {
      (void)hash_search(table_counts, &entry->key, HASH_REMOVE, nullptr);
    }
  }
  const uint64 written = shared->rejections_written;
  const uint64 kept = Min(written, (uint64)shared->rejections_capacity);
  for (uint64 i = written - kept; i < written; ++i) {
    RejectionEntry &r = ring[i % shared->rejections_capacity];
    if (r.database == MyDatabaseId) r.database = InvalidOid;  // no longer shown
  }
  shared->reset_at = GetCurrentTimestamp();
  LWLockRelease(shared->lock);
  PG_RETURN_VOID();
}

}  // extern "C"
