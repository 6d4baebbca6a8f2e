// The fleet mode's checker (see fleet.hpp, RELIABILITY.md "Fleet mode"):
// reads a run directory written by pg_fencing_stress --fleet and judges it,
// one function per invariant.  What it reads:
//   meta.txt         mode=fleet, ttl_ms, candidates, processes, start_wall_us, end_wall_us
//   faults.log       the nemesis's events: pause/resume, kill, crash/restarted,
//                    bouncer_kill/bouncer_up, spawn, worker_exit
//   workers/f*.log   every fleet process's events (fleet_worker.cpp)
//   history.tsv      every committed write:  seq tbl row token val write_id ts_us pm_start_us
//   grants.tsv       every grant of a lease: seq lock holder token ts_us pm_start_us slot
#pragma once

#include <ostream>

#include "checker.hpp"

namespace pg_fencing::stress {

// Prints the report to out; returns the number of violations found.
// Throws std::runtime_error if the run directory cannot be read.
long CheckFleetRun(const CheckOptions &options, std::ostream &out);

}  // namespace pg_fencing::stress
