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
//
// Permit mode (meta permits > 0): the workers hold permits of a semaphore,
// each grant of a slot is on the record with its slot, and the reads under
// the read fence are on it too (reads.tsv), numbered from the same sequence.
// A grant of a slot takes the slot's gate before its seq; a writer or a
// presentation under the slot's current token holds that gate shared until
// it commits.  So a token's tenure, in seq order, runs from its grant to the
// next grant of its slot, and everything accepted under it -- a write, a read
// that saw rows -- must lie inside.
//
// Restores (faults.log "ev=restore"; RELIABILITY.md, "The restore fault").
// The orchestrator took a base backup early, and later lost the server
// (SIGKILL) and started it from a fresh copy of that backup: the database
// went back to some point inside the backup's window, and everything it
// committed after that point is gone from it.  That splits the run into
// timelines, each with a record of its own: timeline 0 from the start to the
// restore, whose record the orchestrator read from the lost data directory
// after the run (lost-1/, everything the lost server had committed), and
// timeline 1 from the restore to the end (the run directory's own files).
// The restored record begins with what the backup held of timeline 0 (rows
// of server incarnations started before the restore); the rest was committed
// after the restore.  Each record is one commit order of its own: seq is
// unique within it (the restored sequence goes on from the backup's value,
// above every seq the backup holds, but may hand out again the seqs of the
// lost ones).  What each invariant becomes:
//  - every event (a write, a grant, a read) is judged once, in the record of
//    the timeline it committed in, against that whole record: per row and per
//    lock orders (B6, B7), tenures (P1, R4), grant order (A4) are properties
//    of one commit order, and hold in each;
//  - a token is granted once over the whole run: A1 over every record's own
//    grants (lost ones included), A2 over every client's receipts;
//  - the restore must not hand out a token at or below one it already gave
//    away: A5 (a restored server's incarnation grants above every earlier
//    incarnation, lost ones included) and A6 (real time, across the restore);
//  - no stale write accepted after the restore (B9): a write committed after
//    the restore under a token granted after it must carry a token above every
//    token granted before the restore, kept by the backup or lost with the
//    timeline.  A write after the restore under a token granted *before* it
//    (a worker paused across the restore, a careless or zombie one) is judged
//    against what the restored database can know (B7 on its record, D
//    against the grants it kept or made): no fence restored from a backup can
//    refuse a write for a grant the restore erased, so those are counted, not
//    judged on the lost grants;
//  - acknowledged means durable, up to the restore's loss: a write, grant or
//    read acknowledged before the backup began is in the restored record (it
//    committed before the backup's start checkpoint); one acknowledged after
//    may be gone with the timeline, and is counted as lost by the restore, not
//    reported; every acknowledged one is in one of the records (B3, A3, R5);
//  - the restored record holds nothing the lost one did not: its rows from
//    before the restore are rows of the lost record, committed before the
//    backup ended;
//  - the final rows are the restored record's last writes (B8): the rows the
//    restored timeline never wrote hold what the backup had;
//  - C and D judge a write against the record of the server that could have
//    judged it: a write in flight across the restore against either.
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
#include <unordered_set>
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
  int rec = 0;          // the record (timeline) it was committed in
  std::string raw;      // the line as dumped
};

// A worker frozen after a write, before its COMMIT (the freeze fault).
struct Freeze {
  std::int64_t at = 0;  // wall µs, just before it stopped
  Token tok = kNone;
  std::int64_t ms = 0;
  std::string who;
  std::string wid;
  // What it did first when it resumed, in the frozen transaction: "commit"
  // (nothing) or a variant's call, "close", "open" or "reacquire".
  std::string then = "commit";
  std::int64_t lease_end = kNone;  // a variant's: its lease's end, wall µs (server clock)
  bool stopped = true;             // false: it could not stop, and wrote on at once
  std::int64_t thawed = 0;         // wall µs it resumed at; 0: not on record (killed)
  bool called = false;             // a variant's call answered in the frozen transaction
  std::string answer;
};

struct ServerGrant {
  std::int64_t seq = 0;
  std::string lock;
  std::string holder;
  Token tok = kNone;
  std::int64_t ts = 0;
  std::int64_t pm = 0;
  std::optional<int> slot;  // a permit's slot; none for a lease
  int rec = 0;
  std::string raw;
};

// A read under the read fence, as the worker logged it (r_inv, r_done).
struct ReadRec {
  std::string rid;
  std::string who;
  Token tok = kNone;
  bool undo = false;          // the presentation was taken back before the count
  std::int64_t sent = 0;      // wall µs, logged before sending
  std::int64_t received = 0;  // wall µs, logged after the outcome
  Outcome out = Outcome::kNone;
  std::string present;  // out=ok: "ok" or "55Z01"
  long rows = -1;       // out=ok: the rows it saw
  std::string state;
  std::string msg;
};

// A read as its transaction recorded it (stress_reads).
struct ServerRead {
  std::int64_t seq = 0;
  std::string rid;
  Token tok = kNone;
  bool presented = false;  // a presentation was in force when it counted
  long rows = 0;
  std::int64_t ts = 0;
  std::int64_t pm = 0;
  int rec = 0;
  std::string raw;
};

struct FinalRow {
  std::string tbl;
  int row = -1;
  std::optional<Token> tok;
  std::optional<std::int64_t> val;
  std::optional<std::string> wid;
};

// ---- Reading ----------------------------------------------------------------

std::optional<std::string> Cell(const std::string &cell) {
  if (cell == "\\N") return std::nullopt;
  return cell;
}

std::optional<std::int64_t> IntCell(const std::string &cell) {
  if (cell == "\\N") return std::nullopt;
  return std::stoll(cell);
}

// Rows of columns cells; or of fewer, down to min_columns, for files of
// older runs that lacked the last ones.
std::vector<std::vector<std::string>> ReadTsv(const std::string &path, std::size_t columns,
                                              std::size_t min_columns = 0) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string &line : CompleteLines(ReadFile(path), nullptr)) {
    if (line.empty()) continue;
    std::vector<std::string> cells = Split(line, '\t');
    const std::size_t fewest = min_columns == 0 ? columns : min_columns;
    if (cells.size() < fewest || cells.size() > columns)
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

// ---- Permits: a token's tenure of its slot --------------------------------------

// From a permit's grant to the next grant of its slot, in commit (seq) order.
struct Tenure {
  int slot = 0;
  std::int64_t from = 0;              // the grant's seq
  std::int64_t until = INT64_MAX;     // the next grant of the slot's seq (none yet: max)
  const ServerGrant *next = nullptr;  // that next grant
};

// Every token granted as a permit of lock, with its tenure; grants must be
// in seq order.  A token on record twice keeps its first grant (the second
// is a violation of its own, A1).
std::unordered_map<Token, Tenure> Tenures(const std::vector<ServerGrant> &grants,
                                          const std::string &lock) {
  std::unordered_map<Token, Tenure> tenures;
  std::map<int, Token> latest;  // slot -> its latest grant so far
  for (const ServerGrant &g : grants) {
    if (g.lock != lock || !g.slot) continue;
    const auto previous = latest.find(*g.slot);
    if (previous != latest.end()) {
      // (A token on record for two slots keeps its first one's tenure.)
      Tenure &ended = tenures[previous->second];
      if (ended.next == nullptr && ended.slot == *g.slot) {
        ended.until = g.seq;
        ended.next = &g;
      }
    }
    latest[*g.slot] = g.tok;
    tenures.emplace(g.tok, Tenure{*g.slot, g.seq, INT64_MAX, nullptr});
  }
  return tenures;
}

// The names one kind of act (a write, a read that saw rows) is reported
// under when it falls outside its token's tenure.
struct TenureKinds {
  const char *no_permit;     // the token is no permit of the semaphore
  const char *before_grant;  // committed before its token was granted
  const char *after_next;    // committed after the slot was granted again
};

// An act (what, "write 0.1.7") under tok that committed at seq must lie
// inside tok's tenure: after its grant, before the next grant of its slot.
// The one place where a semaphore's exclusion per slot is judged, for
// writes and reads alike.
void CheckTenure(const std::unordered_map<Token, Tenure> &tenures, Token tok, std::int64_t seq,
                 const std::string &what, const TenureKinds &kinds, Violations &violations) {
  const std::string at = what + " token " + std::to_string(tok) + " seq " + std::to_string(seq);
  const auto it = tenures.find(tok);
  if (it == tenures.end()) {
    violations.Add(kinds.no_permit, at + ": no grant of the semaphore on record has this token");
    return;
  }
  const Tenure &t = it->second;
  if (seq < t.from) {
    violations.Add(kinds.before_grant, at + " is before its grant (seq " + std::to_string(t.from) +
                                           ", permit " + std::to_string(t.slot) + ")");
  } else if (seq >= t.until) {  // seqs are unique: only a forged record can be equal
    violations.Add(kinds.after_next, at + " is after permit " + std::to_string(t.slot) +
                                         " was granted again to " + t.next->holder + " (token " +
                                         std::to_string(t.next->tok) + ", seq " +
                                         std::to_string(t.until) + ")");
  }
}

// The slot a token is a permit of, or nullopt.
std::optional<int> SlotOf(const std::unordered_map<Token, Tenure> &tenures, Token tok) {
  const auto it = tenures.find(tok);
  if (it == tenures.end()) return std::nullopt;
  return it->second.slot;
}

// ---- Restores and records ---------------------------------------------------

// One restore, from faults.log ("ev=restore"): the server was lost from
// lost_at (the kill began: its backends may still commit until killed, when
// all of them were gone) and was up again at restarted, started from a fresh
// copy of a base backup taken between backup_start and backup_end.  The lost
// server's record is in the run directory's subdirectory record.  Wall µs.
struct Restore {
  int n = 0;
  std::string record;
  std::int64_t backup_start = 0;
  std::int64_t backup_end = 0;
  std::int64_t lost_at = 0;
  std::int64_t killed = 0;
  std::int64_t restarted = 0;
};

// A server's record: what one timeline committed, as dumped at its end (see
// the top of this file).  Its rows of server incarnations started from
// born_from on were committed in the timeline itself ("born" here); the
// others came with the backup it was restored from.
struct Record {
  std::string name;
  std::int64_t born_from = INT64_MIN;
  std::vector<HistRec> history;                        // by seq
  std::vector<ServerGrant> grants;                     // by seq
  std::vector<ServerRead> reads;                       // by seq
  std::unordered_map<Token, Tenure> tenures;           // permit mode
  std::set<std::pair<Token, std::string>> grant_keys;  // (token, holder) of every grant
  std::unordered_set<std::string> wids;                // write id of every history row
  std::unordered_set<std::string> rids;                // read id of every read
  std::map<std::string, std::set<Token>> born_tokens;  // lock -> tokens granted here
  bool Born(std::int64_t pm) const { return pm >= born_from; }
};

std::string JoinCells(const std::vector<std::string> &cells) {
  std::string out;
  for (const std::string &cell : cells) out += (out.empty() ? "" : "\t") + cell;
  return out;
}

std::vector<HistRec> ReadHistory(const std::string &path) {
  std::vector<HistRec> history;
  for (const auto &cells : ReadTsv(path, 8)) {
    HistRec h;
    h.seq = std::stoll(cells[0]);
    h.tbl = cells[1];
    h.row = std::stoi(cells[2]);
    h.tok = IntCell(cells[3]);
    h.val = IntCell(cells[4]);
    h.wid = Cell(cells[5]);
    h.ts = std::stoll(cells[6]);
    h.pm = std::stoll(cells[7]);
    h.raw = JoinCells(cells);
    history.push_back(std::move(h));
  }
  std::sort(history.begin(), history.end(),
            [](const HistRec &a, const HistRec &b) { return a.seq < b.seq; });
  return history;
}

std::vector<ServerGrant> ReadGrants(const std::string &path) {
  std::vector<ServerGrant> grants;
  for (const auto &cells : ReadTsv(path, 7, 6)) {
    ServerGrant g;
    g.seq = std::stoll(cells[0]);
    g.lock = cells[1];
    g.holder = cells[2];
    g.tok = std::stoll(cells[3]);
    g.ts = std::stoll(cells[4]);
    g.pm = std::stoll(cells[5]);
    if (cells.size() > 6) {
      if (const auto slot = IntCell(cells[6])) g.slot = static_cast<int>(*slot);
    }
    g.raw = JoinCells(cells);
    grants.push_back(std::move(g));
  }
  std::sort(grants.begin(), grants.end(),
            [](const ServerGrant &a, const ServerGrant &b) { return a.seq < b.seq; });
  return grants;
}

std::vector<ServerRead> ReadReads(const std::string &path) {
  std::vector<ServerRead> reads;
  for (const auto &cells : ReadTsv(path, 7)) {
    ServerRead r;
    r.seq = std::stoll(cells[0]);
    r.rid = cells[1];
    r.tok = std::stoll(cells[2]);
    r.presented = cells[3] == "t";
    r.rows = std::stol(cells[4]);
    r.ts = std::stoll(cells[5]);
    r.pm = std::stoll(cells[6]);
    r.raw = JoinCells(cells);
    reads.push_back(std::move(r));
  }
  std::sort(reads.begin(), reads.end(),
            [](const ServerRead &a, const ServerRead &b) { return a.seq < b.seq; });
  return reads;
}

// Which fence a table of the harness is under (by its tag in the logs).
enum class Fence { kRow, kLock, kPermit };
Fence FenceOf(const std::string &tbl) {
  if (tbl == kRowTableTag) return Fence::kRow;
  if (tbl == kLockTableTag) return Fence::kLock;
  return Fence::kPermit;
}

// ---- Frozen writes ------------------------------------------------------------

// What became of the frozen writes of a guarded run (JudgeFrozenWrites).
struct FrozenWrites {
  long judged = 0;
  long refused = 0;  // refused with 55Z04: at the COMMIT, or at a variant's call
  long ended = 0;    // not committed otherwise: the server ended the transaction first
  long variants = 0;
  std::map<std::string, long> by_then;  // variants per call
  long called = 0;                      // variants whose call answered
  long variants_refused = 0;            // variants refused with 55Z04
};

// G: no frozen write commits.  Each one's lease had ended before its worker
// resumed -- a plain freeze lasts TTL + 3-4 s with the heartbeat stopped, a
// variant until just past the end it logged -- so its transaction may not
// commit, whatever it called before its COMMIT (closing its session, opening
// another, acquiring the lock again: each let such a COMMIT through before
// 1.9): the server refuses it (55Z04) or has ended the transaction.  A
// variant that resumed before its end would make the check wrong: reported.
FrozenWrites JudgeFrozenWrites(
    const std::vector<Freeze> &freezes, const std::vector<WriteRec> &writes,
    const std::unordered_map<std::string, std::size_t> &write_index,
    const std::unordered_map<std::string, const HistRec *> &history_by_wid,
    Violations &violations) {
  FrozenWrites report;
  for (const Freeze &z : freezes) {
    const auto it = write_index.find(z.wid);
    if (!z.stopped || it == write_index.end()) continue;
    const WriteRec &w = writes[it->second];
    const bool variant = z.then != "commit";
    ++report.judged;
    std::string what = Describe(w) + " froze for " + std::to_string(z.ms) + " ms, then " + z.then;
    if (variant) {
      ++report.variants;
      ++report.by_then[z.then];
      if (z.called) {
        ++report.called;
        what += " (answered " + z.answer + ")";
      }
      if (z.thawed != 0 && z.thawed <= z.lease_end) {
        violations.Add(
            "freeze variant resumed before its lease ended (harness)",
            what + ": resumed " + std::to_string(z.lease_end - z.thawed) + " µs before the end");
      }
    }
    const auto committed = history_by_wid.find(z.wid);
    if (committed != history_by_wid.end() || w.out == Outcome::kOk) {
      violations.Add("frozen write committed after its lease ended",
                     what + ": committed" +
                         (committed != history_by_wid.end()
                              ? " (seq " + std::to_string(committed->second->seq) + ")"
                              : std::string(" (acknowledged)")));
    } else if (w.state == "55Z04") {
      ++report.refused;
      if (variant) ++report.variants_refused;
    } else {
      ++report.ended;
    }
  }
  return report;
}

}  // namespace

long CheckRun(const CheckOptions &options, std::ostream &out) {
  const std::string &dir = options.run_dir;
  Violations violations(options.examples);

  // ---- meta, faults ----
  std::map<std::string, std::string> meta;
  for (const std::string &line : CompleteLines(ReadFile(dir + "/meta.txt"), nullptr)) {
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const bool guarded = meta["mode"] != "unguarded";
  const int rows = std::stoi(meta.count("rows") ? meta["rows"] : "0");
  // Permit mode: the workers took permits of kSemName and wrote its tables.
  const int permits = std::stoi(meta.count("permits") ? meta["permits"] : "0");
  const bool permit_mode = permits > 0;
  std::map<std::string, long> faults;
  std::vector<Restore> restores;
  // When the server was down (crashes; restores are added below): wall µs.
  std::vector<std::pair<std::int64_t, std::int64_t>> outages;
  // Requests of the freeze fault's variant (then= a call, not commit).
  long variant_requests = 0;
  for (const std::string &line : CompleteLines(ReadFile(dir + "/faults.log"), nullptr)) {
    const Fields f = ParseFields(line);
    if (const auto ev = Get(f, "ev")) ++faults[*ev];
    if (Get(f, "ev") == std::optional<std::string>("freeze_request") &&
        Get(f, "then").value_or("commit") != "commit")
      ++variant_requests;
    // The server's crashes, from the crash to its restart.
    if (Get(f, "ev") == std::optional<std::string>("crash")) {
      outages.push_back({GetInt(f, "wall"), INT64_MAX});
    } else if (Get(f, "ev") == std::optional<std::string>("restarted") && !outages.empty()) {
      outages.back().second = GetInt(f, "wall");
    }
    if (Get(f, "ev") == std::optional<std::string>("restore")) {
      Restore r;
      r.n = static_cast<int>(GetInt(f, "n"));
      r.record = Get(f, "record").value_or("");
      r.backup_start = GetInt(f, "backup_start");
      r.backup_end = GetInt(f, "backup_end");
      r.lost_at = GetInt(f, "lost_at");
      r.restarted = GetInt(f, "restarted");
      r.killed = GetInt(f, "killed", r.restarted);
      if (r.record.empty() || r.record.find('/') != std::string::npos || r.lost_at < 0)
        throw std::runtime_error("malformed restore event in faults.log: " + line);
      restores.push_back(std::move(r));
    }
  }
  std::sort(restores.begin(), restores.end(),
            [](const Restore &a, const Restore &b) { return a.lost_at < b.lost_at; });
  for (const Restore &r : restores) outages.push_back({r.lost_at, r.restarted});
  bool restore_planned = false;
  bool freeze_planned = false;
  for (const std::string &kind : Split(meta["faults"], ',')) {
    if (kind == "restore") restore_planned = true;
    if (kind == "freeze") freeze_planned = true;
  }
  // The timelines whose server may have judged a request sent at S and
  // answered at R: from the first whose server was still alive at S (a lost
  // server's backends may commit until it is killed) to the last that had
  // begun by R.
  const auto first_timeline = [&](std::int64_t sent) {
    int k = 0;
    for (const Restore &r : restores) k += sent >= r.killed ? 1 : 0;
    return k;
  };
  const auto last_timeline = [&](std::int64_t received) {
    int k = 0;
    for (const Restore &r : restores) k += received >= r.lost_at ? 1 : 0;
    return k;
  };

  // ---- worker logs ----
  std::vector<WriteRec> writes;
  std::unordered_map<std::string, std::size_t> write_index;
  std::vector<GrantRec> grants;
  std::vector<ReadRec> reads;
  std::unordered_map<std::string, std::size_t> read_index;
  std::map<std::string, long> events;
  std::set<Token> lost_tokens;
  std::vector<Freeze> freezes;
  std::unordered_map<std::string, std::size_t> freeze_index;  // by write id
  long truncated = 0;
  long anomalies = 0;
  for (const std::string &path : LogFiles(dir + "/workers")) {
    for (const std::string &line : CompleteLines(ReadFile(path), &truncated)) {
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
      } else if (ev == "r_inv") {
        ReadRec r;
        r.rid = Get(f, "rid").value_or("");
        r.who = who;
        r.tok = GetInt(f, "tok");
        r.undo = Get(f, "present") == std::optional<std::string>("undo");
        r.sent = GetInt(f, "wall");
        if (r.rid.empty() || read_index.count(r.rid)) {
          ++anomalies;
          continue;
        }
        read_index[r.rid] = reads.size();
        reads.push_back(std::move(r));
      } else if (ev == "r_done") {
        const auto it = read_index.find(Get(f, "rid").value_or(""));
        if (it == read_index.end()) {
          ++anomalies;
          continue;
        }
        ReadRec &r = reads[it->second];
        r.received = GetInt(f, "wall");
        const std::string result = Get(f, "out").value_or("");
        r.out = result == "ok" ? Outcome::kOk : result == "err" ? Outcome::kError : Outcome::kInfo;
        r.present = Get(f, "present").value_or("");
        r.rows = static_cast<long>(GetInt(f, "rows"));
        r.state = Get(f, "state").value_or("");
        r.msg = Get(f, "msg").value_or("");
      } else if (ev == "freeze") {
        Freeze z;
        z.at = GetInt(f, "wall");
        z.tok = GetInt(f, "tok");
        z.ms = GetInt(f, "ms");
        z.who = who;
        z.wid = Get(f, "wid").value_or("");
        z.then = Get(f, "then").value_or("commit");
        z.lease_end = GetInt(f, "end");
        freeze_index[z.wid] = freezes.size();
        freezes.push_back(std::move(z));
      } else if (ev == "thaw" || ev == "thaw_call") {
        const auto it = freeze_index.find(Get(f, "wid").value_or(""));
        if (it == freeze_index.end()) {
          ++anomalies;
          continue;
        }
        Freeze &z = freezes[it->second];
        if (ev == "thaw") {
          z.thawed = GetInt(f, "wall");
          z.stopped = Get(f, "stopped") != std::optional<std::string>("0");
        } else {
          z.called = true;
          z.answer = Get(f, "answer").value_or("");
        }
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

  // ---- server state: one record per timeline ----
  std::vector<Record> records(restores.size() + 1);
  for (std::size_t k = 0; k < records.size(); ++k) {
    Record &rec = records[k];
    const bool last = k == restores.size();
    rec.name = last ? "final" : restores[k].record;
    const std::string rdir = last ? dir : dir + "/" + restores[k].record;
    rec.born_from = k == 0 ? INT64_MIN : restores[k - 1].lost_at;
    rec.history = ReadHistory(rdir + "/history.tsv");
    rec.grants = ReadGrants(rdir + "/grants.tsv");
    if (permit_mode) rec.reads = ReadReads(rdir + "/reads.tsv");
    for (HistRec &h : rec.history) {
      h.rec = static_cast<int>(k);
      if (h.wid) rec.wids.insert(*h.wid);
    }
    for (ServerGrant &g : rec.grants) {
      g.rec = static_cast<int>(k);
      rec.grant_keys.insert({g.tok, g.holder});
      if (rec.Born(g.pm)) rec.born_tokens[g.lock].insert(g.tok);
    }
    for (ServerRead &r : rec.reads) {
      r.rec = static_cast<int>(k);
      rec.rids.insert(r.rid);
    }
    // Permit mode: each permit token's slot and tenure, in this record's
    // commit order.
    rec.tenures = Tenures(rec.grants, kSemName);
  }
  const Record &final_record = records.back();
  // " [lost-1]": which record a violation was found in, once there are several.
  const auto in = [&](int k) {
    return records.size() == 1 ? std::string()
                               : " [" + records[static_cast<std::size_t>(k)].name + "]";
  };
  // Every committed write, grant and read once: from the record of the
  // timeline it committed in.  Without a restore, the server's one record.
  std::vector<HistRec> history;
  std::vector<ServerGrant> server_grants;
  std::vector<ServerRead> server_reads;
  for (const Record &rec : records) {
    for (const HistRec &h : rec.history)
      if (rec.Born(h.pm)) history.push_back(h);
    for (const ServerGrant &g : rec.grants)
      if (rec.Born(g.pm)) server_grants.push_back(g);
    for (const ServerRead &r : rec.reads)
      if (rec.Born(r.pm)) server_reads.push_back(r);
  }
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
  // A4: per lock, grants in commit order carry strictly increasing tokens
  // (in each record; a grant judged in the record it was born in).
  for (const Record &rec : records) {
    std::map<std::string, Token> last;
    for (const ServerGrant &g : rec.grants) {
      auto [it, fresh] = last.emplace(g.lock, g.tok);
      if (!fresh) {
        if (g.tok <= it->second && rec.Born(g.pm)) {
          violations.Add("grant order", "lock " + g.lock + ": token " + std::to_string(g.tok) +
                                            " granted (seq " + std::to_string(g.seq) +
                                            ") after token " + std::to_string(it->second) +
                                            in(g.rec));
        }
        it->second = std::max(it->second, g.tok);
      }
    }
  }
  // A5: every token granted by a later server incarnation (after a crash)
  // is above every token granted by an earlier one.  Over every record's own
  // grants: the incarnation a restore started is above every earlier one,
  // the lost timeline's included (a database gone back must not hand out
  // again what it gave away).
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
    std::int64_t previous_pm = INT64_MIN;
    for (const auto &[pm, range] : incarnations) {
      bool restored = false;  // the first incarnation after a restore
      for (const Restore &r : restores)
        restored = restored || (previous_pm < r.lost_at && r.lost_at <= pm);
      if (range.first <= before) {
        violations.Add(restored ? "grant after the restore not above grants before it"
                                : "grant after crash not above grants before it",
                       "incarnation started at " + std::to_string(pm) +
                           (restored ? " (after the restore)" : "") + " granted " +
                           std::to_string(range.first) + ", an earlier one had granted " +
                           std::to_string(before));
      }
      before = std::max(before, range.second);
      previous_pm = pm;
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

  // A7 (permit mode): every grant of the semaphore is of one of its permits.
  std::map<int, long> grants_by_slot;
  for (const ServerGrant &g : server_grants) {
    if (g.lock != kSemName) continue;
    if (!g.slot || *g.slot < 1 || *g.slot > permits) {
      violations.Add("permit grant outside the semaphore's permits",
                     "token " + std::to_string(g.tok) + " to " + g.holder + " on permit " +
                         (g.slot ? std::to_string(*g.slot) : std::string("none")) + " of " +
                         std::to_string(permits));
      continue;
    }
    ++grants_by_slot[*g.slot];
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

  // The final rows' last writes: in the final record (after a restore, the
  // restored one, whose rows not written since hold what the backup had).
  std::map<std::string, const HistRec *> last_by_row;
  for (const HistRec &h : final_record.history) last_by_row[RowKey(h.tbl, h.row)] = &h;
  // A write that set no token kept the row's old one; it is reported above
  // as a write without token, not as a stale one.
  const auto set_no_token = [&](const HistRec &h) {
    const auto it = h.wid ? write_index.find(*h.wid) : write_index.end();
    return it != write_index.end() && writes[it->second].missing;
  };
  // B6: per row, committed tokens never decrease in commit order (not under
  // a semaphore).  In each record, reported in the record it was born in.
  for (const Record &rec : records) {
    std::map<std::string, Token> high;
    for (const HistRec &h : rec.history) {
      const std::string key = RowKey(h.tbl, h.row);
      // Under a semaphore a row's token is not compared: holders of
      // different permits write the same rows in any order.
      if (!h.tok || FenceOf(h.tbl) == Fence::kPermit) continue;
      auto [it, fresh] = high.emplace(key, *h.tok);
      if (!fresh) {
        if (*h.tok < it->second && rec.Born(h.pm)) {
          violations.Add("row token decreased (commit order)",
                         key + ": write " + h.wid.value_or("?") + " token " +
                             std::to_string(*h.tok) + " committed after token " +
                             std::to_string(it->second) + in(h.rec));
        }
        it->second = std::max(it->second, *h.tok);
      }
    }
  }
  // B7: per lock, each committed write's token is at least every token
  // granted or written under the lock before it in commit order.  In each
  // record: after a restore, the grants and writes the restored database
  // kept from the backup or made since.
  for (const Record &rec : records) {
    struct Entry {
      std::int64_t seq;
      Token tok;
      std::string what;  // "W<write id>" or "grant to H"
      bool born;
    };
    std::vector<Entry> order;
    for (const ServerGrant &g : rec.grants) {
      if (g.lock == kLockName)
        order.push_back({g.seq, g.tok, "grant to " + g.holder, rec.Born(g.pm)});
    }
    for (const HistRec &h : rec.history) {
      if (h.tbl != kLockTableTag || set_no_token(h)) continue;
      order.push_back({h.seq, h.tok.value_or(kNone), "W" + h.wid.value_or("?"), rec.Born(h.pm)});
    }
    std::sort(order.begin(), order.end(),
              [](const Entry &a, const Entry &b) { return a.seq < b.seq; });
    Token high = kNone;
    std::string high_what;
    for (const Entry &e : order) {
      if (e.what[0] == 'W' && e.tok < high && e.born) {
        violations.Add(std::string("stale write under lock (commit order") +
                           (guarded ? ")" : "; unguarded: number order)"),
                       "write " + e.what.substr(1) + " token " + std::to_string(e.tok) + " seq " +
                           std::to_string(e.seq) + " after " + high_what + " token " +
                           std::to_string(high) +
                           (records.size() > 1 ? " [" + rec.name + "]" : ""));
      }
      if (e.tok > high) {
        high = e.tok;
        high_what = e.what[0] == 'W' ? "write " + e.what.substr(1) : e.what;
      }
    }
  }
  // B9: no stale write accepted after a restore.  A write committed after
  // restore k under a token granted after it (a grant born in the restored
  // record) must carry a token above every token granted before the restore,
  // whether the backup kept that grant or the restore lost it: below or
  // equal, it is a write under a token the database had already given away
  // or passed, which no holder of the lease may still use.  Under the lock's
  // fence and under the semaphore's (the per-row fence lets a lower token
  // write a row the newer holder has not touched, B6 and D judge it).  A
  // write after the restore under a token granted before it is judged by B7
  // and D against what the restored record holds: the fence went back with
  // the database, and cannot know of a grant the restore lost; those are
  // counted.
  long old_token_writes = 0;
  // Per record after a restore: its committed writes under a lock or a
  // semaphore with a token granted in it (what B7 judges; E wants some).
  std::vector<long> fresh_token_writes(records.size(), 0);
  for (std::size_t k = 1; k < records.size(); ++k) {
    const Record &rec = records[k];
    std::map<std::string, std::pair<Token, const ServerGrant *>> before;  // lock -> highest
    for (std::size_t j = 0; j < k; ++j) {
      for (const ServerGrant &g : records[j].grants) {
        if (!records[j].Born(g.pm)) continue;
        auto [it, fresh] = before.emplace(g.lock, std::make_pair(g.tok, &g));
        if (!fresh && g.tok > it->second.first) it->second = {g.tok, &g};
      }
    }
    for (const HistRec &h : rec.history) {
      if (!rec.Born(h.pm) || !h.tok || FenceOf(h.tbl) == Fence::kRow || set_no_token(h)) continue;
      const std::string lock = FenceOf(h.tbl) == Fence::kLock ? kLockName : kSemName;
      const auto it = before.find(lock);
      if (it == before.end()) continue;
      const auto born = rec.born_tokens.find(lock);
      if (born == rec.born_tokens.end() || !born->second.count(*h.tok)) {
        ++old_token_writes;
        continue;
      }
      ++fresh_token_writes[k];
      if (*h.tok <= it->second.first) {
        const ServerGrant &g = *it->second.second;
        violations.Add(
            "stale write accepted after the restore (token not above one granted before it)",
            "write " + h.wid.value_or("?") + " " + RowKey(h.tbl, h.row) + " token " +
                std::to_string(*h.tok) + " (granted after restore " +
                std::to_string(restores[k - 1].n) + ") seq " + std::to_string(h.seq) + ": token " +
                std::to_string(g.tok) + " had been granted to " + g.holder + " before the restore" +
                (rec.grant_keys.count({g.tok, g.holder}) ? " (kept by the backup)"
                                                         : " (lost by the restore)"));
      }
    }
  }
  // P1 (permit mode): no two holders of a permit wrote at once.  Every
  // committed write under a permit's token lies inside the token's tenure of
  // its slot, in commit order.
  // (In the record it committed in: after a restore, the restored one's
  // tenures.)
  long tenure_writes = 0;
  for (const HistRec &h : history) {
    if (FenceOf(h.tbl) != Fence::kPermit || !h.tok) continue;
    // A write that set no token kept the row's old one (another holder's,
    // perhaps); it is reported above as a write without token.
    if (set_no_token(h)) continue;
    ++tenure_writes;
    CheckTenure(records[static_cast<std::size_t>(h.rec)].tenures, *h.tok, h.seq,
                "write " + h.wid.value_or("?") + in(h.rec),
                {"write under a token that is no permit",
                 "write before its permit was granted (commit order)",
                 "write after its permit was granted again (commit order)"},
                violations);
  }

  // ==== R. Reads under the read fence (permit mode) ====
  // The server's record of a read exists iff its transaction committed, and
  // its seq was taken after the presentation took its permit's gate, which
  // it held to its commit.
  std::unordered_map<std::string, const ServerRead *> read_by_rid;
  long tenure_reads = 0;
  for (const ServerRead &sr : server_reads) {
    const std::string what = "read " + sr.rid + " token " + std::to_string(sr.tok) + " seq " +
                             std::to_string(sr.seq) + " (" + std::to_string(sr.rows) + " rows, " +
                             (sr.presented ? "presented" : "not presented") + ")";
    if (!read_by_rid.emplace(sr.rid, &sr).second) {
      violations.Add("read recorded twice", what);
      continue;
    }
    // R1: each recorded read is one a worker sent, as it was told.
    const auto it = read_index.find(sr.rid);
    if (it == read_index.end()) {
      violations.Add("phantom read", what + " was never sent");
      continue;
    }
    const ReadRec &r = reads[it->second];
    const bool told_in_force = r.present == "ok" && !r.undo;
    if (sr.tok != r.tok || (r.undo && sr.presented) ||
        (r.out == Outcome::kOk && (sr.presented != told_in_force || sr.rows != r.rows))) {
      violations.Add("read record mismatch", what + ", sent with token " + std::to_string(r.tok) +
                                                 (r.undo ? " (presentation taken back)" : "") +
                                                 ", told present=" + r.present +
                                                 " rows=" + std::to_string(r.rows));
    }
    // R2: the read fence lets a transaction see rows only while it has a
    // presentation in force (a refused one, or one rolled back with its
    // savepoint, is none); R3: and then all of them.
    if (sr.rows > 0 && !sr.presented) {
      violations.Add("rows seen without a presentation in force (read fence)", what);
    } else if (sr.presented && sr.rows != rows) {
      violations.Add("read fence hid rows from a current holder", what);
    }
    // R4: no stale read.  A read that saw rows lies inside its token's
    // tenure, in commit order, as a write does.
    if (sr.rows > 0 && sr.presented) {
      ++tenure_reads;
      CheckTenure(records[static_cast<std::size_t>(sr.rec)].tenures, sr.tok, sr.seq,
                  "read " + sr.rid + in(sr.rec),
                  {"read under a token that is no permit",
                   "read before its permit was granted (commit order)",
                   "stale read: rows seen after the permit was granted again (commit order)"},
                  violations);
    }
  }
  struct ReadCounts {
    long attempts = 0, ok = 0, saw_rows = 0, refused = 0, undone = 0, error = 0, info = 0,
         info_recorded = 0;
  };
  ReadCounts read_counts;
  std::map<std::string, long> read_error_states;
  // R5: a read the worker saw commit is on record; one that failed is not.
  for (const ReadRec &r : reads) {
    ++read_counts.attempts;
    const bool recorded = read_by_rid.count(r.rid) > 0;
    switch (r.out) {
      case Outcome::kOk:
        ++read_counts.ok;
        if (r.rows > 0) ++read_counts.saw_rows;
        if (r.present == "55Z01") ++read_counts.refused;
        if (r.undo) ++read_counts.undone;
        if (!recorded) {
          violations.Add("acknowledged read lost",
                         "read " + r.rid + " (" + r.who + ") token " + std::to_string(r.tok));
        }
        break;
      case Outcome::kError:
        ++read_counts.error;
        ++read_error_states[r.state];
        if (recorded) {
          violations.Add("failed read recorded", "read " + r.rid + ": " + r.msg);
        }
        break;
      default:
        ++read_counts.info;
        if (recorded) ++read_counts.info_recorded;
        break;
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
  // Under a semaphore only a new grant of the write's own permit justifies
  // the refusal.  Each timeline's server judged against its own record: after
  // a restore, what the backup kept and what the restored server did since.
  struct FencePoints {
    std::map<std::string, MaxBefore> by_row;
    MaxBefore by_lock;
    std::map<int, MaxBefore> by_slot;
  };
  std::vector<FencePoints> fence(records.size());
  for (std::size_t k = 0; k < records.size(); ++k) {
    FencePoints &f = fence[k];
    for (const HistRec &h : records[k].history) {
      if (!h.tok) continue;
      f.by_row[RowKey(h.tbl, h.row)].Add(h.ts, *h.tok);
      if (h.tbl == kLockTableTag) f.by_lock.Add(h.ts, *h.tok);
    }
    for (const ServerGrant &g : records[k].grants) {
      if (g.lock == kLockName) f.by_lock.Add(g.ts, g.tok);
      if (g.lock == kSemName && g.slot) f.by_slot[*g.slot].Add(g.ts, g.tok);
    }
    for (auto &[key, points] : f.by_row) points.Finish();
    f.by_lock.Finish();
    for (auto &[slot, points] : f.by_slot) points.Finish();
  }
  // The tokens that fence a write of tbl[row] under tok on timeline k's
  // server; nullptr when tok is no permit of the semaphore on its record,
  // which the guard must refuse whatever else happened (and A3 reports, if a
  // worker received it).
  const auto fence_points = [&](int k, const std::string &tbl, int row,
                                Token tok) -> const MaxBefore * {
    FencePoints &f = fence[static_cast<std::size_t>(k)];
    switch (FenceOf(tbl)) {
      case Fence::kRow:
        return &f.by_row[RowKey(tbl, row)];
      case Fence::kLock:
        return &f.by_lock;
      case Fence::kPermit:
        break;
    }
    const std::optional<int> slot = SlotOf(records[static_cast<std::size_t>(k)].tenures, tok);
    return slot ? &f.by_slot[*slot] : nullptr;
  };
  struct RefusalCounts {
    long certain = 0, concurrent = 0;
  };
  // A 55Z01 for tok, sent at S and answered at R, judged against the points
  // of the servers that may have judged it: those of the timelines from S's
  // to R's (one, unless it was in flight across a restore; then a higher
  // token on either record justifies it).
  const auto judge_refusal = [&](const std::string &tbl, int row, Token tok, std::int64_t sent,
                                 std::int64_t received, const std::string &what,
                                 RefusalCounts &counts) {
    bool certain = false;
    Token before_received = kNone;
    for (int k = first_timeline(sent); k <= last_timeline(received); ++k) {
      const MaxBefore *points = fence_points(k, tbl, row, tok);
      if (points == nullptr || points->Before(sent) > tok) certain = true;
      if (points != nullptr) before_received = std::max(before_received, points->Before(received));
    }
    if (certain) {
      ++counts.certain;
    } else if (before_received <= tok) {
      violations.Add("false rejection (55Z01 without a higher committed token)", what);
    } else {
      ++counts.concurrent;
    }
  };
  RefusalCounts write_refusals;
  RefusalCounts read_refusals;
  for (const WriteRec &w : writes) {
    if (w.out == Outcome::kMissing && !w.missing) {
      violations.Add("false 55Z02 (the write had a token)", Describe(w) + ": " + w.msg);
    }
    if (w.missing && w.out == Outcome::kStale) {
      violations.Add("tokenless write got 55Z01, not 55Z02", Describe(w));
    }
    if (w.out != Outcome::kStale || w.missing) continue;
    judge_refusal(w.tbl, w.row, w.tok, w.sent, w.received, Describe(w) + ": " + w.msg,
                  write_refusals);
  }
  // A refused presentation of a read, likewise.
  for (const ReadRec &r : reads) {
    if (r.out != Outcome::kOk || r.present != "55Z01") continue;
    judge_refusal(
        kReadTableTag, 0, r.tok, r.sent, r.received,
        "read " + r.rid + " (" + r.who + ") token " + std::to_string(r.tok) + ": " + r.msg,
        read_refusals);
  }

  // ==== D. Stale acceptances seen in real time ====
  // Independent of the commit numbering (which is only an order where writes
  // serialise): a write sent after a client had *received* a higher grant
  // (lock-wide), a newer grant of the write's own permit (semaphore), or an
  // acknowledgement of a higher write to the same row (both exclusive
  // fences) must be refused.  If it committed, that is a stale write,
  // whatever order the server chose.  Under a semaphore the same holds for a
  // read that saw rows: its presentation came after the newer grant.
  // After a restore, a write is judged against what the restored server
  // can know: the grants and acknowledged writes its record holds (kept by
  // the backup or made since), and, for a token the restored server granted
  // itself, every grant received before (that token must be above them all).
  {
    MaxBefore grants_received;
    for (const GrantRec &g : grants) grants_received.Add(g.received, g.tok);
    grants_received.Finish();
    struct Known {
      MaxBefore grants;                               // received grants on the record
      std::map<int, MaxBefore> by_slot;               // the same, per permit
      std::map<std::string, MaxBefore> acked_by_row;  // acknowledged writes on the record
    };
    std::vector<Known> known(records.size());
    for (std::size_t k = 0; k < records.size(); ++k) {
      const Record &rec = records[k];
      Known &kn = known[k];
      for (const GrantRec &g : grants) {
        if (k > 0 && !rec.grant_keys.count({g.tok, g.holder})) continue;
        kn.grants.Add(g.received, g.tok);
        if (const std::optional<int> slot = SlotOf(rec.tenures, g.tok)) {
          kn.by_slot[*slot].Add(g.received, g.tok);
        }
      }
      for (const WriteRec &w : writes) {
        if (w.out == Outcome::kOk && !w.missing && FenceOf(w.tbl) != Fence::kPermit &&
            (k == 0 || rec.wids.count(w.wid)))
          kn.acked_by_row[RowKey(w.tbl, w.row)].Add(w.received, w.tok);
      }
      kn.grants.Finish();
      for (auto &[slot, points] : kn.by_slot) points.Finish();
      for (auto &[key, points] : kn.acked_by_row) points.Finish();
    }
    // The newest grant of tok's permit a client had received before t, on
    // record k.
    const auto received_before = [&](int k, Token tok, std::int64_t t) {
      const Known &kn = known[static_cast<std::size_t>(k)];
      const std::optional<int> slot = SlotOf(records[static_cast<std::size_t>(k)].tenures, tok);
      const auto it = slot ? kn.by_slot.find(*slot) : kn.by_slot.end();
      return it == kn.by_slot.end() ? kNone : it->second.Before(t);
    };
    for (const WriteRec &w : writes) {
      if (w.missing) continue;
      const auto committed = history_by_wid.find(w.wid);
      if (committed == history_by_wid.end()) continue;
      const int k = committed->second->rec;
      const Record &rec = records[static_cast<std::size_t>(k)];
      const Known &kn = known[static_cast<std::size_t>(k)];
      if (w.tbl == kLockTableTag) {
        const auto born = rec.born_tokens.find(kLockName);
        const bool own = k == 0 || (born != rec.born_tokens.end() && born->second.count(w.tok));
        const Token granted = (own ? grants_received : kn.grants).Before(w.sent);
        if (granted > w.tok) {
          violations.Add("stale write accepted after a higher grant (real time)",
                         Describe(w) + " sent after token " + std::to_string(granted) +
                             " was granted" + in(k));
        }
      }
      if (FenceOf(w.tbl) == Fence::kPermit) {
        const Token granted = received_before(k, w.tok, w.sent);
        if (granted > w.tok) {
          violations.Add("stale write accepted after a newer grant of its permit (real time)",
                         Describe(w) + " sent after token " + std::to_string(granted) +
                             " of its permit was granted" + in(k));
        }
      }
      const auto it = kn.acked_by_row.find(RowKey(w.tbl, w.row));
      if (it != kn.acked_by_row.end()) {
        const Token acked = it->second.Before(w.sent);
        if (acked > w.tok) {
          violations.Add("stale write accepted after a higher write (real time)",
                         Describe(w) + " sent after a write with token " + std::to_string(acked) +
                             " had been acknowledged" + in(k));
        }
      }
    }
    for (const ServerRead &sr : server_reads) {
      const auto it = read_index.find(sr.rid);
      if (sr.rows == 0 || it == read_index.end()) continue;
      const ReadRec &r = reads[it->second];
      const Token granted = received_before(sr.rec, sr.tok, r.sent);
      if (granted > sr.tok) {
        violations.Add("stale read after a newer grant of its permit (real time)",
                       "read " + r.rid + " (" + r.who + ") token " + std::to_string(sr.tok) +
                           " saw " + std::to_string(sr.rows) + " rows, sent after token " +
                           std::to_string(granted) + " of its permit was granted" + in(sr.rec));
      }
    }
  }

  // ==== X. Across a restore ====
  // What restore n (record k-1 lost, record k restored) had to keep, what it
  // may have lost, and what the restored record may hold.
  struct RestoreReport {
    long kept_writes = 0, kept_grants = 0;  // the restored record's rows from before the restore
    long lost_writes = 0, lost_grants = 0;  // the lost record's rows the restored one lacks
    long lost_acked = 0, lost_received = 0, lost_read = 0;  // of those, acknowledged to a client
  };
  std::vector<RestoreReport> restore_reports(restores.size());
  for (std::size_t i = 0; i < restores.size(); ++i) {
    const Restore &rs = restores[i];
    const Record &lost = records[i];
    const Record &restored = records[i + 1];
    RestoreReport &report = restore_reports[i];
    const std::string which = " (restore " + std::to_string(rs.n) + ")";
    // The restored record holds nothing the lost one did not: its rows from
    // before the restore are the lost record's, unchanged, committed before
    // the backup ended.
    const auto check_kept = [&](const auto &lost_rows, const auto &kept_rows, const char *what,
                                long &kept, long &lost_count, std::set<std::int64_t> &kept_seqs) {
      std::unordered_map<std::int64_t, const std::string *> by_seq;
      for (const auto &row : lost_rows) by_seq[row.seq] = &row.raw;
      for (const auto &row : kept_rows) {
        if (restored.Born(row.pm)) continue;
        ++kept;
        kept_seqs.insert(row.seq);
        const auto it = by_seq.find(row.seq);
        if (it == by_seq.end() || *it->second != row.raw) {
          violations.Add("restored record mismatch",
                         std::string(what) + " seq " + std::to_string(row.seq) +
                             " from before the restore is not the lost record's" + which);
        } else if (row.ts > rs.backup_end) {
          violations.Add("restored record mismatch",
                         std::string(what) + " seq " + std::to_string(row.seq) +
                             " committed after the backup ended" + which);
        }
      }
      for (const auto &row : lost_rows) lost_count += kept_seqs.count(row.seq) ? 0 : 1;
    };
    std::set<std::int64_t> kept_history, kept_grants, kept_reads;
    long kept_read_count = 0, lost_read_rows = 0;
    check_kept(lost.history, restored.history, "write", report.kept_writes, report.lost_writes,
               kept_history);
    check_kept(lost.grants, restored.grants, "grant", report.kept_grants, report.lost_grants,
               kept_grants);
    check_kept(lost.reads, restored.reads, "read", kept_read_count, lost_read_rows, kept_reads);
    // Acknowledged before the backup began: committed before its start
    // checkpoint, so in the backup, so in the restored record.  After: may be
    // gone with the timeline (counted).
    for (const WriteRec &w : writes) {
      if (w.out != Outcome::kOk || !lost.wids.count(w.wid) || restored.wids.count(w.wid)) continue;
      if (w.received < rs.backup_start) {
        violations.Add(
            "acknowledged write lost by the restore (acknowledged before the backup began)",
            Describe(w) + which);
      } else {
        ++report.lost_acked;
      }
    }
    for (const GrantRec &g : grants) {
      if (!lost.grant_keys.count({g.tok, g.holder}) || restored.grant_keys.count({g.tok, g.holder}))
        continue;
      if (g.received < rs.backup_start) {
        violations.Add("acknowledged grant lost by the restore (received before the backup began)",
                       "token " + std::to_string(g.tok) + " received by " + g.holder + which);
      } else {
        ++report.lost_received;
      }
    }
    for (const ReadRec &r : reads) {
      if (r.out != Outcome::kOk || !lost.rids.count(r.rid) || restored.rids.count(r.rid)) continue;
      if (r.received < rs.backup_start) {
        violations.Add(
            "acknowledged read lost by the restore (acknowledged before the backup began)",
            "read " + r.rid + " (" + r.who + ") token " + std::to_string(r.tok) + which);
      } else {
        ++report.lost_read;
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

  // ==== F. A frozen holder never keeps the next one waiting (issue 24) ====
  // A worker frozen after a write (at F, token T) renews no more: its lease
  // ends by F + ttl.  The lock's next grant must come within the bound (1 s
  // after the lease's end, plus a second for a loaded machine and the
  // waiters' own retries), not when the freeze ends (ttl + 3-4 s later):
  // the server ends the frozen transaction, which held the lock's fence
  // gate or its row's lock.  Not judged: a freeze the lock had already
  // moved past (T was no longer its latest grant), one with the server down
  // meanwhile, one after which nobody was granted the lock.  Exclusive
  // lock only: beside a frozen permit the semaphore's other permits are
  // free.
  const std::int64_t ttl_us = std::stoll(meta.count("ttl_ms") ? meta["ttl_ms"] : "0") * 1000;
  long freezes_judged = 0;
  if (guarded && !permit_mode) {
    for (const Freeze &z : freezes) {
      const ServerGrant *next = nullptr;
      bool moved_on = false;
      for (const ServerGrant &g : server_grants) {
        if (g.tok <= z.tok) continue;
        if (g.ts < z.at) moved_on = true;
        if (g.ts >= z.at && (next == nullptr || g.ts < next->ts)) next = &g;
      }
      if (moved_on || next == nullptr) continue;
      bool down = false;
      for (const auto &[from, to] : outages) down = down || (from <= next->ts && to >= z.at);
      if (down) continue;
      ++freezes_judged;
      const std::int64_t deadline = z.at + ttl_us + 2 * 1000000;
      if (next->ts > deadline) {
        violations.Add("takeover delayed past the bound behind a frozen holder",
                       z.who + " froze with token " + std::to_string(z.tok) + " for " +
                           std::to_string(z.ms) + " ms; the next grant came " +
                           std::to_string((next->ts - z.at) / 1000) + " ms later");
      }
    }
  }

  // ==== G. No frozen write commits after its lease ended (issue 42) ====
  // Guarded runs only: an unguarded table ties no write to a lease.
  FrozenWrites frozen;
  if (guarded) {
    frozen = JudgeFrozenWrites(freezes, writes, write_index, history_by_wid, violations);
  }

  // ==== E. The run must have exercised something ====
  long stale_total = 0;
  for (const auto &[tbl, c] : counts) stale_total += c.stale;
  const std::vector<std::string> tables =
      permit_mode ? std::vector<std::string>{kSemTableTag, kReadTableTag}
                  : std::vector<std::string>{kRowTableTag, kLockTableTag};
  if (grants.empty() || counts[tables[0]].ok == 0 || counts[tables[1]].ok == 0) {
    violations.Add("vacuous run", "no grants, or no accepted write in a table");
  }
  if (guarded && stale_total == 0) {
    violations.Add("vacuous run",
                   "no write was ever refused as stale: the guard was not exercised");
  }
  // A request reaches a random worker, which freezes at its next write: in
  // a short run it may never write again.  Three requests and no freeze
  // mean the fault is broken.  (A freeze that happened but could not be
  // judged -- the restore fell in its window -- is only counted in the
  // summary.)
  if (freeze_planned && guarded && !permit_mode && faults["freeze_request"] >= 3 &&
      freezes.empty()) {
    violations.Add("vacuous run", "the freeze fault was requested " +
                                      std::to_string(faults["freeze_request"]) +
                                      " times, but no worker froze");
  }
  // Likewise for the variant, which freezes at the worker's next grant.
  if (freeze_planned && guarded && !permit_mode && variant_requests >= 3 && frozen.variants == 0) {
    violations.Add("vacuous run",
                   "the freeze fault's variant (close, open or reacquire after the "
                   "lease's end) was requested " +
                       std::to_string(variant_requests) + " times, but no worker froze in one");
  }
  if (restore_planned && restores.empty()) {
    violations.Add("vacuous run", "the restore fault was on, but no restore happened");
  }
  for (std::size_t i = 0; i < restores.size(); ++i) {
    if (restore_reports[i].lost_writes + restore_reports[i].lost_grants == 0) {
      violations.Add("vacuous run", "restore " + std::to_string(restores[i].n) +
                                        " lost nothing: no write or grant after its backup");
    }
    if (fresh_token_writes[i + 1] == 0) {
      violations.Add("vacuous run", "restore " + std::to_string(restores[i].n) +
                                        ": the restored server committed no write under a "
                                        "lock's grant of its own, so nothing judged it");
    }
  }
  if (permit_mode) {
    if (static_cast<int>(grants_by_slot.size()) < permits) {
      violations.Add("vacuous run", "only " + std::to_string(grants_by_slot.size()) + " of " +
                                        std::to_string(permits) + " permits were ever granted");
    }
    if (tenure_reads == 0) violations.Add("vacuous run", "no read under the read fence saw rows");
    if (guarded && read_counts.refused == 0) {
      violations.Add("vacuous run", "no read's presentation was ever refused as stale");
    }
  }

  // ==== Report ====
  long writes_total = static_cast<long>(writes.size());
  long reads_total = static_cast<long>(reads.size());
  long acquires = events["acq_invoke"];
  out << "== check " << dir << "\n";
  out << "run: mode=" << meta["mode"] << " seed=" << meta["seed"]
      << " duration=" << meta["duration_s"] << "s workers=" << meta["workers"] << " rows=" << rows
      << " ttl=" << meta["ttl_ms"] << "ms pg_fencing=" << meta["extversion"];
  if (permit_mode) out << " semaphore=" << kSemName << " permits=" << permits;
  out << "\n";
  out << "operations: " << writes_total + reads_total + acquires + events["release"] << " (writes "
      << writes_total << (permit_mode ? ", reads " + std::to_string(reads_total) : "")
      << ", acquires " << acquires << ", releases " << events["release"] << ")\n";
  out << "faults: pause=" << faults["pause"] << " kill=" << faults["kill"]
      << " crash=" << faults["crash"];
  if (restore_planned || !restores.empty()) out << " restore=" << restores.size();
  out << " (worker processes started " << faults["spawn"] << ", unexpected worker exits "
      << faults["worker_exit"] << ")\n";
  const std::int64_t start_us =
      std::stoll(meta.count("start_wall_us") ? meta["start_wall_us"] : "0");
  const auto at = [&](std::int64_t us) {
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(1);
    text << "+" << static_cast<double>(us - start_us) / 1e6 << " s";
    return text.str();
  };
  for (std::size_t i = 0; i < restores.size(); ++i) {
    const Restore &r = restores[i];
    const RestoreReport &rr = restore_reports[i];
    out << "restore " << r.n << ": base backup " << at(r.backup_start) << " to " << at(r.backup_end)
        << ", server lost " << at(r.lost_at) << ", restored server up "
        << (r.restarted - r.lost_at) / 1000 << " ms later; lost: " << rr.lost_writes
        << " committed writes (" << rr.lost_acked << " acknowledged, all after the backup began), "
        << rr.lost_grants << " grants (" << rr.lost_received << " received by workers)";
    if (permit_mode) out << ", " << rr.lost_read << " acknowledged reads";
    out << "; kept from before the restore: " << rr.kept_writes << " writes, " << rr.kept_grants
        << " grants\n";
  }
  if (!restores.empty()) {
    long fresh = 0;
    for (long n : fresh_token_writes) fresh += n;
    out << "after the restore: " << old_token_writes
        << " committed writes under tokens granted before it (judged on the restored record), "
        << fresh
        << " under tokens the restored server granted (judged against every earlier grant)\n";
  }
  out << "grants: " << grants.size() << " received by workers, " << server_grants.size()
      << " on the server's record (" << unacknowledged_grants
      << " never acknowledged to a worker), over " << incarnations.size()
      << " server incarnations\n";
  out << "acquires: " << acquires << " (granted " << grants.size() << ", busy after the wait "
      << events["acq_timeout"] << ", failed on an error " << events["acq_error"]
      << "); leases lost while held " << lost_tokens.size() << "\n";
  if (!freezes.empty()) {
    out << "frozen holders: " << freezes.size() << " froze after a write; " << freezes_judged
        << " judged against the bound on the next grant\n";
  }
  if (frozen.judged > 0) {
    out << "frozen writes committed after their lease ended: "
        << violations.Count("frozen write committed after its lease ended") << " of "
        << frozen.judged << " (refused 55Z04 " << frozen.refused << ", ended by the server first "
        << frozen.ended << ")";
    if (frozen.variants + variant_requests > 0) {
      out << "; variants resumed just after the end " << frozen.variants << " of "
          << variant_requests << " requested (then close " << frozen.by_then["close"] << ", open "
          << frozen.by_then["open"] << ", reacquire " << frozen.by_then["reacquire"]
          << "; the call answered in " << frozen.called << ", refused 55Z04 "
          << frozen.variants_refused << ")";
    }
    out << "\n";
  }
  if (permit_mode) {
    out << "permits: grants per permit";
    for (const auto &[slot, n] : grants_by_slot) out << " " << slot << "=" << n;
    out << "; checked against their permit's tenure: " << tenure_writes << " committed writes, "
        << tenure_reads << " reads that saw rows\n";
  }
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
    const Fence fence = FenceOf(tbl);
    out << "  "
        << (fence == Fence::kRow    ? "per-row fence  "
            : fence == Fence::kLock ? "lock-wide fence"
            : tbl == kReadTableTag  ? "semaphore, read fence"
                                    : "semaphore      ")
        << " (" << tbl << "): attempts " << c.attempts << ", accepted " << c.ok << ", 55Z01 "
        << c.stale << ", 55Z02 " << c.missing << ", other " << c.error << ", indeterminate "
        << c.info << " (" << c.info_committed << " committed)\n";
  }
  if (!error_states.empty()) {
    out << "  other errors by SQLSTATE:";
    for (const auto &[state, n] : error_states) out << " " << state << "=" << n;
    out << "\n";
  }
  out << "rejections 55Z01: " << write_refusals.certain
      << " with the higher token committed before the write was sent, " << write_refusals.concurrent
      << " with it committed while the write was in flight\n";
  if (permit_mode) {
    out << "reads: attempts " << read_counts.attempts << ", answered " << read_counts.ok
        << " (saw rows " << read_counts.saw_rows << ", presentation refused 55Z01 "
        << read_counts.refused << ", presentation taken back " << read_counts.undone
        << "), other errors " << read_counts.error << ", indeterminate " << read_counts.info
        << " (recorded " << read_counts.info_recorded << "); " << server_reads.size()
        << " on the server's record\n";
    if (!read_error_states.empty()) {
      out << "  read errors by SQLSTATE:";
      for (const auto &[state, n] : read_error_states) out << " " << state << "=" << n;
      out << "\n";
    }
    out << "refused presentations: " << read_refusals.certain
        << " with the newer grant committed before the read was sent, " << read_refusals.concurrent
        << " with it committed while the read was in flight\n";
  }
  out << "history: " << history.size() << " committed writes on the server's record";
  if (records.size() > 1) {
    out << " (" << records.size() << " records; the final one " << final_record.history.size()
        << ")";
  }
  out << ", final state of " << final_checked << " rows checked\n";
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
