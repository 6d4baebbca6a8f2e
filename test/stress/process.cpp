// See process.hpp.
#include "process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "common.hpp"

namespace pg_fencing::stress {

namespace {

constexpr int kExecFailed = 127;

volatile sig_atomic_t g_stop_requested = 0;

void OnStopSignal(int) { g_stop_requested = 1; }

// pid -> wait status; std::nullopt while it runs.
std::map<pid_t, std::optional<int>> &Watched() {
  static std::map<pid_t, std::optional<int>> watched;
  return watched;
}

}  // namespace

void BecomeSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw std::system_error(errno, std::generic_category(), "prctl(PR_SET_CHILD_SUBREAPER)");
  }
}

std::optional<RunAs> ServerUser() {
  if (geteuid() != 0) return std::nullopt;
  const passwd *pw = getpwnam("postgres");
  if (pw == nullptr) throw std::runtime_error("running as root, but there is no user \"postgres\"");
  return RunAs{pw->pw_uid, pw->pw_gid};
}

void ChownTo(const std::string &path, const std::optional<RunAs> &run_as) {
  if (run_as && chown(path.c_str(), run_as->uid, run_as->gid) != 0) {
    throw std::system_error(errno, std::generic_category(), "chown " + path);
  }
}

pid_t Spawn(const std::vector<std::string> &argv, const SpawnOptions &options) {
  // Everything the child needs is built before fork.
  std::vector<std::string> args = argv;
  std::vector<char *> cargv;
  for (std::string &arg : args) cargv.push_back(arg.data());
  cargv.push_back(nullptr);
  const std::string output = options.output_path;
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (!output.empty()) {
      const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) _exit(kExecFailed);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    if (options.run_as) {
      if (setgroups(0, nullptr) != 0 || setgid(options.run_as->gid) != 0 ||
          setuid(options.run_as->uid) != 0) {
        _exit(kExecFailed);
      }
      // The server's user may not be able to enter our working directory (a
      // clone under /root is mode 700); initdb and postgres complain when
      // they cannot return to it.  Every path we pass is absolute.
      if (chdir("/") != 0) _exit(kExecFailed);
    }
    // After the credentials change, which would clear it.
    if (options.death_signal != 0) {
      if (prctl(PR_SET_PDEATHSIG, options.death_signal) != 0) _exit(kExecFailed);
      if (getppid() != parent) _exit(kExecFailed);
    }
    // Dispositions the orchestrator set (SIG_IGN survives exec) and its mask.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD}) sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(cargv[0], cargv.data());
    _exit(kExecFailed);
  }
  Reaper::Watch(pid);
  return pid;
}

void Reaper::Watch(pid_t pid) { Watched()[pid] = std::nullopt; }

void Reaper::Reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // none left to collect now (0), or no children (-1)
    const auto it = Watched().find(pid);
    if (it != Watched().end()) it->second = status;
  }
}

std::optional<int> Reaper::Status(pid_t pid) {
  const auto it = Watched().find(pid);
  if (it == Watched().end()) return std::nullopt;
  return it->second;
}

void Reaper::Forget(pid_t pid) { Watched().erase(pid); }

std::optional<int> Reaper::WaitFor(pid_t pid, int timeout_ms) {
  const std::int64_t deadline = MonoMs() + timeout_ms;
  for (;;) {
    Reap();
    if (std::optional<int> status = Status(pid)) return status;
    if (MonoMs() >= deadline) return std::nullopt;
    SleepMs(5);
  }
}

void AwaitReady(pid_t &pid, const std::function<void()> &probe, int timeout_ms,
                const std::string &what, const std::string &see) {
  const std::int64_t deadline = MonoMs() + timeout_ms;
  for (;;) {
    Reaper::Reap();
    if (const std::optional<int> status = Reaper::Status(pid)) {
      Reaper::Forget(pid);
      pid = -1;
      throw std::runtime_error(what + " exited at start (" + DescribeStatus(*status) + "); see " +
                               see);
    }
    try {
      probe();
      return;
    } catch (const std::exception &) {
      // not yet: starting up, or recovering
    }
    if (MonoMs() >= deadline) {
      throw std::runtime_error(what + " not ready after " + std::to_string(timeout_ms) +
                               " ms; see " + see);
    }
    SleepMs(20);
  }
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

namespace {

// Fields of /proc/PID/stat after "(comm)": state, ppid, ...
std::vector<std::string> StatFields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  std::string field;
  while (rest >> field) fields.push_back(field);
  return fields;
}

}  // namespace

char ProcessState(pid_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  return fields.empty() || fields[0].empty() ? 0 : fields[0][0];
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  DIR *proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent *entry = readdir(proc)) {
    char *end = nullptr;
    const long candidate = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || candidate <= 0) continue;
    const std::vector<std::string> fields = StatFields(static_cast<pid_t>(candidate));
    if (fields.size() > 1 && std::atol(fields[1].c_str()) == pid) {
      children.push_back(static_cast<pid_t>(candidate));
    }
  }
  closedir(proc);
  return children;
}

void SleepMs(int ms) {
  if (ms <= 0) return;
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void CatchStopSignals() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool StopRequested() { return g_stop_requested != 0; }

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace pg_fencing::stress
