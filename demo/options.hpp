// Command line of pg_fencing_demo: the options a user gives the demo, and the
// hidden ones the demo gives the copies of itself it starts as workers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace pg_fencing::demo {

// A bad command line; what() is the message for the user.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the pause scenario's locks and tokens come from (--lock).
enum class LockServiceKind {
  kPg,     // the extension's leases: fencing_acquire, token from fencing_grant()
  kRedis,  // SET key id NX PX ttl, then a token from fencing_grant()
  kEtcd,   // a key put under an etcd lease; its create_revision is the token
};

// The permit scenario's semaphore: its number of permits.
inline constexpr int kDemoPermits = 3;

// "pg", "redis", "etcd".
const char *LockServiceName(LockServiceKind kind);

struct DemoOptions {
  std::string conninfo;  // empty: libpq's PG* environment variables
  // --fencing: which runs of the pause and interleave scenarios to make.  Off:
  // pause without a guard, interleave with a per-row fence only; on: pause
  // with fencing_protect, interleave with a lock-wide fence.
  bool with_fencing_off = true;
  bool with_fencing_on = true;
  bool run_pause_scenario = true;
  bool run_leader_scenario = true;
  bool run_interleave_scenario = true;
  // The permit scenario: the pause scenario on one permit of a semaphore of
  // kDemoPermits (1.4), the other permits held by a bystander.
  bool run_permit_scenario = true;
  // --sessions: the leader scenario's candidates take the leader lease in a
  // session of their own (fencing_session_open, 1.8), whose expiry ends it.
  bool sessions = false;
  int rows = 20;  // the interleave scenario's table
  // --lock: the pause scenario's lock service; the others always use pg.
  LockServiceKind lock_service = LockServiceKind::kPg;
  // --redis HOST:PORT or --etcd URL: a running service of that kind; empty
  // for pg.
  std::string lock_service_address;
  std::chrono::milliseconds ttl{1000};
  std::chrono::milliseconds pause{2500};
  bool json = false;
  bool allow_color = true;  // --no-color turns it off; colour also needs a terminal
};

enum class WorkerRole {
  kPauseHolder,          // A: holds the lease, is paused between its check and its write
  kPauseSuccessor,       // B: waits for the lock while A is paused, then writes
  kLeaderCandidate,      // competes for the leader lease and logs writes while it leads
  kInterleaveHolder,     // A: writes every row, is paused between two of them, carries on
  kInterleaveSuccessor,  // B: waits for the lock while A is paused, then writes some rows
};

struct WorkerOptions {
  WorkerRole role = WorkerRole::kLeaderCandidate;
  std::string name;      // who in the timeline: "A", "B", "L1", ...
  std::string conninfo;  // from the environment, see ExportConninfoToWorkers
  std::string lock_name;
  LockServiceKind lock_service = LockServiceKind::kPg;
  std::string lock_service_address;  // see DemoOptions
  std::string table;
  std::chrono::milliseconds ttl{0};
  std::chrono::milliseconds acquire_wait{0};  // the wait of fencing_acquire's waiting form
  int permits = 0;      // > 0: one permit of a semaphore of this many (pg only), not the lease
  bool sessions = false;  // the leader candidate: its lease in a session (DemoOptions::sessions)
  int rows = 0;         // the interleave table's (interleave roles only)
  int event_fd = -1;    // write end of the orchestrator's event pipe
  int command_fd = -1;  // read end of this worker's command pipe
};

struct CommandLine {
  enum class Action { kRunDemo, kRunWorker, kShowHelp };
  Action action = Action::kRunDemo;
  DemoOptions demo;      // for kRunDemo
  WorkerOptions worker;  // for kRunWorker
};

// Throws UsageError.
CommandLine ParseCommandLine(int argc, char **argv);

std::string UsageText();

// The arguments that make this program run as the worker `options` describes
// (everything but the program name).  The connection string is not among
// them: command lines are visible to every local user and it may hold a
// password, so it travels in the environment (ExportConninfoToWorkers).
std::vector<std::string> WorkerArguments(const WorkerOptions &options);
void ExportConninfoToWorkers(const std::string &conninfo);

// The holder name a worker acquires leases with: unique per process, and
// recognisable in fencing_leader() and the fencing_leases view.
std::string LeaseHolderName(const std::string &worker_name, pid_t pid);

}  // namespace pg_fencing::demo
