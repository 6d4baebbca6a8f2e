// Starting and steering worker processes (see worker_process.hpp).
#include "worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace pg_fencing::demo {

namespace {

// This program, whatever name or path it was started by.
constexpr char kSelfExecutable[] = "/proc/self/exe";
constexpr int kExecFailedStatus = 127;

[[noreturn]] void ThrowErrno(const std::string &what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Runs in the child between fork and exec, so only async-signal-safe calls.
[[noreturn]] void BecomeWorker(pid_t orchestrator, int event_fd, int command_fd, char **argv) {
  // Die with the orchestrator, even while stopped: a demo interrupted with
  // Ctrl-C must not leave a lease holder running.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != orchestrator) _exit(kExecFailedStatus);
  // These two, and only these, survive the exec.
  if (fcntl(event_fd, F_SETFD, 0) != 0 || fcntl(command_fd, F_SETFD, 0) != 0) {
    _exit(kExecFailedStatus);
  }
  // The orchestrator ignores SIGPIPE; a worker whose orchestrator is gone
  // should simply die on its next event.
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof default_action);
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, nullptr);
  execv(kSelfExecutable, argv);
  _exit(kExecFailedStatus);
}

}  // namespace

WorkerProcess::WorkerProcess(WorkerOptions options) : options_(std::move(options)) {
  int command_pipe[2];
  if (pipe2(command_pipe, O_CLOEXEC) != 0) ThrowErrno("pipe2");
  options_.command_fd = command_pipe[0];
  command_write_fd_ = command_pipe[1];

  // Everything the child needs is built before fork: no allocation after it.
  std::vector<std::string> arguments = WorkerArguments(options_);
  arguments.insert(arguments.begin(), "pg_fencing_demo");
  std::vector<char *> argv;
  for (std::string &argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  const pid_t orchestrator = getpid();
  pid_ = fork();
  if (pid_ == 0) BecomeWorker(orchestrator, options_.event_fd, options_.command_fd, argv.data());
  const int fork_errno = errno;
  close(options_.command_fd);  // the child's end
  if (pid_ < 0) {
    close(command_write_fd_);
    errno = fork_errno;
    ThrowErrno("fork");
  }
}

WorkerProcess::~WorkerProcess() {
  if (!reaped_) Kill();
  if (command_write_fd_ >= 0) close(command_write_fd_);
}

void WorkerProcess::Pause() {
  if (kill(pid_, SIGSTOP) != 0) ThrowErrno("kill(SIGSTOP)");
  int status;
  while (waitpid(pid_, &status, WUNTRACED) < 0) {
    if (errno != EINTR) ThrowErrno("waitpid");
  }
  if (!WIFSTOPPED(status)) {
    reaped_ = true;
    throw std::runtime_error(options_.name + " exited instead of stopping");
  }
}

void WorkerProcess::Resume() {
  if (kill(pid_, SIGCONT) != 0) ThrowErrno("kill(SIGCONT)");
}

void WorkerProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  killed_ = true;
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void WorkerProcess::SendGo() {
  if (write(command_write_fd_, &kGoCommand, 1) != 1) ThrowErrno("write to " + options_.name);
}

void WorkerProcess::RequestStop() {
  if (command_write_fd_ < 0) return;
  close(command_write_fd_);
  command_write_fd_ = -1;
}

bool WorkerProcess::TryReap() {
  if (reaped_) return true;
  int status;
  if (waitpid(pid_, &status, WNOHANG) != pid_ || !(WIFEXITED(status) || WIFSIGNALED(status))) {
    return false;
  }
  reaped_ = true;
  exited_cleanly_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return true;
}

}  // namespace pg_fencing::demo
