// The scenarios, on the orchestrator's side.  Each makes one run: starts its
// workers, steers them, shows the timeline and returns its verdict.
#pragma once

#include <pqxx/pqxx>

#include "options.hpp"
#include "timeline.hpp"

namespace pg_fencing::demo {

// A stale holder resumes after its lease has passed to another; with
// fencing_on its write must be rejected, without it must land.
Verdict RunPauseScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                         bool fencing_on);

// The same on one permit of a semaphore whose other permits a bystander
// holds: the stale holder's permit is granted again, to the successor.
Verdict RunPermitScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                          bool fencing_on);

// Leaders are killed and replaced; the accepted writes must stay in token order.
Verdict RunLeaderScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline);

// A stale holder resumes in the middle of writing a table under one lock,
// after the next holder has written some of its rows; with a per-row fence
// its writes to the other rows must land, with a lock-wide fence none may.
Verdict RunInterleaveScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                              bool lock_wide);

// Bound on one step of a scenario that should take milliseconds, or one ttl
// when it waits for a lease to expire; only a broken setup takes longer.
inline Clock::duration StepTimeout(const DemoOptions &options) {
  return options.ttl * 3 + std::chrono::seconds(5);
}

inline std::string MillisecondsText(Clock::duration duration) {
  return std::to_string(ToMilliseconds(duration)) + " ms";
}

// A worker of the pause or interleave scenario, A or B: takes the lock once.
inline WorkerOptions HolderWorkerOptions(const DemoOptions &options, WorkerRole role,
                                         const char *name, const std::string &lock_name,
                                         const std::string &table) {
  WorkerOptions worker;
  worker.role = role;
  worker.name = name;
  worker.lock_name = lock_name;
  worker.table = table;
  worker.ttl = options.ttl;
  // Enough for B to outlast A's lease, and for A to outlast one left live by
  // an interrupted earlier run.
  worker.acquire_wait = options.ttl * 2 + std::chrono::seconds(1);
  worker.rows = options.rows;
  return worker;
}

}  // namespace pg_fencing::demo
