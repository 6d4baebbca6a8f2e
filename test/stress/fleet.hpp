// Fleet mode (issue 43): hundreds of candidates of one election, waiting in
// the lock's line (fencing_line_join / fencing_line_poll) through a PgBouncer
// in transaction pooling, while a nemesis pauses and kills their processes,
// crashes the server and restarts PgBouncer.  RELIABILITY.md, "Fleet mode".
//
//   pg_fencing_stress --fleet N ...         the orchestrator (fleet_orchestrator.cpp)
//   pg_fencing_stress --fleet-worker ...    one of its processes (fleet_worker.cpp)
//   pg_fencing_stress_check RUN_DIR         the checker (fleet_checker.cpp), chosen by
//                                           meta.txt's mode=fleet
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"

namespace pg_fencing::stress {

// The election every candidate of the fleet stands in.
inline constexpr char kFleetLock[] = "fleet";
// The leader's guarded rows: fencing_protect(kFleetTable, lock_name =>
// kFleetLock), so that a write under any token below the lock's latest grant
// is refused (55Z01).
inline constexpr char kFleetTable[] = "fleet_rows";
inline constexpr char kFleetTableTag[] = "fleet";

// One process of the fleet; its conninfo goes through PgBouncer.
struct FleetWorkerConfig : WorkerProcessConfig {
  int candidates = 50;  // candidates multiplexed in this process
  int rows = 4;
  std::chrono::milliseconds ttl{3000};
  std::chrono::milliseconds poll_every{500};
  std::chrono::milliseconds write_every{100};
  // How long a leader leads before it resigns, drawn uniformly.
  std::chrono::milliseconds lead_min{1000};
  std::chrono::milliseconds lead_max{3000};
};

std::vector<std::string> FleetWorkerArguments(const FleetWorkerConfig &config);
// Parses what FleetWorkerArguments produced (after --fleet-worker); throws on error.
FleetWorkerConfig ParseFleetWorkerArguments(const std::vector<std::string> &args);

// Runs until SIGTERM; returns the process exit status.
int RunFleetWorker(const FleetWorkerConfig &config);

// The fleet orchestrator: argv as given to pg_fencing_stress (with --fleet N).
int RunFleetOrchestrator(int argc, char **argv);

// The holder name of a candidate's session: "f<slot>.<incarnation>.<candidate>.<generation>",
// unique per session, so that the server's record of a grant names the
// process that took it.
std::string FleetHolder(int slot, int incarnation, int candidate, int generation);
// The slot and incarnation a holder name was made from; false if it is not one.
bool ParseFleetHolder(const std::string &holder, int &slot, int &incarnation);

}  // namespace pg_fencing::stress
