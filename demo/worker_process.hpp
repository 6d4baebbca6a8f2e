// A worker as the orchestrator sees it: a child process running this program
// with --worker, which it can pause, resume, kill, and talk to through a
// command pipe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "events.hpp"
#include "options.hpp"

namespace pg_fencing::demo {

class WorkerProcess {
 public:
  // Starts the worker (fork, then exec of this very program): a process of
  // its own, as a real client would be, not a thread sharing our state.
  // options.event_fd is the write end of the run's event pipe;
  // options.command_fd is filled in here.
  explicit WorkerProcess(WorkerOptions options);
  // Kills the worker if it is still running: no run leaves one behind.
  ~WorkerProcess();

  WorkerProcess(const WorkerProcess &) = delete;
  WorkerProcess &operator=(const WorkerProcess &) = delete;

  const std::string &name() const { return options_.name; }
  pid_t pid() const { return pid_; }
  std::string lease_holder() const { return LeaseHolderName(options_.name, pid_); }

  // SIGSTOP; returns once the kernel reports the process stopped.
  void Pause();
  void Resume();
  // SIGKILL, and reaps the process.
  void Kill();

  // Lets a worker waiting for the go-ahead proceed (it reads it as soon as
  // it runs).
  void SendGo();
  // Closes the command pipe, which the worker takes as "finish and exit".
  void RequestStop();

  // Reaps the worker if it has exited; true once it has.
  bool TryReap();
  // Whether it exited by itself with status 0; meaningful once reaped.
  bool exited_cleanly() const { return exited_cleanly_; }
  bool killed() const { return killed_; }

 private:
  WorkerOptions options_;
  pid_t pid_ = -1;
  int command_write_fd_ = -1;
  bool reaped_ = false;
  bool exited_cleanly_ = false;
  bool killed_ = false;
};

}  // namespace pg_fencing::demo
