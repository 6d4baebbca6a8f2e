// Rendering of the timeline (see timeline.hpp).
#include "timeline.hpp"

#include <cstdio>

namespace pg_fencing::demo {

namespace {

// ANSI SGR sequences.
constexpr std::string_view kReset = "\033[0m";
constexpr std::string_view kBold = "\033[1m";
constexpr std::string_view kDim = "\033[2m";
constexpr std::string_view kGreen = "\033[32m";
constexpr std::string_view kBoldGreen = "\033[1;32m";
constexpr std::string_view kBoldRed = "\033[1;31m";
constexpr std::string_view kYellow = "\033[33m";
constexpr std::string_view kBoldMagenta = "\033[1;35m";
// Actors get these in turn; red and green are kept for outcomes.
constexpr std::string_view kActorStyles[] = {"\033[33m", "\033[36m", "\033[34m"};

std::string TokenText(const std::optional<Token> &token) {
  return token ? std::to_string(*token) : std::string("?");
}

// Whom the orchestrator acted on, with the token it held if known.
std::string SubjectText(const Event &event) {
  return event.subject + (event.token ? " (token " + std::to_string(*event.token) + ")" : "");
}

std::string Describe(const Event &event) {
  const std::string token = TokenText(event.token);
  const std::string detail_suffix = event.detail.empty() ? "" : ": " + event.detail;
  switch (event.kind) {
    case EventKind::kAcquired:
      return "holds token " + token + (event.detail.empty() ? "" : " (" + event.detail + ")");
    case EventKind::kAboutToWrite:
      return "held() = true, about to write with token " + token + detail_suffix;
    case EventKind::kWriteAccepted:
      return "write accepted (token " + token + ")" + detail_suffix;
    case EventKind::kWriteRejected:
      return "write REJECTED 55Z01 (token " + token + ")" + detail_suffix;
    case EventKind::kBatchDone:
      return "batch done (token " + token + ")" + detail_suffix;
    case EventKind::kLeaseLost:
      return "lease lost" + detail_suffix;
    case EventKind::kReleased:
      return "released the lease (token " + token + ") and stopped";
    case EventKind::kError:
      return "ERROR" + detail_suffix;
    case EventKind::kStarted:
      return "started " + event.subject + " (" + event.detail + ")";
    case EventKind::kPaused:
      return "SIGSTOP " + SubjectText(event) + detail_suffix;
    case EventKind::kResumed:
      return "SIGCONT " + SubjectText(event) + detail_suffix;
    case EventKind::kKilled:
      return "kill -9 " + SubjectText(event) + detail_suffix;
    case EventKind::kTakeover:
      return SubjectText(event) + " took over " + event.detail;
    case EventKind::kRowState:
      return "row now holds " + event.detail;
    case EventKind::kNote:
      return event.detail;
  }
  return event.detail;
}

std::string_view StyleOfKind(EventKind kind) {
  switch (kind) {
    case EventKind::kWriteAccepted:
      return kGreen;
    case EventKind::kWriteRejected:
      return kBoldGreen;  // the guard doing its job; a stale write that lands gets the red
    case EventKind::kError:
      return kBoldRed;
    case EventKind::kLeaseLost:
      return kYellow;
    case EventKind::kPaused:
    case EventKind::kResumed:
    case EventKind::kKilled:
      return kBoldMagenta;
    case EventKind::kTakeover:
    case EventKind::kRowState:
    case EventKind::kAcquired:
    case EventKind::kBatchDone:
      return kBold;
    default:
      return {};
  }
}

std::string JsonString(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          quoted += escaped;
        } else {
          quoted += c;
        }
    }
  }
  return quoted + "\"";
}

const char *JsonBool(bool value) { return value ? "true" : "false"; }

}  // namespace

Timeline::Timeline(std::ostream &out, Format format)
    : out_(out), format_(format), demo_start_(Clock::now()), run_start_(demo_start_) {}

void Timeline::BeginRun(const std::string &run_id, const std::string &title) {
  run_id_ = run_id;
  run_start_ = Clock::now();
  actor_styles_.clear();
  if (format_ == Format::kJson) return;  // the run is named in each of its events
  out_ << '\n' << Paint("== " + title + " ==", kBold) << std::endl;
}

void Timeline::Record(const Event &event, std::string_view alarm, bool json_only) {
  if (json_only && format_ != Format::kJson) return;
  const long long elapsed_ms = ToMilliseconds(event.at - run_start_);
  const std::string text = Describe(event);
  if (format_ == Format::kJson) {
    out_ << "{\"type\":\"event\",\"run\":" << JsonString(run_id_) << ",\"t_ms\":" << elapsed_ms
         << ",\"who\":" << JsonString(event.who)
         << ",\"event\":" << JsonString(KindName(event.kind));
    if (event.token) out_ << ",\"token\":" << *event.token;
    if (!event.subject.empty()) out_ << ",\"subject\":" << JsonString(event.subject);
    if (!event.detail.empty()) out_ << ",\"detail\":" << JsonString(event.detail);
    out_ << ",\"text\":" << JsonString(text);
    if (!alarm.empty()) out_ << ",\"alarm\":" << JsonString(alarm);
    out_ << '}' << std::endl;
    return;
  }

  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%7lld ms  ", elapsed_ms);
  char who[16];
  std::snprintf(who, sizeof who, "%-5s ", event.who.c_str());
  out_ << Paint(elapsed, kDim) << Paint(who, StyleOfActor(event.who));
  if (alarm.empty()) {
    out_ << Paint(text, StyleOfKind(event.kind));
  } else {
    out_ << Paint(text + "   <-- " + std::string(alarm), kBoldRed);
  }
  out_ << std::endl;
}

void Timeline::RecordVerdict(const Verdict &verdict) {
  results_.push_back({run_id_, verdict});
  if (format_ == Format::kJson) {
    out_ << "{\"type\":\"verdict\",\"run\":" << JsonString(run_id_)
         << ",\"ok\":" << JsonBool(verdict.ok) << ",\"text\":" << JsonString(verdict.text) << '}'
         << std::endl;
    return;
  }
  out_ << (verdict.ok ? Paint("[ ok ]", kGreen) : Paint("[FAIL]", kBoldRed)) << ' ' << run_id_
       << ": " << verdict.text << std::endl;
}

void Timeline::RecordSummary() {
  const long long elapsed_ms = ToMilliseconds(Clock::now() - demo_start_);
  std::size_t failed = 0;
  for (const RunResult &result : results_) failed += result.verdict.ok ? 0 : 1;

  if (format_ == Format::kJson) {
    out_ << "{\"type\":\"summary\",\"ok\":" << JsonBool(all_ok()) << ",\"runs\":" << results_.size()
         << ",\"failed\":" << failed << ",\"elapsed_ms\":" << elapsed_ms << ",\"verdicts\":[";
    for (std::size_t i = 0; i < results_.size(); ++i) {
      out_ << (i ? "," : "") << "{\"run\":" << JsonString(results_[i].run_id)
           << ",\"ok\":" << JsonBool(results_[i].verdict.ok)
           << ",\"text\":" << JsonString(results_[i].verdict.text) << '}';
    }
    out_ << "]}" << std::endl;
    return;
  }

  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f s", static_cast<double>(elapsed_ms) / 1000.0);
  out_ << '\n';
  if (all_ok()) {
    out_ << Paint("All " + std::to_string(results_.size()) + " runs showed what they should",
                  kGreen);
  } else {
    out_ << Paint(std::to_string(failed) + " of " + std::to_string(results_.size()) +
                      " runs did NOT show what they should",
                  kBoldRed);
  }
  out_ << " (" << seconds << ")." << std::endl;
}

bool Timeline::all_ok() const {
  for (const RunResult &result : results_) {
    if (!result.verdict.ok) return false;
  }
  return !results_.empty();
}

std::string Timeline::Paint(std::string_view text, std::string_view style) const {
  if (format_ != Format::kColorText || style.empty()) return std::string(text);
  return std::string(style) + std::string(text) + std::string(kReset);
}

std::string_view Timeline::StyleOfActor(const std::string &who) {
  if (who == kOrchestratorName) return kBoldMagenta;
  auto [entry, inserted] = actor_styles_.try_emplace(who);
  if (inserted) {
    const std::size_t others = actor_styles_.size() - 1;
    entry->second = kActorStyles[others % std::size(kActorStyles)];
  }
  return entry->second;
}

}  // namespace pg_fencing::demo
