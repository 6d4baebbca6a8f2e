// The orchestrator's side of a run (see run.hpp).
#include "run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace pg_fencing::demo {

namespace {

// How often waits for an exit look at the process between events.
constexpr std::chrono::milliseconds kReapInterval{10};

}  // namespace

EventMatcher EventFrom(std::string who, std::initializer_list<EventKind> kinds) {
  return [who = std::move(who), kinds = std::vector<EventKind>(kinds)](const Event &event) {
    return event.who == who && std::find(kinds.begin(), kinds.end(), event.kind) != kinds.end();
  };
}

EventMatcher EventOfKind(EventKind kind) {
  return [kind](const Event &event) { return event.kind == kind; };
}

std::string StaleWriteWatch::Check(const Event &event) {
  if (event.kind != EventKind::kWriteAccepted || !event.token) return {};
  std::string alarm;
  if (highest_accepted_ && *event.token < *highest_accepted_) {
    alarm = "STALE: token " + std::to_string(*event.token) + " < " +
            std::to_string(*highest_accepted_) + ", and nothing checked it";
  }
  highest_accepted_ = std::max(highest_accepted_.value_or(*event.token), *event.token);
  return alarm;
}

Run::Run(Timeline &timeline, const std::string &run_id, const std::string &title)
    : timeline_(timeline) {
  int event_pipe[2];
  if (pipe2(event_pipe, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  event_read_fd_ = event_pipe[0];
  event_write_fd_ = event_pipe[1];
  reader_.emplace(event_read_fd_);
  timeline_.BeginRun(run_id, title);
}

Run::~Run() {
  workers_.clear();  // kills whatever is still running
  close(event_read_fd_);
  close(event_write_fd_);
}

WorkerProcess &Run::StartWorker(WorkerOptions options, const std::string &purpose) {
  options.event_fd = event_write_fd_;
  workers_.push_back(std::make_unique<WorkerProcess>(std::move(options)));
  WorkerProcess &worker = *workers_.back();
  Report(EventKind::kStarted, worker.name(), std::nullopt,
         "pid " + std::to_string(worker.pid()) + ", " + purpose);
  return worker;
}

std::optional<Event> Run::AwaitEvent(const EventMatcher &wanted, Clock::time_point deadline) {
  while (std::optional<Event> event = reader_->Next(deadline)) {
    Show(*event);
    if (wanted(*event)) return event;
  }
  return std::nullopt;
}

void Run::ShowEventsUntil(Clock::time_point deadline) {
  while (std::optional<Event> event = reader_->Next(deadline)) Show(*event);
}

bool Run::AwaitExit(WorkerProcess &worker, Clock::time_point deadline) {
  while (!worker.TryReap()) {
    if (Clock::now() >= deadline) return false;
    ShowEventsUntil(std::min(deadline, Clock::now() + kReapInterval));
  }
  // Its last words may still be in the pipe.
  ShowEventsUntil(Clock::now());
  return true;
}

bool Run::StopWorkers(Clock::duration grace) {
  for (const auto &worker : workers_) {
    if (!worker->killed()) worker->RequestStop();
  }
  const Clock::time_point deadline = Clock::now() + grace;
  bool all_clean = true;
  for (const auto &worker : workers_) {
    if (worker->killed()) continue;
    if (!AwaitExit(*worker, deadline)) {
      Report(EventKind::kNote, worker->name(), std::nullopt,
             worker->name() + " did not stop in time; killing it", "not a clean stop");
      worker->Kill();
      all_clean = false;
    } else if (!worker->exited_cleanly()) {
      Report(EventKind::kNote, worker->name(), std::nullopt,
             worker->name() + " exited with a failure status", "not a clean stop");
      all_clean = false;
    }
  }
  return all_clean;
}

void Run::Report(EventKind kind, const std::string &subject, std::optional<Token> token,
                 const std::string &detail, std::string_view alarm) {
  ShowEventsUntil(Clock::now());  // what happened before this goes first
  timeline_.Record(Event{Clock::now(), kOrchestratorName, kind, token, subject, detail}, alarm);
}

void Run::Show(const Event &event) {
  const EventDisplay display = observer_ ? observer_(event) : EventDisplay{};
  if (display.show) timeline_.Record(event, display.alarm, display.json_only);
}

}  // namespace pg_fencing::demo
