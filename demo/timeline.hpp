// The demo's output: a timeline of events per run, a verdict line per run
// and a summary, as coloured or plain text, or as one JSON object per line.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "events.hpp"

namespace pg_fencing::demo {

// Whether a run showed what it should, and a one-line explanation.
struct Verdict {
  bool ok = false;
  std::string text;
};

class Timeline {
 public:
  enum class Format { kText, kColorText, kJson };

  Timeline(std::ostream &out, Format format);

  // Starts a run; its events are timed from now.
  void BeginRun(const std::string &run_id, const std::string &title);
  // One timeline line.  A non-empty alarm marks what went wrong, such as a
  // stale write that got through.  A json_only event is left out of the
  // text, where a summary line stands for it.
  void Record(const Event &event, std::string_view alarm = {}, bool json_only = false);
  void RecordVerdict(const Verdict &verdict);
  void RecordSummary();

  bool all_ok() const;

 private:
  struct RunResult {
    std::string run_id;
    Verdict verdict;
  };

  std::string Paint(std::string_view text, std::string_view style) const;
  std::string_view StyleOfActor(const std::string &who);

  std::ostream &out_;
  Format format_;
  Clock::time_point demo_start_;
  Clock::time_point run_start_;
  std::string run_id_;
  std::vector<RunResult> results_;
  std::map<std::string, std::string_view> actor_styles_;  // per run, in order of appearance
};

}  // namespace pg_fencing::demo
