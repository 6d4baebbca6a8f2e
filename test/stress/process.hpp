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

#include <functional>
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
// Gives path to run_as (what the server's user must own); nothing without.
void ChownTo(const std::string &path, const std::optional<RunAs> &run_as);

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

// Waits until a server just started as pid takes connections: probe()
// (a connection attempt) returns without throwing; tried every 20 ms for up
// to timeout_ms.  Throws if the server exits meanwhile (then forgets it and
// sets pid to -1) or is not ready in time; what names it in the message,
// and see says where to look.
void AwaitReady(pid_t &pid, const std::function<void()> &probe, int timeout_ms,
                const std::string &what, const std::string &see);

// Whether a process with this PID exists (zombies included).
bool ProcessExists(pid_t pid);
// Children of pid, from /proc.
std::vector<pid_t> ChildrenOf(pid_t pid);
// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or 0.
char ProcessState(pid_t pid);

void SleepMs(int ms);

// SIGTERM and SIGINT only set a flag (StopRequested) that the main loop of
// an orchestrator or a worker polls, so that it ends where it chooses and
// writes its last lines (a run is checked even when interrupted).
void CatchStopSignals();
bool StopRequested();

// "exit 3", "signal 9".
std::string DescribeStatus(int status);

}  // namespace pg_fencing::stress
