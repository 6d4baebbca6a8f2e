// The leader scenario (see scenarios.hpp): three candidates compete for a
// leader lease and the leader writes with its token every 100 ms; the
// orchestrator kills the leader twice, times each takeover, and finally
// checks from the log table that the accepted writes are in token order.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "demo_tables.hpp"
#include "events.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "run.hpp"
#include "scenarios.hpp"

namespace pg_fencing::demo {

namespace {

constexpr int kCandidateCount = 3;
constexpr int kLeadersToKill = 2;
// Each acquire attempt waits this long.  Short, so that a candidate notices a
// stop request soon; it does not slow a takeover, as attempts follow each
// other at once.
constexpr std::chrono::milliseconds kCandidateAttemptWait{250};

// Consecutive log entries with the same token: one leader's term.
struct Term {
  Token token;
  std::size_t writes;
};

std::vector<Term> TermsOf(const std::vector<Token> &log) {
  std::vector<Term> terms;
  for (const Token token : log) {
    if (terms.empty() || terms.back().token != token) terms.push_back({token, 0});
    ++terms.back().writes;
  }
  return terms;
}

std::string TermsText(const std::vector<Term> &terms) {
  std::string text;
  for (const Term &term : terms) {
    if (!text.empty()) text += " -> ";
    text += std::to_string(term.token) + " (" + std::to_string(term.writes) + " writes)";
  }
  return text.empty() ? "none" : text;
}

WorkerOptions CandidateOptions(const DemoOptions &options, int number, const std::string &lock_name,
                               const std::string &table) {
  WorkerOptions worker;
  worker.role = WorkerRole::kLeaderCandidate;
  worker.name = "L" + std::to_string(number);
  worker.lock_name = lock_name;
  worker.table = table;
  worker.ttl = options.ttl;
  worker.acquire_wait = kCandidateAttemptWait;
  worker.sessions = options.sessions;
  return worker;
}

// The candidate fencing_leader() names, or nullptr.
WorkerProcess *FindLeader(pqxx::connection &db, const std::string &lock_name,
                          const std::vector<WorkerProcess *> &candidates) {
  pqxx::work tx(db);
  const pqxx_compat::Field holder =
      pqxx_compat::ExecParams1(tx, "SELECT fencing_leader($1)", lock_name)[0];
  if (holder.is_null()) return nullptr;
  for (WorkerProcess *candidate : candidates) {
    if (!candidate->killed() && candidate->lease_holder() == holder.as<std::string>()) {
      return candidate;
    }
  }
  return nullptr;
}

Verdict JudgeLeader(const DemoOptions &options, const std::vector<Clock::duration> &takeovers,
                    const std::vector<Token> &log, bool stopped_cleanly) {
  const std::vector<Term> terms = TermsOf(log);
  const bool in_token_order = std::is_sorted(log.begin(), log.end());
  std::string takeover_text;
  for (const Clock::duration takeover : takeovers) {
    takeover_text += (takeover_text.empty() ? "" : ", ") + MillisecondsText(takeover);
  }
  std::string text = std::to_string(takeovers.size()) + " takeovers (" + takeover_text +
                     " after the kill; ttl " + MillisecondsText(options.ttl) + "); " +
                     std::to_string(log.size()) + " accepted writes, by token: " + TermsText(terms);

  std::vector<std::string> problems;
  if (takeovers.size() < kLeadersToKill) problems.push_back("too few takeovers");
  if (!in_token_order) problems.push_back("the log is NOT in token order");
  if (terms.size() < kCandidateCount) {
    problems.push_back("fewer than " + std::to_string(kCandidateCount) + " leaders wrote");
  }
  if (!stopped_cleanly) problems.push_back("the workers did not stop cleanly");
  for (const std::string &problem : problems) text += "; " + problem;
  return {problems.empty(), text};
}

}  // namespace

Verdict RunLeaderScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline) {
  const std::string table = "fencing_demo_leader";
  const std::string lock_name = "fencing_demo:leader";
  Run run(timeline, "leader",
          "leader scenario: " + std::to_string(kCandidateCount) + " candidates, lock " + lock_name +
              ", protected table " + table + " (log in " + table + "_log), ttl " +
              MillisecondsText(options.ttl) +
              (options.sessions ? ", each candidate's lease in a session of its own" : ""));
  CreateLeaderTables(db, table);

  // Every accepted write is in the log table; the timeline shows the first
  // of each term.
  std::map<std::string, Token> token_of;  // each candidate's latest token
  std::set<Token> tokens_written;
  run.SetObserver([&](const Event &event) {
    EventDisplay display;
    if (event.kind == EventKind::kAcquired && event.token) token_of[event.who] = *event.token;
    if (event.kind == EventKind::kWriteAccepted && event.token) {
      display.show = tokens_written.insert(*event.token).second;
    }
    return display;
  });

  run.Report(EventKind::kNote, table, std::nullopt,
             "the leader writes every " + MillisecondsText(kLeaderWritePeriod) +
                 "; shown is the first write of each term, the log table has them all");
  std::vector<WorkerProcess *> candidates;
  for (int number = 1; number <= kCandidateCount; ++number) {
    candidates.push_back(
        &run.StartWorker(CandidateOptions(options, number, lock_name, table), "leader candidate"));
  }
  if (!run.AwaitEvent(EventOfKind(EventKind::kAcquired), Clock::now() + StepTimeout(options))) {
    return {false, "no candidate became leader"};
  }

  // Comfortably more than one ttl, and still "about one ttl".
  const Clock::duration takeover_limit = options.ttl * 2;
  std::vector<Clock::duration> takeovers;
  for (int round = 0; round < kLeadersToKill; ++round) {
    // A whole ttl in office: only its heartbeats keep it leader.
    run.ShowEventsUntil(Clock::now() + options.ttl);
    WorkerProcess *leader = FindLeader(db, lock_name, candidates);
    if (!leader) return {false, "fencing_leader() named none of the live candidates"};
    leader->Kill();
    const Clock::time_point killed_at = Clock::now();
    run.Report(EventKind::kKilled, leader->name(), token_of[leader->name()],
               "the leader per fencing_leader(); its lease is left to expire");

    const std::optional<Event> successor =
        run.AwaitEvent(EventOfKind(EventKind::kAcquired), killed_at + takeover_limit);
    if (!successor) {
      return {false, "no takeover within " + MillisecondsText(takeover_limit) + " of killing " +
                         leader->name()};
    }
    takeovers.push_back(successor->at - killed_at);
    run.Report(EventKind::kTakeover, successor->who, successor->token,
               MillisecondsText(takeovers.back()) + " after the kill (ttl " +
                   MillisecondsText(options.ttl) + ")");
  }
  run.ShowEventsUntil(Clock::now() + options.ttl);

  const bool stopped_cleanly = run.StopWorkers(StepTimeout(options));
  const std::vector<Token> log = ReadLeaderLogTokens(db, table);
  run.Report(EventKind::kNote, table + "_log", std::nullopt,
             table + "_log: " + std::to_string(log.size()) +
                 " accepted writes, by token: " + TermsText(TermsOf(log)));
  return JudgeLeader(options, takeovers, log, stopped_cleanly);
}

}  // namespace pg_fencing::demo
