// What both orchestrators (orchestrator.cpp's and the fleet's,
// fleet_orchestrator.cpp) do alike: the common part of their command lines,
// the run directory and the cluster they start, the bookkeeping of their
// worker processes and the crash fault (in the faults.log lines both
// checkers read), and the end of a run.
#pragma once

#include <sys/types.h>

#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checker.hpp"
#include "cluster.hpp"
#include "common.hpp"

namespace pg_fencing::stress {

inline constexpr int kExitPass = 0;
inline constexpr int kExitViolations = 1;
inline constexpr int kExitSetupError = 2;

// A command line the orchestrator cannot run: it prints the usage text.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "MIN-MAX", 0 <= MIN <= MAX.
std::pair<int, int> ParseRange(const std::string &text);

// "a,b,c", or "none" for no items (the fault lists of meta.txt and the
// header line).
std::string JoinOrNone(const std::set<std::string> &items);

// Walks argv[1..]: handle(option, value) takes each option, calling value()
// for its argument (a missing one is a usage error), and returns false for
// an option it does not know (a usage error).  A number that does not parse
// is a usage error naming the option.
void ForEachOption(int argc, char **argv,
                   const std::function<bool(const std::string &option,
                                            const std::function<std::string()> &value)> &handle);

// parse(argc, argv), or nullopt after printing a usage error and usage.
template <typename Options>
std::optional<Options> ParseCommandLine(int argc, char **argv, Options (*parse)(int, char **),
                                        const std::string &usage) {
  try {
    return parse(argc, argv);
  } catch (const UsageError &error) {
    std::cerr << "pg_fencing_stress: " << error.what() << "\n" << usage;
    return std::nullopt;
  }
}

// Where a server's socket directory is made: a short path, for Unix socket
// names are limited to 107 bytes.
inline constexpr char kSocketDirTemplate[] = "/tmp/pgfs_sock.XXXXXX";

// A new directory from a mkdtemp template ("/tmp/name.XXXXXX").
std::string MakeTempDir(const std::string &templ);

// The run directory: wanted (created, and empty), or a new
// /tmp/pg_fencing_stress.*; absolute, with workers/ inside.
std::string MakeRunDir(const std::string &wanted);

// The cluster of a run: in dir/pgdata, on socket_dir, logging to
// dir/postgres.log, durable (fsync, synchronous commit), logging every
// error; preload: shared_preload_libraries = pg_fencing.
ClusterOptions RunClusterOptions(const std::string &pg_bindir, const std::string &dir,
                                 const std::string &socket_dir, int max_connections, bool preload);

// After a setup or run error: says so, stops the server (its data directory
// stays for a post-mortem; the socket directory is of no use) and returns
// the exit status.
int AbandonRun(const std::exception &error, const std::string &dir, Cluster *cluster,
               const std::string &socket_dir);

// The end of a run: the faults injected, then (if check) the checker's
// verdict on dir as the exit status.
int FinishRun(const std::string &fault_summary, const std::string &dir, bool check, int examples,
              long (*checker)(const CheckOptions &, std::ostream &));

// The crash fault: SIGKILL to the postmaster and every server process, down
// for down_ms, then a restart (crash recovery).  faults.log gets ev=crash
// (stamped at the fault's start; why: fields appended), ev=crashed and
// ev=restarted.
void CrashAndRestart(Cluster &cluster, const EventLog &faults, int down_ms,
                     const std::string &why = "");

// The worker processes of a run, one per slot: a slot keeps its number
// across the processes that fill it in turn (its incarnations).  Each
// process is this very program run again, its output in
// workers/<letter>SS.iNNN.stderr beside its log (.log), killed if the
// orchestrator dies.  faults.log says when each started, exited by itself,
// was killed or stopped.
class WorkerSlots {
 public:
  struct Slot {
    pid_t pid = -1;
    int incarnation = -1;
  };
  // What a new incarnation is told: its arguments after the program's path
  // (the mode's flag first), and any fields for its ev=spawn line.
  struct Launch {
    std::vector<std::string> arguments;
    std::string spawn_fields;
  };
  using Prepare = std::function<Launch(int slot, int incarnation, const std::string &log_path)>;

  WorkerSlots(int count, char letter, std::string run_dir, const EventLog &faults, Prepare prepare);

  std::size_t size() const { return slots_.size(); }
  const Slot &operator[](std::size_t index) const { return slots_[index]; }

  // Starts a new incarnation of the slot's process.
  void Start(int index);
  // A worker that exits by itself has failed (it runs until SIGTERM); the
  // run goes on with a new one, and the exit is on record.
  void RespawnExited();
  // SIGKILL, then a new incarnation; ev=kill with who's fields.
  void Kill(int index, const std::string &who);
  // At the run's end: SIGTERM to every worker, SIGKILL to one still there
  // after 20 s; ev=end counts the unexpected exits.
  void StopAll();

 private:
  std::vector<Slot> slots_;
  const char letter_;
  const std::string run_dir_;
  const EventLog &faults_;
  const Prepare prepare_;
  int unexpected_exits_ = 0;
};

}  // namespace pg_fencing::stress
