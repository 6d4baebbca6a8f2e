// A stress worker: a process of its own (the orchestrator runs this program
// again with --worker), competing for the lease kLockName (or, in permit
// mode, for a permit of the semaphore kSemName) and writing rows of both
// tables with its token, logging every attempt and its outcome.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"

namespace pg_fencing::stress {

struct WorkerConfig : WorkerProcessConfig {
  int rows = 16;
  std::chrono::milliseconds ttl{500};
  std::chrono::milliseconds acquire_wait{1000};
  // How long a worker keeps a lease it got, drawn uniformly.
  std::chrono::milliseconds hold_min{100};
  std::chrono::milliseconds hold_max{1000};
  // After a hold, keep writing with the old token for up to this long
  // (a "zombie": released or lost, and does not care).
  std::chrono::milliseconds zombie_max{400};
  // Pause between two writes, drawn uniformly from 0 .. this.
  std::chrono::milliseconds write_gap_max{3};
  // Per hold: probability of ignoring held() (writing on after the loss).
  double p_careless = 0.35;
  // Per hold: probability of zombie writes after it.
  double p_zombie = 0.35;
  // Per write: probability of a write that does not set the token (55Z02).
  double p_missing = 0.02;
  // Permit mode: > 0 takes one of this many permits of kSemName instead of
  // the lease, and writes the semaphore's tables.
  int permits = 0;
  // Permit mode, per operation: a read under the read fence instead of a write.
  double p_read = 0.25;
  // Per read: present the token, then take the presentation back (roll back
  // its savepoint) before reading, which must then see no row.
  double p_undo = 0.15;
};

// What a frozen writer does when it resumes, inside its frozen transaction,
// before it sends COMMIT.  kCommit is the freeze fault as 1.6 made it: the
// worker's next write freezes for TTL + 3-4 s, then commits.  The others
// are its variant (issue 42): the worker takes the lock in a hold of its
// own, writes once, freezes until just after its lease's end, and then
// tries what once let such a COMMIT through (1.8): it closes the session
// it holds the lease in, opens another session (whose sweep ends its own
// ended one), or takes the lock again with fencing_acquire.
enum class Thaw : int { kCommit = 0, kCloseSession = 1, kOpenSession = 2, kReacquire = 3 };

// The logs' name of a thaw (then=...), which the checker reads.
const char *ThawName(Thaw thaw);

// The freeze fault's request, carried as SIGUSR1's value (sigqueue): a
// freeze of ms then kCommit, or a variant (its length is its lease's).
int FreezeSignalValue(int ms, Thaw thaw);

std::vector<std::string> WorkerArguments(const WorkerConfig &config);
// Parses what WorkerArguments produced (after --worker); throws on error.
WorkerConfig ParseWorkerArguments(const std::vector<std::string> &args);

// Runs until SIGTERM; returns the process exit status.
int RunWorker(const WorkerConfig &config);

}  // namespace pg_fencing::stress
