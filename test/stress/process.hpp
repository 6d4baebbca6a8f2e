// Child processes of the orchestrator: starting them (optionally as another
// user), and reaping them.
//
// The orchestrator makes itself a child subreaper, so the server processes
// orphaned when it kills the postmaster with SIGKILL become its children and
// are reaped here rather than left as zombies (the container's init may not
// reap them, and a zombie postmaster would keep its PID "alive" for the next
// postmaster's lock-file check).  All reaping goes through Reaper::Reap(),
// which remembers the exit status of the processes it was told to watch and
// discards the others.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace pg_fencing::stress {

// Makes this process the reaper of its orphaned descendants.
void BecomeSubreaper();

struct RunAs {
  uid_t uid;
  gid_t gid;
};
// The postgres user when we are root (the server refuses to run as root);
// nullopt otherwise (run as ourselves).
std::optional<RunAs> ServerUser();

struct SpawnOptions {
  std::optional<RunAs> run_as;
  std::string output_path;  // stdout and stderr appended here; empty: inherited
  int death_signal = 0;     // sent to the child when we die (PR_SET_PDEATHSIG)
};

// fork + execv; the child is watched by the Reaper.  Throws on fork failure.
pid_t Spawn(const std::vector<std::string> &argv, const SpawnOptions &options);

class Reaper {
 public:
  static void Watch(pid_t pid);
  // Collects every exited child without blocking.
  static void Reap();
  // The wait status of a watched child that has exited (after Reap()).
  static std::optional<int> Status(pid_t pid);
  static void Forget(pid_t pid);
  // Reaps until pid has exited or timeout_ms passed; the status, if exited.
  static std::optional<int> WaitFor(pid_t pid, int timeout_ms);
};

// Whether a process with this PID exists (zombies included).
bool ProcessExists(pid_t pid);
// Children of pid, from /proc.
std::vector<pid_t> ChildrenOf(pid_t pid);
// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or 0.
char ProcessState(pid_t pid);

void SleepMs(int ms);

// "exit 3", "signal 9".
std::string DescribeStatus(int status);

}  // namespace pg_fencing::stress
