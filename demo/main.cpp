// pg_fencing_demo: the README's show.  Without arguments it connects to the
// database, runs the pause scenario with fencing off and on, the leader
// scenario, the interleave scenario with a per-row and a lock-wide fence,
// and the permit scenario (the pause scenario on a semaphore), prints their timeline and a verdict
// per run.  Started with
// --worker, it is one of the worker processes of such a run instead.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "lock_service.hpp"
#include "options.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "scenarios.hpp"
#include "timeline.hpp"
#include "worker.hpp"

namespace pg_fencing::demo {

namespace {

constexpr int kExitAllAsExpected = 0;
constexpr int kExitRunFailed = 1;
constexpr int kExitSetupError = 2;

Timeline::Format OutputFormat(const DemoOptions &options) {
  if (options.json) return Timeline::Format::kJson;
  // https://no-color.org: set and not empty means no colour.
  const char *no_color = std::getenv("NO_COLOR");
  const bool color =
      options.allow_color && isatty(STDOUT_FILENO) && (no_color == nullptr || *no_color == '\0');
  return color ? Timeline::Format::kColorText : Timeline::Format::kText;
}

void PrepareDatabase(pqxx::connection &db) {
  pqxx::nontransaction tx(db);
  // The demo's own DROP TABLE IF EXISTS and friends would chatter on stderr.
  pqxx_compat::Exec0(tx, "SET client_min_messages = warning");
  pqxx_compat::Exec0(tx, "CREATE EXTENSION IF NOT EXISTS pg_fencing");
}

template <typename Scenario>
void RecordRun(Timeline &timeline, Scenario &&scenario) {
  Verdict verdict;
  try {
    verdict = scenario();
  } catch (const std::exception &error) {
    verdict = {false, std::string("aborted: ") + error.what()};
  }
  timeline.RecordVerdict(verdict);
}

int RunDemo(const DemoOptions &options) {
  // Writing to the command pipe of a worker that has died must fail, not
  // kill the orchestrator.
  signal(SIGPIPE, SIG_IGN);
  ExportConninfoToWorkers(options.conninfo);

  std::unique_ptr<pqxx::connection> db;
  try {
    db = std::make_unique<pqxx::connection>(options.conninfo);
    PrepareDatabase(*db);
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_demo: cannot prepare the database: " << error.what() << '\n';
    return kExitSetupError;
  }
  try {
    CheckLockServiceReachable(options.lock_service, options.lock_service_address);
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_demo: cannot use the " << LockServiceName(options.lock_service)
              << " lock service: " << error.what() << '\n';
    return kExitSetupError;
  }

  Timeline timeline(std::cout, OutputFormat(options));
  if (options.run_pause_scenario) {
    for (const bool fencing_on : {false, true}) {
      if (!(fencing_on ? options.with_fencing_on : options.with_fencing_off)) continue;
      RecordRun(timeline, [&] { return RunPauseScenario(options, *db, timeline, fencing_on); });
    }
  }
  if (options.run_leader_scenario) {
    RecordRun(timeline, [&] { return RunLeaderScenario(options, *db, timeline); });
  }
  if (options.run_interleave_scenario) {
    // --fencing off is the per-row fence, on the lock-wide one.
    for (const bool lock_wide : {false, true}) {
      if (!(lock_wide ? options.with_fencing_on : options.with_fencing_off)) continue;
      RecordRun(timeline, [&] { return RunInterleaveScenario(options, *db, timeline, lock_wide); });
    }
  }
  if (options.run_permit_scenario) {
    for (const bool fencing_on : {false, true}) {
      if (!(fencing_on ? options.with_fencing_on : options.with_fencing_off)) continue;
      RecordRun(timeline, [&] { return RunPermitScenario(options, *db, timeline, fencing_on); });
    }
  }
  timeline.RecordSummary();
  return timeline.all_ok() ? kExitAllAsExpected : kExitRunFailed;
}

int Main(int argc, char **argv) {
  CommandLine command_line;
  try {
    command_line = ParseCommandLine(argc, argv);
  } catch (const UsageError &error) {
    std::cerr << "pg_fencing_demo: " << error.what() << "\nTry 'pg_fencing_demo --help'.\n";
    return kExitSetupError;
  }
  switch (command_line.action) {
    case CommandLine::Action::kShowHelp:
      std::cout << UsageText();
      return kExitAllAsExpected;
    case CommandLine::Action::kRunWorker:
      return RunWorker(command_line.worker);
    case CommandLine::Action::kRunDemo:
      break;
  }
  return RunDemo(command_line.demo);
}

}  // namespace

}  // namespace pg_fencing::demo

int main(int argc, char **argv) { return pg_fencing::demo::Main(argc, argv); }
