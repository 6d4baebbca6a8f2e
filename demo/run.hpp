// One run of a scenario, on the orchestrator's side: the run's event pipe,
// its workers, and its section of the timeline.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "events.hpp"
#include "timeline.hpp"
#include "worker_process.hpp"

namespace pg_fencing::demo {

// What the scenario makes of a worker event before it is shown.
struct EventDisplay {
  bool show = true;
  bool json_only = false;  // see Timeline::Record
  std::string alarm;       // see Timeline::Record
};
using EventObserver = std::function<EventDisplay(const Event &)>;
using EventMatcher = std::function<bool(const Event &)>;

// Matches events of any of `kinds` from the worker called `who`.
EventMatcher EventFrom(std::string who, std::initializer_list<EventKind> kinds);
// Matches events of `kind` from any worker.
EventMatcher EventOfKind(EventKind kind);

// Watches a run's accepted writes for one whose token is below a token
// accepted before: exactly the failure fencing prevents.
class StaleWriteWatch {
 public:
  // The alarm for `event`, empty if it is not such a write; remembers the
  // highest token accepted so far.
  std::string Check(const Event &event);

 private:
  std::optional<Token> highest_accepted_;
};

class Run {
 public:
  Run(Timeline &timeline, const std::string &run_id, const std::string &title);
  ~Run();

  Run(const Run &) = delete;
  Run &operator=(const Run &) = delete;

  // Sees every worker event first; by default all are shown as they are.
  void SetObserver(EventObserver observer) { observer_ = std::move(observer); }

  // `options` without the pipe ends, which the run supplies.
  WorkerProcess &StartWorker(WorkerOptions options, const std::string &purpose);

  // Shows worker events as they arrive until one matches, and returns it;
  // nullopt if none did by the deadline.
  std::optional<Event> AwaitEvent(const EventMatcher &wanted, Clock::time_point deadline);
  void ShowEventsUntil(Clock::time_point deadline);
  // Shows events until the worker has exited; false if it had not by the deadline.
  bool AwaitExit(WorkerProcess &worker, Clock::time_point deadline);
  // Asks every worker not killed to finish and waits for them; true if
  // all exited by themselves with status 0 in time.
  bool StopWorkers(Clock::duration grace);

  // An event of the orchestrator's own.
  void Report(EventKind kind, const std::string &subject, std::optional<Token> token,
              const std::string &detail, std::string_view alarm = {});

 private:
  void Show(const Event &event);

  Timeline &timeline_;
  int event_read_fd_ = -1;
  int event_write_fd_ = -1;
  std::optional<EventReader> reader_;
  EventObserver observer_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

}  // namespace pg_fencing::demo
