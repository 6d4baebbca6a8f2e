// Session: fencing_session_open'd keepalive for many leases, renewed by a
// heartbeat thread (Heartbeat, heartbeat.cpp), as a Lease is.
//
// Timing.  The server starts the session's ttl when it runs the open (or a
// renewal), after the client sent it: "send time + ttl" on the client's
// monotonic clock is never later than the server's end, so held() (the
// heartbeat's, minus its safety margin) never claims a session, nor any
// lease in it, that the server may have ended.
//
// Connections.  Made without a Client: two, both from options.conninfo, so
// both as the role that opened the session: the heartbeat's, which opened
// the session and then renews it (a renewal must never queue behind an
// acquire that waits), and the work connection, on which Acquire,
// AcquireAll, Release and Close take turns under work_mutex_.  Made with a
// Client: the work connection only, on which the session is opened, from
// the client's conninfo; the client's heartbeat (SharedHeartbeat,
// shared_heartbeat.cpp) renews it, on the client's one connection, in one
// statement with every other session and lease of the client's that is
// due; so a renewal still never queues behind an acquire.  The close stays
// on the work connection either way: a wait in line gives the connection
// up between its polls, and Close() wakes a wait that sleeps (closed_,
// line_wake_), which then ends (CheckHeld), so the close ends a wait on
// another thread rather than queueing behind it.  (A wait in CALL
// fencing_await, or one that listens, keeps the connection, as before.)
// Sending the close on the shared heartbeat connection instead would put a
// statement that may wait on the session's locks in front of every
// renewal of the client.
//
// Waiting in line (extension 1.10).  A wait in the session, for an
// exclusive lease, a shared lease or a permit, is a place in the lock's
// line, a row the database keeps, not a statement that runs for the whole
// wait:
//   join   SELECT place, token FROM fencing_line_join(session, lock, wait, payload,
//                                                     kind, permits)
//   poll   SELECT state, token FROM fencing_line_poll(ARRAY[place])
//   leave  SELECT fencing_line_leave(place)
// each one short statement outside any transaction block (nontransaction),
// so between them the candidate holds no transaction, no snapshot and --
// behind a transaction-pooling PgBouncer -- no server connection.  The
// place whose turn it is takes the lease itself when it joins or polls,
// and nobody else may take it meanwhile, so arrival order holds for the
// whole wait (exclusive places first; a semaphore's free permits to its
// places in the order they joined).  Between polls the client sleeps
// (options_.line_poll), woken early when options_.line_listen and the work
// connection hears the place's number on fencing_line.  At the deadline
// the place leaves, which gives back a lease a poll took meanwhile (its
// answer lost, say): a wait that ran out holds nothing and leaves no row.
// The line keeps one place per session and lock, and a join again answers
// that place: one more shared lease or permit of a lock whose line has the
// session's place already (a lease taken through it, or another thread's
// wait) waits in CALL fencing_await instead, as does every wait on a
// database without the line's kinds.
//
// AcquireAll with a wait waits in line too: one lock after the other, in
// byte order of the distinct names (the order fencing_session_acquire_all
// takes them in, so that two sessions with overlapping sets cannot
// deadlock), each an exclusive wait in its line with what is left of the
// wait.  A lock taken stays taken while the next is waited for (visible
// to others: all or none holds for the answer, not for every instant);
// when one is not had in time, or an error ends the wait, every lease it
// took is given back and its place left.  Without a wait, and on a
// database without the line, it is one fencing_session_acquire_all.
//
// Prepared statements.  None: every statement goes through PQexecParams
// (pqxx_compat::ExecParams*), libpq's unnamed statement, which lives for
// one statement only and so works behind a transaction pooler.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "deadline_query.hpp"
#include "shared_heartbeat.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "pg_fencing/session.hpp"
#include "sql_text.hpp"

namespace pg_fencing::client {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using detail::IntervalText;

// A text[] literal of names: each element double-quoted, with its double
// quotes and backslashes escaped, so that any name goes through as it is.
std::string ArrayLiteral(const std::vector<std::string> &names) {
  std::string out = "{";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (const char c : names[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

// A fencing_token[] as the server prints it, "{1,2,3}".
std::vector<Token> TokensOfArray(const std::string &text) {
  std::vector<Token> tokens;
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
    throw std::runtime_error("the server returned a malformed token array: \"" + text + "\"");
  }
  std::string::size_type start = 1;
  while (start < text.size() - 1) {
    std::string::size_type end = text.find(',', start);
    if (end == std::string::npos) end = text.size() - 1;
    tokens.push_back(detail::TokenOfText(text.substr(start, end - start).c_str()));
    start = end + 1;
  }
  return tokens;
}

// The kind argument of fencing_session_acquire and fencing_await.
const char *KindOf(LeaseOptions::Mode mode) {
  switch (mode) {
    case LeaseOptions::Mode::kShared:
      return "shared";
    case LeaseOptions::Mode::kPermit:
      return "permit";
    case LeaseOptions::Mode::kExclusive:
      break;
  }
  return "exclusive";
}

constexpr const char *kLineChannel = "fencing_line";
constexpr const char *kUndefinedFunction = "42883";

// LISTEN fencing_line on a connection for as long as it lives (one wait in
// line), UNLISTEN after: a connection that LISTENs but is not read holds
// back the server's notification queue.  A notification is a hint only
// (any role may NOTIFY on any channel): it makes the wait poll sooner,
// never decides anything.
class LineListener {
 public:
  explicit LineListener(pqxx::connection &conn) : conn_(conn) {
#if PG_FENCING_PQXX_HAVE_LISTEN
    conn_.listen(kLineChannel, [this](pqxx::notification n) { Heard(std::string(n.payload)); });
#else
    // libpqxx 6 reports a receiver's trouble (an UNLISTEN on a broken
    // connection) on stderr unless a handler takes it.
    quiet_ = std::make_unique<pqxx::quiet_errorhandler>(conn_);
    receiver_ = std::make_unique<Receiver>(conn_, *this);
#endif
  }
  ~LineListener() {
    try {
#if PG_FENCING_PQXX_HAVE_LISTEN
      conn_.listen(kLineChannel);  // no handler: UNLISTEN
#else
      receiver_.reset();
      quiet_.reset();
#endif
    } catch (...) {
      // A broken connection listens no more either.
    }
  }
  LineListener(const LineListener &) = delete;
  LineListener &operator=(const LineListener &) = delete;

  // Sleeps until `until`, or until a notification names `place`.
  void SleepUntil(std::int64_t place, Clock::time_point until) {
    for (;;) {
      conn_.get_notifs();  // hands what arrived to Heard()
      const bool heard =
          overflowed_ || std::find(heard_.begin(), heard_.end(), place) != heard_.end();
      heard_.clear();
      overflowed_ = false;
      if (heard) return;
      const Clock::time_point now = Clock::now();
      if (now >= until) return;
      pollfd pfd{};
      pfd.fd = conn_.sock();
      if (pfd.fd < 0) throw pqxx::broken_connection("the session's work connection has no socket");
      pfd.events = POLLIN;
      // Rounded up, so that we never spin on a sub-millisecond remainder.
      const auto left = std::chrono::ceil<milliseconds>(until - now);
      if (poll(&pfd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) {
        throw std::runtime_error(std::string("poll on the session's work connection: ") +
                                 std::strerror(errno));
      }
    }
  }

 private:
  void Heard(const std::string &payload) {
    std::int64_t place = 0;
    const char *end = payload.data() + payload.size();
    const auto parsed = std::from_chars(payload.data(), end, place);
    if (parsed.ec != std::errc() || parsed.ptr != end) return;  // not a place number
    if (heard_.size() >= kHeardKept) {
      overflowed_ = true;  // a burst: poll, whoever it named
      return;
    }
    heard_.push_back(place);
  }

#if !PG_FENCING_PQXX_HAVE_LISTEN
  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection &conn, LineListener &listener)
        : pqxx::notification_receiver(conn, kLineChannel), listener_(listener) {}
    void operator()(const std::string &payload, int) override { listener_.Heard(payload); }

   private:
    LineListener &listener_;
  };
  std::unique_ptr<pqxx::quiet_errorhandler> quiet_;
  std::unique_ptr<Receiver> receiver_;
#endif

  static constexpr std::size_t kHeardKept = 1024;
  pqxx::connection &conn_;
  std::vector<std::int64_t> heard_;  // place numbers heard since the last look
  bool overflowed_ = false;
};

}  // namespace

Session::Session(SessionOptions options) : Session(std::move(options), nullptr) {}

Session::Session(Client &client, SessionOptions options)
    : Session(
          [&] {
            options.conninfo = client.ConninfoFor(options.conninfo,
                                                  "fencing session of \"" + options.holder + "\"");
            return std::move(options);
          }(),
          client.heartbeat_) {}

Session::Session(SessionOptions options, std::shared_ptr<detail::SharedHeartbeat> shared)
    : options_(std::move(options)), shared_(std::move(shared)) {
  const std::string what = "fencing session of \"" + options_.holder + "\"";
  Heartbeat::CheckTiming(options_.ttl, options_.heartbeat, what);
  if (options_.line_poll.count() <= 0) {
    throw std::invalid_argument(what + ": line_poll must be positive");
  }
  if (!shared_) heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
  work_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
  const Clock::time_point sent = Clock::now();
  {
    pqxx::nontransaction tx(shared_ ? *work_conn_ : *heartbeat_conn_);
    id_ = pqxx_compat::ExecParams1(tx, "SELECT fencing_session_open($1, $2::interval)",
                                   options_.holder, IntervalText(options_.ttl))[0]
              .as<std::int64_t>();
  }
  try {
    Heartbeat::Options heartbeat;
    heartbeat.ttl = options_.ttl;
    heartbeat.period = options_.heartbeat;
    if (shared_) {
      heartbeat.group = detail::SharedHeartbeat::Group(shared_);
    } else {
      heartbeat.renew = [this](Clock::time_point deadline) { return Renew(deadline); };
    }
    heartbeat.refused = "the session ended, or was closed";
    heartbeat.on_lost = options_.on_lost;
    heartbeat_ = std::make_unique<Heartbeat>(std::move(heartbeat), sent);
    if (shared_) {
      detail::HeartbeatTarget target;
      target.session = id_;
      target.ttl = options_.ttl;
      shared_->Track(heartbeat_.get(), std::move(target));
    }
    heartbeat_->Start();
  } catch (...) {
    if (shared_ && heartbeat_) {
      heartbeat_->Stop();
      shared_->Untrack(heartbeat_.get());
    }
    // No destructor will run: close it rather than let it linger a ttl.
    try {
      pqxx::nontransaction tx(*work_conn_);
      pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", id_);
    } catch (...) {
    }
    throw;
  }
}

Session::~Session() {
  try {
    Close();
  } catch (...) {
    // A destructor must not throw; the server ends the session after ttl.
  }
  if (shared_) shared_->Untrack(heartbeat_.get());
}

bool Session::held() const { return heartbeat_->held(); }

void Session::CheckHeld() const {
  if (!held()) {
    throw LeaseLostError("fencing session " + std::to_string(id_) +
                         " is no longer held: " + lost_reason());
  }
}

std::string Session::lost_reason() const { return heartbeat_->lost_reason(); }

Heartbeat::Renewal Session::Renew(Clock::time_point deadline) {
  if (!heartbeat_conn_) return Heartbeat::Renewal::kTimedOut;  // an earlier one never answered
  pqxx::connection &conn = *heartbeat_conn_;
  const std::string sql = "SELECT fencing_session_renew(" + std::to_string(id_) + ", " +
                          conn.quote(IntervalText(options_.ttl)) + "::interval)";
  std::optional<bool> renewed;
  try {
    renewed = detail::BooleanByDeadline(conn, sql, deadline, renew_in_flight_,
                                        [this] { heartbeat_->ReportTimedOut(); });
  } catch (...) {
    renew_in_flight_ = false;
    throw;
  }
  renew_in_flight_ = false;
  if (!renewed) {
    heartbeat_conn_.reset();  // its answer may still come: never reused
    return Heartbeat::Renewal::kTimedOut;
  }
  return *renewed ? Heartbeat::Renewal::kRenewed : Heartbeat::Renewal::kRefused;
}

std::optional<Token> Session::Acquire(const std::string &lock_name,
                                      std::optional<milliseconds> wait) {
  SessionLockOptions options;
  options.wait = wait;
  return AcquireOne(lock_name, options);
}

std::unique_ptr<SessionLease> Session::Lock(const std::string &lock_name,
                                            const SessionLockOptions &options) {
  const std::optional<Token> token = AcquireOne(lock_name, options);
  if (!token) {
    throw LeaseUnavailableError(
        "lock \"" + lock_name + "\"" +
        (options.mode == LeaseOptions::Mode::kPermit ? ": every permit is taken"
                                                     : " is held by another holder") +
        (options.wait ? " (waited " + std::to_string(options.wait->count()) + " ms)" : ""));
  }
  // Not make_unique: the constructor is private, for Session only.
  return std::unique_ptr<SessionLease>(new SessionLease(*this, lock_name, options.mode, *token));
}

std::optional<Token> Session::AcquireOne(const std::string &lock_name,
                                         const SessionLockOptions &options) {
  if (options.payload && options.mode != LeaseOptions::Mode::kExclusive) {
    throw std::invalid_argument("lock \"" + lock_name + "\": a payload needs an exclusive lease");
  }
  const std::string permits =
      options.mode == LeaseOptions::Mode::kPermit ? std::to_string(options.permits) : "";
  std::optional<std::string> token;
  if (options.wait) {
    token = WaitInLine(lock_name, options);
  } else {
    token = AcquireInSession(
        "SELECT fencing_session_acquire($1, $2, $3::interval, payload => $4::jsonb, "
        "kind => $5, permits => $6::integer)",
        lock_name, std::nullopt, options.payload ? options.payload->c_str() : nullptr,
        KindOf(options.mode), permits.empty() ? nullptr : permits.c_str());
  }
  if (!token) return std::nullopt;
  return detail::TokenOfText(token->c_str());
}

std::optional<std::string> Session::WaitInLine(const std::string &lock_name,
                                               const SessionLockOptions &options, bool *no_line) {
  // The client's deadline governs: it polls at it and then leaves.  The
  // place's own end, on the server, is a backstop for a client that is
  // gone, set kLineGrace later, so that the last poll, however late its
  // sleep ends on a busy machine, still finds the place waiting (a place
  // whose end had passed would be gone, and a first place that never
  // polls in time keeps the lock from everyone).
  const Clock::time_point deadline = Clock::now() + *options.wait;
  constexpr std::chrono::milliseconds kLineGrace{2000};
  const char *payload = options.payload ? options.payload->c_str() : nullptr;
  const std::string permits =
      options.mode == LeaseOptions::Mode::kPermit ? std::to_string(options.permits) : "";
  std::unique_lock<std::mutex> lock(work_mutex_);
  CheckHeld();
  // One more shared lease or permit of a lock whose line has this
  // session's place: a join would answer that place's lease, not a new one.
  const bool exclusive = options.mode == LeaseOptions::Mode::kExclusive;
  if (!exclusive && (line_places_.count(lock_name) > 0 || line_waits_.count(lock_name) > 0)) {
    return AwaitInSession(lock_name, options);
  }
  // This wait's place, while it waits (under work_mutex_, which the sleeps
  // between polls give up).
  struct Waiting {
    std::set<std::string> *waits = nullptr;
    std::set<std::string>::iterator at;
    ~Waiting() {
      if (waits != nullptr) waits->erase(at);
    }
  } waiting;
  if (!exclusive) {
    waiting.at = line_waits_.insert(lock_name).first;
    waiting.waits = &line_waits_;
  }
  // Before the join, so that a number sent between the join and the first
  // sleep is heard.
  std::optional<LineListener> listener;
  if (options_.line_listen) listener.emplace(*work_conn_);
  std::int64_t place = 0;
  try {
    pqxx::nontransaction tx(*work_conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(
        tx,
        "SELECT place, token FROM fencing_line_join($1, $2, $3::interval, $4::jsonb, $5, "
        "$6::integer)",
        id_, lock_name, IntervalText(*options.wait + kLineGrace), payload, KindOf(options.mode),
        permits.empty() ? nullptr : permits.c_str());
    place = row[0].as<std::int64_t>();
    if (!row[1].is_null()) {
      const std::string token = row[1].c_str();
      line_places_[lock_name] = {detail::TokenOfText(token.c_str()), place};
      return token;
    }
  } catch (const pqxx::sql_error &e) {
    // A database without the line, or without its kinds: the wait of 1.8.
    if (pqxx_compat::SqlState(e) != kUndefinedFunction) throw;
    listener.reset();
    if (no_line != nullptr) {
      *no_line = true;
      return std::nullopt;
    }
    return AwaitInSession(lock_name, options);
  }
  try {
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) break;
      const Clock::time_point until =
          std::min<Clock::time_point>(now + options_.line_poll, deadline);
      if (listener) {
        listener->SleepUntil(place, until);
      } else {
        // Lets the session's other calls use the work connection meanwhile.
        line_wake_.wait_until(lock, until, [this] { return closed_; });
      }
      CheckHeld();  // throws once Close() ran meanwhile
      // Polled at the deadline too: a wait shorter than line_poll, or a
      // candidate that comes back for short waits, still takes its turn
      // when it is first (a place that never polls would hold the line).
      pqxx::nontransaction tx(*work_conn_);
      const pqxx::row row = pqxx_compat::ExecParams1(
          tx, "SELECT state, token FROM fencing_line_poll(ARRAY[$1::bigint])", place);
      const std::string state = row[0].c_str();
      if (state == "granted") {
        const std::string token = row[1].c_str();
        line_places_[lock_name] = {detail::TokenOfText(token.c_str()), place};
        return token;
      }
      // Gone before the deadline: the session ended (55Z05 on the next
      // call, or LeaseLostError once the heartbeat knows), or the place was
      // left from another connection.  Not acquired, either way.
      if (state != "waiting") return std::nullopt;
      if (Clock::now() >= deadline) break;
    }
  } catch (...) {
    LeaveLineQuietly(place);
    throw;
  }
  // The deadline: leave, giving back a lease a poll may have taken.
  pqxx::nontransaction tx(*work_conn_);
  pqxx_compat::ExecParams1(tx, "SELECT fencing_line_leave($1)", place);
  return std::nullopt;
}

void Session::LeaveLineQuietly(std::int64_t place) noexcept {
  if (closed_) return;
  try {
    pqxx::nontransaction tx(*work_conn_);
    pqxx_compat::ExecParams1(tx, "SELECT fencing_line_leave($1)", place);
  } catch (...) {
    // The place ends with its wait or its session on the server.
  }
}

// CALL fencing_await(..., session =>), outside any transaction block (the
// procedure ends its own transactions): it commits each attempt before it
// sleeps, so that a wait of hours holds no snapshot, as Lease's does; but
// it holds the work connection, and a pooled server connection, for the
// whole wait.  Only for the waits the line cannot hold (WaitInLine).
std::optional<std::string> Session::AwaitInSession(const std::string &lock_name,
                                                   const SessionLockOptions &options) {
  const std::string permits =
      options.mode == LeaseOptions::Mode::kPermit ? std::to_string(options.permits) : "";
  pqxx::nontransaction tx(*work_conn_);
  const pqxx::row row = pqxx_compat::ExecParams1(
      tx,
      "CALL fencing_await($1, session => $2, wait => $3::interval, kind => $4, "
      "permits => $5::integer, payload => $6::jsonb)",
      lock_name, id_, IntervalText(*options.wait), KindOf(options.mode),
      permits.empty() ? nullptr : permits.c_str(),
      options.payload ? options.payload->c_str() : nullptr);
  if (row[0].is_null()) return std::nullopt;
  return std::string(row[0].c_str());
}

std::optional<std::vector<Token>> Session::AcquireAll(const std::vector<std::string> &lock_names,
                                                      std::optional<milliseconds> wait) {
  // Names the server refuses (none, an empty one) go to it, as always.
  const bool plain =
      !lock_names.empty() && std::none_of(lock_names.begin(), lock_names.end(),
                                          [](const std::string &name) { return name.empty(); });
  if (wait && wait->count() > 0 && plain) {
    bool no_line = false;
    std::optional<std::vector<Token>> tokens = AcquireAllInLine(lock_names, *wait, &no_line);
    if (!no_line) return tokens;
  }
  const std::optional<std::string> tokens =
      AcquireInSession("SELECT fencing_session_acquire_all($1, $2::text[], $3::interval)",
                       ArrayLiteral(lock_names), wait);
  if (!tokens) return std::nullopt;
  return TokensOfArray(*tokens);
}

std::optional<std::vector<Token>> Session::AcquireAllInLine(
    const std::vector<std::string> &lock_names, milliseconds wait, bool *no_line) {
  const Clock::time_point deadline = Clock::now() + wait;
  // Byte order: std::string compares as unsigned char, as COLLATE "C".
  std::vector<std::string> order(lock_names);
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::map<std::string, Token> had = HeldInSession(order);
  std::vector<std::pair<std::string, Token>> taken;  // the leases this call took
  try {
    for (const std::string &lock_name : order) {
      if (had.count(lock_name) > 0) continue;  // held already: kept, and not given back
      SessionLockOptions options;
      options.wait =
          std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
      const std::optional<std::string> token = WaitInLine(lock_name, options, no_line);
      if (!token) {
        GiveBack(taken);
        return std::nullopt;
      }
      taken.emplace_back(lock_name, detail::TokenOfText(token->c_str()));
      had[lock_name] = taken.back().second;
    }
  } catch (...) {
    GiveBack(taken);
    throw;
  }
  std::vector<Token> tokens;
  tokens.reserve(lock_names.size());
  for (const std::string &lock_name : lock_names) tokens.push_back(had.at(lock_name));
  return tokens;
}

std::map<std::string, Token> Session::HeldInSession(const std::vector<std::string> &order) {
  std::lock_guard<std::mutex> lock(work_mutex_);
  CheckHeld();
  pqxx::nontransaction tx(*work_conn_);
  const pqxx::row row = pqxx_compat::ExecParams1(
      tx,
      "SELECT array_agg(l.token ORDER BY u.i) FROM unnest($2::text[]) WITH ORDINALITY u(n, i) "
      "LEFT JOIN fencing_leases l ON l.lock_name = u.n AND l.session_id = $1 AND l.live",
      id_, ArrayLiteral(order));
  // "{17,NULL,42}": one element per name of order.
  const std::string text = row[0].c_str();
  std::map<std::string, Token> held;
  std::string::size_type start = 1;
  for (const std::string &lock_name : order) {
    std::string::size_type end = text.find(',', start);
    if (end == std::string::npos) end = text.size() - 1;
    const std::string element = text.substr(start, end - start);
    if (element != "NULL") held[lock_name] = detail::TokenOfText(element.c_str());
    start = end + 1;
  }
  return held;
}

void Session::GiveBack(const std::vector<std::pair<std::string, Token>> &taken) noexcept {
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
    try {
      Release(it->first, it->second);  // leaves its place too, which gives the lease back
    } catch (...) {
      // The caller is on its way out with an answer or an error of its own;
      // the lease ends with the session at the latest.
    }
  }
}

template <typename... More>
std::optional<std::string> Session::AcquireInSession(const char *sql, const std::string &locks,
                                                     std::optional<milliseconds> wait,
                                                     More &&...more) {
  std::lock_guard<std::mutex> lock(work_mutex_);
  CheckHeld();
  // READ COMMITTED, as the waiting acquire requires (pqxx's BEGIN leaves the
  // level to default_transaction_isolation).
  pqxx::work tx(*work_conn_);
  pqxx_compat::Exec0(tx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
  const std::string wait_text = wait ? IntervalText(*wait) : std::string();
  // A null char pointer is SQL NULL (no wait) to libpqxx 6 and 7 alike.
  const pqxx::row row = pqxx_compat::ExecParams1(
      tx, sql, id_, locks, wait ? wait_text.c_str() : nullptr, std::forward<More>(more)...);
  tx.commit();
  if (row[0].is_null()) return std::nullopt;
  return std::string(row[0].c_str());
}

bool Session::Release(const std::string &lock_name, Token token) {
  std::lock_guard<std::mutex> lock(work_mutex_);
  const auto taken = line_places_.find(lock_name);
  if (taken != line_places_.end() && taken->second.first == token) {
    const std::int64_t place = taken->second.second;
    line_places_.erase(taken);
    // The place a lease was taken through is kept while the lease lives;
    // left after the release (the select list runs in order), so that it is
    // the release's answer that counts.
    pqxx::nontransaction tx(*work_conn_);
    return pqxx_compat::ExecParams1(tx, "SELECT fencing_release($1, $2), fencing_line_leave($3)",
                                    lock_name, token, place)[0]
        .as<bool>();
  }
  pqxx::nontransaction tx(*work_conn_);
  return pqxx_compat::ExecParams1(tx, "SELECT fencing_release($1, $2)", lock_name, token)[0]
      .as<bool>();
}

int Session::Close() {
  heartbeat_->Stop();  // no renewal after the close
  std::lock_guard<std::mutex> lock(work_mutex_);
  if (closed_) return 0;
  closed_ = true;
  line_wake_.notify_all();  // the waits in line end (their places go with the session)
  line_places_.clear();
  pqxx::nontransaction tx(*work_conn_);
  return pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", id_)[0].as<int>();
}

}  // namespace pg_fencing::client

namespace pg_fencing::client {

SessionLease::~SessionLease() {
  try {
    if (held()) Release();
  } catch (...) {
    // A destructor must not throw; the lease ends with the session.
  }
}

std::string SessionLease::Describe() const {
  const std::string session = " in fencing session " + std::to_string(session_.id());
  switch (mode_) {
    case LeaseOptions::Mode::kShared:
      return "lock \"" + lock_name_ + "\" (shared)" + session;
    case LeaseOptions::Mode::kPermit:
      return "a permit of semaphore \"" + lock_name_ + "\"" + session;
    case LeaseOptions::Mode::kExclusive:
      break;
  }
  return "lock \"" + lock_name_ + "\"" + session;
}

bool SessionLease::held() const { return !released_ && session_.held(); }

void SessionLease::CheckHeld() const {
  if (!held()) {
    throw LeaseLostError(Describe() + " (token " + detail::TokenText(token_) +
                         ") is no longer held: " + lost_reason());
  }
}

std::string SessionLease::lost_reason() const {
  if (released_) return "released";
  return session_.lost_reason();
}

bool SessionLease::Release() {
  if (released_.exchange(true)) return false;
  return session_.Release(lock_name_, token_);
}

}  // namespace pg_fencing::client
