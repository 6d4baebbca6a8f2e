// The two scenarios, on the orchestrator's side.  Each makes one run: starts
// its workers, steers them, shows the timeline and returns its verdict.
#pragma once

#include <pqxx/pqxx>

#include "options.hpp"
#include "timeline.hpp"

namespace pg_fencing::demo {

// A stale holder resumes after its lease has passed to another; with
// fencing_on its write must be rejected, without it must land.
Verdict RunPauseScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                         bool fencing_on);

// Leaders are killed and replaced; the accepted writes must stay in token order.
Verdict RunLeaderScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline);

// Bound on one step of a scenario that should take milliseconds, or one ttl
// when it waits for a lease to expire; only a broken setup takes longer.
inline Clock::duration StepTimeout(const DemoOptions &options) {
  return options.ttl * 3 + std::chrono::seconds(5);
}

inline std::string MillisecondsText(Clock::duration duration) {
  return std::to_string(ToMilliseconds(duration)) + " ms";
}

}  // namespace pg_fencing::demo
