// The pause scenario (see scenarios.hpp):
//   A takes the lease (token n), checks held(), writes, checks held() again
//   and is stopped right there; its lease expires on the server; B takes the
//   lock (token n+1) and writes; A resumes and writes with token n at once.
// The lock comes from the lock service of --lock (lock_service.hpp): the
// extension's leases, Redis or etcd; the rest is the same for all three.
// The permit scenario is the same story on the last free permit of a
// semaphore (1.4): a bystander holds the others, so B is granted A's own
// permit, and the table is fenced under the semaphore, per permit.
#include <optional>
#include <stdexcept>
#include <vector>

#include "demo_tables.hpp"
#include "events.hpp"
#include "lock_service.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "run.hpp"
#include "scenarios.hpp"

namespace pg_fencing::demo {

namespace {

constexpr char kHolder[] = "A";
constexpr char kSuccessor[] = "B";

// What the verdict is drawn from.
struct PauseFacts {
  Token holder_token = 0;
  std::optional<Event> successor_write;  // B's outcome, if it came before A resumed
  std::optional<Event> stale_write;      // A's outcome after the pause
  PauseRow final_row;
};

// A write's outcome as its worker reports it (or its failure).
EventMatcher WriteOutcomeOf(const char *who) {
  return EventFrom(who, {EventKind::kWriteAccepted, EventKind::kWriteRejected, EventKind::kError});
}

std::string RowText(const PauseRow &row) {
  return "token " + (row.token ? std::to_string(*row.token) : std::string("NULL")) + ", val '" +
         row.value + "'";
}

std::string OutcomeText(const std::optional<Event> &write) {
  if (!write) return "no outcome was reported";
  switch (write->kind) {
    case EventKind::kWriteAccepted:
      return "it was accepted";
    case EventKind::kWriteRejected:
      return "it was rejected";
    default:
      return "it failed: " + write->detail;
  }
}

Verdict JudgePause(const DemoOptions &options, bool fencing_on, const PauseFacts &facts) {
  if (!facts.successor_write || facts.successor_write->kind != EventKind::kWriteAccepted) {
    return {false, "B had not written when A resumed (pause " + MillisecondsText(options.pause) +
                       ", ttl " + MillisecondsText(options.ttl) +
                       "), so there was no newer write to protect; try a longer --pause"};
  }
  const std::string holder_token = std::to_string(facts.holder_token);
  const std::string successor_token = std::to_string(*facts.successor_write->token);
  const std::string what_happened = "A's write with token " + holder_token + ": " +
                                    OutcomeText(facts.stale_write) + "; the row holds " +
                                    RowText(facts.final_row);
  const bool stale_accepted =
      facts.stale_write && facts.stale_write->kind == EventKind::kWriteAccepted;
  const bool stale_rejected =
      facts.stale_write && facts.stale_write->kind == EventKind::kWriteRejected;

  if (!fencing_on) {
    if (stale_accepted && facts.final_row.token == facts.holder_token &&
        facts.final_row.value == kHolderStaleValue) {
      return {true, "fencing OFF: A's stale write (token " + holder_token +
                        ") landed on top of B's (token " + successor_token +
                        ") and B's write is lost: the failure fencing exists to prevent, shown "
                        "as expected"};
    }
    return {false, "fencing OFF: expected A's stale write to land, but " + what_happened};
  }
  if (stale_rejected && facts.final_row.token == facts.successor_write->token &&
      facts.final_row.value == kSuccessorValue) {
    return {true, "fencing ON: A's stale write (token " + holder_token +
                      ") was rejected with 55Z01 and B's value (token " + successor_token +
                      ") survives"};
  }
  const std::string expected =
      "fencing ON: expected A's stale write to be rejected and B's value to survive";
  return {false, expected + ", but " + what_happened};
}

// "redis/" for the run id, "redis_" for the table, "redis:" for the lock
// name; nothing for pg, whose names are those of the demo before --lock.
std::string ServicePrefix(const DemoOptions &options, char separator) {
  if (options.lock_service == LockServiceKind::kPg) return {};
  return LockServiceName(options.lock_service) + std::string(1, separator);
}

// The lock, for the run's title.
std::string LockText(const DemoOptions &options, const std::string &lock_name) {
  const std::string key = LockKeyOf(options.lock_service, lock_name);
  switch (options.lock_service) {
    case LockServiceKind::kRedis:
      return "lock in Redis at " + options.lock_service_address + ": SET " + key + " <id> NX PX " +
             std::to_string(options.ttl.count()) + ", token from fencing_grant()";
    case LockServiceKind::kEtcd:
      return "lock in etcd at " + options.lock_service_address + ": key " + key +
             " under a lease, token = its create_revision";
    case LockServiceKind::kPg:
      break;
  }
  return "lock " + lock_name;
}

// The permit scenario's bystander: it holds every permit but one of the
// semaphore for the whole run, as one holder per permit (the same names each
// run, so that a run after an interrupted one gets the same permits back).
class Bystander {
 public:
  Bystander(pqxx::connection &db, const std::string &semaphore) : db_(db), semaphore_(semaphore) {
    for (int i = 1; i < kDemoPermits; ++i) {
      pqxx::nontransaction tx(db_);
      const pqxx::row row = pqxx_compat::ExecParams1(
          tx, "SELECT fencing_acquire_permit($1, $2, $3, '10 minutes')::bigint", semaphore_,
          "bystander-" + std::to_string(i), kDemoPermits);
      if (row[0].is_null()) throw std::runtime_error("the bystander found no free permit");
      tokens_.push_back(row[0].as<Token>());
    }
  }
  ~Bystander() {
    try {
      for (const Token token : tokens_) {
        pqxx::nontransaction tx(db_);
        pqxx_compat::ExecParams(tx, "SELECT fencing_release($1, $2)", semaphore_, token);
      }
    } catch (...) {
      // The permits end by themselves.
    }
  }
  Bystander(const Bystander &) = delete;
  Bystander &operator=(const Bystander &) = delete;

  const std::vector<Token> &tokens() const { return tokens_; }

 private:
  pqxx::connection &db_;
  std::string semaphore_;
  std::vector<Token> tokens_;
};

// The slot a permit token holds now (fencing_permits), or -1 when it is no
// slot's latest grant.
int SlotOf(pqxx::connection &db, const std::string &semaphore, Token token) {
  pqxx::nontransaction tx(db);
  const pqxx::result rows =
      pqxx_compat::ExecParams(tx,
                              "SELECT slot FROM fencing_permits WHERE lock_name = $1 AND token = "
                              "$2::bigint::fencing_token",
                              semaphore, token);
  return rows.empty() ? -1 : rows[0][0].as<int>();
}

WorkerOptions PauseWorkerOptions(const DemoOptions &options, WorkerRole role, const char *name,
                                 const std::string &lock_name, const std::string &table,
                                 bool on_permit) {
  WorkerOptions worker = HolderWorkerOptions(options, role, name, lock_name, table);
  worker.lock_service = options.lock_service;
  worker.lock_service_address = options.lock_service_address;
  if (on_permit) worker.permits = kDemoPermits;
  return worker;
}

Verdict RunPause(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                 bool fencing_on, bool on_permit) {
  const std::string mode = fencing_on ? "on" : "off";
  const std::string scenario = on_permit ? "permit" : "pause";
  const std::string table = "fencing_demo_" + scenario + "_" + ServicePrefix(options, '_') + mode;
  const std::string lock_name =
      "fencing_demo:" + scenario + ":" + ServicePrefix(options, ':') + mode;
  const std::string lock_text = on_permit ? "the last of the " + std::to_string(kDemoPermits) +
                                                " permits of semaphore " + lock_name +
                                                " (a bystander holds the others)"
                                          : LockText(options, lock_name);
  const std::string guard_text =
      !fencing_on ? " without guard"
      : on_permit ? " protected under the semaphore (each permit fenced on its own)"
                  : " with fencing_protect";
  Run run(timeline, scenario + "/" + ServicePrefix(options, '/') + mode,
          scenario + " scenario, fencing " + (fencing_on ? "ON" : "OFF") + ": table " + table +
              guard_text + ", " + lock_text + ", ttl " + MillisecondsText(options.ttl) +
              ", pause " + MillisecondsText(options.pause));
  CreatePauseTable(db, table, fencing_on,
                   on_permit ? std::optional<std::string>(lock_name) : std::nullopt,
                   options.lock_service == LockServiceKind::kEtcd);
  std::optional<Bystander> bystander;
  if (on_permit) {
    bystander.emplace(db, lock_name);
    run.Report(EventKind::kNote, "bystander", std::nullopt,
               "holds " + std::to_string(bystander->tokens().size()) + " of the " +
                   std::to_string(kDemoPermits) + " permits for the whole run");
  }

  // Flag a stale write wherever it shows up.
  StaleWriteWatch stale_watch;
  run.SetObserver([&stale_watch](const Event &event) {
    EventDisplay display;
    display.alarm = stale_watch.Check(event);
    return display;
  });
  const auto report_row = [&](std::optional<Token> token_to_keep) {
    const PauseRow row = ReadPauseRow(db, table);
    std::string alarm;
    if (token_to_keep && row.token != token_to_keep) {
      alarm = "B's write (token " + std::to_string(*token_to_keep) + ") is lost";
    }
    run.Report(EventKind::kRowState, table, row.token, RowText(row), alarm);
    return row;
  };

  PauseFacts facts;
  WorkerProcess &holder = run.StartWorker(
      PauseWorkerOptions(options, WorkerRole::kPauseHolder, kHolder, lock_name, table, on_permit),
      "takes the lease and writes");
  const std::optional<Event> about_to_write =
      run.AwaitEvent(EventFrom(kHolder, {EventKind::kAboutToWrite, EventKind::kError}),
                     Clock::now() + StepTimeout(options));
  if (!about_to_write) return {false, "A never got as far as its second write"};
  if (about_to_write->kind == EventKind::kError) {
    return {false, "A failed before its second write: " + about_to_write->detail};
  }
  facts.holder_token = *about_to_write->token;
  const int holder_slot = on_permit ? SlotOf(db, lock_name, facts.holder_token) : -1;

  holder.Pause();
  const Clock::time_point paused_at = Clock::now();
  run.Report(EventKind::kPaused, kHolder, facts.holder_token,
             "between its held() check and its write, for " + MillisecondsText(options.pause) +
                 " (think GC pause, VM migration)");
  holder.SendGo();  // A reads it the moment it runs again

  run.StartWorker(PauseWorkerOptions(options, WorkerRole::kPauseSuccessor, kSuccessor, lock_name,
                                     table, on_permit),
                  "waits for the lock");
  const Clock::time_point resume_at = paused_at + options.pause;
  facts.successor_write = run.AwaitEvent(WriteOutcomeOf(kSuccessor), resume_at);
  std::optional<Token> successor_token;
  if (facts.successor_write && facts.successor_write->kind == EventKind::kWriteAccepted) {
    successor_token = facts.successor_write->token;
    report_row(std::nullopt);
  }
  run.ShowEventsUntil(resume_at);

  holder.Resume();
  run.Report(EventKind::kResumed, kHolder, facts.holder_token,
             "after " + MillisecondsText(Clock::now() - paused_at) +
                 "; it has already checked its lease, so it writes at once");
  facts.stale_write = run.AwaitEvent(WriteOutcomeOf(kHolder), Clock::now() + StepTimeout(options));
  facts.final_row = report_row(successor_token);

  const bool stopped_cleanly = run.StopWorkers(StepTimeout(options));
  Verdict verdict = JudgePause(options, fencing_on, facts);
  if (on_permit && successor_token) {
    // The story needs B on A's own permit: anything else is no re-grant.
    const int successor_slot = SlotOf(db, lock_name, *successor_token);
    bool bystander_intact = true;
    for (const Token token : bystander->tokens()) {
      if (SlotOf(db, lock_name, token) < 0) bystander_intact = false;
    }
    if (!bystander_intact) {
      verdict.ok = false;
      verdict.text += "; and a bystander's permit was granted to someone else";
    } else if (holder_slot < 0 || successor_slot != holder_slot) {
      verdict.ok = false;
      verdict.text += "; and B was not granted A's permit (slot " + std::to_string(holder_slot) +
                      ", B's " + std::to_string(successor_slot) + ")";
    } else {
      verdict.text += "; B holds A's permit (slot " + std::to_string(holder_slot) +
                      ") and the bystander still holds the others";
    }
  }
  if (!stopped_cleanly) {
    verdict.ok = false;
    verdict.text += "; and the workers did not stop cleanly";
  }
  return verdict;
}

}  // namespace

Verdict RunPauseScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                         bool fencing_on) {
  return RunPause(options, db, timeline, fencing_on, false);
}

Verdict RunPermitScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                          bool fencing_on) {
  return RunPause(options, db, timeline, fencing_on, true);
}

}  // namespace pg_fencing::demo
