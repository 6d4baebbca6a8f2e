// The checker: reads a run directory written by pg_fencing_stress and
// judges it.  What it reads:
//   meta.txt            key=value: mode, seed, workers, rows, ...
//   faults.log          the nemesis's events (event-log lines)
//   workers/*.log       every worker process's events (see worker.cpp)
//   history.tsv         the server's record of every committed write, made by
//                       an AFTER UPDATE trigger in the writing transaction:
//                       seq tbl row token val write_id ts_us pm_start_us
//   grants.tsv          the same for every lease or permit grant (trigger on
//                       the extension's fencing_lease and fencing_permit):
//                       seq lock holder token ts_us pm_start_us slot
//                       (slot: a permit's, \N for a lease; older runs lack it)
//   reads.tsv           permit mode: every read under the read fence, recorded
//                       by the reading transaction:
//                       seq read_id token presented rows_seen ts_us pm_start_us
//   final.tsv           the tables at the end: tbl row token val write_id
//   lost-N/             after restore N (faults.log "ev=restore n=N"): the
//                       history.tsv, grants.tsv and reads.tsv of the server
//                       that restore lost, read from its data directory
//                       after the run (the files above are then the restored
//                       server's)
// The checks are described in RELIABILITY.md and at each check below.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace pg_fencing::stress {

struct CheckOptions {
  std::string run_dir;
  int examples = 5;  // violations shown per kind
};

// The violations a checker found (this one or the fleet's), counted by
// kind, with the first few examples of each for the report.
class Violations {
 public:
  explicit Violations(int examples) : examples_(examples) {}
  void Add(const std::string &kind, const std::string &example) {
    Entry &entry = kinds_[kind];
    if (static_cast<int>(entry.examples.size()) < examples_) entry.examples.push_back(example);
    ++entry.count;
    ++total_;
  }
  long total() const { return total_; }
  long Count(const std::string &kind) const {
    const auto it = kinds_.find(kind);
    return it == kinds_.end() ? 0 : it->second.count;
  }
  void Print(std::ostream &out) const {
    for (const auto &[kind, entry] : kinds_) {
      out << "  " << kind << ": " << entry.count << "\n";
      for (const std::string &example : entry.examples) out << "      e.g. " << example << "\n";
    }
  }

 private:
  struct Entry {
    long count = 0;
    std::vector<std::string> examples;
  };
  int examples_;
  long total_ = 0;
  std::map<std::string, Entry> kinds_;
};

// Prints the report to out; returns the number of violations found.
// Throws std::runtime_error if the run directory cannot be read.
long CheckRun(const CheckOptions &options, std::ostream &out);

}  // namespace pg_fencing::stress
