// A process of the fleet (see fleet.hpp): `candidates` candidates of the
// election kFleetLock, multiplexed on two connections through PgBouncer in
// transaction pooling.  Every call is one short autocommit statement with
// unnamed parameters (no named prepared statement, no LISTEN: neither works
// through a transaction pooler), so that between calls a candidate holds no
// server connection at all -- the point of the line.
//
// Why two connections and one thread: the waiting candidates' statements
// (open and join, renew, poll: one statement each for all of them) go on the
// fleet connection; the leader's (renew, write, resign) on its own one, so
// that a leader's renewal never waits behind a batch on the client side.
// One thread runs both on a timer: the order of events in the log is the
// order they happened in, and a leader paused (SIGSTOP) is paused whole, as
// a GC pause or a stopped VM would be.
//
// Each candidate's session is one "generation": opened, joined, then either
// granted (the leader renews the session every ttl/3, writes its token into
// a guarded row every ~100 ms, and resigns after a while by fencing_release,
// fencing_line_leave or fencing_session_close), or gone (its session ended).
// Then the candidate opens a new session and joins at the end of the line.
//
// Log events (one line each, common.hpp's format; W: wall µs):
//   start pid=P
//   join c=C h=H sess=S place=P start=W          a session opened and joined (the
//                                                statement began at W: the session
//                                                lives at least until W + ttl)
//   grant c=C h=H tok=T src=join|poll start=W    the lease, taken at the join or a poll
//   gone c=C h=H place=P                         the place waits no more (not granted)
//   renew_batch start=W out=ok ok=H,... false=H,...   the waiting candidates' sessions
//   renew_batch start=W out=conn|err [state=S] n=N    renewed in one statement, or not
//   poll_fail start=W out=conn|err [state=S]
//   open_fail start=W out=conn|err [state=S]
//   renew h=H tok=T start=W out=true|false|conn|err [state=S]   a leader's renewal
//   w_inv wid=W h=H row=R tok=T val=V            before a leader's write is sent
//   w_done wid=W out=ok|55Z01|err|conn [state=S] [n=ROWS]
//   lost h=H tok=T why=renew|55Z01               the leader learns its lease is gone
//   resign h=H tok=T how=release|leave|close     before the leader lets go
//   resigned h=H tok=T how=... out=true|false|conn|err
//   alive                                        once a second: the process runs
//   stop
// out=conn: the connection broke, or the answer was a connection-class error
// (SQLSTATE 08xxx, 57Pxx: the server or PgBouncer down or restarting); the
// checker's excuse for a lost lease.  out=err: any other error.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "common.hpp"
#include "fleet.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "process.hpp"

namespace pg_fencing::stress {

namespace {

// A connection through PgBouncer, opened again after it breaks, at most
// every kReconnectMs (while PgBouncer is down a connect fails at once).
class Link {
 public:
  Link(std::string conninfo, const EventLog &log, std::string prefix, const char *name)
      : conninfo_(std::move(conninfo)), log_(log), prefix_(std::move(prefix)), name_(name) {}

  // The open connection, or nullptr when it cannot be opened now.
  pqxx::connection *Get() {
    if (db_ && db_->is_open()) return db_.get();
    db_.reset();
    const std::int64_t now = MonoMs();
    if (now < next_attempt_ms_) return nullptr;
    next_attempt_ms_ = now + kReconnectMs;
    try {
      db_ = std::make_unique<pqxx::connection>(conninfo_);
      failures_ = 0;
      return db_.get();
    } catch (const std::exception &error) {
      // One line per outage, not one per attempt.
      if (failures_++ == 0) {
        log_.Write(prefix_ + "ev=conn_fail link=" + name_, FirstLine(error.what()));
      }
      return nullptr;
    }
  }
  void Drop() { db_.reset(); }

 private:
  static constexpr int kReconnectMs = 100;
  std::string conninfo_;
  const EventLog &log_;
  std::string prefix_;
  const char *name_;
  std::unique_ptr<pqxx::connection> db_;
  std::int64_t next_attempt_ms_ = 0;
  int failures_ = 0;
};

// "out=conn ..." or "out=err state=..." for a failed call; drops the link
// when the connection is gone, so that the next call opens a new one.
std::string FailureFields(const std::exception &error, Link &link) {
  if (const auto *sql = dynamic_cast<const pqxx::sql_error *>(&error)) {
    const std::string state = pqxx_compat::SqlState(*sql);
    // Connection exceptions (08) and operator intervention (57P01-57P03: a
    // shutdown or a crash of the server, "the database system is starting
    // up"): the server or PgBouncer was away.  PgBouncer reports its own
    // failures (server login failing, query_wait_timeout) as 08P01.
    if (state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0) {
      link.Drop();
      return "out=conn state=" + state;
    }
    return "out=err state=" + (state.empty() ? std::string("none") : state);
  }
  if (dynamic_cast<const pqxx::broken_connection *>(&error) != nullptr) {
    link.Drop();
    return "out=conn";
  }
  link.Drop();  // unknown: start afresh
  return "out=err state=none";
}

enum class Role { kIdle, kWaiting, kLeader };

struct Candidate {
  int index = 0;
  int generation = -1;
  std::string holder;
  std::int64_t session = 0;
  std::int64_t place = 0;
  std::int64_t token = 0;
  Role role = Role::kIdle;
  // A leader's timers (MonoMs).
  std::int64_t next_renew_ms = 0;
  std::int64_t next_write_ms = 0;
  std::int64_t resign_at_ms = 0;
};

std::string Join(const std::vector<std::string> &items, char separator) {
  std::string out;
  for (const std::string &item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

// A row of a pqxx::result as iterating it hands it out (pqxx::row before
// libpqxx 8, a pqxx::row_ref from 8 on; see pqxx_compat.hpp).
using ResultRow = std::remove_cv_t<
    std::remove_reference_t<decltype(*std::declval<const pqxx::result &>().begin())>>;

// A PostgreSQL array literal of plain words (holder names, numbers).
std::string ArrayLiteral(const std::vector<std::string> &items) {
  return "{" + Join(items, ',') + "}";
}

class FleetWorker {
 public:
  explicit FleetWorker(const FleetWorkerConfig &config)
      : config_(config),
        log_(config.log_path),
        prefix_("w=" + std::to_string(config.slot) + " inc=" + std::to_string(config.incarnation) +
                " "),
        fleet_link_(config.conninfo, log_, prefix_, "fleet"),
        leader_link_(config.conninfo, log_, prefix_, "leader"),
        rng_(config.seed),
        candidates_(static_cast<std::size_t>(config.candidates)) {
    for (std::size_t i = 0; i < candidates_.size(); ++i) candidates_[i].index = static_cast<int>(i);
  }

  int Run() {
    log_.Write(prefix_ + "ev=start pid=" + std::to_string(getpid()));
    const std::int64_t renew_every = config_.ttl.count() / 3;
    std::int64_t next_open = 0;
    std::int64_t next_renew_batch = MonoMs() + renew_every;
    std::int64_t next_poll = MonoMs() + Uniform(0, static_cast<int>(config_.poll_every.count()));
    std::int64_t next_alive = 0;
    while (!StopRequested()) {
      // The leaders first, writes before renewals: a leader resumed after a
      // pause writes under its old token before it learns anything, which
      // is what the fence is for.
      for (Candidate &c : candidates_) {
        if (c.role != Role::kLeader) continue;
        if (MonoMs() >= c.next_write_ms) LeaderWrite(c);
        if (c.role == Role::kLeader && MonoMs() >= c.next_renew_ms) LeaderRenew(c);
        if (c.role == Role::kLeader && MonoMs() >= c.resign_at_ms) Resign(c);
      }
      const std::int64_t now = MonoMs();
      if (now >= next_open) {
        OpenAndJoin();
        next_open = now + 200;
      }
      if (now >= next_renew_batch) {
        RenewWaiting();
        next_renew_batch = now + renew_every;
      }
      if (now >= next_poll) {
        Poll();
        // Jittered, so that the processes do not poll in step.
        const int period = static_cast<int>(config_.poll_every.count());
        next_poll = now + Uniform(period * 9 / 10, period * 11 / 10);
      }
      if (now >= next_alive) {
        log_.Write(prefix_ + "ev=alive");
        next_alive = now + 1000;
      }
      SleepMs(5);
    }
    log_.Write(prefix_ + "ev=stop");
    return 0;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

  std::string Who(const Candidate &c) const { return "h=" + c.holder; }

  void BecomeLeader(Candidate &c, std::int64_t token, const char *source, std::int64_t start_us) {
    c.role = Role::kLeader;
    c.token = token;
    const std::int64_t now = MonoMs();
    c.next_write_ms = now;
    c.next_renew_ms = now;  // a renewal of its own at once: its clock starts now
    c.resign_at_ms = now + Uniform(static_cast<int>(config_.lead_min.count()),
                                   static_cast<int>(config_.lead_max.count()));
    log_.Write(prefix_ + "ev=grant c=" + std::to_string(c.index) + " " + Who(c) + " tok=" +
               std::to_string(token) + " src=" + source + " start=" + std::to_string(start_us));
  }

  // A candidate whose lease or place is over: its session is closed (best
  // effort: one that failed to close ends by itself within a ttl) and it
  // joins again with a new one.
  void Retire(Candidate &c) {
    if (c.session != 0) {
      if (pqxx::connection *db = leader_link_.Get()) {
        try {
          pqxx::nontransaction tx(*db);
          pqxx_compat::ExecParams(tx, "SELECT fencing_session_close($1)", c.session);
        } catch (const std::exception &error) {
          (void)FailureFields(error, leader_link_);
        }
      }
    }
    c.role = Role::kIdle;
    c.session = 0;
    c.place = 0;
    c.token = 0;
  }

  // The candidates in role, in order.
  std::vector<Candidate *> InRole(Role role) {
    std::vector<Candidate *> batch;
    for (Candidate &c : candidates_) {
      if (c.role == role) batch.push_back(&c);
    }
    return batch;
  }

  // A PostgreSQL array literal of one field of each candidate of a batch.
  template <typename Field>
  static std::string ArrayOf(const std::vector<Candidate *> &batch, Field field) {
    std::vector<std::string> items;
    for (const Candidate *c : batch) items.push_back(field(*c));
    return ArrayLiteral(items);
  }

  // One statement for a whole batch of candidates on the fleet link:
  // statement(tx) runs it, and its rows answer the batch in order,
  // answer(candidate, row, start) taking each.  Nothing is sent for an empty
  // batch or while the link is down.  On failure "ev=<failure> start=W
  // out=..." (then failure_fields) goes to the log.  Returns when the
  // statement started, if it succeeded.
  template <typename Statement, typename Answer>
  std::optional<Stamp> Batch(const std::vector<Candidate *> &batch, const std::string &failure,
                             const std::string &failure_fields, Statement statement,
                             Answer answer) {
    if (batch.empty()) return std::nullopt;
    pqxx::connection *db = fleet_link_.Get();
    if (db == nullptr) return std::nullopt;
    const Stamp start = Now();
    try {
      pqxx::nontransaction tx(*db);
      const pqxx::result rows = statement(tx);
      std::size_t i = 0;
      for (const auto &row : rows) {
        if (i >= batch.size()) break;
        answer(*batch[i++], row, start);
      }
      return start;
    } catch (const std::exception &error) {
      log_.Write(prefix_ + "ev=" + failure + " start=" + std::to_string(start.wall_us) + " " +
                     FailureFields(error, fleet_link_) + failure_fields,
                 FirstLine(error.what()));
      return std::nullopt;
    }
  }

  // Every idle candidate opens a session and joins the line, in one
  // statement.  A first place takes the lease at once (its token).  A
  // statement rolled back, or committed with its answer lost: the sessions
  // of a lost answer end by themselves within a ttl, their places with them.
  void OpenAndJoin() {
    const std::vector<Candidate *> idle = InRole(Role::kIdle);
    for (Candidate *c : idle) {
      c->generation += 1;
      c->holder = FleetHolder(config_.slot, config_.incarnation, c->index, c->generation);
    }
    Batch(
        idle, "open_fail", "",
        [&](pqxx::nontransaction &tx) {
          return pqxx_compat::ExecParams(
              tx,
              "SELECT o.h, o.s, j.place, j.token::bigint FROM "
              "(SELECT h, fencing_session_open(h, $2::interval) AS s "
              "   FROM unnest($1::text[]) WITH ORDINALITY AS u(h, n) ORDER BY n) o "
              "CROSS JOIN LATERAL fencing_line_join(o.s, $3) j",
              ArrayOf(idle, [](const Candidate &c) { return c.holder; }),
              std::to_string(config_.ttl.count()) + " milliseconds", std::string(kFleetLock));
        },
        [&](Candidate &c, const ResultRow &row, const Stamp &start) {
          if (row[0].c_str() != c.holder) throw std::runtime_error("join answered out of order");
          c.session = row[1].as<std::int64_t>();
          c.place = row[2].as<std::int64_t>();
          c.role = Role::kWaiting;
          log_.Write(prefix_ + "ev=join c=" + std::to_string(c.index) + " " + Who(c) +
                     " sess=" + std::to_string(c.session) + " place=" + std::to_string(c.place) +
                     " start=" + std::to_string(start.wall_us));
          if (!row[3].is_null()) BecomeLeader(c, row[3].as<std::int64_t>(), "join", start.wall_us);
        });
  }

  // The waiting candidates' sessions, renewed in one statement.
  void RenewWaiting() {
    const std::vector<Candidate *> waiting = InRole(Role::kWaiting);
    std::vector<std::string> renewed;
    std::vector<std::string> ended;
    const std::optional<Stamp> start = Batch(
        waiting, "renew_batch", " n=" + std::to_string(waiting.size()),
        [&](pqxx::nontransaction &tx) {
          return pqxx_compat::ExecParams(
              tx,
              "SELECT fencing_session_renew(s) FROM unnest($1::bigint[]) WITH ORDINALITY AS "
              "u(s, n) ORDER BY n",
              ArrayOf(waiting, [](const Candidate &c) { return std::to_string(c.session); }));
        },
        [&](Candidate &c, const ResultRow &row, const Stamp &) {
          if (row[0].as<bool>()) {
            renewed.push_back(c.holder);
          } else {
            ended.push_back(c.holder);
            c.role = Role::kIdle;  // its session ended: join again with a new one
            c.session = 0;
          }
        });
    if (start) {
      log_.Write(prefix_ + "ev=renew_batch start=" + std::to_string(start->wall_us) +
                 " out=ok ok=" + Join(renewed, ',') + " false=" + Join(ended, ','));
    }
  }

  // The waiting candidates' places, polled in one statement: the first
  // place in line takes the lease inside it.
  void Poll() {
    const std::vector<Candidate *> waiting = InRole(Role::kWaiting);
    Batch(
        waiting, "poll_fail", "",
        [&](pqxx::nontransaction &tx) {
          return pqxx_compat::ExecParams(
              tx, "SELECT place, state, token::bigint FROM fencing_line_poll($1::bigint[])",
              ArrayOf(waiting, [](const Candidate &c) { return std::to_string(c.place); }));
        },
        [&](Candidate &c, const ResultRow &row, const Stamp &start) {
          const std::string state = row[1].c_str();
          if (state == "granted") {
            BecomeLeader(c, row[2].as<std::int64_t>(), "poll", start.wall_us);
          } else if (state == "gone") {
            log_.Write(prefix_ + "ev=gone c=" + std::to_string(c.index) + " " + Who(c) +
                       " place=" + std::to_string(c.place));
            Retire(c);
          }
        });
  }

  void LeaderRenew(Candidate &c) {
    pqxx::connection *db = leader_link_.Get();
    const Stamp start = Now();
    const std::string head = prefix_ + "ev=renew " + Who(c) + " tok=" + std::to_string(c.token) +
                             " start=" + std::to_string(start.wall_us) + " ";
    if (db == nullptr) {
      log_.Write(head + "out=conn", "no connection");
      c.next_renew_ms = MonoMs() + 100;
      return;
    }
    try {
      pqxx::nontransaction tx(*db);
      const bool renewed =
          pqxx_compat::ExecParams1(tx, "SELECT fencing_session_renew($1)", c.session)[0].as<bool>();
      log_.Write(head + (renewed ? "out=true" : "out=false"));
      if (!renewed) {
        log_.Write(prefix_ + "ev=lost " + Who(c) + " tok=" + std::to_string(c.token) +
                   " why=renew");
        Retire(c);
        return;
      }
      c.next_renew_ms = MonoMs() + config_.ttl.count() / 3;
    } catch (const std::exception &error) {
      log_.Write(head + FailureFields(error, leader_link_), FirstLine(error.what()));
      c.next_renew_ms = MonoMs() + 100;  // soon again: the lease is at stake
    }
  }

  void LeaderWrite(Candidate &c) {
    c.next_write_ms = MonoMs() + config_.write_every.count();
    pqxx::connection *db = leader_link_.Get();
    if (db == nullptr) return;
    const std::string wid = std::to_string(config_.slot) + "." +
                            std::to_string(config_.incarnation) + "." + std::to_string(writes_++);
    const int row = Uniform(0, config_.rows - 1);
    const std::int64_t val = static_cast<std::int64_t>(rng_() >> 2);
    log_.Write(prefix_ + "ev=w_inv wid=" + wid + " " + Who(c) + " row=" + std::to_string(row) +
               " tok=" + std::to_string(c.token) + " val=" + std::to_string(val));
    try {
      pqxx::nontransaction tx(*db);
      const pqxx::result r = pqxx_compat::ExecParams(
          tx,
          std::string("UPDATE ") + kFleetTable +
              " SET token = $1::bigint::fencing_token, val = $2, write_id = $3 WHERE id = $4",
          c.token, val, wid, row);
      log_.Write(prefix_ + "ev=w_done wid=" + wid +
                 " out=ok n=" + std::to_string(r.affected_rows()));
    } catch (const pqxx::sql_error &error) {
      if (pqxx_compat::SqlState(error) == "55Z01") {
        log_.Write(prefix_ + "ev=w_done wid=" + wid + " out=55Z01");
        log_.Write(prefix_ + "ev=lost " + Who(c) + " tok=" + std::to_string(c.token) +
                   " why=55Z01");
        Retire(c);
        return;
      }
      log_.Write(prefix_ + "ev=w_done wid=" + wid + " " + FailureFields(error, leader_link_),
                 FirstLine(error.what()));
    } catch (const std::exception &error) {
      log_.Write(prefix_ + "ev=w_done wid=" + wid + " " + FailureFields(error, leader_link_),
                 FirstLine(error.what()));
    }
  }

  // The leader lets go, each way in turn chosen at random: the lease alone
  // (fencing_release), its place (fencing_line_leave gives the lease back),
  // or its whole session.  Then it joins again with a new session.
  void Resign(Candidate &c) {
    static constexpr const char *kHows[] = {"release", "leave", "close"};
    const std::string how = kHows[Uniform(0, 2)];
    const std::string head = prefix_ + Who(c) + " tok=" + std::to_string(c.token) + " how=" + how;
    log_.Write(prefix_ + "ev=resign " + Who(c) + " tok=" + std::to_string(c.token) + " how=" + how);
    std::string outcome = "out=conn";
    if (pqxx::connection *db = leader_link_.Get()) {
      try {
        pqxx::nontransaction tx(*db);
        std::string answer;
        if (how == "release") {
          answer = pqxx_compat::ExecParams1(
                       tx, "SELECT fencing_release($1, $2::bigint::fencing_token)::text",
                       std::string(kFleetLock), c.token)[0]
                       .c_str();
        } else if (how == "leave") {
          answer = pqxx_compat::ExecParams1(tx, "SELECT fencing_line_leave($1)::text", c.place)[0]
                       .c_str();
        } else {
          answer =
              pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)::text", c.session)[0]
                  .c_str();
        }
        outcome = "out=ok answer=" + answer;
      } catch (const std::exception &error) {
        outcome = FailureFields(error, leader_link_);
      }
    }
    log_.Write(prefix_ + "ev=resigned " + head.substr(prefix_.size()) + " " + outcome);
    Retire(c);
  }

  const FleetWorkerConfig config_;
  const EventLog log_;
  const std::string prefix_;
  Link fleet_link_;
  Link leader_link_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  long writes_ = 0;
};

}  // namespace

std::vector<std::string> FleetWorkerArguments(const FleetWorkerConfig &c) {
  return {std::to_string(c.slot),
          std::to_string(c.incarnation),
          std::to_string(c.candidates),
          c.conninfo,
          c.log_path,
          std::to_string(c.rows),
          std::to_string(c.ttl.count()),
          std::to_string(c.poll_every.count()),
          std::to_string(c.write_every.count()),
          std::to_string(c.lead_min.count()),
          std::to_string(c.lead_max.count()),
          std::to_string(c.seed)};
}

FleetWorkerConfig ParseFleetWorkerArguments(const std::vector<std::string> &args) {
  if (args.size() != 12) throw std::invalid_argument("--fleet-worker: expected 12 arguments");
  FleetWorkerConfig c;
  c.slot = std::stoi(args[0]);
  c.incarnation = std::stoi(args[1]);
  c.candidates = std::stoi(args[2]);
  c.conninfo = args[3];
  c.log_path = args[4];
  c.rows = std::stoi(args[5]);
  c.ttl = std::chrono::milliseconds(std::stoll(args[6]));
  c.poll_every = std::chrono::milliseconds(std::stoll(args[7]));
  c.write_every = std::chrono::milliseconds(std::stoll(args[8]));
  c.lead_min = std::chrono::milliseconds(std::stoll(args[9]));
  c.lead_max = std::chrono::milliseconds(std::stoll(args[10]));
  c.seed = std::stoull(args[11]);
  return c;
}

int RunFleetWorker(const FleetWorkerConfig &config) {
  CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);
  FleetWorker worker(config);
  return worker.Run();
}

}  // namespace pg_fencing::stress
