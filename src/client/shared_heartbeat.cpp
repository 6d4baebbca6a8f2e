// SharedHeartbeat: a Client's one heartbeat (shared_heartbeat.hpp).
//
// One thread (the HeartbeatGroup's) and one connection renew every session
// and lease made with the Client: when one is due, one statement renews
// every one the group put in the batch,
//
//   SELECT b.i, fencing_session_renew(b.s, b.t::interval)
//     FROM unnest('{7,9}'::bigint[], '{"2000 milliseconds",...}'::text[],
//                 '{0,1}'::integer[]) AS b(s, t, i)
//   UNION ALL
//   SELECT b.i, fencing_renew(b.n, b.k::fencing_token, b.t::interval)
//     FROM unnest('{"lock"}'::text[], '{17}'::text[], ..., '{2}'::integer[]) AS b(n, k, t, i)
//
// and each row's answer goes to its lock (i: its place in the batch).  The
// values are quoted literals, not parameters: the statement goes through a
// pqxx::pipeline (as BooleanByDeadline's), so that the thread can stop
// waiting at the batch's deadline; it is one statement outside any
// transaction block, with no named prepared statement, and nothing holds a
// transaction or a snapshot between rounds (a transaction-pooling PgBouncer
// takes it as it is).
//  - The server refuses the statement (say, a lease's role lost the
//    privilege on its lock: 42501): the batch is sent again, one statement
//    a lock, so that the error is that lock's loss alone.
//  - The connection breaks: every lock of the batch not answered is lost,
//    as when a lock's own heartbeat connection breaks; the next round makes
//    a new connection.
//  - No answer by the deadline: the locks whose deadline passed are lost
//    (the group's TimedOut), the statement and its connection are let go on
//    a thread of their own (the pipeline's destructor cancels the query,
//    which needs a connection of its own and may hang too), and the next
//    round, at once, makes a new connection for the rest.
//  - The connection is made on a thread of its own too, and waited for no
//    longer than the batch's deadline: a server that does not answer a
//    connect delays no loss.
// The connection is made when the first batch is sent, and closed when the
// last lock has left the group (its idle call).
#include "shared_heartbeat.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>
#include <utility>

#include "deadline_query.hpp"
#include "sql_text.hpp"

namespace pg_fencing::client::detail {

namespace {

using Clock = std::chrono::steady_clock;

// A statement on the wire, with its connection.  Destroyed in this order.
struct InFlight {
  std::unique_ptr<pqxx::connection> conn;
  std::unique_ptr<pqxx::nontransaction> tx;
  std::unique_ptr<pqxx::pipeline> pipe;
  ~InFlight() {
    pipe.reset();
    tx.reset();
    conn.reset();
  }
};

// A statement (and its connection) that got no answer in time, or whose
// connection broke, ends on a thread of its own: see above.
void LetGo(std::unique_ptr<InFlight> flight) {
  if (!flight) return;
  try {
    std::thread([f = std::move(flight)]() mutable { f.reset(); }).detach();
  } catch (...) {
    // No thread: the caller's, then (the lambda, and so flight, is gone).
  }
}

// An array literal: each element double-quoted, its double quotes and
// backslashes escaped.
std::string ArrayOf(const std::vector<std::string> &elements) {
  std::string out = "{";
  for (std::size_t i = 0; i < elements.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (const char c : elements[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

}  // namespace

struct SharedHeartbeat::Connecting {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::unique_ptr<pqxx::connection> conn;
  std::string error;
};

SharedHeartbeat::SharedHeartbeat(std::string conninfo)
    : conninfo_(std::move(conninfo)), group_([this] {
        HeartbeatGroup::Options options;
        options.renew = [this](HeartbeatGroup::Round &round) { Renew(round); };
        options.idle = [this] { Idle(); };
        return options;
      }()) {}

SharedHeartbeat::~SharedHeartbeat() = default;

std::shared_ptr<HeartbeatGroup> SharedHeartbeat::Group(
    const std::shared_ptr<SharedHeartbeat> &self) {
  return std::shared_ptr<HeartbeatGroup>(self, &self->group_);
}

void SharedHeartbeat::Track(const Heartbeat *heartbeat, HeartbeatTarget target) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_[heartbeat] = std::move(target);
}

void SharedHeartbeat::Untrack(const Heartbeat *heartbeat) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_.erase(heartbeat);
}

void SharedHeartbeat::Idle() {
  conn_.reset();
  connecting_.reset();  // an attempt still under way drops what it makes
}

bool SharedHeartbeat::Connect(HeartbeatGroup::Round &round) {
  if (!connecting_) {
    auto attempt = std::make_shared<Connecting>();
    std::thread([attempt, conninfo = conninfo_] {
      std::unique_ptr<pqxx::connection> conn;
      std::string error;
      try {
        conn = std::make_unique<pqxx::connection>(conninfo);
      } catch (const std::exception &e) {
        error = e.what();
      } catch (...) {
        error = "unknown exception";
      }
      {
        std::lock_guard<std::mutex> lock(attempt->mutex);
        attempt->conn = std::move(conn);
        attempt->error = error.empty() ? "the heartbeat connection could not be made" : error;
        attempt->done = true;
      }
      attempt->done_cv.notify_all();
    }).detach();
    connecting_ = attempt;
  }
  const std::shared_ptr<Connecting> attempt = connecting_;
  for (;;) {
    // Not under the attempt's mutex: deadline() takes the group's.
    const Clock::time_point deadline = round.deadline();
    const Clock::time_point now = Clock::now();
    std::unique_lock<std::mutex> lock(attempt->mutex);
    if (attempt->done) break;
    if (deadline == Clock::time_point::max()) return false;  // nothing left to renew
    if (now >= deadline) {
      lock.unlock();
      round.TimedOut();
      return false;  // the attempt goes on, for the next round
    }
    attempt->done_cv.wait_for(lock, deadline - now);
  }
  connecting_.reset();
  if (!attempt->conn) throw pqxx::broken_connection(attempt->error);
  conn_ = std::move(attempt->conn);
  return true;
}

std::string SharedHeartbeat::Sql(const std::vector<std::optional<HeartbeatTarget>> &targets,
                                 const std::vector<std::size_t> &which) const {
  std::vector<std::string> sessions, session_ttls, session_places;
  std::vector<std::string> names, tokens, lease_ttls, lease_places;
  for (const std::size_t i : which) {
    const HeartbeatTarget &target = *targets[i];
    if (target.session != 0) {
      sessions.push_back(std::to_string(target.session));
      session_ttls.push_back(IntervalText(target.ttl));
      session_places.push_back(std::to_string(i));
    } else {
      names.push_back(target.lock_name);
      tokens.push_back(TokenText(target.token));
      lease_ttls.push_back(IntervalText(target.ttl));
      lease_places.push_back(std::to_string(i));
    }
  }
  pqxx::connection &conn = *conn_;
  const auto array = [&conn](const std::vector<std::string> &elements, const char *type) {
    return conn.quote(ArrayOf(elements)) + "::" + type + "[]";
  };
  std::string sql;
  if (!sessions.empty()) {
    sql = "SELECT b.i, fencing_session_renew(b.s, b.t::interval) FROM unnest(" +
          array(sessions, "bigint") + ", " + array(session_ttls, "text") + ", " +
          array(session_places, "integer") + ") AS b(s, t, i)";
  }
  if (!names.empty()) {
    if (!sql.empty()) sql += " UNION ALL ";
    sql += "SELECT b.i, fencing_renew(b.n, b.k::fencing_token, b.t::interval) FROM unnest(" +
           array(names, "text") + ", " + array(tokens, "text") + ", " + array(lease_ttls, "text") +
           ", " + array(lease_places, "integer") + ") AS b(n, k, t, i)";
  }
  return sql;
}

std::optional<pqxx::result> SharedHeartbeat::Run(const std::string &sql,
                                                 HeartbeatGroup::Round &round) {
  using std::chrono::milliseconds;
  auto flight = std::make_unique<InFlight>();
  flight->conn = std::move(conn_);  // back once answered
  try {
    flight->tx = std::make_unique<pqxx::nontransaction>(*flight->conn);
    flight->pipe = std::make_unique<pqxx::pipeline>(*flight->tx);
    const pqxx::pipeline::query_id id = flight->pipe->insert(sql);  // sent at once
    for (;;) {
      flight->pipe->resume();  // reads what has arrived, without blocking
      if (flight->pipe->is_finished(id)) break;
      const Clock::time_point deadline = round.deadline();
      const Clock::time_point now = Clock::now();
      if (deadline == Clock::time_point::max()) {
        // Every lock of the batch left the group: nobody waits for this.
        LetGo(std::move(flight));
        return std::nullopt;
      }
      if (now >= deadline) {
        round.TimedOut();  // first: letting go may take a while
        LetGo(std::move(flight));
        return std::nullopt;
      }
      AwaitInput(*flight->conn, deadline);
    }
    std::optional<pqxx::result> result;
    try {
      result = flight->pipe->retrieve(id);  // throws the server's error, if any
    } catch (const pqxx::sql_error &) {
      // An answer, if an error: nothing is left on the wire.
      flight->pipe.reset();
      flight->tx.reset();
      if (flight->conn->is_open()) conn_ = std::move(flight->conn);
      throw;
    }
    flight->pipe.reset();
    flight->tx.reset();
    conn_ = std::move(flight->conn);
    return result;
  } catch (...) {
    if (flight && flight->conn) LetGo(std::move(flight));
    throw;
  }
}

void SharedHeartbeat::Renew(HeartbeatGroup::Round &round) {
  // What each lock renews; none for one that left the group meanwhile.
  std::vector<std::optional<HeartbeatTarget>> targets;
  std::vector<std::size_t> which;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < round.locks().size(); ++i) {
      const auto found = targets_.find(round.locks()[i]);
      if (found == targets_.end()) {
        targets.emplace_back();
      } else {
        targets.emplace_back(found->second);
        which.push_back(i);
      }
    }
  }
  if (which.empty()) return;
  if (!conn_ && !Connect(round)) return;
  const Clock::time_point sent = Clock::now();
  std::optional<pqxx::result> rows;
  try {
    rows = Run(Sql(targets, which), round);
  } catch (const pqxx::sql_error &) {
    // Refused by the server, the connection intact: one lock's trouble
    // must not be every lock's.
    if (which.size() == 1 || !conn_) throw;
    RenewEach(round, targets, which);
    return;
  }
  if (!rows) return;
  for (pqxx::result::size_type r = 0; r < rows->size(); ++r) {
    const auto row = (*rows)[r];  // a row_ref in libpqxx 8
    const bool renewed = !row[1].is_null() && row[1].as<bool>();
    round.Answer(static_cast<std::size_t>(row[0].as<long>()), sent,
                 renewed ? Heartbeat::Renewal::kRenewed : Heartbeat::Renewal::kRefused);
  }
}

void SharedHeartbeat::RenewEach(HeartbeatGroup::Round &round,
                                const std::vector<std::optional<HeartbeatTarget>> &targets,
                                const std::vector<std::size_t> &which) {
  for (const std::size_t i : which) {
    if (!conn_ && !Connect(round)) return;
    const Clock::time_point sent = Clock::now();
    std::optional<pqxx::result> rows;
    try {
      rows = Run(Sql(targets, {i}), round);
    } catch (const pqxx::sql_error &error) {
      round.Answer(i, sent, Heartbeat::Renewal::kRefused, error.what());
      if (!conn_) throw;  // the connection went with it: the rest fail
      continue;
    }
    if (!rows) return;
    const bool renewed = rows->size() == 1 && !(*rows)[0][1].is_null() && (*rows)[0][1].as<bool>();
    round.Answer(i, sent, renewed ? Heartbeat::Renewal::kRenewed : Heartbeat::Renewal::kRefused);
  }
}

}  // namespace pg_fencing::client::detail
