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
#include "fleet.hpp"
#include "fleet_checker.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "process.hpp"

namespace pg_fencing::stress {

namespace {

constexpr int kExitPass = 0;
constexpr int kExitViolations = 1;
constexpr int kExitSetupError = 2;

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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

std::pair<int, int> ParseRange(const std::string &text) {
  const std::size_t dash = text.find('-');
  if (dash == std::string::npos) throw UsageError("expected MIN-MAX, got " + text);
  const int low = std::stoi(text.substr(0, dash));
  const int high = std::stoi(text.substr(dash + 1));
  if (low < 0 || high < low) throw UsageError("bad range " + text);
  return {low, high};
}

FleetOptions ParseOptions(int argc, char **argv) {
  FleetOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    try {
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
        throw UsageError("unknown option " + arg);
      }
    } catch (const std::invalid_argument &) {
      throw UsageError("bad value for " + arg);
    } catch (const std::out_of_range &) {
      throw UsageError("bad value for " + arg);
    }
  }
  if (o.processes < 1 || o.processes > 64) throw UsageError("--processes must be 1..64");
  if (o.candidates < o.processes || o.candidates > 20000)
    throw UsageError("--fleet must be at least --processes and at most 20000");
  if (o.pool_size < 1) throw UsageError("--pool must be positive");
  if (o.duration_s < 1) throw UsageError("--duration must be positive");
  if (o.worker.ttl.count() < 300) throw UsageError("--ttl must be at least 300 ms");
  return o;
}

std::string Join(const std::set<std::string> &items) {
  std::string out;
  for (const std::string &item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "none" : out;
}

void Chown(const std::string &path, const std::optional<RunAs> &run_as) {
  if (run_as && chown(path.c_str(), run_as->uid, run_as->gid) != 0) {
    throw std::runtime_error("chown " + path + " failed");
  }
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
    char templ[] = "/tmp/pgfs_bouncer.XXXXXX";
    if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    socket_dir_ = templ;
    std::filesystem::create_directories(dir_);
    chmod(socket_dir_.c_str(), 0755);
    Chown(dir_, run_as_);
    Chown(socket_dir_, run_as_);
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
    Chown(dir_ + "/pgbouncer.ini", run_as_);
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
    const std::int64_t deadline = MonoMs() + 30000;
    for (;;) {
      Reaper::Reap();
      if (const std::optional<int> status = Reaper::Status(pid_)) {
        Reaper::Forget(pid_);
        pid_ = -1;
        throw std::runtime_error("pgbouncer exited at start (" + DescribeStatus(*status) +
                                 "); see " + dir_);
      }
      try {
        pqxx::connection probe(Conninfo());
        pqxx::nontransaction tx(probe);
        pqxx_compat::Exec1(tx, "SELECT 1");
        return;
      } catch (const std::exception &) {
        // not yet
      }
      if (MonoMs() >= deadline) throw std::runtime_error("pgbouncer not ready; see " + dir_);
      SleepMs(20);
    }
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
  {
    pqxx::connection admin(cluster.Conninfo("postgres", "postgres"));
    pqxx::nontransaction tx(admin);
    pqxx_compat::Exec0(tx, std::string("CREATE DATABASE ") + kDatabase);
  }
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  pqxx_compat::Exec0(tx, "SET client_min_messages = warning");
  pqxx_compat::Exec0(tx, "CREATE EXTENSION pg_fencing");
  pqxx_compat::Exec0(tx, std::string("CREATE ROLE ") + kAppRole + " LOGIN");
  tx.exec(std::string("SELECT fencing_allow_create('") + kAppRole + "')");
  pqxx_compat::Exec0(tx, std::string("ALTER ROLE ") + kAppRole + " SET statement_timeout = '10s'");
  // The commit order, as in the other modes (orchestrator.cpp): a write and
  // a grant under the lock both lock its fence row before they take a number.
  pqxx_compat::Exec0(tx, "CREATE SEQUENCE stress_commit_seq CACHE 1");
  pqxx_compat::Exec0(tx, R"(CREATE TABLE stress_history (
      seq bigint PRIMARY KEY, tbl text NOT NULL, row_id int NOT NULL, token bigint,
      val bigint, write_id text, ts timestamptz NOT NULL, pm_start timestamptz NOT NULL))");
  pqxx_compat::Exec0(tx, R"(CREATE TABLE stress_grants (
      seq bigint PRIMARY KEY, lock_name text NOT NULL, holder text NOT NULL, token bigint NOT NULL,
      ts timestamptz NOT NULL, pm_start timestamptz NOT NULL, slot int))");
  pqxx_compat::Exec0(tx, R"(CREATE FUNCTION stress_record_write() RETURNS trigger LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    BEGIN
      INSERT INTO public.stress_history
        VALUES (nextval('public.stress_commit_seq'), TG_ARGV[0], NEW.id, NEW.token::bigint,
                NEW.val, NEW.write_id, clock_timestamp(), pg_postmaster_start_time());
      RETURN NULL;
    END $$)");
  pqxx_compat::Exec0(tx, R"(CREATE FUNCTION stress_record_grant() RETURNS trigger LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    BEGIN
      IF TG_OP = 'INSERT' OR NEW.token::bigint IS DISTINCT FROM OLD.token::bigint THEN
        INSERT INTO public.stress_grants
          VALUES (nextval('public.stress_commit_seq'), NEW.lock_name, NEW.holder,
                  NEW.token::bigint, clock_timestamp(), pg_postmaster_start_time(), NULL);
      END IF;
      RETURN NULL;
    END $$)");
  pqxx_compat::Exec0(tx,
                     "CREATE TRIGGER stress_grants AFTER INSERT OR UPDATE ON fencing_lease "
                     "FOR EACH ROW EXECUTE FUNCTION stress_record_grant()");
  pqxx_compat::Exec0(tx,
                     std::string("CREATE TABLE ") + kFleetTable +
                         " (id int PRIMARY KEY, token fencing_token, val bigint, write_id text)");
  pqxx_compat::Exec0(tx, std::string("INSERT INTO ") + kFleetTable +
                             " (id) SELECT g FROM generate_series(0, " +
                             std::to_string(o.worker.rows - 1) + ") g");
  pqxx_compat::Exec0(tx, std::string("CREATE TRIGGER stress_history AFTER UPDATE ON ") +
                             kFleetTable + " FOR EACH ROW EXECUTE FUNCTION stress_record_write('" +
                             kFleetTableTag + "')");
  pqxx_compat::Exec0(tx, std::string("GRANT SELECT, UPDATE ON ") + kFleetTable + " TO " + kAppRole);
  // Lock-wide: a leader that lost its lease cannot write any row once the
  // next leader has been granted, whether or not it has written yet.
  tx.exec(std::string("SELECT fencing_protect('") + kFleetTable + "', lock_name => '" + kFleetLock +
          "')");
  tx.commit();
}

void DumpQuery(pqxx::work &tx, const std::string &sql, const std::string &path) {
  std::string out;
  for (const auto &row : tx.exec(sql)) {
    for (pqxx::row::size_type i = 0; i < row.size(); ++i) {
      out += (i ? "\t" : "") + std::string(row[i].is_null() ? "\\N" : row[i].c_str());
    }
    out += '\n';
  }
  WriteFile(path, out);
}

void DumpFleetState(const Cluster &cluster, const std::string &dir) {
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::work tx(db);
  const auto micros = [](const std::string &column) {
    return "(extract(epoch FROM " + column + ") * 1000000)::bigint";
  };
  DumpQuery(tx,
            "SELECT seq, tbl, row_id, token, val, write_id, " + micros("ts") + ", " +
                micros("pm_start") + " FROM stress_history ORDER BY seq",
            dir + "/history.tsv");
  DumpQuery(tx,
            "SELECT seq, lock_name, holder, token, " + micros("ts") + ", " + micros("pm_start") +
                ", slot FROM stress_grants ORDER BY seq",
            dir + "/grants.tsv");
  DumpQuery(tx,
            std::string("SELECT '") + kFleetTableTag + "', id, token::bigint, val, write_id FROM " +
                kFleetTable + " ORDER BY id",
            dir + "/final.tsv");
  tx.commit();
}

// ---- The fleet and the nemesis ----------------------------------------------------

struct Process {
  pid_t pid = -1;
  int incarnation = -1;
};

class FleetOrchestrator {
 public:
  FleetOrchestrator(const FleetOptions &o, Cluster &cluster, Bouncer &bouncer, std::string dir,
                    std::string self)
      : o_(o),
        cluster_(cluster),
        bouncer_(bouncer),
        dir_(std::move(dir)),
        self_(std::move(self)),
        faults_(dir_ + "/faults.log"),
        rng_(o.seed),
        processes_(static_cast<std::size_t>(o.processes)) {}

  void Run() {
    for (std::size_t i = 0; i < processes_.size(); ++i) Spawn(static_cast<int>(i));
    const std::int64_t start = MonoMs();
    const std::int64_t end = start + static_cast<std::int64_t>(o_.duration_s) * 1000;
    // The fleet lines up and elects its first leader before the first fault.
    std::int64_t next_fault = start + 3000;
    std::int64_t next_progress = start + 10000;
    std::vector<std::string> round(o_.faults.begin(), o_.faults.end());
    std::shuffle(round.begin(), round.end(), rng_);
    std::size_t next_in_round = 0;
    while (!g_interrupted && MonoMs() < end) {
      Reaper::Reap();
      RespawnExited();
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
    StopWorkers();
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

  void Spawn(int index) {
    Process &p = processes_[static_cast<std::size_t>(index)];
    p.incarnation += 1;
    FleetWorkerConfig config = o_.worker;
    config.slot = index;
    config.incarnation = p.incarnation;
    // The candidates spread over the processes; the first ones get one more.
    config.candidates = o_.candidates / o_.processes + (index < o_.candidates % o_.processes);
    config.conninfo = bouncer_.Conninfo() + " application_name=fleet_" + std::to_string(index);
    char name[64];
    std::snprintf(name, sizeof name, "/workers/f%02d.i%03d", index, p.incarnation);
    config.log_path = dir_ + name + ".log";
    config.seed = rng_();
    std::vector<std::string> argv = {self_, "--fleet-worker"};
    for (std::string &arg : FleetWorkerArguments(config)) argv.push_back(std::move(arg));
    p.pid = stress::Spawn(argv, {std::nullopt, dir_ + name + ".stderr", SIGKILL});
    faults_.Write("ev=spawn w=" + std::to_string(index) + " inc=" + std::to_string(p.incarnation) +
                  " pid=" + std::to_string(p.pid) +
                  " candidates=" + std::to_string(config.candidates));
  }

  void RespawnExited() {
    for (std::size_t i = 0; i < processes_.size(); ++i) {
      if (const std::optional<int> status = Reaper::Status(processes_[i].pid)) {
        faults_.Write(
            "ev=worker_exit w=" + std::to_string(i) + " pid=" + std::to_string(processes_[i].pid),
            DescribeStatus(*status));
        Reaper::Forget(processes_[i].pid);
        ++unexpected_exits_;
        Spawn(static_cast<int>(i));
      }
    }
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
      const Stamp before = Now();
      faults_.Write(before, "ev=crash pm=" + std::to_string(cluster_.postmaster()));
      const int killed = cluster_.Crash();
      faults_.Write("ev=crashed procs=" + std::to_string(killed));
      SleepMs(Uniform(0, 500));
      cluster_.Start();
      faults_.Write("ev=restarted down_ms=" +
                    std::to_string((Now().mono_ns - before.mono_ns) / 1000000));
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
    const bool leader = index >= 0;
    if (!leader) index = Uniform(0, static_cast<int>(processes_.size()) - 1);
    Process &p = processes_[static_cast<std::size_t>(index)];
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
    kill(p.pid, SIGKILL);
    const std::optional<int> status = Reaper::WaitFor(p.pid, 10000);
    if (!status) throw std::runtime_error("worker " + std::to_string(p.pid) + " survived SIGKILL");
    Reaper::Forget(p.pid);
    faults_.Write("ev=kill " + who);
    Spawn(index);
    // After the leader's death, its takeover is judged (ttl + 1 s): nothing
    // else happens meanwhile.
    return leader ? static_cast<int>(o_.worker.ttl.count()) + 2000 : 0;
  }

  void StopWorkers() {
    for (const Process &p : processes_) kill(p.pid, SIGTERM);
    const std::int64_t deadline = MonoMs() + 20000;
    for (std::size_t i = 0; i < processes_.size(); ++i) {
      const int left = static_cast<int>(std::max<std::int64_t>(0, deadline - MonoMs()));
      std::optional<int> status = Reaper::WaitFor(processes_[i].pid, left);
      if (!status) {
        kill(processes_[i].pid, SIGKILL);
        status = Reaper::WaitFor(processes_[i].pid, 10000);
        faults_.Write("ev=stop_killed w=" + std::to_string(i));
      } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        faults_.Write("ev=worker_exit w=" + std::to_string(i), DescribeStatus(*status));
        ++unexpected_exits_;
      }
      Reaper::Forget(processes_[i].pid);
    }
    faults_.Write("ev=end unexpected_exits=" + std::to_string(unexpected_exits_));
  }

  const FleetOptions &o_;
  Cluster &cluster_;
  Bouncer &bouncer_;
  const std::string dir_;
  const std::string self_;
  const EventLog faults_;
  std::mt19937_64 rng_;
  std::vector<Process> processes_;
  std::map<std::string, int> injected_;
  int unexpected_exits_ = 0;
};

std::string MakeRunDir(const std::string &wanted) {
  std::string dir = wanted;
  if (dir.empty()) {
    char templ[] = "/tmp/pg_fencing_stress.XXXXXX";
    if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = templ;
  } else {
    std::filesystem::create_directories(dir);
    if (!std::filesystem::is_empty(dir)) throw UsageError("--dir " + dir + " is not empty");
  }
  dir = std::filesystem::absolute(dir).string();
  std::filesystem::create_directories(dir + "/workers");
  chmod(dir.c_str(), 0755);  // the server and PgBouncer (as postgres) reach their directories
  return dir;
}

}  // namespace

int RunFleetOrchestrator(int argc, char **argv) {
  FleetOptions o;
  try {
    o = ParseOptions(argc, argv);
  } catch (const UsageError &error) {
    std::cerr << "pg_fencing_stress: " << error.what() << "\n" << UsageText();
    return kExitSetupError;
  }
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string dir;
  std::string socket_dir;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Bouncer> bouncer;
  std::string fault_summary;
  try {
    BecomeSubreaper();
    dir = MakeRunDir(o.dir);
    char sock_templ[] = "/tmp/pgfs_sock.XXXXXX";
    if (mkdtemp(sock_templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    socket_dir = sock_templ;
    std::cout << "pg_fencing_stress: mode=fleet lock=" << kFleetLock
              << " candidates=" << o.candidates << " processes=" << o.processes
              << " pool=" << o.pool_size << " seed=" << o.seed << " duration=" << o.duration_s
              << "s ttl=" << o.worker.ttl.count() << "ms faults=" << Join(o.faults)
              << " dir=" << dir << std::endl;

    ClusterOptions co;
    co.bindir = std::filesystem::absolute(o.pg_bindir).string();
    co.datadir = dir + "/pgdata";
    co.socket_dir = socket_dir;
    co.log_path = dir + "/postgres.log";
    co.settings = {"log_min_messages=log", "log_min_error_statement=panic", "max_connections=100",
                   "fsync=on", "synchronous_commit=on"};
    if (o.preload) co.settings.push_back("shared_preload_libraries=pg_fencing");
    cluster = std::make_unique<Cluster>(co);
    cluster->InitDb();
    cluster->Start();
    SetUpFleetDatabase(*cluster, o);
    bouncer = std::make_unique<Bouncer>(dir, socket_dir, o);
    bouncer->Start();

    std::string extversion;
    {
      pqxx::connection db(cluster->Conninfo("postgres", kDatabase));
      pqxx::nontransaction tx(db);
      extversion = pqxx_compat::Exec1(
                       tx, "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'")[0]
                       .c_str();
    }
    std::ostringstream meta;
    meta << "mode=fleet\nseed=" << o.seed << "\nduration_s=" << o.duration_s
         << "\ncandidates=" << o.candidates << "\nprocesses=" << o.processes
         << "\npool=" << o.pool_size << "\nrows=" << o.worker.rows
         << "\nttl_ms=" << o.worker.ttl.count() << "\npoll_ms=" << o.worker.poll_every.count()
         << "\nfaults=" << Join(o.faults) << "\nlock=" << kFleetLock
         << "\nextversion=" << extversion << "\nstart_wall_us=" << Now().wall_us << "\n";
    WriteFile(dir + "/meta.txt", meta.str());

    FleetOrchestrator orchestrator(o, *cluster, *bouncer, dir, "/proc/self/exe");
    orchestrator.Run();
    fault_summary = orchestrator.FaultSummary();
    {
      std::ofstream end(dir + "/meta.txt", std::ios::app);
      end << "end_wall_us=" << Now().wall_us << "\n";
    }
    if (g_interrupted) std::cerr << "pg_fencing_stress: interrupted; checking what ran\n";
    bouncer->Stop();
    DumpFleetState(*cluster, dir);
    cluster->Stop();
    if (!o.keep_data) cluster->RemoveData();
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_stress: " << error.what()
              << (dir.empty() ? "" : " (run dir " + dir + ")") << "\n";
    bouncer.reset();
    if (cluster) {
      try {
        cluster->Stop();
      } catch (...) {
      }
    }
    std::error_code ignored;
    if (!socket_dir.empty()) std::filesystem::remove_all(socket_dir, ignored);
    return kExitSetupError;
  }
  bouncer.reset();
  std::cout << "pg_fencing_stress: faults injected: " << fault_summary << std::endl;
  if (!o.check) return kExitPass;
  try {
    CheckOptions check;
    check.run_dir = dir;
    check.examples = o.examples;
    const long violations = CheckFleetRun(check, std::cout);
    return violations == 0 ? kExitPass : kExitViolations;
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_stress: checker: " << error.what() << "\n";
    return kExitSetupError;
  }
}

}  // namespace pg_fencing::stress
