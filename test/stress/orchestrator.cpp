// pg_fencing_stress: the orchestrator.  Creates a cluster of its own, sets up
// the tables, starts the workers, runs the nemesis, collects the server's
// history at the end and hands everything to the checker.  Started with
// --worker, it is one of the workers instead (worker.cpp).
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "checker.hpp"
#include "cluster.hpp"
#include "common.hpp"
#include "database.hpp"
#include "fleet.hpp"
#include "orchestration.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "process.hpp"
#include "worker.hpp"

namespace pg_fencing::stress {

namespace {

struct Options {
  int workers = 8;
  int rows = 16;
  int duration_s = 60;
  std::uint64_t seed = 1;
  bool unguarded = false;
  std::set<std::string> faults = {"pause", "kill", "crash", "restore", "freeze"};
  // The restore fault: the base backup and the restore, in percent of the
  // duration.
  int backup_pct = 20;
  int restore_pct = 60;
  int fault_min_ms = 1000;
  int fault_max_ms = 4000;
  int pause_min_ms = -1;  // default: 1.5 ttl
  int pause_max_ms = -1;  // default: 5 ttl
  std::string dir;
  std::string pg_bindir = "/usr/lib/postgresql/15/bin";
  bool keep_data = false;
  bool preload = false;  // shared_preload_libraries = pg_fencing (statistics, the expiry worker)
  bool check = true;
  int examples = 5;
  WorkerConfig worker;  // the per-worker knobs; slot, incarnation, paths filled in later
};

std::string UsageText() {
  return R"(usage: pg_fencing_stress [options]
Runs N worker processes that compete for the lease "stress" (or, with
--permits, for the permits of the semaphore "stress_sem") and write with
their tokens to two protected tables, while a nemesis pauses (SIGSTOP) and
kills (SIGKILL) workers and crashes the server (SIGKILL to the postmaster and
all its processes, then restart), and once takes a base backup early and
later loses the server and starts it from a copy of that backup.  Creates its own cluster with initdb (run
as root: the server runs as "postgres"; otherwise as the calling user), on a
Unix socket only.  At the end, checks the history (pg_fencing_stress_check).

  --workers N         worker processes (8)
  --rows N            rows per table (16)
  --duration S        seconds of load and faults (60)
  --seed N            seeds the nemesis and the workers (1)
  --ttl MS            lease ttl (500)
  --acquire-wait MS   fencing_acquire's wait (1000)
  --unguarded         no fencing_protect on the tables: the checker must find violations
  --faults LIST       comma-separated from pause,kill,crash,restore,freeze, or none (all);
                      freeze: a worker stops after a write, before its COMMIT, for
                      ttl + 3-4 s (its lease runs out; the next holder must not wait);
                      three requests in four a variant (not with --permits): the
                      worker's next hold stops until just after its lease's end,
                      then closes its session, opens another or acquires the lock
                      again, and commits
  --restore-at B-R    restore fault: the base backup at B%, the restore at R% of the
                      duration, after a server crash (forced if none came) (20-60)
  --fault-interval MIN-MAX   ms between two faults (1000-4000)
  --pause MIN-MAX     ms a paused worker stays stopped (1.5-5 ttl)
  --hold MIN-MAX      ms a worker keeps a lease (100-1000)
  --p-careless P      per hold: ignore the loss of the lease (0.35)
  --p-zombie P        per hold: write on with the old token after it (0.35)
  --p-missing P       per write: leave the token out (0.02)
  --permits N         permit mode: the workers take one of N permits of the semaphore
                      "stress_sem" instead of the lease; its two tables are protected under
                      it, one also behind a read fence, and some operations are reads (0: off)
  --p-read P          permit mode, per operation: a read under the read fence (0.25)
  --p-undo P          per read: present, then roll the presentation back before reading (0.15)
  --dir DIR           run directory (logs, history; default: a new /tmp/pg_fencing_stress.*)
  --pg-bindir DIR     PostgreSQL binaries (/usr/lib/postgresql/15/bin)
  --keep-data         keep the cluster's data directory
  --preload           the server preloads pg_fencing: its statistics and expiry worker run
                      through the faults
  --no-check          do not run the checker
  --examples N        violations shown per kind (5)
Exit status: 0 no violation, 1 violations found, 2 setup or usage error.
)";
}

Options ParseOptions(int argc, char **argv) {
  Options o;
  ForEachOption(argc, argv, [&](const std::string &arg, const auto &value) {
    if (arg == "--workers")
      o.workers = std::stoi(value());
    else if (arg == "--rows")
      o.rows = std::stoi(value());
    else if (arg == "--duration")
      o.duration_s = std::stoi(value());
    else if (arg == "--seed")
      o.seed = std::stoull(value());
    else if (arg == "--ttl")
      o.worker.ttl = std::chrono::milliseconds(std::stoi(value()));
    else if (arg == "--acquire-wait")
      o.worker.acquire_wait = std::chrono::milliseconds(std::stoi(value()));
    else if (arg == "--unguarded")
      o.unguarded = true;
    else if (arg == "--faults") {
      o.faults.clear();
      for (const std::string &f : Split(value(), ',')) {
        if (f == "none") continue;
        if (f != "pause" && f != "kill" && f != "crash" && f != "restore" && f != "freeze")
          throw UsageError("unknown fault " + f);
        o.faults.insert(f);
      }
    } else if (arg == "--restore-at") {
      std::tie(o.backup_pct, o.restore_pct) = ParseRange(value());
      if (o.restore_pct <= o.backup_pct || o.restore_pct >= 100)
        throw UsageError("--restore-at needs B < R < 100");
    } else if (arg == "--fault-interval") {
      std::tie(o.fault_min_ms, o.fault_max_ms) = ParseRange(value());
    } else if (arg == "--pause") {
      std::tie(o.pause_min_ms, o.pause_max_ms) = ParseRange(value());
    } else if (arg == "--hold") {
      const auto [low, high] = ParseRange(value());
      o.worker.hold_min = std::chrono::milliseconds(low);
      o.worker.hold_max = std::chrono::milliseconds(high);
    } else if (arg == "--p-careless")
      o.worker.p_careless = std::stod(value());
    else if (arg == "--p-zombie")
      o.worker.p_zombie = std::stod(value());
    else if (arg == "--p-missing")
      o.worker.p_missing = std::stod(value());
    else if (arg == "--permits")
      o.worker.permits = std::stoi(value());
    else if (arg == "--p-read")
      o.worker.p_read = std::stod(value());
    else if (arg == "--p-undo")
      o.worker.p_undo = std::stod(value());
    else if (arg == "--dir")
      o.dir = value();
    else if (arg == "--pg-bindir")
      o.pg_bindir = value();
    else if (arg == "--keep-data")
      o.keep_data = true;
    else if (arg == "--preload")
      o.preload = true;
    else if (arg == "--no-check")
      o.check = false;
    else if (arg == "--examples")
      o.examples = std::stoi(value());
    else if (arg == "--help" || arg == "-h") {
      std::cout << UsageText();
      std::exit(kExitPass);
    } else {
      return false;
    }
    return true;
  });
  if (o.workers < 1 || o.workers > 64) throw UsageError("--workers must be 1..64");
  if (o.rows < 1 || o.rows > 100000) throw UsageError("--rows must be 1..100000");
  if (o.duration_s < 1) throw UsageError("--duration must be positive");
  if (o.worker.ttl.count() < 50) throw UsageError("--ttl must be at least 50 ms");
  if (o.worker.permits < 0 || o.worker.permits > 1000)
    throw UsageError("--permits must be 0..1000");
  if (o.pause_min_ms < 0) {
    o.pause_min_ms = static_cast<int>(o.worker.ttl.count() * 3 / 2);
    o.pause_max_ms = static_cast<int>(o.worker.ttl.count() * 5);
  }
  o.worker.rows = o.rows;
  return o;
}

// ---- Database set-up and the final dump ------------------------------------

// The two tables of a run, and how each is protected.
struct StressTable {
  const char *name;
  const char *tag;
  const char *lock;  // fencing_protect's lock_name; nullptr: per row
  bool read_fence;   // row-level security on fencing_reads_allowed(lock)
};

std::vector<StressTable> TablesOf(const Options &o) {
  if (o.worker.permits > 0) {
    return {{kSemTable, kSemTableTag, kSemName, false},
            {kReadTable, kReadTableTag, kSemName, true}};
  }
  return {{kRowTable, kRowTableTag, nullptr, false}, {kLockTable, kLockTableTag, kLockName, false}};
}

void SetUpDatabase(const Cluster &cluster, const Options &o) {
  CreateRunDatabase(cluster);
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  SetUpApplication(tx);
  // A worker paused inside a transaction after a write holds the lock's
  // fence gate and its row's lock.  Guarded and preloaded, the server ends
  // that transaction when its lease ends (issue 24: what the freeze fault
  // and the pauses test); otherwise idle_in_transaction_session_timeout
  // does, well within a ttl, as the README recommends without the preload.
  if (o.unguarded || !o.preload) {
    const long idle_ms = std::max<long>(10, o.worker.ttl.count() / 2);
    pqxx_compat::Exec0(tx, std::string("ALTER ROLE ") + kAppRole +
                               " SET idle_in_transaction_session_timeout = '" +
                               std::to_string(idle_ms) + "ms'");
  }
  CreateServerRecord(tx);
  // Reads under the read fence (permit mode), recorded by the reading
  // transaction itself: presented says whether a presentation was in force
  // when it counted the rows it could see.
  pqxx_compat::Exec0(tx, R"(CREATE TABLE stress_reads (
      seq bigint PRIMARY KEY, read_id text NOT NULL, token bigint NOT NULL,
      presented boolean NOT NULL, rows_seen bigint NOT NULL, ts timestamptz NOT NULL,
      pm_start timestamptz NOT NULL))");
  const std::vector<StressTable> tables = TablesOf(o);
  for (const StressTable &t : tables) CreateWorkedTable(tx, t.name, t.tag, o.rows);
  // A read's record, taken by the reading transaction after it presented:
  // the workers pass what they counted, the server numbers it.
  pqxx_compat::Exec0(tx, R"(CREATE FUNCTION stress_record_read(read_id text, token bigint,
        presented boolean, rows_seen bigint) RETURNS bigint LANGUAGE sql
      SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    INSERT INTO public.stress_reads
      VALUES (nextval('public.stress_commit_seq'), read_id, token, presented, rows_seen,
              clock_timestamp(), pg_postmaster_start_time())
    RETURNING rows_seen
    $$)");
  pqxx_compat::Exec0(tx, "REVOKE ALL ON FUNCTION stress_record_read FROM PUBLIC");
  pqxx_compat::Exec0(tx,
                     std::string("GRANT EXECUTE ON FUNCTION stress_record_read TO ") + kAppRole);
  if (!o.unguarded) {
    for (const StressTable &t : tables) {
      tx.exec(std::string("SELECT fencing_protect('") + t.name + "'" +
              (t.lock ? std::string(", lock_name => '") + t.lock + "'" : std::string()) + ")");
      if (!t.read_fence) continue;
      // The read fence of docs/functions.md: rows hidden from a transaction that has not
      // presented a current token.  The workers' role is neither superuser
      // nor owner, so the policies hold for it.
      pqxx_compat::Exec0(tx, std::string("ALTER TABLE ") + t.name +
                                 " ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY");
      pqxx_compat::Exec0(tx, std::string("CREATE POLICY all_rows ON ") + t.name + " USING (true)");
      pqxx_compat::Exec0(tx, std::string("CREATE POLICY read_fence ON ") + t.name +
                                 " AS RESTRICTIVE FOR SELECT USING ((SELECT "
                                 "fencing_reads_allowed('" +
                                 t.lock + "')))");
    }
  }
  tx.commit();
}

// The server's record of what committed: history.tsv, grants.tsv and, in
// permit mode, reads.tsv, into dir.
void DumpRecord(pqxx::work &tx, const Options &o, const std::string &dir) {
  DumpServerRecord(tx, dir);
  if (o.worker.permits > 0) {
    DumpQuery(tx,
              "SELECT seq, read_id, token, presented, rows_seen, " + Micros("ts") + ", " +
                  Micros("pm_start") + " FROM stress_reads ORDER BY seq",
              dir + "/reads.tsv");
  }
}

// At the end of the run: the record, the tables' final rows and the marks.
void DumpState(const Cluster &cluster, const Options &o, const std::string &dir) {
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  DumpRecord(tx, o, dir);
  std::string final_rows;
  for (const StressTable &t : TablesOf(o)) {
    final_rows += std::string(final_rows.empty() ? "" : " UNION ALL ") + "SELECT '" + t.tag +
                  "', id, token::bigint, val, write_id FROM " + t.name;
  }
  DumpQuery(tx, final_rows + " ORDER BY 1, 2", dir + "/final.tsv");
  DumpQuery(tx, "SELECT lock_name, high_water::bigint FROM fencing_fences ORDER BY 1",
            dir + "/fences.tsv");
  tx.commit();
}

// ---- Workers and the nemesis --------------------------------------------------

// A worker stopped by the pause fault, until resume_at (MonoMs).
struct Pause {
  bool paused = false;
  std::int64_t resume_at = 0;
};

class Orchestrator {
 public:
  Orchestrator(const Options &options, Cluster &cluster, std::string dir)
      : o_(options),
        cluster_(cluster),
        dir_(std::move(dir)),
        faults_(dir_ + "/faults.log"),
        rng_(options.seed),
        pauses_(static_cast<std::size_t>(options.workers)),
        workers_(options.workers, 'w', dir_, faults_,
                 [this](int slot, int incarnation, const std::string &log_path) {
                   return Launch(slot, incarnation, log_path);
                 }) {}

  void Run() {
    for (std::size_t i = 0; i < workers_.size(); ++i) workers_.Start(static_cast<int>(i));
    const std::int64_t start = MonoMs();
    const std::int64_t end = start + static_cast<std::int64_t>(o_.duration_s) * 1000;
    std::int64_t next_fault = start + Uniform(o_.fault_min_ms, o_.fault_max_ms);
    std::int64_t next_progress = start + 10000;
    if (o_.faults.count("restore")) {
      restore_phase_ = RestorePhase::kWaiting;
      backup_at_ = start + static_cast<std::int64_t>(o_.duration_s) * 10 * o_.backup_pct;
      restore_at_ = start + static_cast<std::int64_t>(o_.duration_s) * 10 * o_.restore_pct;
    }
    // The random faults; the restore fault comes when its time is due.
    for (const std::string &kind : o_.faults) {
      if (kind == "restore") continue;
      random_faults_.push_back(kind);
      // Twice as often as the others: pauses, and freezes (a short run must
      // judge some; and the first fault is one).
      if (kind == "pause" || kind == "freeze") random_faults_.push_back(kind);
    }
    bool first_fault = o_.faults.count("freeze") > 0;
    while (!StopRequested() && (MonoMs() < end || AwaitingWriteAfterRestore(end))) {
      Reaper::Reap();
      workers_.RespawnExited();
      ResumeDue(false);
      // After a crash or the restore of its own, the nemesis waits a whole
      // interval: a restored server that crashed at once would grant nothing.
      if (StepRestore()) next_fault = MonoMs() + Uniform(o_.fault_min_ms, o_.fault_max_ms);
      if (!random_faults_.empty() && MonoMs() >= next_fault) {
        InjectFault(first_fault ? "freeze" : "");
        first_fault = false;
        next_fault = MonoMs() + Uniform(o_.fault_min_ms, o_.fault_max_ms);
      }
      if (MonoMs() >= next_progress) {
        std::cerr << "pg_fencing_stress: " << (MonoMs() - start) / 1000 << " s, faults "
                  << FaultSummary() << "\n";
        next_progress += 10000;
      }
      SleepMs(10);
    }
    ResumeDue(true);
    workers_.StopAll();
    if (backup_pid_ > 0) {  // the run ended during the backup
      kill(backup_pid_, SIGKILL);
      Reaper::WaitFor(backup_pid_, 10000);
      Reaper::Forget(backup_pid_);
      backup_pid_ = -1;
      faults_.Write("ev=backup_abandoned");
    }
  }

  // The data directories of the servers lost by restores, for the record of
  // what each had committed (read at the end: ReadLostRecords).
  struct Lost {
    std::string datadir;  // the lost server's data directory
    std::string record;   // the run directory's subdirectory for its record
  };
  const std::vector<Lost> &lost() const { return lost_; }
  const std::string &backup_dir() const { return backup_dir_; }

  std::string FaultSummary() const {
    std::string out;
    for (const char *kind : {"pause", "kill", "crash", "restore", "freeze"}) {
      const auto it = injected_.find(kind);
      out += std::string(out.empty() ? "" : " ") + kind + "=" +
             std::to_string(it == injected_.end() ? 0 : it->second);
    }
    return out;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

  // A new incarnation of a worker (WorkerSlots::Start): it is not paused.
  WorkerSlots::Launch Launch(int index, int incarnation, const std::string &log_path) {
    pauses_[static_cast<std::size_t>(index)] = Pause{};
    WorkerConfig config = o_.worker;
    config.slot = index;
    config.incarnation = incarnation;
    config.conninfo = cluster_.Conninfo(kAppRole, kDatabase) + " application_name=stress_w" +
                      std::to_string(index);
    config.log_path = log_path;
    config.seed = rng_();
    std::vector<std::string> arguments = {"--worker"};
    for (std::string &arg : WorkerArguments(config)) arguments.push_back(std::move(arg));
    return {std::move(arguments), ""};
  }

  void ResumeDue(bool all) {
    for (std::size_t i = 0; i < pauses_.size(); ++i) {
      Pause &pause = pauses_[i];
      if (pause.paused && (all || MonoMs() >= pause.resume_at)) {
        kill(workers_[i].pid, SIGCONT);
        pause.paused = false;
        faults_.Write("ev=resume w=" + std::to_string(i) +
                      " pid=" + std::to_string(workers_[i].pid));
      }
    }
  }

  // A random fault, or the kind given.
  void InjectFault(const std::string &given) {
    const std::string kind =
        !given.empty() ? given
                       : random_faults_[static_cast<std::size_t>(
                             Uniform(0, static_cast<int>(random_faults_.size()) - 1))];
    // A crash would break the base backup under way: not while it runs;
    // nor while a frozen holder is being judged (check F needs the server
    // up from the freeze to the next grant).
    if (kind == "crash" && restore_phase_ == RestorePhase::kBackingUp) return;
    if (kind == "crash" && MonoMs() < freeze_window_end_) return;
    const int index = Uniform(0, static_cast<int>(workers_.size()) - 1);
    const pid_t pid = workers_[static_cast<std::size_t>(index)].pid;
    Pause &pause = pauses_[static_cast<std::size_t>(index)];
    const std::string who = "w=" + std::to_string(index) + " pid=" + std::to_string(pid);
    if (kind == "pause") {
      if (pause.paused) return;  // already stopped: skip this one
      const int ms = Uniform(o_.pause_min_ms, o_.pause_max_ms);
      kill(pid, SIGSTOP);
      pause.paused = true;
      pause.resume_at = MonoMs() + ms;
      faults_.Write("ev=pause " + who + " ms=" + std::to_string(ms));
    } else if (kind == "freeze") {
      if (pause.paused) return;
      // Longer than the bound on a takeover by far, so that a frozen holder
      // that kept the next one waiting shows in the checker.
      const int ms = static_cast<int>(o_.worker.ttl.count()) + Uniform(3000, 4000);
      const Thaw thaw = NextThaw();
      union sigval value;
      value.sival_int = FreezeSignalValue(thaw == Thaw::kCommit ? ms : 0, thaw);
      sigqueue(pid, SIGUSR1, value);
      faults_.Write("ev=freeze_request " + who +
                    (thaw == Thaw::kCommit ? " ms=" + std::to_string(ms) : std::string()) +
                    " then=" + ThawName(thaw));
      // The worker freezes at its next write, soon (a variant at its next
      // grant, within a few seconds, for about a ttl); then the next grant
      // is due within ttl + 2 s.
      freeze_window_end_ = MonoMs() + ms + 2000;
    } else if (kind == "kill") {
      workers_.Kill(index, who);
    } else {
      CrashServer("");
      return;  // counted there
    }
    ++injected_[kind];
  }

  // The freeze fault's requests take turns: the plain freeze, then each of
  // its variants (worker.hpp, Thaw), so that a short run has them all (the
  // default guarded run makes seven requests or so; its first fault is a
  // plain one).  Permit runs only the plain one: the variant holds the
  // exclusive lock.
  Thaw NextThaw() {
    static constexpr Thaw kTurns[] = {Thaw::kCommit, Thaw::kCloseSession, Thaw::kOpenSession,
                                      Thaw::kReacquire};
    if (o_.worker.permits > 0) return Thaw::kCommit;
    return kTurns[freeze_requests_++ % (sizeof kTurns / sizeof kTurns[0])];
  }

  void CrashServer(const std::string &why) {
    CrashAndRestart(cluster_, faults_, Uniform(0, 500), why);
    ++injected_["crash"];
    if (restore_phase_ == RestorePhase::kBackedUp) ++crashes_since_backup_;
    last_restart_ms_ = MonoMs();
  }

  // The restore fault, one step at a time from the main loop (the nemesis
  // goes on meanwhile).  Its timeline:
  //  1. at backup_pct of the run: pg_basebackup of the running server (-X
  //     stream, after an immediate checkpoint) into backup/, while the
  //     workers go on; no crash while it runs;
  //  2. then the nemesis as usual; at restore_pct, if no crash came since the
  //     backup ended, one now (a new server incarnation reserves new tokens:
  //     what a database that goes back could hand out again), and at least
  //     kRestoreAfterCrashMs more so that it grants some;
  //  3. the restore: SIGKILL the postmaster and every server process, as a
  //     crash does; the data directory moves to pgdata.lost-1 (read again at
  //     the end, by a server of its own: the record of what the lost server
  //     had committed); pgdata becomes a fresh copy of backup/, and the server
  //     starts from it (recovery to the end of the backup's WAL).  Workers
  //     paused across it resume afterwards with their old tokens.
  // faults.log gets "ev=restore" with the wall times the checker needs.
  // Returns whether it crashed or restored the server just now.
  bool StepRestore() {
    constexpr std::int64_t kRestoreAfterCrashMs = 2000;
    switch (restore_phase_) {
      case RestorePhase::kOff:
      case RestorePhase::kDone:
        return false;
      case RestorePhase::kWaiting:
        if (MonoMs() < backup_at_) return false;
        backup_dir_ = dir_ + "/backup";
        backup_start_ = Now();
        faults_.Write(backup_start_, "ev=backup_start dir=" + backup_dir_);
        backup_pid_ = cluster_.StartBaseBackup(backup_dir_, dir_ + "/basebackup.log");
        restore_phase_ = RestorePhase::kBackingUp;
        return false;
      case RestorePhase::kBackingUp: {
        const std::optional<int> status = Reaper::Status(backup_pid_);
        if (!status) return false;
        Reaper::Forget(backup_pid_);
        backup_pid_ = -1;
        if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
          throw std::runtime_error("pg_basebackup failed (" + DescribeStatus(*status) + "); see " +
                                   dir_ + "/basebackup.log");
        }
        backup_end_ = Now();
        faults_.Write(backup_end_,
                      "ev=backup_done ms=" +
                          std::to_string((backup_end_.mono_ns - backup_start_.mono_ns) / 1000000));
        restore_phase_ = RestorePhase::kBackedUp;
        return false;
      }
      case RestorePhase::kBackedUp:
        break;
    }
    if (MonoMs() < restore_at_) return false;
    if (crashes_since_backup_ == 0) {
      CrashServer(" why=restore_after_crash");
      return true;
    }
    if (MonoMs() < last_restart_ms_ + kRestoreAfterCrashMs) return false;
    const int n = static_cast<int>(lost_.size()) + 1;
    const Lost lost{dir_ + "/pgdata.lost-" + std::to_string(n), "lost-" + std::to_string(n)};
    const Stamp lost_at = Now();
    faults_.Write(lost_at, "ev=restore_lose n=" + std::to_string(n) +
                               " pm=" + std::to_string(cluster_.postmaster()));
    const int killed = cluster_.Crash();
    const Stamp dead = Now();  // every process of the lost server gone
    cluster_.ReplaceDataWith(backup_dir_, lost.datadir);
    faults_.Write("ev=restore_copied n=" + std::to_string(n) + " procs=" + std::to_string(killed));
    cluster_.Start();
    const Stamp up = Now();
    faults_.Write(up, "ev=restore n=" + std::to_string(n) + " record=" + lost.record +
                          " backup_start=" + std::to_string(backup_start_.wall_us) +
                          " backup_end=" + std::to_string(backup_end_.wall_us) +
                          " lost_at=" + std::to_string(lost_at.wall_us) +
                          " killed=" + std::to_string(dead.wall_us) +
                          " restarted=" + std::to_string(up.wall_us) +
                          " down_ms=" + std::to_string((up.mono_ns - lost_at.mono_ns) / 1000000));
    lost_.push_back(lost);
    lost_at_us_ = lost_at.wall_us;
    ++injected_["restore"];
    last_restart_ms_ = MonoMs();
    restore_phase_ = RestorePhase::kDone;  // once per run
    return true;
  }

  // The restore's defects are judged, and planted by the self-test, on
  // writes under grants the restored server made.  A slow machine (a
  // restored server long in recovery, workers slow to reconnect) can reach
  // the run's end before there is one; then the run goes on, the nemesis
  // too, until the restored server has committed a write to a table under a
  // lock under a grant of its own (asked every 500 ms), for at most
  // kAfterRestoreCapMs past the end.  faults.log says by how much.
  bool AwaitingWriteAfterRestore(std::int64_t end) {
    constexpr std::int64_t kAfterRestoreCapMs = 20000;
    if (restore_phase_ != RestorePhase::kDone || wrote_after_restore_) return false;
    const std::int64_t now = MonoMs();
    if (now >= end + kAfterRestoreCapMs) {
      faults_.Write("ev=run_extended ms=" + std::to_string(now - end) +
                    " wrote_after_restore=false");
      wrote_after_restore_ = true;  // asked for the last time
      return false;
    }
    if (now < next_restore_write_check_ms_) return true;
    next_restore_write_check_ms_ = now + 500;
    try {
      pqxx::connection db(cluster_.Conninfo("postgres", kDatabase));
      pqxx::work tx(db);
      std::string tags;
      for (const StressTable &t : TablesOf(o_)) {
        if (t.lock != nullptr) tags += std::string(tags.empty() ? "" : ", ") + tx.quote(t.tag);
      }
      const bool wrote =
          pqxx_compat::Exec1(tx,
                             "SELECT EXISTS (SELECT FROM stress_history h JOIN stress_grants g "
                             "USING (token) WHERE h.tbl IN (" +
                                 tags +
                                 ") AND g.pm_start >= "
                                 "to_timestamp(" +
                                 std::to_string(lost_at_us_) + " / 1e6))")[0]
              .as<bool>();
      if (!wrote) return true;
    } catch (const std::exception &) {
      return true;  // the server is down (a crash fault): ask again
    }
    wrote_after_restore_ = true;
    if (now > end) {
      faults_.Write("ev=run_extended ms=" + std::to_string(now - end) +
                    " wrote_after_restore=true");
    }
    return false;
  }

  const Options &o_;
  Cluster &cluster_;
  const std::string dir_;
  const EventLog faults_;
  std::mt19937_64 rng_;
  std::vector<Pause> pauses_;  // by slot
  WorkerSlots workers_;
  std::map<std::string, int> injected_;
  std::vector<std::string> random_faults_;
  // The restore fault (StepRestore).
  enum class RestorePhase { kOff, kWaiting, kBackingUp, kBackedUp, kDone };
  RestorePhase restore_phase_ = RestorePhase::kOff;
  std::int64_t backup_at_ = 0;   // MonoMs
  std::int64_t restore_at_ = 0;  // MonoMs
  std::int64_t lost_at_us_ = 0;  // wall clock, when the restore lost the server
  bool wrote_after_restore_ = false;
  std::int64_t next_restore_write_check_ms_ = 0;  // MonoMs
  std::string backup_dir_;
  pid_t backup_pid_ = -1;
  Stamp backup_start_;
  Stamp backup_end_;
  int crashes_since_backup_ = 0;
  std::int64_t last_restart_ms_ = 0;
  std::int64_t freeze_window_end_ = 0;  // no crash before this (MonoMs)
  std::size_t freeze_requests_ = 0;     // the freeze fault's requests so far (NextThaw)
  std::vector<Lost> lost_;
};

// The record of each server a restore lost: its data directory started once
// more, on a socket of its own (no worker reaches it), after the run; its
// record dumped into the run directory's lost-N/, where the checker reads
// it.  Then the lost directory and the backup go, unless --keep-data.
void ReadLostRecords(const ClusterOptions &base, const Options &o, const std::string &dir,
                     const Orchestrator &orchestrator) {
  for (const Orchestrator::Lost &lost : orchestrator.lost()) {
    ClusterOptions co = base;
    co.datadir = lost.datadir;
    co.socket_dir = MakeTempDir(kSocketDirTemplate);
    co.log_path = dir + "/postgres." + lost.record + ".log";
    Cluster cluster(co);
    cluster.Start();  // crash recovery: everything the lost server had committed
    std::filesystem::create_directories(dir + "/" + lost.record);
    {
      pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
      pqxx::work tx(db);
      DumpRecord(tx, o, dir + "/" + lost.record);
      tx.commit();
    }
    cluster.Stop();
    std::error_code ignored;
    if (o.keep_data)
      std::filesystem::remove_all(co.socket_dir, ignored);
    else
      cluster.RemoveData();
  }
  if (!o.keep_data && !orchestrator.backup_dir().empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(orchestrator.backup_dir(), ignored);
  }
}

int RunOrchestrator(int argc, char **argv) {
  const std::optional<Options> parsed = ParseCommandLine(argc, argv, ParseOptions, UsageText());
  if (!parsed) return kExitSetupError;
  const Options &o = *parsed;
  CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);

  std::string dir;
  std::string socket_dir;
  std::unique_ptr<Cluster> cluster;
  std::string fault_summary;
  try {
    BecomeSubreaper();
    dir = MakeRunDir(o.dir);
    socket_dir = MakeTempDir(kSocketDirTemplate);
    const std::string mode = o.unguarded ? "unguarded" : "guarded";
    const std::string lock = o.worker.permits > 0 ? kSemName : kLockName;
    std::cout << "pg_fencing_stress: mode=" << mode << " lock=" << lock
              << " permits=" << o.worker.permits << " seed=" << o.seed
              << " duration=" << o.duration_s << "s workers=" << o.workers << " rows=" << o.rows
              << " ttl=" << o.worker.ttl.count() << "ms faults=" << JoinOrNone(o.faults)
              << " dir=" << dir << std::endl;

    const ClusterOptions co = RunClusterOptions(o.pg_bindir, dir, socket_dir, 200, o.preload);
    cluster = std::make_unique<Cluster>(co);
    cluster->InitDb();
    cluster->Start();
    SetUpDatabase(*cluster, o);

    std::ostringstream meta;
    meta << "mode=" << mode << "\nseed=" << o.seed << "\nduration_s=" << o.duration_s
         << "\nworkers=" << o.workers << "\nrows=" << o.rows << "\nttl_ms=" << o.worker.ttl.count()
         << "\nfaults=" << JoinOrNone(o.faults) << "\nrestore_at=" << o.backup_pct << "-"
         << o.restore_pct << "\nlock=" << lock << "\npermits=" << o.worker.permits
         << "\nextversion=" << ExtensionVersion(*cluster) << "\nstart_wall_us=" << Now().wall_us
         << "\n";
    WriteFile(dir + "/meta.txt", meta.str());

    Orchestrator orchestrator(o, *cluster, dir);
    orchestrator.Run();
    fault_summary = orchestrator.FaultSummary();
    if (StopRequested()) std::cerr << "pg_fencing_stress: interrupted; checking what ran\n";

    DumpState(*cluster, o, dir);
    cluster->Stop();
    if (!o.keep_data) cluster->RemoveData();
    ReadLostRecords(co, o, dir, orchestrator);
  } catch (const std::exception &error) {
    return AbandonRun(error, dir, cluster.get(), socket_dir);
  }
  return FinishRun(fault_summary, dir, o.check, o.examples, CheckRun);
}

}  // namespace

}  // namespace pg_fencing::stress

int main(int argc, char **argv) {
  using namespace pg_fencing::stress;
  if (argc > 1 && std::string(argv[1]) == "--fleet-worker") {
    try {
      return RunFleetWorker(
          ParseFleetWorkerArguments(std::vector<std::string>(argv + 2, argv + argc)));
    } catch (const std::exception &error) {
      std::fprintf(stderr, "pg_fencing_stress --fleet-worker: %s\n", error.what());
      return 2;
    }
  }
  // Fleet mode has an orchestrator of its own (fleet_orchestrator.cpp).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--fleet") return RunFleetOrchestrator(argc, argv);
  }
  if (argc > 1 && std::string(argv[1]) == "--worker") {
    try {
      return RunWorker(ParseWorkerArguments(std::vector<std::string>(argv + 2, argv + argc)));
    } catch (const std::exception &error) {
      std::fprintf(stderr, "pg_fencing_stress --worker: %s\n", error.what());
      return 2;
    }
  }
  return RunOrchestrator(argc, argv);
}
