// Timeline events, and how workers send theirs to the orchestrator: one line
// per event on a pipe all of a run's workers share.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "pg_fencing/token.hpp"

namespace pg_fencing::demo {

// Stamps are taken where the event happens, in whichever process.  That is
// meaningful because steady_clock is CLOCK_MONOTONIC on Linux: one clock for
// the whole machine, not per process.
using Clock = std::chrono::steady_clock;

inline long long ToMilliseconds(Clock::duration duration) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
}

enum class EventKind {
  // Reported by workers about themselves.
  kAcquired,       // holds the lease with `token`
  kAboutToWrite,   // held() was true just now; the write with `token` comes next
  kWriteAccepted,  // a fenced write with `token` committed
  kWriteRejected,  // a fenced write with `token` failed with 55Z01
  kBatchDone,      // finished a run of row writes with `token`; the detail counts them
  kLeaseLost,      // the client library's on_lost callback fired
  kReleased,       // gave the lease back and is stopping
  kError,          // anything unexpected; the worker exits
  // Reported by the orchestrator about `subject`, a worker, or the table.
  kStarted,
  kPaused,
  kResumed,
  kKilled,
  kTakeover,
  kRowState,
  // Either side: a remark that needs no kind of its own.
  kNote,
};

struct Event {
  Clock::time_point at;
  std::string who;  // the actor: a worker's name, or "demo" for the orchestrator
  EventKind kind = EventKind::kNote;
  std::optional<Token> token;
  std::string subject;  // whom the orchestrator acted on; empty for worker events
  std::string detail;
};

inline constexpr char kOrchestratorName[] = "demo";

// The other direction, each worker's command pipe: one kGoCommand byte lets
// a worker that waits for it proceed; end of file asks it to finish and exit.
inline constexpr char kGoCommand = 'g';

// The stable name of a kind, used on the pipe and in the JSON output.
std::string_view KindName(EventKind kind);

// Sends events from a worker (from any of its threads) to the orchestrator.
class EventWriter {
 public:
  EventWriter(int fd, std::string who) : fd_(fd), who_(std::move(who)) {}

  // Never throws: it is called from the client library's on_lost callback,
  // and a lost event must not turn into a lost worker.
  void Emit(EventKind kind, std::optional<Token> token = std::nullopt,
            std::string_view detail = {}) const noexcept;

 private:
  int fd_;
  std::string who_;
};

// Reads the events of a run's workers, on the orchestrator's side.
class EventReader {
 public:
  explicit EventReader(int fd) : fd_(fd) {}

  // The next event, or nullopt once deadline has passed without one.
  std::optional<Event> Next(Clock::time_point deadline);

 private:
  std::optional<Event> TakeBufferedEvent();

  int fd_;
  std::string buffer_;
};

}  // namespace pg_fencing::demo
