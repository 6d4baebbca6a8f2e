// The interleave scenario (see scenarios.hpp):
//   one lock covers a table of N rows.  A takes the lease (token n), checks
//   held() once and writes the rows one by one; after a quarter of them it
//   is stopped, between two rows; its lease expires on the server; B takes
//   the lock (token n+1) and writes every second row of the second half; A
//   resumes and carries on with the rest of the rows, with token n.  A
//   per-row fence rejects A only on B's rows; a lock-wide fence everywhere.
#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "demo_tables.hpp"
#include "events.hpp"
#include "run.hpp"
#include "scenarios.hpp"

namespace pg_fencing::demo {

namespace {

constexpr char kHolder[] = "A";
constexpr char kSuccessor[] = "B";
// The row map has a letter per row: the name of the worker that wrote it
// while it held the lease, or one of these.
constexpr char kStaleMark = 'x';  // written by A after B's grant
constexpr char kUnwrittenMark = '.';

// What the verdict is drawn from.
struct InterleaveFacts {
  Token holder_token = 0;
  std::optional<Token> successor_token;
  std::vector<int> successor_rows;  // the rows B writes
  std::vector<int> resumed_rows;    // the rows A writes after the pause
  // As the workers reported them.
  int successor_accepted = 0;
  int resumed_accepted = 0;
  int resumed_rejected = 0;
  std::optional<Event> resumed_outcome;  // A's batch_done after the pause, or its error
};

// What the table shows, judged by the server's clock.
struct TableFacts {
  int stale = 0;           // rows holding A's token, written after B's grant
  int successor_kept = 0;  // B's rows that still hold B's token
  std::string map;
};

TableFacts ReadTableFacts(pqxx::connection &db, const std::string &table,
                          const std::string &lock_name, const InterleaveFacts &facts,
                          Token successor_token) {
  TableFacts result;
  for (const InterleaveRow &row : ReadInterleaveRows(db, table, lock_name, successor_token)) {
    const bool stale = row.token == facts.holder_token && row.written_after_grant;
    const bool successor_row = std::find(facts.successor_rows.begin(), facts.successor_rows.end(),
                                         row.id) != facts.successor_rows.end();
    result.stale += stale ? 1 : 0;
    result.successor_kept += successor_row && row.token == successor_token ? 1 : 0;
    result.map += stale ? kStaleMark : row.writer.empty() ? kUnwrittenMark : row.writer.front();
  }
  return result;
}

// A write's batch as its worker reports it, when done (or its failure).
EventMatcher BatchOutcomeOf(const char *who) {
  return EventFrom(who, {EventKind::kBatchDone, EventKind::kError});
}

// How long a worker may take over `rows` row writes.
Clock::duration BatchTimeout(const DemoOptions &options, std::size_t rows) {
  return StepTimeout(options) + kInterleaveWritePeriod * 5 * static_cast<int>(rows);
}

std::string StaleRowsText(int stale) {
  return RowCountText(stale) + " written by the stale holder after the new holder took over";
}

Verdict JudgeInterleave(const DemoOptions &options, bool lock_wide, const InterleaveFacts &facts,
                        const std::optional<TableFacts> &table) {
  const int successor_rows = static_cast<int>(facts.successor_rows.size());
  const int resumed_rows = static_cast<int>(facts.resumed_rows.size());
  if (!facts.successor_token || !table || facts.successor_accepted < successor_rows) {
    return {false, "B had not written its rows when A resumed (B had " +
                       MillisecondsText(options.pause) + " to take the lock, ttl " +
                       MillisecondsText(options.ttl) +
                       "), so there was no newer holder to protect; try a longer --pause"};
  }
  if (!facts.resumed_outcome || facts.resumed_outcome->kind != EventKind::kBatchDone) {
    return {false, "A did not get through its rows after the pause: " +
                       (facts.resumed_outcome ? facts.resumed_outcome->detail
                                              : std::string("no outcome was reported"))};
  }
  int untouched_by_successor = 0;
  for (const int row : facts.resumed_rows) {
    if (std::find(facts.successor_rows.begin(), facts.successor_rows.end(), row) ==
        facts.successor_rows.end()) {
      ++untouched_by_successor;
    }
  }
  const std::string holder_token = std::to_string(facts.holder_token);
  const std::string successor_token = std::to_string(*facts.successor_token);
  const std::string what_happened =
      "A reported " + std::to_string(facts.resumed_accepted) + " accepted and " +
      std::to_string(facts.resumed_rejected) + " rejected of its " + std::to_string(resumed_rows) +
      " writes after the pause; the table holds " + StaleRowsText(table->stale) + ", and " +
      std::to_string(table->successor_kept) + " of B's " + RowCountText(successor_rows) +
      " with B's token (" + table->map + ")";
  const bool successor_kept = table->successor_kept == successor_rows;

  if (!lock_wide) {
    if (table->stale >= 1 && table->stale == facts.resumed_accepted && successor_kept) {
      return {true, "per-row fence only: " + StaleRowsText(table->stale) + " (token " +
                        holder_token + ", after token " + successor_token +
                        "), on the rows B never wrote; only A's " +
                        std::to_string(facts.resumed_rejected) +
                        " writes to B's own rows were rejected: the hole a lock-wide fence "
                        "closes, shown as expected"};
    }
    return {false,
            "per-row fence only: expected A's stale writes to land on the rows B never wrote and "
            "to be rejected on B's, but " +
                what_happened};
  }
  if (table->stale == 0 && successor_kept && facts.resumed_accepted == 0 &&
      facts.resumed_rejected == resumed_rows) {
    return {true,
            "lock-wide fence: all " + std::to_string(resumed_rows) +
                " of A's writes after the pause (token " + holder_token +
                ") were rejected with 55Z01, " + std::to_string(untouched_by_successor) +
                " of them on rows B never wrote; no stale write in the table, and B's token " +
                successor_token + " is still on its " + RowCountText(successor_rows)};
  }
  return {false,
          "lock-wide fence: expected every one of A's writes after the pause to be rejected, "
          "but " +
              what_happened};
}

}  // namespace

Verdict RunInterleaveScenario(const DemoOptions &options, pqxx::connection &db, Timeline &timeline,
                              bool lock_wide) {
  const std::string mode = lock_wide ? "lock-wide" : "per-row";
  const std::string table =
      std::string("fencing_demo_interleave_") + (lock_wide ? "lock_wide" : "per_row");
  const std::string lock_name = "fencing_demo:interleave:" + mode;
  const std::string rows_text = RowsText(RowRange(1, options.rows));
  Run run(timeline, "interleave/" + mode,
          std::string("interleave scenario, ") +
              (lock_wide ? "LOCK-WIDE fence" : "PER-ROW fence only") + ": table " + table + " (" +
              std::to_string(options.rows) + " rows) with fencing_protect(" + table +
              (lock_wide ? ", lock_name => '" + lock_name + "')" : ")") + ", lock " + lock_name +
              ", ttl " + MillisecondsText(options.ttl));
  CreateInterleaveTable(db, table, options.rows,
                        lock_wide ? std::optional<std::string>(lock_name) : std::nullopt);

  InterleaveFacts facts;
  const int before_pause = InterleaveRowsBeforePause(options.rows);
  facts.successor_rows = InterleaveSuccessorRows(options.rows);
  facts.resumed_rows = RowRange(before_pause + 1, options.rows);
  run.Report(EventKind::kNote, table, std::nullopt,
             "A writes " + rows_text + " and is stopped after row " + std::to_string(before_pause) +
                 "; B then writes " + RowsText(facts.successor_rows) +
                 ". Each batch shows its first accepted and first rejected write (--json: all)." +
                 " Row map: A, B = written by that holder, x = by A after B's grant, . = not" +
                 " written");

  // Flag stale writes, show each batch's first accepted and first rejected
  // write, and count them all.
  StaleWriteWatch stale_watch;
  std::set<std::pair<std::string, EventKind>> shown_in_batch;
  bool holder_resumed = false;
  run.SetObserver([&](const Event &event) {
    EventDisplay display;
    display.alarm = stale_watch.Check(event);
    const bool accepted = event.kind == EventKind::kWriteAccepted;
    if (accepted || event.kind == EventKind::kWriteRejected) {
      display.json_only = !shown_in_batch.insert({event.who, event.kind}).second;
      if (event.who == kSuccessor && accepted) ++facts.successor_accepted;
      if (event.who == kHolder && holder_resumed) {
        ++(accepted ? facts.resumed_accepted : facts.resumed_rejected);
      }
    } else if (event.kind == EventKind::kBatchDone) {
      shown_in_batch.erase({event.who, EventKind::kWriteAccepted});
      shown_in_batch.erase({event.who, EventKind::kWriteRejected});
    }
    return display;
  });
  std::optional<TableFacts> table_facts;
  const auto report_table = [&] {
    table_facts = ReadTableFacts(db, table, lock_name, facts, *facts.successor_token);
    const bool stale = table_facts->stale > 0;
    run.Report(EventKind::kNote, table, std::nullopt,
               rows_text + " now: " + table_facts->map + (stale ? "" : " (no stale write)"),
               stale ? StaleRowsText(table_facts->stale) : std::string());
  };

  WorkerProcess &holder = run.StartWorker(
      HolderWorkerOptions(options, WorkerRole::kInterleaveHolder, kHolder, lock_name, table),
      "takes the lease and writes " + rows_text);
  const std::optional<Event> first_batch =
      run.AwaitEvent(BatchOutcomeOf(kHolder), Clock::now() + BatchTimeout(options, before_pause));
  if (!first_batch) return {false, "A never got through its first rows"};
  if (first_batch->kind == EventKind::kError) {
    return {false, "A failed before the pause: " + first_batch->detail};
  }
  facts.holder_token = *first_batch->token;

  holder.Pause();
  const Clock::time_point paused_at = Clock::now();
  run.Report(EventKind::kPaused, kHolder, facts.holder_token,
             "between rows " + std::to_string(before_pause) + " and " +
                 std::to_string(before_pause + 1) + ", until B has written its rows (B has " +
                 MillisecondsText(options.pause) + " to take the lock)");
  holder.SendGo();  // A reads it the moment it runs again

  run.StartWorker(
      HolderWorkerOptions(options, WorkerRole::kInterleaveSuccessor, kSuccessor, lock_name, table),
      "waits for the lock, then writes " + RowsText(facts.successor_rows));
  // --pause bounds the wait for B to take the lock; its rows take what they take.
  const std::optional<Event> successor_acquired = run.AwaitEvent(
      EventFrom(kSuccessor, {EventKind::kAcquired, EventKind::kError}), paused_at + options.pause);
  std::optional<Event> successor_batch;
  if (successor_acquired && successor_acquired->kind == EventKind::kAcquired) {
    successor_batch =
        run.AwaitEvent(BatchOutcomeOf(kSuccessor),
                       Clock::now() + BatchTimeout(options, facts.successor_rows.size()));
  }
  if (successor_batch && successor_batch->kind == EventKind::kBatchDone) {
    facts.successor_token = successor_batch->token;
    report_table();
  }

  holder_resumed = true;
  holder.Resume();
  run.Report(EventKind::kResumed, kHolder, facts.holder_token,
             "after " + MillisecondsText(Clock::now() - paused_at) +
                 "; it checked its lease before row 1, so it carries on with " +
                 RowsText(facts.resumed_rows));
  facts.resumed_outcome = run.AwaitEvent(
      BatchOutcomeOf(kHolder), Clock::now() + BatchTimeout(options, facts.resumed_rows.size()));
  if (facts.successor_token) report_table();

  const bool stopped_cleanly = run.StopWorkers(StepTimeout(options));
  Verdict verdict = JudgeInterleave(options, lock_wide, facts, table_facts);
  if (!stopped_cleanly) {
    verdict.ok = false;
    verdict.text += "; and the workers did not stop cleanly";
  }
  return verdict;
}

}  // namespace pg_fencing::demo
