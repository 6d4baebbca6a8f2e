// See orchestration.hpp.
#include "orchestration.hpp"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "process.hpp"

namespace pg_fencing::stress {

std::pair<int, int> ParseRange(const std::string &text) {
  const std::size_t dash = text.find('-');
  if (dash == std::string::npos) throw UsageError("expected MIN-MAX, got " + text);
  const int low = std::stoi(text.substr(0, dash));
  const int high = std::stoi(text.substr(dash + 1));
  if (low < 0 || high < low) throw UsageError("bad range " + text);
  return {low, high};
}

std::string JoinOrNone(const std::set<std::string> &items) {
  std::string out;
  for (const std::string &item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "none" : out;
}

void ForEachOption(int argc, char **argv,
                   const std::function<bool(const std::string &option,
                                            const std::function<std::string()> &value)> &handle) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::function<std::string()> value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (!handle(arg, value)) throw UsageError("unknown option " + arg);
    } catch (const std::invalid_argument &) {
      throw UsageError("bad value for " + arg);
    } catch (const std::out_of_range &) {
      throw UsageError("bad value for " + arg);
    }
  }
}

std::string MakeTempDir(const std::string &templ) {
  std::vector<char> path(templ.begin(), templ.end());
  path.push_back('\0');
  if (mkdtemp(path.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
  }
  return path.data();
}

std::string MakeRunDir(const std::string &wanted) {
  std::string dir = wanted;
  if (dir.empty()) {
    dir = MakeTempDir("/tmp/pg_fencing_stress.XXXXXX");
  } else {
    std::filesystem::create_directories(dir);
    if (!std::filesystem::is_empty(dir)) throw UsageError("--dir " + dir + " is not empty");
  }
  dir = std::filesystem::absolute(dir).string();
  std::filesystem::create_directories(dir + "/workers");
  // The server (and PgBouncer), as postgres, reach their directories inside.
  chmod(dir.c_str(), 0755);
  return dir;
}

ClusterOptions RunClusterOptions(const std::string &pg_bindir, const std::string &dir,
                                 const std::string &socket_dir, int max_connections, bool preload) {
  ClusterOptions co;
  co.bindir = std::filesystem::absolute(pg_bindir).string();  // the server runs from /
  co.datadir = dir + "/pgdata";
  co.socket_dir = socket_dir;
  co.log_path = dir + "/postgres.log";
  co.settings = {"log_min_messages=log", "log_min_error_statement=panic",
                 "max_connections=" + std::to_string(max_connections), "fsync=on",
                 "synchronous_commit=on"};
  if (preload) co.settings.push_back("shared_preload_libraries=pg_fencing");
  return co;
}

int AbandonRun(const std::exception &error, const std::string &dir, Cluster *cluster,
               const std::string &socket_dir) {
  std::cerr << "pg_fencing_stress: " << error.what()
            << (dir.empty() ? "" : " (run dir " + dir + ")") << "\n";
  if (cluster != nullptr) {
    try {
      cluster->Stop();
    } catch (...) {
    }
  }
  std::error_code ignored;
  if (!socket_dir.empty()) std::filesystem::remove_all(socket_dir, ignored);
  return kExitSetupError;
}

int FinishRun(const std::string &fault_summary, const std::string &dir, bool check, int examples,
              long (*checker)(const CheckOptions &, std::ostream &)) {
  std::cout << "pg_fencing_stress: faults injected: " << fault_summary << std::endl;
  if (!check) return kExitPass;
  try {
    CheckOptions options;
    options.run_dir = dir;
    options.examples = examples;
    const long violations = checker(options, std::cout);
    return violations == 0 ? kExitPass : kExitViolations;
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_stress: checker: " << error.what() << "\n";
    return kExitSetupError;
  }
}

void CrashAndRestart(Cluster &cluster, const EventLog &faults, int down_ms,
                     const std::string &why) {
  const Stamp before = Now();
  faults.Write(before, "ev=crash pm=" + std::to_string(cluster.postmaster()) + why);
  const int killed = cluster.Crash();
  faults.Write("ev=crashed procs=" + std::to_string(killed));
  SleepMs(down_ms);
  cluster.Start();
  faults.Write("ev=restarted down_ms=" +
               std::to_string((Now().mono_ns - before.mono_ns) / 1000000));
}

// ---- WorkerSlots ----------------------------------------------------------------

namespace {

// This very program, even if the file was replaced (rebuilt) during the
// run: a forked child's /proc/self/exe is the image it was forked from.
constexpr char kSelfPath[] = "/proc/self/exe";

}  // namespace

WorkerSlots::WorkerSlots(int count, char letter, std::string run_dir, const EventLog &faults,
                         Prepare prepare)
    : slots_(static_cast<std::size_t>(count)),
      letter_(letter),
      run_dir_(std::move(run_dir)),
      faults_(faults),
      prepare_(std::move(prepare)) {}

void WorkerSlots::Start(int index) {
  Slot &slot = slots_[static_cast<std::size_t>(index)];
  slot.incarnation += 1;
  char name[64];
  std::snprintf(name, sizeof name, "/workers/%c%02d.i%03d", letter_, index, slot.incarnation);
  Launch launch = prepare_(index, slot.incarnation, run_dir_ + name + ".log");
  std::vector<std::string> argv = {kSelfPath};
  for (std::string &arg : launch.arguments) argv.push_back(std::move(arg));
  slot.pid = Spawn(argv, {std::nullopt, run_dir_ + name + ".stderr", SIGKILL});
  faults_.Write("ev=spawn w=" + std::to_string(index) + " inc=" + std::to_string(slot.incarnation) +
                " pid=" + std::to_string(slot.pid) +
                (launch.spawn_fields.empty() ? "" : " " + launch.spawn_fields));
}

void WorkerSlots::RespawnExited() {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (const std::optional<int> status = Reaper::Status(slots_[i].pid)) {
      faults_.Write(
          "ev=worker_exit w=" + std::to_string(i) + " pid=" + std::to_string(slots_[i].pid),
          DescribeStatus(*status));
      Reaper::Forget(slots_[i].pid);
      ++unexpected_exits_;
      Start(static_cast<int>(i));
    }
  }
}

void WorkerSlots::Kill(int index, const std::string &who) {
  const pid_t pid = slots_[static_cast<std::size_t>(index)].pid;
  kill(pid, SIGKILL);
  const std::optional<int> status = Reaper::WaitFor(pid, 10000);
  if (!status) throw std::runtime_error("worker " + std::to_string(pid) + " survived SIGKILL");
  Reaper::Forget(pid);
  faults_.Write("ev=kill " + who);
  Start(index);
}

void WorkerSlots::StopAll() {
  for (const Slot &slot : slots_) kill(slot.pid, SIGTERM);
  const std::int64_t deadline = MonoMs() + 20000;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const int left = static_cast<int>(std::max<std::int64_t>(0, deadline - MonoMs()));
    std::optional<int> status = Reaper::WaitFor(slots_[i].pid, left);
    if (!status) {
      kill(slots_[i].pid, SIGKILL);
      status = Reaper::WaitFor(slots_[i].pid, 10000);
      faults_.Write("ev=stop_killed w=" + std::to_string(i));
    } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      faults_.Write("ev=worker_exit w=" + std::to_string(i), DescribeStatus(*status));
      ++unexpected_exits_;
    }
    Reaper::Forget(slots_[i].pid);
  }
  faults_.Write("ev=end unexpected_exits=" + std::to_string(unexpected_exits_));
}

}  // namespace pg_fencing::stress
