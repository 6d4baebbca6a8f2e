// Wire format of worker events (see events.hpp): one line per event,
//   <steady clock ns> TAB <who> TAB <kind> TAB <token or -> TAB <subject> TAB <detail> LF
// written with a single write() of at most PIPE_BUF bytes, which POSIX makes
// atomic, so lines from several workers and threads never interleave.
#include "events.hpp"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace pg_fencing::demo {

namespace {

constexpr char kSeparator = '\t';
constexpr char kNoToken[] = "-";

struct KindNameEntry {
  EventKind kind;
  std::string_view name;
};
constexpr KindNameEntry kKindNames[] = {
    {EventKind::kAcquired, "acquired"},
    {EventKind::kAboutToWrite, "about_to_write"},
    {EventKind::kWriteAccepted, "write_accepted"},
    {EventKind::kWriteRejected, "write_rejected"},
    {EventKind::kBatchDone, "batch_done"},
    {EventKind::kLeaseLost, "lease_lost"},
    {EventKind::kReleased, "released"},
    {EventKind::kError, "error"},
    {EventKind::kStarted, "started"},
    {EventKind::kPaused, "paused"},
    {EventKind::kResumed, "resumed"},
    {EventKind::kKilled, "killed"},
    {EventKind::kTakeover, "takeover"},
    {EventKind::kRowState, "row_state"},
    {EventKind::kNote, "note"},
};

std::optional<EventKind> KindFromName(std::string_view name) {
  for (const KindNameEntry &entry : kKindNames) {
    if (entry.name == name) return entry.kind;
  }
  return std::nullopt;
}

// Separators inside a field would break the line apart.
std::string Flatten(std::string_view text) {
  std::string flat(text);
  std::replace(flat.begin(), flat.end(), kSeparator, ' ');
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  return flat;
}

std::string EncodeEvent(const Event &event) {
  std::string line = std::to_string(event.at.time_since_epoch().count());
  for (const std::string &field :
       {Flatten(event.who), std::string(KindName(event.kind)),
        event.token ? std::to_string(*event.token) : std::string(kNoToken), Flatten(event.subject),
        Flatten(event.detail)}) {
    line += kSeparator;
    line += field;
  }
  // Keep within PIPE_BUF so the write stays atomic; only a long detail
  // (an error message) can get there.
  constexpr std::size_t kMaxLine = PIPE_BUF - 1;
  if (line.size() > kMaxLine) line.resize(kMaxLine);
  line += '\n';
  return line;
}

std::optional<Event> DecodeEvent(std::string_view line) {
  std::vector<std::string_view> fields;
  constexpr std::size_t kFieldCount = 6;
  while (fields.size() + 1 < kFieldCount) {
    const std::size_t separator = line.find(kSeparator);
    if (separator == std::string_view::npos) return std::nullopt;
    fields.push_back(line.substr(0, separator));
    line.remove_prefix(separator + 1);
  }
  fields.push_back(line);  // the detail, last, may be anything

  const ParseResult stamp = ParseToken(fields[0]);  // a non-negative integer too
  const std::optional<EventKind> kind = KindFromName(fields[2]);
  if (stamp.status != ParseStatus::kOk || !kind) return std::nullopt;
  Event event;
  event.at = Clock::time_point(Clock::duration(stamp.value));
  event.who = std::string(fields[1]);
  event.kind = *kind;
  if (fields[3] != kNoToken) {
    const ParseResult token = ParseToken(fields[3]);
    if (token.status != ParseStatus::kOk) return std::nullopt;
    event.token = token.value;
  }
  event.subject = std::string(fields[4]);
  event.detail = std::string(fields[5]);
  return event;
}

}  // namespace

std::string_view KindName(EventKind kind) {
  for (const KindNameEntry &entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "unknown";
}

void EventWriter::Emit(EventKind kind, std::optional<Token> token,
                       std::string_view detail) const noexcept {
  try {
    const std::string line =
        EncodeEvent(Event{Clock::now(), who_, kind, token, std::string(), std::string(detail)});
    ssize_t written;
    do {
      written = write(fd_, line.data(), line.size());
    } while (written < 0 && errno == EINTR);
    // A failed write means the orchestrator is gone; the worker follows it
    // soon (it is killed when its parent dies), so there is nobody to tell.
  } catch (...) {
    // Out of memory while formatting: drop the event rather than the worker.
  }
}

std::optional<Event> EventReader::Next(Clock::time_point deadline) {
  while (true) {
    if (std::optional<Event> event = TakeBufferedEvent()) return event;

    // Rounded up, so a sub-millisecond remainder waits rather than spins; at
    // or past the deadline, still a look at what has already arrived.
    const auto remaining =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
    pollfd readable{fd_, POLLIN, 0};
    const int ready = poll(&readable, 1, static_cast<int>(remaining.count()));
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready == 0 && remaining.count() == 0) return std::nullopt;
    if (ready <= 0) continue;

    // No end of file to handle: the orchestrator keeps a write end open
    // itself, for the workers it has yet to start.
    char chunk[PIPE_BUF];
    const ssize_t got = read(fd_, chunk, sizeof chunk);
    if (got > 0) buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

std::optional<Event> EventReader::TakeBufferedEvent() {
  std::size_t end;
  while ((end = buffer_.find('\n')) != std::string::npos) {
    std::optional<Event> event = DecodeEvent(std::string_view(buffer_).substr(0, end));
    buffer_.erase(0, end + 1);
    if (event) return event;  // a malformed line would be our own bug: skip it
  }
  return std::nullopt;
}

}  // namespace pg_fencing::demo
