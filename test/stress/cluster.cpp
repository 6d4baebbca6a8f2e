// See cluster.hpp.
#include "cluster.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <pqxx/pqxx>
#include <stdexcept>
#include <system_error>

#include "common.hpp"

namespace pg_fencing::stress {

namespace {

constexpr int kReadyTimeoutMs = 120000;
constexpr int kStopTimeoutMs = 30000;
constexpr int kKillTimeoutMs = 10000;
// Any number will do: the socket directory is ours alone.
constexpr int kPort = 5432;

}  // namespace

Cluster::Cluster(ClusterOptions options) : options_(std::move(options)), run_as_(ServerUser()) {}

Cluster::~Cluster() {
  try {
    if (running()) Stop();
  } catch (...) {
  }
}

void Cluster::MakeDirectories() {
  namespace fs = std::filesystem;
  fs::create_directories(options_.datadir);
  fs::create_directories(options_.socket_dir);
  chmod(options_.datadir.c_str(), 0700);
  chmod(options_.socket_dir.c_str(), 0755);
  ChownTo(options_.datadir, run_as_);
  ChownTo(options_.socket_dir, run_as_);
}

void Cluster::InitDb() {
  MakeDirectories();
  const pid_t pid =
      Spawn({options_.bindir + "/initdb", "-D", options_.datadir, "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"},
            {run_as_, options_.log_path, SIGKILL});
  const std::optional<int> status = Reaper::WaitFor(pid, kReadyTimeoutMs);
  Reaper::Forget(pid);
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    throw std::runtime_error("initdb failed (" + (status ? DescribeStatus(*status) : "timeout") +
                             "); see " + options_.log_path);
  }
}

void Cluster::Start() {
  if (running()) throw std::logic_error("cluster already running");
  // A cluster started on a data directory it did not create (a lost one,
  // read again at the end) has no socket directory yet.
  std::filesystem::create_directories(options_.socket_dir);
  chmod(options_.socket_dir.c_str(), 0755);
  ChownTo(options_.socket_dir, run_as_);
  std::vector<std::string> argv = {
      options_.bindir + "/postgres", "-D", options_.datadir,   "-p", std::to_string(kPort), "-k",
      options_.socket_dir,           "-c", "listen_addresses="};
  for (const std::string &setting : options_.settings) {
    argv.push_back("-c");
    argv.push_back(setting);
  }
  // If the orchestrator dies, the server shuts down at once (SIGQUIT), taking
  // its backends with it.
  postmaster_ = Spawn(argv, {run_as_, options_.log_path, SIGQUIT});

  // Accepting connections: recovery, if any, is over.
  const std::string conninfo = Conninfo("postgres", "postgres");
  AwaitReady(
      postmaster_, [&] { pqxx::connection probe(conninfo); }, kReadyTimeoutMs, "server",
      options_.log_path);
}

int Cluster::Crash() {
  if (!running()) throw std::logic_error("cluster not running");
  const pid_t pm = postmaster_;
  // Freeze it first: a postmaster that is not running forks no new backend
  // between our listing its children and killing them.  kill() returns before
  // the stop takes effect, so wait for the 'T' state.
  kill(pm, SIGSTOP);
  for (int i = 0; i < 2000 && ProcessState(pm) != 'T' && ProcessState(pm) != 0; ++i) SleepMs(1);
  const std::vector<pid_t> children = ChildrenOf(pm);
  kill(pm, SIGKILL);
  for (pid_t child : children) kill(child, SIGKILL);

  // The postmaster is our child; its children are re-parented to us (we are
  // a subreaper), and Reap() collects them.
  const std::optional<int> status = Reaper::WaitFor(pm, kKillTimeoutMs);
  Reaper::Forget(pm);
  if (!status) throw std::runtime_error("postmaster did not die after SIGKILL");
  postmaster_ = -1;
  const std::int64_t deadline = MonoMs() + kKillTimeoutMs;
  for (;;) {
    Reaper::Reap();
    bool any = false;
    for (pid_t child : children) any = any || ProcessExists(child);
    if (!any) break;
    if (MonoMs() >= deadline) throw std::runtime_error("server processes survived SIGKILL");
    SleepMs(2);
  }
  return static_cast<int>(children.size()) + 1;
}

void Cluster::Stop() {
  if (!running()) return;
  const pid_t pm = postmaster_;
  kill(pm, SIGCONT);  // harmless if it was not stopped
  kill(pm, SIGINT);   // fast shutdown
  std::optional<int> status = Reaper::WaitFor(pm, kStopTimeoutMs);
  if (!status) {
    kill(pm, SIGQUIT);
    status = Reaper::WaitFor(pm, kKillTimeoutMs);
  }
  if (!status) {
    Crash();
    return;
  }
  Reaper::Forget(pm);
  postmaster_ = -1;
}

pid_t Cluster::StartBaseBackup(const std::string &target, const std::string &log_path) const {
  if (!running()) throw std::logic_error("cluster not running");
  std::filesystem::create_directories(target);
  chmod(target.c_str(), 0700);
  ChownTo(target, run_as_);
  // --no-sync: the harness kills processes, never the machine (RELIABILITY.md,
  // Limits); the page cache is the disk here.
  return Spawn({options_.bindir + "/pg_basebackup", "-D", target, "-h", options_.socket_dir, "-p",
                std::to_string(kPort), "-U", "postgres", "-X", "stream", "-c", "fast", "--no-sync",
                "--no-manifest"},
               {run_as_, log_path, SIGKILL});
}

void Cluster::ReplaceDataWith(const std::string &backup, const std::string &lost) {
  if (running()) throw std::logic_error("cluster running");
  std::filesystem::rename(options_.datadir, lost);
  // cp -a keeps the owner (the server's user) and the modes (0700).
  const pid_t pid = Spawn({"/bin/cp", "-a", backup, options_.datadir},
                          {std::nullopt, options_.log_path, SIGKILL});
  const std::optional<int> status = Reaper::WaitFor(pid, kReadyTimeoutMs);
  Reaper::Forget(pid);
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    throw std::runtime_error("copying the base backup " + backup + " failed (" +
                             (status ? DescribeStatus(*status) : "timeout") + ")");
  }
}

void Cluster::RemoveData() {
  std::error_code ignored;
  std::filesystem::remove_all(options_.datadir, ignored);
  std::filesystem::remove_all(options_.socket_dir, ignored);
}

std::string Cluster::Conninfo(const std::string &user, const std::string &dbname) const {
  return "host=" + options_.socket_dir + " port=" + std::to_string(kPort) + " user=" + user +
         " dbname=" + dbname + " connect_timeout=5";
}

}  // namespace pg_fencing::stress
