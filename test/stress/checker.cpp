// The checker (see checker.hpp and RELIABILITY.md).
//
// Two sources, reconciled:
//  - the workers' logs: what each client asked and what it was told.  A write
//    is logged before it is sent (w_inv, with its send time S) and when its
//    fate is known (w_done, with its receive time R).  "info", or no w_done at
//    all (the worker was killed), means the client does not know whether it
//    committed: an indeterminate write.
//  - the server's history: a row in stress_history exists iff the write's
//    transaction committed (the trigger inserts it in that transaction), and
//    its seq was taken after the write locked its row and, under a lock-wide
//    fence, the lock's fence row, both held to commit.  So for two writes that
//    conflict (same row; same lock when guarded), seq order is commit order.
//    Grants are recorded the same way (stress_grants, trigger on fencing_lease,
//    after fencing_try_acquire has locked the fence row).
// Indeterminate writes are resolved by the history: present means committed,
// absent means not.  A write the client was told had committed must be there;
// one the server refused must not.
#include "checker.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "common.hpp"

namespace pg_fencing::stress {

namespace {

using Token = std::int64_t;
constexpr std::int64_t kNone = -1;

enum class Outcome { kNone, kOk, kStale, kMissing, kError, kInfo };

struct WriteRec {
  std::string wid;
  std::string who;  // "w3.i1"
  std::string tbl;
  int row = -1;
  bool missing = false;  // did not set the token
  Token tok = kNone;     // the token it wrote (kNone when missing)
  Token lease = kNone;
  std::int64_t val = 0;
  std::int64_t sent = 0;      // wall µs, logged before sending
  std::int64_t received = 0;  // wall µs, logged after the outcome
  Outcome out = Outcome::kNone;
  std::string state;  // SQLSTATE of an "err"
  int affected = -1;
  std::string msg;
};

struct GrantRec {
  Token tok = kNone;
  std::string holder;
  std::string who;
  std::int64_t invoked = 0;   // wall µs before fencing_acquire was sent
  std::int64_t received = 0;  // wall µs after the token arrived
};

struct HistRec {
  std::int64_t seq = 0;
  std::string tbl;
  int row = -1;
  std::optional<Token> tok;
  std::optional<std::int64_t> val;
  std::optional<std::string> wid;
  std::int64_t ts = 0;  // server clock_timestamp(), µs, before commit
  std::int64_t pm = 0;  // pg_postmaster_start_time(), µs: the server incarnation
};

struct ServerGrant {
  std::int64_t seq = 0;
  std::string lock;
  std::string holder;
  Token tok = kNone;
  std::int64_t ts = 0;
  std::int64_t pm = 0;
};

struct FinalRow {
  std::string tbl;
  int row = -1;
  std::optional<Token> tok;
  std::optional<std::int64_t> val;
  std::optional<std::string> wid;
};

// ---- Reading ----------------------------------------------------------------

std::vector<std::string> Lines(const std::string &text, long *truncated) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      // A process killed in the middle of a line; nothing after it.
      if (truncated) ++*truncated;
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::optional<std::string> Cell(const std::string &cell) {
  if (cell == "\\N") return std::nullopt;
  return cell;
}

std::optional<std::int64_t> IntCell(const std::string &cell) {
  if (cell == "\\N") return std::nullopt;
  return std::stoll(cell);
}

std::vector<std::vector<std::string>> ReadTsv(const std::string &path, std::size_t columns) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string &line : Lines(ReadFile(path), nullptr)) {
    if (line.empty()) continue;
    std::vector<std::string> cells = Split(line, '\t');
    if (cells.size() != columns)
      throw std::runtime_error("malformed line in " + path + ": " + line);
    rows.push_back(std::move(cells));
  }
  return rows;
}

std::vector<std::string> LogFiles(const std::string &dir) {
  std::vector<std::string> files;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) throw std::runtime_error("cannot list " + dir);
  while (const dirent *entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0) {
      files.push_back(dir + "/" + name);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

// ---- Violations ---------------------------------------------------------------

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

// "the highest token recorded before time t": points (time, token) sorted by
// time, with a running maximum.
class MaxBefore {
 public:
  void Add(std::int64_t time, Token tok) { points_.push_back({time, tok}); }
  void Finish() {
    std::sort(points_.begin(), points_.end());
    Token running = kNone;
    for (auto &point : points_) {
      running = std::max(running, point.second);
      point.second = running;
    }
  }
  // Highest token of the points strictly before t; kNone if none.
  Token Before(std::int64_t t) const {
    const auto it = std::lower_bound(points_.begin(), points_.end(),
                                     std::pair<std::int64_t, Token>{t, INT64_MIN});
    return it == points_.begin() ? kNone : std::prev(it)->second;
  }

 private:
  std::vector<std::pair<std::int64_t, Token>> points_;
};

std::string Describe(const WriteRec &w) {
  std::ostringstream out;
  out << "write " << w.wid << " (" << w.who << ") " << w.tbl << "[" << w.row << "] token "
      << (w.missing ? std::string("none") : std::to_string(w.tok));
  return out.str();
}

std::string Opt(const std::optional<Token> &value) {
  return value ? std::to_string(*value) : std::string("NULL");
}

std::string RowKey(const std::string &tbl, int row) {
  return tbl + "[" + std::to_string(row) + "]";
}

}  // namespace

long CheckRun(const CheckOptions &options, std::ostream &out) {
  const std::string &dir = options.run_dir;
  Violations violations(options.examples);

  // ---- meta, faults ----
  std::map<std::string, std::string> meta;
  for (const std::string &line : Lines(ReadFile(dir + "/meta.txt"), nullptr)) {
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const bool guarded = meta["mode"] != "unguarded";
  const int rows = std::stoi(meta.count("rows") ? meta["rows"] : "0");
  std::map<std::string, long> faults;
  for (const std::string &line : Lines(ReadFile(dir + "/faults.log"), nullptr)) {
    const Fields f = ParseFields(line);
    if (const auto ev = Get(f, "ev")) ++faults[*ev];
  }

  // ---- worker logs ----
  std::vector<WriteRec> writes;
  std::unordered_map<std::string, std::size_t> write_index;
  std::vector<GrantRec> grants;
  std::map<std::string, long> events;
  std::set<Token> lost_tokens;
  long truncated = 0;
  long anomalies = 0;
  for (const std::string &path : LogFiles(dir + "/workers")) {
    for (const std::string &line : Lines(ReadFile(path), &truncated)) {
      const Fields f = ParseFields(line);
      const std::string ev = Get(f, "ev").value_or("");
      ++events[ev];
      const std::string who = "w" + Get(f, "w").value_or("?") + ".i" + Get(f, "inc").value_or("?");
      if (ev == "w_inv") {
        WriteRec w;
        w.wid = Get(f, "wid").value_or("");
        w.who = who;
        w.tbl = Get(f, "tbl").value_or("");
        w.row = static_cast<int>(GetInt(f, "row"));
        w.missing = Get(f, "tok") == std::optional<std::string>("none");
        w.tok = w.missing ? kNone : GetInt(f, "tok");
        w.lease = GetInt(f, "lease");
        w.val = GetInt(f, "val");
        w.sent = GetInt(f, "wall");
        if (w.wid.empty() || write_index.count(w.wid)) {
          ++anomalies;
          continue;
        }
        write_index[w.wid] = writes.size();
        writes.push_back(std::move(w));
      } else if (ev == "w_done") {
        const auto it = write_index.find(Get(f, "wid").value_or(""));
        if (it == write_index.end()) {
          ++anomalies;
          continue;
        }
        WriteRec &w = writes[it->second];
        w.received = GetInt(f, "wall");
        const std::string result = Get(f, "out").value_or("");
        w.out = result == "ok"      ? Outcome::kOk
                : result == "55Z01" ? Outcome::kStale
                : result == "55Z02" ? Outcome::kMissing
                : result == "err"   ? Outcome::kError
                                    : Outcome::kInfo;
        w.state = Get(f, "state").value_or("");
        w.affected = static_cast<int>(GetInt(f, "n"));
        w.msg = Get(f, "msg").value_or("");
      } else if (ev == "lost") {
        lost_tokens.insert(GetInt(f, "tok"));
      } else if (ev == "acq_fail") {
        ++events[Get(f, "out") == std::optional<std::string>("timeout") ? "acq_timeout"
                                                                        : "acq_error"];
      } else if (ev == "grant") {
        GrantRec g;
        g.tok = GetInt(f, "tok");
        g.holder = Get(f, "holder").value_or("");
        g.who = who;
        g.invoked = GetInt(f, "inv");
        g.received = GetInt(f, "wall");
        grants.push_back(std::move(g));
      }
    }
  }

  // ---- server state ----
  std::vector<HistRec> history;
  for (const auto &cells : ReadTsv(dir + "/history.tsv", 8)) {
    HistRec h;
    h.seq = std::stoll(cells[0]);
    h.tbl = cells[1];
    h.row = std::stoi(cells[2]);
    h.tok = IntCell(cells[3]);
    h.val = IntCell(cells[4]);
    h.wid = Cell(cells[5]);
    h.ts = std::stoll(cells[6]);
    h.pm = std::stoll(cells[7]);
    history.push_back(std::move(h));
  }
  std::sort(history.begin(), history.end(),
            [](const HistRec &a, const HistRec &b) { return a.seq < b.seq; });
  std::vector<ServerGrant> server_grants;
  for (const auto &cells : ReadTsv(dir + "/grants.tsv", 6)) {
    ServerGrant g;
    g.seq = std::stoll(cells[0]);
    g.lock = cells[1];
    g.holder = cells[2];
    g.tok = std::stoll(cells[3]);
    g.ts = std::stoll(cells[4]);
    g.pm = std::stoll(cells[5]);
    server_grants.push_back(std::move(g));
  }
  std::sort(server_grants.begin(), server_grants.end(),
            [](const ServerGrant &a, const ServerGrant &b) { return a.seq < b.seq; });
  std::vector<FinalRow> final_rows;
  for (const auto &cells : ReadTsv(dir + "/final.tsv", 5)) {
    FinalRow r;
    r.tbl = cells[0];
    r.row = std::stoi(cells[1]);
    r.tok = IntCell(cells[2]);
    r.val = IntCell(cells[3]);
    r.wid = Cell(cells[4]);
    final_rows.push_back(std::move(r));
  }

  // ==== A. Grants ====
  // A1: the server never recorded one token twice.
  std::unordered_map<Token, const ServerGrant *> server_by_token;
  for (const ServerGrant &g : server_grants) {
    if (!server_by_token.emplace(g.tok, &g).second) {
      violations.Add("token granted twice (server record)",
                     "token " + std::to_string(g.tok) + " to " + server_by_token[g.tok]->holder +
                         " and to " + g.holder);
    }
  }
  // A2: no token was received by two acquisitions.
  std::unordered_map<Token, const GrantRec *> client_by_token;
  for (const GrantRec &g : grants) {
    if (!client_by_token.emplace(g.tok, &g).second) {
      violations.Add("token granted twice (received by two holders)",
                     "token " + std::to_string(g.tok) + " by " + client_by_token[g.tok]->holder +
                         " and by " + g.holder);
    }
  }
  // A3: every token a client received is on the server's record, as the
  // same holder's: a grant acknowledged to a client survived every crash.
  long unacknowledged_grants = 0;
  for (const GrantRec &g : grants) {
    const auto it = server_by_token.find(g.tok);
    if (it == server_by_token.end()) {
      violations.Add("acknowledged grant lost", "token " + std::to_string(g.tok) + " received by " +
                                                    g.holder +
                                                    " is not in the server's grant record");
    } else if (it->second->holder != g.holder) {
      violations.Add("grant record mismatch", "token " + std::to_string(g.tok) + " received by " +
                                                  g.holder + ", recorded for " +
                                                  it->second->holder);
    }
  }
  for (const ServerGrant &g : server_grants) {
    if (!client_by_token.count(g.tok)) ++unacknowledged_grants;
  }
  // A4: per lock, grants in commit order carry strictly increasing tokens.
  {
    std::map<std::string, Token> last;
    for (const ServerGrant &g : server_grants) {
      auto [it, fresh] = last.emplace(g.lock, g.tok);
      if (!fresh) {
        if (g.tok <= it->second) {
          violations.Add("grant order", "lock " + g.lock + ": token " + std::to_string(g.tok) +
                                            " granted (seq " + std::to_string(g.seq) +
                                            ") after token " + std::to_string(it->second));
        }
        it->second = std::max(it->second, g.tok);
      }
    }
  }
  // A5: every token granted by a later server incarnation (after a crash)
  // is above every token granted by an earlier one.
  std::map<std::int64_t, std::pair<Token, Token>> incarnations;  // pm -> (min, max)
  for (const ServerGrant &g : server_grants) {
    auto [it, fresh] = incarnations.emplace(g.pm, std::make_pair(g.tok, g.tok));
    if (!fresh) {
      it->second.first = std::min(it->second.first, g.tok);
      it->second.second = std::max(it->second.second, g.tok);
    }
  }
  {
    Token before = kNone;
    for (const auto &[pm, range] : incarnations) {
      if (range.first <= before) {
        violations.Add("grant after crash not above grants before it",
                       "incarnation started at " + std::to_string(pm) + " granted " +
                           std::to_string(range.first) + ", an earlier one had granted " +
                           std::to_string(before));
      }
      before = std::max(before, range.second);
    }
  }
  // A6: real time.  A grant received before another acquisition was even
  // sent carries a lower token (the clients' own clocks; no server order).
  {
    MaxBefore received;
    for (const GrantRec &g : grants) received.Add(g.received, g.tok);
    received.Finish();
    for (const GrantRec &g : grants) {
      const Token earlier = received.Before(g.invoked);
      if (earlier >= g.tok) {
        violations.Add("grant real-time order", "token " + std::to_string(g.tok) + " (" + g.holder +
                                                    ") after token " + std::to_string(earlier) +
                                                    " had been received");
      }
    }
  }

  // ==== B. Writes against the history ====
  std::unordered_map<std::string, const HistRec *> history_by_wid;
  for (const HistRec &h : history) {
    if (!h.wid) {
      violations.Add("phantom write", "history seq " + std::to_string(h.seq) + " has no write id");
      continue;
    }
    if (!history_by_wid.emplace(*h.wid, &h).second) {
      violations.Add("write committed twice", "write " + *h.wid);
      continue;
    }
    // B1: each committed write is one a client sent, with its values.
    const auto it = write_index.find(*h.wid);
    if (it == write_index.end()) {
      violations.Add("phantom write", "history seq " + std::to_string(h.seq) + " write " + *h.wid +
                                          " was never sent");
      continue;
    }
    const WriteRec &w = writes[it->second];
    if (w.missing) {
      violations.Add("write without token committed", Describe(w));
    } else if (w.tbl != h.tbl || w.row != h.row || h.tok != w.tok || h.val != w.val) {
      violations.Add("history mismatch", Describe(w) + " recorded as " + h.tbl + "[" +
                                             std::to_string(h.row) + "] token " + Opt(h.tok));
    }
  }
  struct TableCounts {
    long attempts = 0, ok = 0, stale = 0, missing = 0, error = 0, info = 0, info_committed = 0;
  };
  std::map<std::string, TableCounts> counts;
  std::map<std::string, long> error_states;
  for (const WriteRec &w : writes) {
    TableCounts &c = counts[w.tbl];
    ++c.attempts;
    const bool committed = history_by_wid.count(w.wid) > 0;
    switch (w.out) {
      case Outcome::kOk:
        ++c.ok;
        // B3: acknowledged means durable.
        if (!committed) violations.Add("acknowledged write lost", Describe(w));
        if (w.affected != 1) {
          violations.Add("acknowledged write changed no row",
                         Describe(w) + " affected " + std::to_string(w.affected));
        }
        break;
      case Outcome::kStale:
      case Outcome::kMissing:
      case Outcome::kError:
        if (w.out == Outcome::kStale) ++c.stale;
        if (w.out == Outcome::kMissing) ++c.missing;
        if (w.out == Outcome::kError) {
          ++c.error;
          ++error_states[w.state];
        }
        // B4: refused means not committed.
        if (committed) violations.Add("refused write committed", Describe(w) + ": " + w.msg);
        break;
      case Outcome::kInfo:
      case Outcome::kNone:
        // B5: indeterminate; the history decides.
        ++c.info;
        if (committed) ++c.info_committed;
        break;
    }
  }

  // B6: per row, committed tokens never decrease in commit order.
  std::map<std::string, const HistRec *> last_by_row;
  {
    std::map<std::string, Token> high;
    for (const HistRec &h : history) {
      const std::string key = RowKey(h.tbl, h.row);
      last_by_row[key] = &h;
      if (!h.tok) continue;
      auto [it, fresh] = high.emplace(key, *h.tok);
      if (!fresh) {
        if (*h.tok < it->second) {
          violations.Add("row token decreased (commit order)",
                         key + ": write " + h.wid.value_or("?") + " token " +
                             std::to_string(*h.tok) + " committed after token " +
                             std::to_string(it->second));
        }
        it->second = std::max(it->second, *h.tok);
      }
    }
  }
  // B7: per lock, each committed write's token is at least every token
  // granted or written under the lock before it in commit order.
  {
    std::vector<std::pair<std::int64_t, std::pair<Token, std::string>>>
        order;  // seq -> (tok, what)
    for (const ServerGrant &g : server_grants) {
      if (g.lock == kLockName) order.push_back({g.seq, {g.tok, "grant to " + g.holder}});
    }
    for (const HistRec &h : history) {
      if (h.tbl != kLockTableTag) continue;
      // A write that set no token kept the row's old one; it is reported
      // above as a write without token, not as a stale one.
      const auto it = h.wid ? write_index.find(*h.wid) : write_index.end();
      if (it != write_index.end() && writes[it->second].missing) continue;
      order.push_back({h.seq, {h.tok.value_or(kNone), "W" + h.wid.value_or("?")}});
    }
    std::sort(order.begin(), order.end());
    Token high = kNone;
    std::string high_what;
    for (const auto &[seq, entry] : order) {
      const auto &[tok, what] = entry;
      if (what[0] == 'W' && tok < high) {
        violations.Add(std::string("stale write under lock (commit order") +
                           (guarded ? ")" : "; unguarded: number order)"),
                       "write " + what.substr(1) + " token " + std::to_string(tok) + " seq " +
                           std::to_string(seq) + " after " + high_what + " token " +
                           std::to_string(high));
      }
      if (tok > high) {
        high = tok;
        high_what = what[0] == 'W' ? "write " + what.substr(1) : what;
      }
    }
  }
  // B8: each row's final state is its last committed write.
  long final_checked = 0;
  for (const FinalRow &r : final_rows) {
    ++final_checked;
    const std::string key = RowKey(r.tbl, r.row);
    const auto it = last_by_row.find(key);
    if (it == last_by_row.end()) {
      if (r.tok || r.val || r.wid) {
        violations.Add("final state mismatch",
                       key + " was never written, holds token " + Opt(r.tok));
      }
      continue;
    }
    const HistRec &h = *it->second;
    if (r.tok != h.tok || r.val != h.val || r.wid != h.wid) {
      violations.Add("final state mismatch", key + " holds write " + r.wid.value_or("NULL") +
                                                 " token " + Opt(r.tok) + ", last committed is " +
                                                 h.wid.value_or("NULL") + " token " + Opt(h.tok));
    }
  }
  if (final_checked != 2L * rows) {
    violations.Add("final state mismatch", "expected " + std::to_string(2 * rows) +
                                               " rows, found " + std::to_string(final_checked));
  }

  // ==== C. Rejections ====
  // A 55Z01 is right only if, when the guard judged the write, a higher token
  // had committed on the row (per-row fence) or under the lock (lock-wide:
  // a write or a grant).  The judgement happened between S and R; a higher
  // token that committed before it has a history time (taken before its
  // commit) below R.  So: no higher token with ts < R -> a false rejection,
  // for certain.  Higher token with ts < S: the rejection was required (that
  // writer held the row/fence until it committed, and ours came later).
  std::map<std::string, MaxBefore> by_row;
  MaxBefore by_lock;
  for (const HistRec &h : history) {
    if (!h.tok) continue;
    by_row[RowKey(h.tbl, h.row)].Add(h.ts, *h.tok);
    if (h.tbl == kLockTableTag) by_lock.Add(h.ts, *h.tok);
  }
  for (const ServerGrant &g : server_grants) {
    if (g.lock == kLockName) by_lock.Add(g.ts, g.tok);
  }
  for (auto &[key, points] : by_row) points.Finish();
  by_lock.Finish();
  long rejections_certain = 0;
  long rejections_concurrent = 0;
  for (const WriteRec &w : writes) {
    if (w.out == Outcome::kMissing && !w.missing) {
      violations.Add("false 55Z02 (the write had a token)", Describe(w) + ": " + w.msg);
    }
    if (w.missing && w.out == Outcome::kStale) {
      violations.Add("tokenless write got 55Z01, not 55Z02", Describe(w));
    }
    if (w.out != Outcome::kStale || w.missing) continue;
    const MaxBefore &points = w.tbl == kLockTableTag ? by_lock : by_row[RowKey(w.tbl, w.row)];
    if (points.Before(w.received) <= w.tok) {
      violations.Add("false rejection (55Z01 without a higher committed token)",
                     Describe(w) + ": " + w.msg);
    } else if (points.Before(w.sent) > w.tok) {
      ++rejections_certain;
    } else {
      ++rejections_concurrent;
    }
  }

  // ==== D. Stale acceptances seen in real time ====
  // Independent of the commit numbering (which is only an order where writes
  // serialise): a write sent after a client had *received* a higher grant
  // (lock-wide) or an acknowledgement of a higher write to the same row
  // (both fences) must be refused.  If it committed, that is a stale write,
  // whatever order the server chose.
  {
    MaxBefore grants_received;
    for (const GrantRec &g : grants) grants_received.Add(g.received, g.tok);
    grants_received.Finish();
    std::map<std::string, MaxBefore> acked_by_row;
    for (const WriteRec &w : writes) {
      if (w.out == Outcome::kOk && !w.missing)
        acked_by_row[RowKey(w.tbl, w.row)].Add(w.received, w.tok);
    }
    for (auto &[key, points] : acked_by_row) points.Finish();
    for (const WriteRec &w : writes) {
      if (w.missing || !history_by_wid.count(w.wid)) continue;
      if (w.tbl == kLockTableTag) {
        const Token granted = grants_received.Before(w.sent);
        if (granted > w.tok) {
          violations.Add(
              "stale write accepted after a higher grant (real time)",
              Describe(w) + " sent after token " + std::to_string(granted) + " was granted");
        }
      }
      const auto it = acked_by_row.find(RowKey(w.tbl, w.row));
      if (it != acked_by_row.end()) {
        const Token acked = it->second.Before(w.sent);
        if (acked > w.tok) {
          violations.Add("stale write accepted after a higher write (real time)",
                         Describe(w) + " sent after a write with token " + std::to_string(acked) +
                             " had been acknowledged");
        }
      }
    }
  }

  // A worker runs until told to stop; one that died by itself (an uncaught
  // exception, a crash in the client library) is a failure of the client.
  if (faults["worker_exit"] > 0) {
    violations.Add(
        "worker process died unexpectedly",
        std::to_string(faults["worker_exit"]) + " time(s); see faults.log and workers/*.stderr");
  }

  // ==== E. The run must have exercised something ====
  long stale_total = 0;
  for (const auto &[tbl, c] : counts) stale_total += c.stale;
  if (grants.empty() || counts[kRowTableTag].ok == 0 || counts[kLockTableTag].ok == 0) {
    violations.Add("vacuous run", "no grants, or no accepted write in a table");
  }
  if (guarded && stale_total == 0) {
    violations.Add("vacuous run",
                   "no write was ever refused as stale: the guard was not exercised");
  }

  // ==== Report ====
  long writes_total = static_cast<long>(writes.size());
  long acquires = events["acq_invoke"];
  out << "== check " << dir << "\n";
  out << "run: mode=" << meta["mode"] << " seed=" << meta["seed"]
      << " duration=" << meta["duration_s"] << "s workers=" << meta["workers"] << " rows=" << rows
      << " ttl=" << meta["ttl_ms"] << "ms pg_fencing=" << meta["extversion"] << "\n";
  out << "operations: " << writes_total + acquires + events["release"] << " (writes "
      << writes_total << ", acquires " << acquires << ", releases " << events["release"] << ")\n";
  out << "faults: pause=" << faults["pause"] << " kill=" << faults["kill"]
      << " crash=" << faults["crash"] << " (worker processes started " << faults["spawn"]
      << ", unexpected worker exits " << faults["worker_exit"] << ")\n";
  out << "grants: " << grants.size() << " received by workers, " << server_grants.size()
      << " on the server's record (" << unacknowledged_grants
      << " never acknowledged to a worker), over " << incarnations.size()
      << " server incarnations\n";
  out << "acquires: " << acquires << " (granted " << grants.size() << ", busy after the wait "
      << events["acq_timeout"] << ", failed on an error " << events["acq_error"]
      << "); leases lost while held " << lost_tokens.size() << "\n";
  long info_total = 0;
  long info_committed = 0;
  long error_total = 0;
  long missing_total = 0;
  long ok_total = 0;
  for (const auto &[tbl, c] : counts) {
    info_total += c.info;
    info_committed += c.info_committed;
    error_total += c.error;
    missing_total += c.missing;
    ok_total += c.ok;
  }
  out << "writes: accepted " << ok_total << ", rejected 55Z01 " << stale_total
      << ", rejected 55Z02 " << missing_total << ", other errors " << error_total
      << ", indeterminate " << info_total << " (committed " << info_committed << ", not committed "
      << info_total - info_committed << ")\n";
  for (const auto &[tbl, c] : counts) {
    out << "  " << (tbl == kRowTableTag ? "per-row fence  " : "lock-wide fence") << " (" << tbl
        << "): attempts " << c.attempts << ", accepted " << c.ok << ", 55Z01 " << c.stale
        << ", 55Z02 " << c.missing << ", other " << c.error << ", indeterminate " << c.info << " ("
        << c.info_committed << " committed)\n";
  }
  if (!error_states.empty()) {
    out << "  other errors by SQLSTATE:";
    for (const auto &[state, n] : error_states) out << " " << state << "=" << n;
    out << "\n";
  }
  out << "rejections 55Z01: " << rejections_certain
      << " with the higher token committed before the write was sent, " << rejections_concurrent
      << " with it committed while the write was in flight\n";
  out << "history: " << history.size()
      << " committed writes on the server's record, final state of " << final_checked
      << " rows checked\n";
  if (truncated + anomalies > 0) {
    out << "logs: " << truncated << " truncated last lines (killed workers), " << anomalies
        << " unmatched lines\n";
  }
  out << "violations: " << violations.total() << "\n";
  violations.Print(out);
  out << "RESULT: " << (violations.total() == 0 ? "PASS" : "FAIL (violations found)") << std::endl;
  return violations.total();
}

}  // namespace pg_fencing::stress
