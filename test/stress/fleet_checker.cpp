// The fleet checker (see fleet_checker.hpp).  Times are wall-clock µs: the
// workers' and the nemesis's CLOCK_REALTIME and the server's
// clock_timestamp(), all on one host.
//
// The two invariants of the fleet, as judged here (RELIABILITY.md says the
// same in prose):
//
// (a) No leader loses its lease while its process lives and renews.  A lease
//     is judged when a candidate was told it holds it (a grant event; a
//     grant whose answer never arrived makes nobody a leader).  It ended
//     involuntarily at E, the earlier of the lock's next grant on the
//     server's record and the end of a renewal of the leader's session that
//     answered false -- unless the leader had begun to resign before E, or
//     its process had been killed before E (then (b) judges it).  L is the
//     start of the last renewal of its session that answered true and began
//     before E (a batch renewal while it waited, its own as leader, or the
//     open of the session).  The server set the session's end to at least
//     L + ttl, so:
//       - E < L + ttl is always a violation, whatever the faults: the lease
//         ended before its session could have expired;
//       - E >= L + ttl is excused when, within [L, E], its process was paused
//         (SIGSTOP), or a server crash or PgBouncer restart came (the
//         process's calls wait in PgBouncer or fail meanwhile, its one thread
//         with them), or one of its renewals failed for the connection
//         (out=conn: the server or PgBouncer away).  Otherwise it is a violation: the process
//         lived, was not paused, and its renewals were tried in time (or the
//         harness failed to try them: the report says which).
//     "Renews" thus means: tries every ttl/3, and every try that the faults
//     did not stop was answered true in time.
//
// (b) After a leader's process is killed at K (SIGKILL; the lock's latest
//     grant before K was to a candidate of that process incarnation, which
//     had not begun to resign and had not learnt of a loss), the lock's next
//     grant comes by K + ttl + 1 s.  Exempt: any other fault (a pause of any
//     process, a kill of another, a crash, a PgBouncer restart) overlapping
//     [K, K + ttl + 1 s]: the next place in line may be the paused one, or
//     the server may be down.  The nemesis keeps quiet for ttl + 2 s after
//     the leader's kill, so that exemptions are rare.  A kill whose bound
//     falls after the run's end is not judged.
//
// Beside them, the invariants of every mode: no token granted twice, grants
// increase in commit order, every acknowledged grant and write is on the
// server's record, and no stale write is accepted (in commit order, under
// the lock and per row, and in real time).
#include "fleet_checker.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "fleet.hpp"

namespace pg_fencing::stress {

namespace {

// ---- What a run holds ------------------------------------------------------------

struct Window {
  std::int64_t from = 0;
  std::int64_t to = 0;
  int slot = -1;  // a pause's process; -1 for a server or PgBouncer outage
  std::string what;
  bool Overlaps(std::int64_t a, std::int64_t b) const { return from <= b && to >= a; }
};

struct Kill {
  std::int64_t at = 0;
  int slot = -1;
  int incarnation = -1;
};

// One call that renews a session (or opens it: that sets its end too).
struct Renewal {
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::string out;  // true, false, conn, err
};

// A candidate told that it leads.
struct Leadership {
  std::string holder;
  std::int64_t token = 0;
  std::int64_t at = 0;
  int slot = -1;
  int incarnation = -1;
};

struct Write {
  std::string wid;
  std::string holder;
  int row = -1;
  std::int64_t token = 0;
  std::int64_t val = 0;
  std::int64_t sent = 0;
  std::int64_t answered = 0;
  std::string out;  // ok, 55Z01, err, conn; empty: never answered (killed)
};

struct Grant {
  std::int64_t seq = 0;
  std::string holder;
  std::int64_t token = 0;
  std::int64_t ts = 0;
};

struct Committed {
  std::int64_t seq = 0;
  int row = -1;
  std::int64_t token = 0;
  std::int64_t val = 0;
  std::string wid;
  std::int64_t ts = 0;
};

struct FleetRun {
  std::map<std::string, std::string> meta;
  std::int64_t ttl_us = 0;
  std::int64_t start_us = 0;
  std::int64_t end_us = 0;
  std::vector<Window> pauses;
  std::vector<Window> outages;
  std::vector<Kill> kills;
  std::map<std::string, int> fault_counts;
  int leader_faults = 0;
  int unexpected_exits = 0;
  std::map<std::string, std::vector<Renewal>> renewals;  // by holder
  std::vector<Leadership> leaderships;
  std::map<std::string, std::int64_t> resigned_at;  // holder -> its resign's start
  std::map<std::string, std::int64_t> lost_at;      // holder -> when it learnt of a loss
  std::map<std::string, Write> writes;              // by write id
  std::set<std::string> holders_joined;
  long batch_renewals = 0;
  long batch_renewals_failed = 0;
  long polls_failed = 0;
  long truncated_lines = 0;
  std::vector<Grant> grants;       // seq order
  std::vector<Committed> history;  // seq order
};

std::vector<std::vector<std::string>> Tsv(const std::string &path) {
  std::vector<std::vector<std::string>> rows;
  if (!std::filesystem::exists(path)) return rows;
  for (const std::string &line : CompleteLines(ReadFile(path), nullptr)) {
    if (!line.empty()) rows.push_back(Split(line, '\t'));
  }
  return rows;
}

std::int64_t Int(const std::string &text) { return text == "\\N" ? 0 : std::stoll(text); }

void ReadFaults(const std::string &dir, FleetRun &run) {
  std::map<int, std::int64_t> paused_since;  // slot -> SIGSTOP time
  std::int64_t down_since = 0;
  std::string down_what;
  for (const std::string &line :
       CompleteLines(ReadFile(dir + "/faults.log"), &run.truncated_lines)) {
    const Fields f = ParseFields(line);
    const std::string ev = Get(f, "ev").value_or("");
    const std::int64_t wall = GetInt(f, "wall");
    if (ev == "pause") {
      paused_since[static_cast<int>(GetInt(f, "w"))] = wall;
      ++run.fault_counts["pause"];
      if (GetInt(f, "leader") == 1) ++run.leader_faults;
    } else if (ev == "resume") {
      const int slot = static_cast<int>(GetInt(f, "w"));
      run.pauses.push_back(
          {paused_since[slot], wall, slot, "pause of process " + std::to_string(slot)});
      paused_since.erase(slot);
    } else if (ev == "kill") {
      run.kills.push_back(
          {wall, static_cast<int>(GetInt(f, "w")), static_cast<int>(GetInt(f, "inc"))});
      ++run.fault_counts["kill"];
      if (GetInt(f, "leader") == 1) ++run.leader_faults;
    } else if (ev == "crash" || ev == "bouncer_kill") {
      down_since = wall;
      down_what = ev == "crash" ? "server crash" : "PgBouncer restart";
      ++run.fault_counts[ev == "crash" ? "crash" : "bouncer"];
    } else if (ev == "restarted" || ev == "bouncer_up") {
      run.outages.push_back({down_since, wall, -1, down_what});
    } else if (ev == "worker_exit") {
      ++run.unexpected_exits;
    }
  }
  // A fault the run's end cut short lasts to the end.
  for (const auto &[slot, since] : paused_since) {
    run.pauses.push_back({since, run.end_us, slot, "pause of process " + std::to_string(slot)});
  }
}

void ReadWorkerLog(const std::string &path, FleetRun &run) {
  for (const std::string &line : CompleteLines(ReadFile(path), &run.truncated_lines)) {
    const Fields f = ParseFields(line);
    const std::string ev = Get(f, "ev").value_or("");
    const std::int64_t wall = GetInt(f, "wall");
    const std::string holder = Get(f, "h").value_or("");
    if (ev == "join") {
      run.holders_joined.insert(holder);
      run.renewals[holder].push_back({GetInt(f, "start"), wall, "true"});
    } else if (ev == "renew_batch") {
      ++run.batch_renewals;
      if (Get(f, "out").value_or("") != "ok") {
        ++run.batch_renewals_failed;
        continue;
      }
      for (const char *key : {"ok", "false"}) {
        const std::string list = Get(f, key).value_or("");
        if (list.empty()) continue;
        for (const std::string &h : Split(list, ',')) {
          run.renewals[h].push_back(
              {GetInt(f, "start"), wall, std::string(key) == "ok" ? "true" : "false"});
        }
      }
    } else if (ev == "renew") {
      run.renewals[holder].push_back({GetInt(f, "start"), wall, Get(f, "out").value_or("")});
    } else if (ev == "grant") {
      Leadership l;
      l.holder = holder;
      l.token = GetInt(f, "tok");
      l.at = wall;
      l.slot = static_cast<int>(GetInt(f, "w"));
      l.incarnation = static_cast<int>(GetInt(f, "inc"));
      run.leaderships.push_back(l);
    } else if (ev == "resign") {
      run.resigned_at.emplace(holder, wall);
    } else if (ev == "lost") {
      run.lost_at.emplace(holder, wall);
    } else if (ev == "poll_fail") {
      ++run.polls_failed;
    } else if (ev == "w_inv") {
      Write w;
      w.wid = Get(f, "wid").value_or("");
      w.holder = holder;
      w.row = static_cast<int>(GetInt(f, "row"));
      w.token = GetInt(f, "tok");
      w.val = GetInt(f, "val");
      w.sent = wall;
      run.writes[w.wid] = w;
    } else if (ev == "w_done") {
      const auto it = run.writes.find(Get(f, "wid").value_or(""));
      if (it == run.writes.end()) continue;
      it->second.out = Get(f, "out").value_or("");
      it->second.answered = wall;
    }
  }
}

FleetRun ReadRun(const std::string &dir) {
  FleetRun run;
  for (const std::string &line : CompleteLines(ReadFile(dir + "/meta.txt"), nullptr)) {
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos) run.meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (run.meta["mode"] != "fleet") throw std::runtime_error(dir + " is not a fleet run");
  run.ttl_us = std::stoll(run.meta["ttl_ms"]) * 1000;
  run.start_us = std::stoll(run.meta["start_wall_us"]);
  run.end_us = run.meta.count("end_wall_us") ? std::stoll(run.meta["end_wall_us"]) : INT64_MAX;
  ReadFaults(dir, run);
  std::vector<std::string> logs;
  for (const auto &entry : std::filesystem::directory_iterator(dir + "/workers")) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name[0] == 'f' && name.compare(name.size() - 4, 4, ".log") == 0) {
      logs.push_back(entry.path().string());
    }
  }
  std::sort(logs.begin(), logs.end());
  for (const std::string &path : logs) ReadWorkerLog(path, run);
  for (auto &[holder, list] : run.renewals) {
    std::sort(list.begin(), list.end(),
              [](const Renewal &a, const Renewal &b) { return a.start < b.start; });
  }
  for (const auto &row : Tsv(dir + "/grants.tsv")) {
    if (row.size() < 6 || row[1] != kFleetLock) continue;
    run.grants.push_back({Int(row[0]), row[2], Int(row[3]), Int(row[4])});
  }
  for (const auto &row : Tsv(dir + "/history.tsv")) {
    if (row.size() < 8) continue;
    run.history.push_back({Int(row[0]), static_cast<int>(Int(row[2])), Int(row[3]), Int(row[4]),
                           row[5], Int(row[6])});
  }
  const auto by_seq = [](const auto &a, const auto &b) { return a.seq < b.seq; };
  std::sort(run.grants.begin(), run.grants.end(), by_seq);
  std::sort(run.history.begin(), run.history.end(), by_seq);
  return run;
}

std::string Seconds(std::int64_t us) {
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(3);
  text << static_cast<double>(us) / 1e6 << " s";
  return text.str();
}

std::string At(const FleetRun &run, std::int64_t us) { return "+" + Seconds(us - run.start_us); }

// ---- The invariants every mode has ------------------------------------------------

// No token granted twice: on the server's record, and among what the
// candidates were told (the same holder told twice is one grant).
void CheckTokensGrantedOnce(const FleetRun &run, Violations &v) {
  std::map<std::int64_t, std::string> seen;
  for (const Grant &g : run.grants) {
    if (!seen.emplace(g.token, g.holder).second) {
      v.Add("token granted twice (server record)",
            "token " + std::to_string(g.token) + " to " + seen[g.token] + " and to " + g.holder);
    }
  }
  std::map<std::int64_t, std::string> told;
  for (const Leadership &l : run.leaderships) {
    const auto [it, fresh] = told.emplace(l.token, l.holder);
    if (!fresh && it->second != l.holder) {
      v.Add("token granted twice (clients)",
            "token " + std::to_string(l.token) + " to " + it->second + " and to " + l.holder);
    }
  }
}

// The lock's grants increase in commit order (seq).
void CheckGrantsIncrease(const FleetRun &run, Violations &v) {
  for (std::size_t i = 1; i < run.grants.size(); ++i) {
    if (run.grants[i].token <= run.grants[i - 1].token) {
      v.Add("grants not increasing in commit order",
            "seq " + std::to_string(run.grants[i].seq) + " token " +
                std::to_string(run.grants[i].token) + " after " +
                std::to_string(run.grants[i - 1].token));
    }
  }
}

// Every grant a candidate was told of is on the server's record, its own.
void CheckAcknowledgedGrantsOnRecord(const FleetRun &run, Violations &v) {
  std::map<std::int64_t, std::string> holder_of;
  for (const Grant &g : run.grants) holder_of.emplace(g.token, g.holder);
  for (const Leadership &l : run.leaderships) {
    const auto it = holder_of.find(l.token);
    if (it == holder_of.end() || it->second != l.holder) {
      v.Add("acknowledged grant not on the server's record",
            l.holder + " told token " + std::to_string(l.token) + " at " + At(run, l.at));
    }
  }
}

// An acknowledged write is on the record; a refused one is not; every
// committed write is one a leader sent, as it sent it.
void CheckWritesOnRecord(const FleetRun &run, Violations &v) {
  std::map<std::string, const Committed *> committed;
  for (const Committed &c : run.history) committed.emplace(c.wid, &c);
  for (const auto &[wid, w] : run.writes) {
    const auto it = committed.find(wid);
    if (w.out == "ok" && it == committed.end()) {
      v.Add("acknowledged write lost", "write " + wid + " token " + std::to_string(w.token));
    }
    if ((w.out == "55Z01" || w.out == "err") && it != committed.end()) {
      v.Add("refused write committed", "write " + wid + " (" + w.out + ")");
    }
  }
  for (const Committed &c : run.history) {
    const auto it = run.writes.find(c.wid);
    if (it == run.writes.end() || it->second.token != c.token || it->second.row != c.row ||
        it->second.val != c.val) {
      v.Add("phantom write on the record", "seq " + std::to_string(c.seq) + " write " + c.wid);
    }
  }
}

// No stale write accepted:
//  - in commit order under the lock: a committed write's token is at least
//    every token granted (or written) before it;
//  - per row, in commit order: a row's token never goes down;
//  - in real time: a write sent after a higher grant had been told to a
//    candidate, or after a higher write to its row had been acknowledged,
//    did not commit.
void CheckNoStaleWrite(const FleetRun &run, Violations &v) {
  std::size_t g = 0;
  std::int64_t mark = 0;
  std::map<int, std::int64_t> row_token;
  for (const Committed &c : run.history) {
    while (g < run.grants.size() && run.grants[g].seq < c.seq) {
      mark = std::max(mark, run.grants[g].token);
      ++g;
    }
    if (c.token < mark) {
      v.Add("stale write accepted (below the lock's mark, commit order)",
            "write " + c.wid + " token " + std::to_string(c.token) + " after token " +
                std::to_string(mark));
    }
    mark = std::max(mark, c.token);
    std::int64_t &last = row_token[c.row];
    if (c.token < last) {
      v.Add("stale write accepted (row token decreased, commit order)",
            "write " + c.wid + " row " + std::to_string(c.row) + " token " +
                std::to_string(c.token) + " after " + std::to_string(last));
    }
    last = std::max(last, c.token);
  }
  std::set<std::string> committed;
  for (const Committed &c : run.history) committed.insert(c.wid);
  // (time, token) of grants told and writes acknowledged, by time.
  std::vector<std::pair<std::int64_t, std::int64_t>> told;
  for (const Leadership &l : run.leaderships) told.push_back({l.at, l.token});
  std::sort(told.begin(), told.end());
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> acked_by_row;
  for (const auto &[wid, w] : run.writes) {
    if (w.out == "ok") acked_by_row[w.row].push_back({w.answered, w.token});
  }
  for (auto &[row, list] : acked_by_row) std::sort(list.begin(), list.end());
  const auto highest_before = [](const std::vector<std::pair<std::int64_t, std::int64_t>> &list,
                                 std::int64_t t) {
    std::int64_t high = 0;
    for (const auto &[at, token] : list) {
      if (at >= t) break;
      high = std::max(high, token);
    }
    return high;
  };
  for (const auto &[wid, w] : run.writes) {
    if (!committed.count(wid)) continue;
    const std::int64_t granted = highest_before(told, w.sent);
    if (granted > w.token) {
      v.Add("stale write accepted after a higher grant was told (real time)",
            "write " + wid + " token " + std::to_string(w.token) + " sent at " + At(run, w.sent) +
                ", token " + std::to_string(granted) + " told before");
    }
    const auto it = acked_by_row.find(w.row);
    const std::int64_t written = it == acked_by_row.end() ? 0 : highest_before(it->second, w.sent);
    if (written > w.token) {
      v.Add("stale write accepted after a higher write to its row was acknowledged (real time)",
            "write " + wid + " token " + std::to_string(w.token) + " row " + std::to_string(w.row) +
                ", token " + std::to_string(written) + " acknowledged");
    }
  }
}

// ---- (a) and (b) --------------------------------------------------------------------

struct LeaseReport {
  long judged = 0;
  long resigned = 0;
  long kept_across_fault = 0;  // resigned after a crash, a PgBouncer restart or a pause
  long killed = 0;
  long held_to_end = 0;
  long lost_excused = 0;
  std::map<std::string, long> excuses;
};

// (a): see the top of this file.
LeaseReport CheckLeaderKeepsLease(const FleetRun &run, Violations &v) {
  LeaseReport report;
  std::map<std::int64_t, std::size_t> grant_index;
  for (std::size_t i = 0; i < run.grants.size(); ++i) grant_index.emplace(run.grants[i].token, i);
  std::set<std::int64_t> judged_tokens;
  for (const Leadership &l : run.leaderships) {
    if (!judged_tokens.insert(l.token).second) continue;  // told twice: one lease
    const auto gi = grant_index.find(l.token);
    if (gi == grant_index.end()) continue;  // CheckAcknowledgedGrantsOnRecord reports it
    const std::size_t next = gi->second + 1;
    const auto &renewals_it = run.renewals.find(l.holder);
    static const std::vector<Renewal> kNone;
    const std::vector<Renewal> &renewals =
        renewals_it == run.renewals.end() ? kNone : renewals_it->second;
    // E: the lease's involuntary end.
    std::int64_t end = INT64_MAX;
    std::string how_ended;
    if (next < run.grants.size()) {
      end = run.grants[next].ts;
      how_ended = "the lock granted to " + run.grants[next].holder;
    }
    for (const Renewal &r : renewals) {
      if (r.out == "false" && r.start >= l.at - run.ttl_us && r.end < end) {
        end = r.end;
        how_ended = "a renewal answered false";
        break;
      }
    }
    if (end == INT64_MAX) {
      ++report.held_to_end;
      continue;
    }
    const auto resign = run.resigned_at.find(l.holder);
    if (resign != run.resigned_at.end() && resign->second <= end) {
      ++report.resigned;
      // A lease that a fault came upon and that lasted until its leader let
      // go: what (a) is about, passed.
      bool faulted = false;
      for (const Window &o : run.outages) faulted = faulted || o.Overlaps(l.at, resign->second);
      for (const Window &p : run.pauses) {
        faulted = faulted || (p.slot == l.slot && p.Overlaps(l.at, resign->second));
      }
      report.kept_across_fault += faulted;
      continue;
    }
    bool killed = false;
    for (const Kill &k : run.kills) {
      killed = killed || (k.slot == l.slot && k.incarnation == l.incarnation && k.at <= end);
    }
    if (killed) {
      ++report.killed;
      continue;
    }
    ++report.judged;
    std::int64_t last_ok = 0;
    for (const Renewal &r : renewals) {
      if (r.out == "true" && r.start <= end) last_ok = std::max(last_ok, r.start);
    }
    const std::string what = l.holder + " token " + std::to_string(l.token) + " (told " +
                             At(run, l.at) + "): lease ended " + At(run, end) + " (" + how_ended +
                             "), last renewal answered true began " + At(run, last_ok);
    if (end < last_ok + run.ttl_us) {
      v.Add("leader lost its lease before its ttl since an acknowledged renewal",
            what + ", " + Seconds(end - last_ok) + " before the end");
      continue;
    }
    std::string excuse;
    for (const Window &p : run.pauses) {
      if (excuse.empty() && p.slot == l.slot && p.Overlaps(last_ok, end)) excuse = "paused";
    }
    // A server crash or a PgBouncer restart within [L, E] cuts the whole
    // process off, not only a renewal under way: its one thread waits in
    // whatever call it made, queued in PgBouncer until the server is back
    // (found in the first runs: a batch poll sent during a crash held the
    // leader's next renewal until its session had ended).
    for (const Window &o : run.outages) {
      if (excuse.empty() && o.Overlaps(last_ok, end)) excuse = "a " + o.what;
    }
    long attempts = 0;
    std::string outs;
    for (const Renewal &r : renewals) {
      if (r.start <= last_ok || r.start > end) continue;
      ++attempts;
      outs += (outs.empty() ? "" : ",") + r.out;
      if (excuse.empty() && r.out == "conn") excuse = "a renewal failed for the connection";
      for (const Window &o : run.outages) {
        if (excuse.empty() && o.Overlaps(r.start, r.end))
          excuse = "a renewal held up by a " + o.what;
      }
    }
    if (!excuse.empty()) {
      ++report.lost_excused;
      ++report.excuses[excuse];
      continue;
    }
    // No renewal tried since L while the process ran unpaused is the
    // harness's failure rather than the server's, but the lease was lost
    // all the same: reported under the same name, with what was tried.
    v.Add("leader lost its lease while its process lived and renewed",
          what + ", " +
              (attempts == 0 ? std::string("no renewal tried since (the harness did not renew)")
                             : std::to_string(attempts) + " renewals since (" + outs + ")"));
  }
  return report;
}

struct TakeoverReport {
  long leader_kills = 0;
  long judged = 0;
  long exempt = 0;
  long after_end = 0;
  std::vector<std::int64_t> delays;  // µs, judged kills
};

// (b): see the top of this file.
TakeoverReport CheckTakeoverAfterKill(const FleetRun &run, Violations &v) {
  TakeoverReport report;
  const std::int64_t bound = run.ttl_us + 1000000;
  for (const Kill &k : run.kills) {
    // The lock's latest grant before the kill, and the next one after it.
    const Grant *before = nullptr;
    const Grant *after = nullptr;
    for (const Grant &g : run.grants) {
      if (g.ts < k.at) before = &g;
      if (g.ts >= k.at && after == nullptr) after = &g;
    }
    int slot = -1;
    int incarnation = -1;
    if (before == nullptr || !ParseFleetHolder(before->holder, slot, incarnation) ||
        slot != k.slot || incarnation != k.incarnation) {
      continue;  // not the leader's process
    }
    const auto resign = run.resigned_at.find(before->holder);
    const auto lost = run.lost_at.find(before->holder);
    if ((resign != run.resigned_at.end() && resign->second < k.at) ||
        (lost != run.lost_at.end() && lost->second < k.at)) {
      continue;  // it had let go, or knew it had lost
    }
    ++report.leader_kills;
    bool exempt = false;
    for (const Window &w : run.pauses) exempt = exempt || w.Overlaps(k.at, k.at + bound);
    for (const Window &w : run.outages) exempt = exempt || w.Overlaps(k.at, k.at + bound);
    for (const Kill &other : run.kills) {
      exempt = exempt || (&other != &k && other.at >= k.at && other.at <= k.at + bound);
    }
    if (exempt) {
      ++report.exempt;
      continue;
    }
    const std::string what = "process " + std::to_string(k.slot) + "." +
                             std::to_string(k.incarnation) + " killed " + At(run, k.at) +
                             " holding token " + std::to_string(before->token) + " (" +
                             before->holder + ")";
    if (after == nullptr) {
      if (k.at + bound < run.end_us) {
        ++report.judged;
        v.Add("no takeover after the leader's death", what);
      } else {
        ++report.after_end;
      }
      continue;
    }
    ++report.judged;
    report.delays.push_back(after->ts - k.at);
    if (after->ts - k.at > bound) {
      v.Add("takeover later than ttl + 1 s after the leader's death",
            what + ": next grant (token " + std::to_string(after->token) + ") " +
                Seconds(after->ts - k.at) + " after the kill");
    }
  }
  return report;
}

// A run that judged nothing proves nothing.
void CheckNotVacuous(const FleetRun &run, const LeaseReport &leases,
                     const TakeoverReport &takeovers, Violations &v) {
  const long candidates = std::stol(run.meta.count("candidates") ? run.meta.at("candidates") : "0");
  std::set<std::string> first_generation;
  for (const std::string &h : run.holders_joined) {
    const std::vector<std::string> parts = Split(h, '.');
    if (parts.size() == 4 && parts[1] == "0" && parts[3] == "0") first_generation.insert(h);
  }
  if (static_cast<long>(first_generation.size()) < candidates) {
    v.Add("vacuous run", "only " + std::to_string(first_generation.size()) + " of " +
                             std::to_string(candidates) + " candidates joined the line");
  }
  if (run.grants.size() < 3) v.Add("vacuous run", "fewer than 3 grants");
  long accepted = 0;
  for (const auto &[wid, w] : run.writes) accepted += w.out == "ok";
  if (accepted == 0) v.Add("vacuous run", "no accepted write");
  if (leases.judged + leases.resigned == 0) v.Add("vacuous run", "no lease ended while judged");
  const std::string faults = run.meta.count("faults") ? run.meta.at("faults") : "";
  if (faults.find("kill") != std::string::npos && takeovers.judged == 0) {
    v.Add("vacuous run", "no takeover after a leader's death judged");
  }
  for (const char *kind : {"crash", "bouncer"}) {
    const auto it = run.fault_counts.find(kind);
    if (faults.find(kind) != std::string::npos && (it == run.fault_counts.end() || it->second == 0))
      v.Add("vacuous run", std::string("no ") + kind + " fault injected");
  }
  if (run.unexpected_exits > 0) {
    v.Add("worker process exited by itself",
          std::to_string(run.unexpected_exits) + " (see faults.log and workers/*.stderr)");
  }
}

std::string Distribution(std::vector<std::int64_t> values) {
  if (values.empty()) return "none";
  std::sort(values.begin(), values.end());
  return "min " + Seconds(values.front()) + ", median " + Seconds(values[values.size() / 2]) +
         ", max " + Seconds(values.back()) + " (" + std::to_string(values.size()) + ")";
}

// Hand-over after a resignation: from the resign's start to the next grant
// (reported, not judged).
std::vector<std::int64_t> HandOvers(const FleetRun &run) {
  std::map<std::int64_t, std::size_t> index;
  for (std::size_t i = 0; i < run.grants.size(); ++i) index.emplace(run.grants[i].token, i);
  std::vector<std::int64_t> out;
  for (const Leadership &l : run.leaderships) {
    const auto r = run.resigned_at.find(l.holder);
    const auto g = index.find(l.token);
    if (r == run.resigned_at.end() || g == index.end() || g->second + 1 >= run.grants.size())
      continue;
    const std::int64_t next = run.grants[g->second + 1].ts;
    if (next >= r->second) out.push_back(next - r->second);
  }
  return out;
}

}  // namespace

long CheckFleetRun(const CheckOptions &options, std::ostream &out) {
  const FleetRun run = ReadRun(options.run_dir);
  Violations v(options.examples);
  CheckTokensGrantedOnce(run, v);
  CheckGrantsIncrease(run, v);
  CheckAcknowledgedGrantsOnRecord(run, v);
  CheckWritesOnRecord(run, v);
  CheckNoStaleWrite(run, v);
  const LeaseReport leases = CheckLeaderKeepsLease(run, v);
  const TakeoverReport takeovers = CheckTakeoverAfterKill(run, v);
  CheckNotVacuous(run, leases, takeovers, v);

  std::map<std::string, long> write_outs;
  for (const auto &[wid, w] : run.writes) ++write_outs[w.out.empty() ? "unanswered" : w.out];
  long leader_renewals = 0;
  std::map<std::string, long> renewal_outs;
  for (const auto &[holder, list] : run.renewals) {
    (void)holder;
    for (const Renewal &r : list) ++renewal_outs[r.out];
    leader_renewals += static_cast<long>(list.size());
  }
  out << "== check " << options.run_dir << "\n";
  out << "run: mode=fleet seed=" << run.meta.at("seed") << " duration=" << run.meta.at("duration_s")
      << "s candidates=" << run.meta.at("candidates") << " processes=" << run.meta.at("processes")
      << " pool=" << run.meta.at("pool") << " ttl=" << run.meta.at("ttl_ms")
      << "ms pg_fencing=" << run.meta.at("extversion") << "\n";
  out << "faults: pause=" << (run.fault_counts.count("pause") ? run.fault_counts.at("pause") : 0)
      << " kill=" << (run.fault_counts.count("kill") ? run.fault_counts.at("kill") : 0)
      << " crash=" << (run.fault_counts.count("crash") ? run.fault_counts.at("crash") : 0)
      << " bouncer=" << (run.fault_counts.count("bouncer") ? run.fault_counts.at("bouncer") : 0)
      << " (" << run.leader_faults << " of them on the leader's process); unexpected worker exits "
      << run.unexpected_exits << "\n";
  out << "candidates: " << run.holders_joined.size()
      << " sessions joined the line; session renewals " << leader_renewals << " (";
  for (const auto &[o, n] : renewal_outs) out << o << " " << n << " ";
  out << "), batches " << run.batch_renewals << " (" << run.batch_renewals_failed
      << " failed), failed polls " << run.polls_failed << "\n";
  out << "grants: " << run.grants.size() << " on the server's record, " << run.leaderships.size()
      << " told to candidates\n";
  out << "leases told: " << leases.resigned << " resigned (" << leases.kept_across_fault
      << " of them after a crash, PgBouncer restart or pause of theirs), " << leases.killed
      << " ended by their process's kill, " << leases.held_to_end << " held to the end, "
      << leases.judged << " lost otherwise and judged (" << leases.lost_excused << " excused:";
  for (const auto &[e, n] : leases.excuses) out << " " << e << " " << n << ";";
  out << ")\n";
  out << "takeovers after the leader's death: " << takeovers.leader_kills << " leader kills, "
      << takeovers.judged << " judged, " << takeovers.exempt << " exempt (another fault), "
      << takeovers.after_end << " past the run's end; delay " << Distribution(takeovers.delays)
      << "; bound " << Seconds(run.ttl_us + 1000000) << "\n";
  out << "hand-over after a resignation: " << Distribution(HandOvers(run)) << "\n";
  out << "writes: " << run.writes.size() << " (";
  for (const auto &[o, n] : write_outs) out << o << " " << n << " ";
  out << "), " << run.history.size() << " on the server's record\n";
  if (run.truncated_lines > 0) {
    out << "logs: " << run.truncated_lines << " truncated last lines (killed processes)\n";
  }
  out << "violations: " << v.total() << "\n";
  v.Print(out);
  out << "RESULT: " << (v.total() == 0 ? "PASS" : "FAIL (violations found)") << std::endl;
  return v.total();
}

}  // namespace pg_fencing::stress
