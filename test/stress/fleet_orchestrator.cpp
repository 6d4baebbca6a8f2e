// The fleet orchestrator (see fleet.hpp, RELIABILITY.md "Fleet mode"): a
// cluster of its own, a PgBouncer of its own in front of it (transaction
// pooling, Unix sockets only), K worker processes of N/K candidates each,
// and a nemesis that injects one fault at a time:
//   pause     SIGSTOP a process (the leader's every other time) for 0.3-2 ttl
//             (the first pause: the leader's, for 1.5-2 ttl)
//   kill      SIGKILL a process (the leader's every other time, and the
//             first time), then start a
//             new incarnation of it; after the leader's, no fault for
//             ttl + 2 s, so that the takeover is judged undisturbed
//   crash     SIGKILL the postmaster and every server process, then restart
//   bouncer   SIGKILL PgBouncer, then start it again on the same socket
// One fault at a time, because the checker's exemptions are windows of
// faults: overlapping faults would excuse each other's effects and judge
// less.  The first round has every kind once, in a random order, so that
// even a short run has them all.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "checker.hpp"
#include "cluster.hpp"
#include "common.hpp"
#include "database.hpp"
#include "fleet.hpp"
#include "fleet_checker.hpp"
#include "orchestration.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "process.hpp"

namespace pg_fencing::stress {

namespace {

struct FleetOptions {
  int candidates = 500;
  int processes = 10;
  int pool_size = 10;
  int duration_s = 60;
  std::uint64_t seed = 1;
  std::set<std::string> faults = {"pause", "kill", "crash", "bouncer"};
  int fault_min_ms = 1500;
  int fault_max_ms = 3500;
  std::string dir;
  std::string pg_bindir = "/usr/lib/postgresql/15/bin";
  std::string pgbouncer = "/usr/sbin/pgbouncer";
  bool preload = true;
  bool keep_data = false;
  bool check = true;
  int examples = 5;
  FleetWorkerConfig worker;
};

std::string UsageText() {
  return R"(usage: pg_fencing_stress --fleet N [options]
Fleet mode: N candidates of the election "fleet" in K processes wait in the
lock's line through a PgBouncer in transaction pooling; the leader renews its
session and writes its token into a guarded table; a nemesis pauses and kills
processes (the leader's among them), crashes the server and restarts
PgBouncer, one fault at a time.  At the end, the checker
(pg_fencing_stress_check) judges the run.

  --fleet N             candidates (500)
  --processes K         worker processes, N/K candidates each (10)
  --pool N              PgBouncer's default_pool_size (10)
  --duration S          seconds of load and faults (60)
  --seed N              (1)
  --ttl MS              the candidates' session ttl (3000)
  --poll MS             a waiting candidate polls every MS (500)
  --lead MIN-MAX        ms a leader leads before it resigns (1000-3000)
  --faults LIST         from pause,kill,crash,bouncer, or none (all)
  --fault-interval MIN-MAX   ms between a fault's end and the next one (1500-3500)
  --dir DIR             run directory (default: a new /tmp/pg_fencing_stress.*)
  --pg-bindir DIR       PostgreSQL binaries (/usr/lib/postgresql/15/bin)
  --pgbouncer PATH      (/usr/sbin/pgbouncer)
  --no-preload          the server does not preload pg_fencing
  --keep-data           keep the cluster's data directory
  --no-check            do not run the checker
  --examples N          violations shown per kind (5)
Exit status: 0 no violation, 1 violations found, 2 setup or usage error.
)";
}

FleetOptions ParseOptions(int argc, char **argv) {
  FleetOptions o;
  ForEachOption(argc, argv, [&](const std::string &arg, const auto &value) {
    if (arg == "--fleet") {
      o.candidates = std::stoi(value());
    } else if (arg == "--processes") {
      o.processes = std::stoi(value());
    } else if (arg == "--pool") {
      o.pool_size = std::stoi(value());
    } else if (arg == "--duration") {
      o.duration_s = std::stoi(value());
    } else if (arg == "--seed") {
      o.seed = std::stoull(value());
    } else if (arg == "--ttl") {
      o.worker.ttl = std::chrono::milliseconds(std::stoi(value()));
    } else if (arg == "--poll") {
      o.worker.poll_every = std::chrono::milliseconds(std::stoi(value()));
    } else if (arg == "--lead") {
      const auto [low, high] = ParseRange(value());
      o.worker.lead_min = std::chrono::milliseconds(low);
      o.worker.lead_max = std::chrono::milliseconds(high);
    } else if (arg == "--faults") {
      o.faults.clear();
      for (const std::string &f : Split(value(), ',')) {
        if (f == "none") continue;
        if (f != "pause" && f != "kill" && f != "crash" && f != "bouncer")
          throw UsageError("unknown fault " + f);
        o.faults.insert(f);
      }
    } else if (arg == "--fault-interval") {
      std::tie(o.fault_min_ms, o.fault_max_ms) = ParseRange(value());
    } else if (arg == "--dir") {
      o.dir = value();
    } else if (arg == "--pg-bindir") {
      o.pg_bindir = value();
    } else if (arg == "--pgbouncer") {
      o.pgbouncer = value();
    } else if (arg == "--no-preload") {
      o.preload = false;
    } else if (arg == "--keep-data") {
      o.keep_data = true;
    } else if (arg == "--no-check") {
      o.check = false;
    } else if (arg == "--examples") {
      o.examples = std::stoi(value());
    } else if (arg == "--help" || arg == "-h") {
      std::cout << UsageText();
      std::exit(kExitPass);
    } else {
      return false;
    }
    return true;
  });
  if (o.processes < 1 || o.processes > 64) throw UsageError("--processes must be 1..64");
  if (o.candidates < o.processes || o.candidates > 20000)
    throw UsageError("--fleet must be at least --processes and at most 20000");
  if (o.pool_size < 1) throw UsageError("--pool must be positive");
  if (o.duration_s < 1) throw UsageError("--duration must be positive");
  if (o.worker.ttl.count() < 300) throw UsageError("--ttl must be at least 300 ms");
  return o;
}

// ---- PgBouncer ------------------------------------------------------------------

// The run's own PgBouncer: transaction pooling, a Unix socket in a private
// directory (no TCP, no port to clash), as the server's user (PgBouncer
// refuses to run as root).  Every worker connects through it as kAppRole;
// auth_type = any: the server trusts the socket, and the test is not about
// authentication.
class Bouncer {
 public:
  Bouncer(const std::string &run_dir, const std::string &server_socket_dir, const FleetOptions &o)
      : pgbouncer_(o.pgbouncer), dir_(run_dir + "/pgbouncer"), run_as_(ServerUser()) {
    socket_dir_ = MakeTempDir("/tmp/pgfs_bouncer.XXXXXX");
    std::filesystem::create_directories(dir_);
    chmod(socket_dir_.c_str(), 0755);
    ChownTo(dir_, run_as_);
    ChownTo(socket_dir_, run_as_);
    // server_login_retry: after a crash PgBouncer tries the server again
    // every second, not every 15 s (its default), so that an outage lasts
    // about as long as the server is down.  query_wait_timeout bounds a
    // client's wait for a server connection, so that a stuck pool shows
    // as errors in the logs.
    WriteFile(dir_ + "/pgbouncer.ini",
              "[databases]\n" + std::string(kDatabase) + " = host=" + server_socket_dir +
                  " port=5432 dbname=" + kDatabase + " user=" + kAppRole +
                  "\n\n[pgbouncer]\nlisten_addr =\nlisten_port = " + std::to_string(kPort) +
                  "\nunix_socket_dir = " + socket_dir_ +
                  "\nauth_type = any\npool_mode = transaction\ndefault_pool_size = " +
                  std::to_string(o.pool_size) +
                  "\nmax_client_conn = 500\nserver_login_retry = 1\nserver_check_delay = 0\n"
                  "query_wait_timeout = 10\nserver_connect_timeout = 5\nlogfile = " +
                  dir_ + "/pgbouncer.log\npidfile = " + dir_ + "/pgbouncer.pid\n");
    ChownTo(dir_ + "/pgbouncer.ini", run_as_);
  }
  ~Bouncer() {
    try {
      Stop();
    } catch (...) {
    }
    std::error_code ignored;
    std::filesystem::remove_all(socket_dir_, ignored);
  }
  Bouncer(const Bouncer &) = delete;
  Bouncer &operator=(const Bouncer &) = delete;

  // Starts PgBouncer and returns once a client gets through it to the
  // server (the server must be up).
  void Start() {
    pid_ = Spawn({pgbouncer_, dir_ + "/pgbouncer.ini"}, {run_as_, dir_ + "/stderr", SIGTERM});
    AwaitReady(
        pid_,
        [&] {
          pqxx::connection probe(Conninfo());
          pqxx::nontransaction tx(probe);
          pqxx_compat::Exec1(tx, "SELECT 1");
        },
        30000, "pgbouncer", dir_);
  }
  // SIGKILL: its clients' connections break mid-statement; its pidfile and
  // socket stay behind, as after a real crash.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    Reaper::WaitFor(pid_, 10000);
    Reaper::Forget(pid_);
    pid_ = -1;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);  // immediate shutdown
    if (!Reaper::WaitFor(pid_, 10000)) kill(pid_, SIGKILL);
    Reaper::WaitFor(pid_, 10000);
    Reaper::Forget(pid_);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  std::string Conninfo() const {
    return "host=" + socket_dir_ + " port=" + std::to_string(kPort) + " dbname=" + kDatabase +
           " user=" + kAppRole + " connect_timeout=3";
  }

 private:
  static constexpr int kPort = 6432;
  std::string pgbouncer_;
  std::string dir_;
  std::string socket_dir_;
  std::optional<RunAs> run_as_;
  pid_t pid_ = -1;
};

// ---- Database set-up and the final dump -----------------------------------------

// The fleet's database: the extension, the application role (it creates the
// election's lock, as an application would), the guarded table, and the
// server's own record of every committed write and grant (the same triggers
// and files as the other modes: history.tsv, grants.tsv).
void SetUpFleetDatabase(const Cluster &cluster, const FleetOptions &o) {
  CreateRunDatabase(cluster);
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  SetUpApplication(tx);
  CreateServerRecord(tx);
  CreateWorkedTable(tx, kFleetTable, kFleetTableTag, o.worker.rows);
  // Lock-wide: a leader that lost its lease cannot write any row once the
  // next leader has been granted, whether or not it has written yet.
  tx.exec(std::string("SELECT fencing_protect('") + kFleetTable + "', lock_name => '" + kFleetLock +
          "')");
  tx.commit();
}

void DumpFleetState(const Cluster &cluster, const std::string &dir) {
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  DumpServerRecord(tx, dir);
  DumpQuery(tx,
            std::string("SELECT '") + kFleetTableTag + "', id, token::bigint, val, write_id FROM " +
                kFleetTable + " ORDER BY id",
            dir + "/final.tsv");
  tx.commit();
}

// ---- The fleet and the nemesis ----------------------------------------------------

class FleetOrchestrator {
 public:
  FleetOrchestrator(const FleetOptions &o, Cluster &cluster, Bouncer &bouncer, std::string dir)
      : o_(o),
        cluster_(cluster),
        bouncer_(bouncer),
        dir_(std::move(dir)),
        faults_(dir_ + "/faults.log"),
        rng_(o.seed),
        processes_(o.processes, 'f', dir_, faults_,
                   [this](int slot, int incarnation, const std::string &log_path) {
                     return Launch(slot, incarnation, log_path);
                   }) {}

  void Run() {
    for (std::size_t i = 0; i < processes_.size(); ++i) processes_.Start(static_cast<int>(i));
    const std::int64_t start = MonoMs();
    const std::int64_t end = start + static_cast<std::int64_t>(o_.duration_s) * 1000;
    // The fleet lines up and elects its first leader before the first fault.
    std::int64_t next_fault = start + 3000;
    std::int64_t next_progress = start + 10000;
    std::vector<std::string> round(o_.faults.begin(), o_.faults.end());
    std::shuffle(round.begin(), round.end(), rng_);
    std::size_t next_in_round = 0;
    while (!StopRequested() && MonoMs() < end) {
      Reaper::Reap();
      processes_.RespawnExited();
      if (!o_.faults.empty() && MonoMs() >= next_fault) {
        const bool first_round = next_in_round < round.size();
        const std::string kind = first_round ? round[next_in_round++] : RandomKind();
        const int quiet_ms = Inject(kind, first_round);
        next_fault = MonoMs() + quiet_ms + Uniform(o_.fault_min_ms, o_.fault_max_ms);
      }
      if (MonoMs() >= next_progress) {
        std::cerr << "pg_fencing_stress --fleet: " << (MonoMs() - start) / 1000 << " s, faults "
                  << FaultSummary() << "\n";
        next_progress += 10000;
      }
      SleepMs(10);
    }
    processes_.StopAll();
  }

  std::string FaultSummary() const {
    std::string out;
    for (const char *kind : {"pause", "kill", "crash", "bouncer"}) {
      const auto it = injected_.find(kind);
      out += std::string(out.empty() ? "" : " ") + kind + "=" +
             std::to_string(it == injected_.end() ? 0 : it->second);
    }
    const auto leader = injected_.find("leader");
    out += " (of the leader's process: " +
           std::to_string(leader == injected_.end() ? 0 : leader->second) + ")";
    return out;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

  // Pauses and kills twice as often as crashes and PgBouncer restarts.
  std::string RandomKind() {
    std::vector<std::string> weighted;
    for (const std::string &kind : o_.faults) {
      weighted.push_back(kind);
      if (kind == "pause" || kind == "kill") weighted.push_back(kind);
    }
    return weighted[static_cast<std::size_t>(Uniform(0, static_cast<int>(weighted.size()) - 1))];
  }

  // A new incarnation of a fleet process (WorkerSlots::Start).
  WorkerSlots::Launch Launch(int index, int incarnation, const std::string &log_path) {
    FleetWorkerConfig config = o_.worker;
    config.slot = index;
    config.incarnation = incarnation;
    // The candidates spread over the processes; the first ones get one more.
    config.candidates = o_.candidates / o_.processes + (index < o_.candidates % o_.processes);
    config.conninfo = bouncer_.Conninfo() + " application_name=fleet_" + std::to_string(index);
    config.log_path = log_path;
    config.seed = rng_();
    std::vector<std::string> arguments = {"--fleet-worker"};
    for (std::string &arg : FleetWorkerArguments(config)) arguments.push_back(std::move(arg));
    return {std::move(arguments), "candidates=" + std::to_string(config.candidates)};
  }

  // The slot of the process whose candidate holds the lease now, from the
  // server (its holder name says), or -1.
  int LeaderSlot() {
    try {
      pqxx::connection db(cluster_.Conninfo("postgres", kDatabase));
      pqxx::nontransaction tx(db);
      const pqxx::result r = pqxx_compat::ExecParams(
          tx, "SELECT holder FROM fencing_leases WHERE lock_name = $1 AND live",
          std::string(kFleetLock));
      int slot = -1;
      int incarnation = -1;
      if (r.size() == 1 && ParseFleetHolder(r[0][0].c_str(), slot, incarnation) &&
          slot < static_cast<int>(processes_.size()) &&
          processes_[static_cast<std::size_t>(slot)].incarnation == incarnation) {
        return slot;
      }
    } catch (const std::exception &) {
    }
    return -1;
  }

  // Injects one fault and returns how long to stay quiet after it (ms).
  // In the first round (first_round) a pause or a kill is the leader's, and
  // the pause is longer than the ttl: every run has a leader's lease lost
  // to a pause (excused, and written to by the stale leader when it
  // resumes: 55Z01) and a takeover after the leader's death to judge.
  int Inject(const std::string &kind, bool first_round) {
    if (kind == "crash") {
      CrashAndRestart(cluster_, faults_, Uniform(0, 500));
      ++injected_["crash"];
      return 0;
    }
    if (kind == "bouncer") {
      const Stamp before = Now();
      faults_.Write(before, "ev=bouncer_kill pid=" + std::to_string(bouncer_.pid()));
      bouncer_.Kill();
      SleepMs(Uniform(0, 500));
      bouncer_.Start();
      faults_.Write("ev=bouncer_up pid=" + std::to_string(bouncer_.pid()) +
                    " down_ms=" + std::to_string((Now().mono_ns - before.mono_ns) / 1000000));
      ++injected_["bouncer"];
      return 0;
    }
    // A pause or a kill: the leader's process every other time (when there
    // is a leader), another one at random otherwise.
    int index = -1;
    const bool want_leader = first_round || Uniform(0, 1) == 0;
    if (want_leader) index = LeaderSlot();
    // The first round's must find a leader: between a resignation and the
    // next grant there is none, and a run whose leader is never paused or
    // killed judges nothing of it (a vacuous run).  Waited for, up to 10 s.
    for (int waited_ms = 0; first_round && index < 0 && waited_ms < 10000; waited_ms += 50) {
      SleepMs(50);
      index = LeaderSlot();
    }
    const bool leader = index >= 0;
    if (!leader) index = Uniform(0, static_cast<int>(processes_.size()) - 1);
    const WorkerSlots::Slot &p = processes_[static_cast<std::size_t>(index)];
    const std::string who = "w=" + std::to_string(index) + " inc=" + std::to_string(p.incarnation) +
                            " pid=" + std::to_string(p.pid) + " leader=" + (leader ? "1" : "0");
    ++injected_[kind];
    if (leader) ++injected_["leader"];
    if (kind == "pause") {
      const int ttl = static_cast<int>(o_.worker.ttl.count());
      const int ms = first_round ? Uniform(ttl * 3 / 2, ttl * 2) : Uniform(ttl * 3 / 10, ttl * 2);
      kill(p.pid, SIGSTOP);
      faults_.Write("ev=pause " + who + " ms=" + std::to_string(ms));
      SleepMs(ms);
      kill(p.pid, SIGCONT);
      faults_.Write("ev=resume w=" + std::to_string(index) + " pid=" + std::to_string(p.pid));
      return 0;
    }
    processes_.Kill(index, who);
    // After the leader's death, its takeover is judged (ttl + 1 s): nothing
    // else happens meanwhile.
    return leader ? static_cast<int>(o_.worker.ttl.count()) + 2000 : 0;
  }

  const FleetOptions &o_;
  Cluster &cluster_;
  Bouncer &bouncer_;
  const std::string dir_;
  const EventLog faults_;
  std::mt19937_64 rng_;
  WorkerSlots processes_;
  std::map<std::string, int> injected_;
};

}  // namespace

int RunFleetOrchestrator(int argc, char **argv) {
  const std::optional<FleetOptions> parsed =
      ParseCommandLine(argc, argv, ParseOptions, UsageText());
  if (!parsed) return kExitSetupError;
  const FleetOptions &o = *parsed;
  CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);

  std::string dir;
  std::string socket_dir;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Bouncer> bouncer;
  std::string fault_summary;
  try {
    BecomeSubreaper();
    dir = MakeRunDir(o.dir);
    socket_dir = MakeTempDir(kSocketDirTemplate);
    std::cout << "pg_fencing_stress: mode=fleet lock=" << kFleetLock
              << " candidates=" << o.candidates << " processes=" << o.processes
              << " pool=" << o.pool_size << " seed=" << o.seed << " duration=" << o.duration_s
              << "s ttl=" << o.worker.ttl.count() << "ms faults=" << JoinOrNone(o.faults)
              << " dir=" << dir << std::endl;

    cluster =
        std::make_unique<Cluster>(RunClusterOptions(o.pg_bindir, dir, socket_dir, 100, o.preload));
    cluster->InitDb();
    cluster->Start();
    SetUpFleetDatabase(*cluster, o);
    bouncer = std::make_unique<Bouncer>(dir, socket_dir, o);
    bouncer->Start();

    std::ostringstream meta;
    meta << "mode=fleet\nseed=" << o.seed << "\nduration_s=" << o.duration_s
         << "\ncandidates=" << o.candidates << "\nprocesses=" << o.processes
         << "\npool=" << o.pool_size << "\nrows=" << o.worker.rows
         << "\nttl_ms=" << o.worker.ttl.count() << "\npoll_ms=" << o.worker.poll_every.count()
         << "\nfaults=" << JoinOrNone(o.faults) << "\nlock=" << kFleetLock
         << "\nextversion=" << ExtensionVersion(*cluster) << "\nstart_wall_us=" << Now().wall_us
         << "\n";
    WriteFile(dir + "/meta.txt", meta.str());

    FleetOrchestrator orchestrator(o, *cluster, *bouncer, dir);
    orchestrator.Run();
    fault_summary = orchestrator.FaultSummary();
    {
      std::ofstream end(dir + "/meta.txt", std::ios::app);
      end << "end_wall_us=" << Now().wall_us << "\n";
    }
    if (StopRequested()) std::cerr << "pg_fencing_stress: interrupted; checking what ran\n";
    bouncer->Stop();
    DumpFleetState(*cluster, dir);
    cluster->Stop();
    if (!o.keep_data) cluster->RemoveData();
  } catch (const std::exception &error) {
    bouncer.reset();
    return AbandonRun(error, dir, cluster.get(), socket_dir);
  }
  bouncer.reset();
  return FinishRun(fault_summary, dir, o.check, o.examples, CheckFleetRun);
}

}  // namespace pg_fencing::stress
