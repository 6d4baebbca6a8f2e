// The harness's own PostgreSQL cluster: created with initdb in the run
// directory, served on a Unix socket in a private directory (no TCP at all),
// started as a direct child of the orchestrator so that it can be crashed
// with SIGKILL and restarted at will.
//
// Why not an existing cluster (pg_virtualenv, --pgdata + pg_ctl)?  Crashing
// means killing the postmaster *and every backend* with SIGKILL: a backend
// that outlives its postmaster can still finish a commit, and stale shared
// memory attachments or a zombie postmaster make the restart fail.  Doing it
// right needs the postmaster's PID, its children, and someone who reaps
// them; owning the cluster gives all three without guessing.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "process.hpp"

namespace pg_fencing::stress {

struct ClusterOptions {
  std::string bindir;                 // initdb, postgres
  std::string datadir;                // created here, removed by RemoveData()
  std::string socket_dir;             // short path: Unix socket names are limited to 107 bytes
  std::string log_path;               // the server's stderr
  std::vector<std::string> settings;  // extra "-c name=value"
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions options);
  ~Cluster();  // stops the server if it runs
  Cluster(const Cluster &) = delete;
  Cluster &operator=(const Cluster &) = delete;

  void InitDb();
  // Starts the postmaster and returns once it accepts connections (after
  // crash recovery, if any).  Throws if it exits or is not ready in time.
  void Start();
  // SIGSTOP the postmaster (so it forks nothing more), SIGKILL it and every
  // child it has, and wait until all of them are gone.  Returns how many
  // server processes were killed.
  int Crash();
  // Fast shutdown (SIGINT), then SIGQUIT and SIGKILL if it lingers.
  void Stop();
  void RemoveData();

  // The restore fault (RELIABILITY.md, "The restore fault").  Starts
  // pg_basebackup of the running server into target (created here, empty),
  // as the server's user, after an immediate checkpoint, with the WAL it
  // needs streamed alongside (-X stream): a copy of target starts on its own.
  // Returns its PID, watched by the Reaper; its output goes to log_path.
  pid_t StartBaseBackup(const std::string &target, const std::string &log_path) const;
  // With the server down: moves the data directory to lost (the lost
  // server's files, for the checker's record of what it had committed) and
  // puts a fresh copy of backup in its place, to be started by Start().
  void ReplaceDataWith(const std::string &backup, const std::string &lost);

  bool running() const { return postmaster_ > 0; }
  pid_t postmaster() const { return postmaster_; }
  std::string Conninfo(const std::string &user, const std::string &dbname) const;

 private:
  void MakeDirectories();

  ClusterOptions options_;
  std::optional<RunAs> run_as_;
  pid_t postmaster_ = -1;
};

}  // namespace pg_fencing::stress
