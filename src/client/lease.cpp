// Lease: a fencing_acquire'd lock kept alive by a heartbeat thread.
//
// Timing.  The server starts a lease's ttl when it runs the request, which is
// after the client sent it, so "send time + ttl" on the client's monotonic
// clock is never later than the server's expiry (clock rates aside).  held()
// answers from that alone, minus SafetyMargin(), so a process that was
// paused, or a heartbeat that is stuck, can never make held() claim a lease
// the server may already have given away.  The heartbeat thread (Heartbeat,
// heartbeat.cpp, shared with the other services' locks) only moves that
// deadline forward, and reports the loss (on_lost) as soon as it sees that no
// renewal can land before the deadline any more.
//
// Connections.  A lease made without a Client uses one connection,
// heartbeat_conn_, for the acquire, every renewal and the release:
//  - acquiring on it proves, before the constructor returns, that the
//    connection the heartbeat depends on works; there is no window in which
//    the lease is granted but its heartbeat cannot connect;
//  - renew and release must come from the role that acquired, which the same
//    connection guarantees whatever the connection string resolves to;
//  - one connection per lease, not two.
// The connection belongs to the constructor until the thread starts, then to
// the thread, then (after the thread has been joined) to GiveBack().
//
// A lease made with a Client is renewed by the client's heartbeat
// (SharedHeartbeat, shared_heartbeat.cpp), with the client's other sessions
// and leases, on the client's one heartbeat connection.  Its acquire (and
// the renewal right after a long wait) go on a connection of the lease's,
// closed once the heartbeat has it; its release on a new one, made for it
// (GiveBack): the release is not sent on the heartbeat connection, where a
// release stuck behind a row lock would hold up every renewal.  All use the
// client's conninfo, so the role that acquired is the one that renews and
// releases.
//
// Renewals are sent asynchronously (detail::BooleanByDeadline,
// deadline_query.hpp: pqxx::pipeline, then poll() on the
// socket) so that the thread can give up waiting for an answer at the
// deadline: a renewal stuck behind a row lock or a dead network must not
// delay on_lost.  A pipeline takes plain SQL text, so the renewal's values
// are quoted literals (PQescapeStringConn) rather than parameters.
#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "deadline_query.hpp"
#include "shared_heartbeat.hpp"
#include "pg_fencing/client.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "sql_text.hpp"

namespace pg_fencing::client {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using detail::IntervalText;
using detail::TokenText;

// The value fencing_acquire returned: a token, or NULL when the lock is busy.
std::optional<Token> TokenFromField(const pqxx_compat::Field &field) {
  if (field.is_null()) return std::nullopt;
  return detail::TokenOfText(field.c_str());
}

// fencing_release on conn; true if the server still had the lease live.
bool ReleaseOn(pqxx::connection &conn, const std::string &lock_name, Token token) {
  pqxx::nontransaction tx(conn);
  return pqxx_compat::ExecParams1(tx, "SELECT fencing_release($1, $2)", lock_name, token)[0]
      .as<bool>();
}

// Renews synchronously; used only by the constructor, before the thread runs.
bool RenewOn(pqxx::connection &conn, const std::string &lock_name, Token token, milliseconds ttl) {
  pqxx::nontransaction tx(conn);
  return pqxx_compat::ExecParams1(tx, "SELECT fencing_renew($1, $2, $3::interval)", lock_name,
                                  token, IntervalText(ttl))[0]
      .as<bool>();
}

// One attempt, with the acquire function of the lease's mode.  In READ
// COMMITTED: pqxx's BEGIN leaves the level to default_transaction_isolation,
// and at a stricter one an attempt that meets a just-changed lease row fails
// with a serialization error.
std::optional<Token> AcquireAtOnce(pqxx::connection &conn, const LeaseOptions &options) {
  pqxx::work tx(conn);
  pqxx_compat::Exec0(tx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
  std::optional<Token> granted;
  switch (options.mode) {
    case LeaseOptions::Mode::kExclusive:
      // A null char pointer is SQL NULL to libpqxx 6 and 7 alike.
      granted = TokenFromField(pqxx_compat::ExecParams1(
          tx, "SELECT fencing_acquire($1, $2, $3::interval, payload => $4::jsonb)",
          options.lock_name, options.holder, IntervalText(options.ttl),
          options.payload ? options.payload->c_str() : nullptr)[0]);
      break;
    case LeaseOptions::Mode::kShared:
      granted = TokenFromField(pqxx_compat::ExecParams1(
          tx, "SELECT fencing_acquire_shared($1, $2, $3::interval)", options.lock_name,
          options.holder, IntervalText(options.ttl))[0]);
      break;
    case LeaseOptions::Mode::kPermit:
      granted = TokenFromField(pqxx_compat::ExecParams1(
          tx, "SELECT fencing_acquire_permit($1, $2, $3::integer, $4::interval)",
          options.lock_name, options.holder, options.permits, IntervalText(options.ttl))[0]);
      break;
  }
  tx.commit();
  return granted;
}

// Waits up to options.wait with CALL fencing_await, outside any transaction
// block (a nontransaction: the procedure must end its own transactions).
// It commits each attempt before it sleeps, so that a follower waiting for
// hours holds no snapshot all that time; the function form
// fencing_acquire(..., wait) would hold the xmin horizon of the whole
// database for as long as it waits.
std::optional<Token> AcquireWaiting(pqxx::connection &conn, const LeaseOptions &options) {
  const char *kind = "exclusive";
  std::string permits;
  if (options.mode == LeaseOptions::Mode::kShared) kind = "shared";
  if (options.mode == LeaseOptions::Mode::kPermit) {
    kind = "permit";
    permits = std::to_string(options.permits);
  }
  pqxx::nontransaction tx(conn);
  return TokenFromField(pqxx_compat::ExecParams1(
      tx,
      "CALL fencing_await($1, $2, $3::interval, $4::interval, kind => $5, "
      "permits => $6::integer, payload => $7::jsonb)",
      options.lock_name, options.holder, IntervalText(options.ttl), IntervalText(*options.wait),
      kind, permits.empty() ? nullptr : permits.c_str(),
      options.payload ? options.payload->c_str() : nullptr)[0]);
}

}  // namespace

// ---- Client ------------------------------------------------------------------

Client::Client(std::string conninfo)
    : heartbeat_(std::make_shared<detail::SharedHeartbeat>(std::move(conninfo))) {}

Client::~Client() = default;

const std::string &Client::conninfo() const noexcept { return heartbeat_->conninfo(); }

std::size_t Client::renewing() const { return heartbeat_->size(); }

std::string Client::ConninfoFor(const std::string &given, const std::string &what) const {
  if (!given.empty() && given != conninfo()) {
    throw std::invalid_argument(what +
                                ": made with a Client, it uses the client's conninfo; leave "
                                "conninfo empty, or give the client's");
  }
  return conninfo();
}

// ---- Lease ---------------------------------------------------------------------

Lease::Lease(LeaseOptions options) : Lease(std::move(options), nullptr) {}

Lease::Lease(Client &client, LeaseOptions options)
    : Lease(
          [&] {
            options.conninfo =
                client.ConninfoFor(options.conninfo, "lock \"" + options.lock_name + "\"");
            return std::move(options);
          }(),
          client.heartbeat_) {}

Lease::Lease(LeaseOptions options, std::shared_ptr<detail::SharedHeartbeat> shared)
    : options_(std::move(options)), shared_(std::move(shared)) {
  if (options_.on_at_risk) {
    Heartbeat::CheckAtRiskFraction(options_.ttl, options_.heartbeat, options_.at_risk_fraction,
                                   Describe());
  } else {
    Heartbeat::CheckTiming(options_.ttl, options_.heartbeat, Describe());
  }

  if (options_.payload && options_.mode != LeaseOptions::Mode::kExclusive) {
    throw std::invalid_argument(Describe() + ": a payload needs an exclusive lease");
  }

  heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);

  const Clock::time_point sent = Clock::now();
  const std::optional<Token> granted = options_.wait ? AcquireWaiting(*heartbeat_conn_, options_)
                                                     : AcquireAtOnce(*heartbeat_conn_, options_);
  if (!granted) {
    throw LeaseUnavailableError(
        Describe() +
        (options_.mode == LeaseOptions::Mode::kPermit ? ": every permit is taken"
                                                      : " is held by another holder") +
        (options_.wait ? " (waited " + std::to_string(options_.wait->count()) + " ms)" : ""));
  }
  token_ = *granted;
  Clock::time_point valid_from = sent;

  try {
    // A wait can outlast the ttl: the server started the lease when it
    // granted it, not when we asked, so our send time would make the lease
    // look expired (or nearly) already.  One renewal right away gives a send
    // time close to the grant.
    if (options_.wait && Clock::now() - sent > SafetyMargin(options_.ttl)) {
      const Clock::time_point renew_sent = Clock::now();
      if (!RenewOn(*heartbeat_conn_, options_.lock_name, token_, options_.ttl)) {
        throw LeaseUnavailableError(Describe() + " was granted (token " + TokenText(token_) +
                                    ") but expired before it could be renewed; ttl too short?");
      }
      valid_from = renew_sent;
    }
    Heartbeat::Options heartbeat;
    heartbeat.ttl = options_.ttl;
    heartbeat.period = options_.heartbeat;
    if (shared_) {
      heartbeat.group = detail::SharedHeartbeat::Group(shared_);
    } else {
      heartbeat.renew = [this](Clock::time_point deadline) { return Renew(deadline); };
    }
    heartbeat.refused = "the lease expired, was released or revoked, or was taken over";
    heartbeat.on_lost = options_.on_lost;
    heartbeat.on_at_risk = options_.on_at_risk;
    heartbeat.at_risk_fraction = options_.at_risk_fraction;
    heartbeat_ = std::make_unique<Heartbeat>(std::move(heartbeat), valid_from);
    if (shared_) {
      detail::HeartbeatTarget target;
      target.lock_name = options_.lock_name;
      target.token = token_;
      target.ttl = options_.ttl;
      shared_->Track(heartbeat_.get(), std::move(target));
    }
    heartbeat_->Start();
  } catch (...) {
    // No destructor will run: give the lock back rather than let it linger
    // for a whole ttl.
    if (shared_ && heartbeat_) {
      heartbeat_->Stop();
      shared_->Untrack(heartbeat_.get());
    }
    try {
      ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
    } catch (...) {
    }
    throw;
  }
  // The client's heartbeat renews it: the acquire's connection is done.
  if (shared_) heartbeat_conn_.reset();
}

Lease::~Lease() {
  // The hand-over thread leaves without releasing; the release is ours.
  {
    std::lock_guard<std::mutex> lock(work_mutex_);
    closing_ = true;
  }
  work_changed_.notify_all();
  if (hand_over_thread_.joinable()) hand_over_thread_.join();
  try {
    // Destroying the lease from its own on_lost cannot wait for the thread
    // it runs on; see on_lost in client.hpp.
    const bool live = heartbeat_->held();
    if (heartbeat_->Stop() && live) GiveBack();
  } catch (...) {
    // A destructor must not throw; the server ends the lease after ttl.
  }
  if (shared_) shared_->Untrack(heartbeat_.get());
}

std::string Lease::Describe() const {
  switch (options_.mode) {
    case LeaseOptions::Mode::kShared:
      return "lock \"" + options_.lock_name + "\" (shared)";
    case LeaseOptions::Mode::kPermit:
      return "a permit of semaphore \"" + options_.lock_name + "\"";
    case LeaseOptions::Mode::kExclusive:
      break;
  }
  return "lock \"" + options_.lock_name + "\"";
}

bool Lease::held() const { return heartbeat_->held(); }

void Lease::CheckHeld() const {
  if (!held()) {
    throw LeaseLostError(Describe() + " (token " + TokenText(token_) +
                         ") is no longer held: " + lost_reason());
  }
}

std::string Lease::lost_reason() const { return heartbeat_->lost_reason(); }

bool Lease::Release() {
  if (!heartbeat_->Stop()) return false;  // from here on the connection is ours
  return GiveBack();
}

bool Lease::GiveBack() {
  // With a Client's heartbeat: on a connection made for it, and closed.
  if (shared_) {
    pqxx::connection conn(options_.conninfo);
    return ReleaseOn(conn, options_.lock_name, token_);
  }
  // Called from on_lost.  If the renewal that timed out is still on the
  // wire, the connection cannot take the release; the lease is lost anyway.
  if (heartbeat_->OnHeartbeatThread() && renew_in_flight_) return false;
  // The heartbeat may have dropped its connection (a renewal timed out), or
  // found it broken: release on a new one rather than leave the lock to
  // expire.  Likewise if it broke since the last renewal; retrying is safe,
  // a second fencing_release of the same token just returns false.
  if (!heartbeat_conn_ || !heartbeat_conn_->is_open()) {
    if (options_.payload && options_.mode != LeaseOptions::Mode::kExclusive) {
      throw std::invalid_argument(Describe() + ": a payload needs an exclusive lease");
    }

    heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  }
  try {
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  } catch (const pqxx::broken_connection &) {
    if (options_.payload && options_.mode != LeaseOptions::Mode::kExclusive) {
      throw std::invalid_argument(Describe() + ": a payload needs an exclusive lease");
    }

    heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  }
}

Heartbeat::Renewal Lease::Renew(Clock::time_point deadline) {
  Heartbeat::Renewal outcome;
  try {
    outcome = RenewPipelined(deadline);
  } catch (...) {
    renew_in_flight_ = false;  // the pipeline is gone
    throw;
  }
  renew_in_flight_ = false;
  // An answer may still be on its way; start afresh if ever needed.
  if (outcome == Heartbeat::Renewal::kTimedOut) heartbeat_conn_.reset();
  return outcome;
}

Heartbeat::Renewal Lease::RenewPipelined(Clock::time_point deadline) {
  pqxx::connection &conn = *heartbeat_conn_;
  const std::string sql = "SELECT fencing_renew(" + conn.quote(options_.lock_name) + ", " +
                          conn.quote(TokenText(token_)) + ", " +
                          conn.quote(IntervalText(options_.ttl)) + "::interval)";
  const std::optional<bool> renewed = detail::BooleanByDeadline(
      conn, sql, deadline, renew_in_flight_, [this] { heartbeat_->ReportTimedOut(); });
  if (!renewed) return Heartbeat::Renewal::kTimedOut;
  return *renewed ? Heartbeat::Renewal::kRenewed : Heartbeat::Renewal::kRefused;
}

// ---- Graceful hand-over ----------------------------------------------------

Lease::WorkGuard &Lease::WorkGuard::operator=(WorkGuard &&other) noexcept {
  if (this != &other) {
    Finish();
    lease_ = other.lease_;
    other.lease_ = nullptr;
  }
  return *this;
}

void Lease::WorkGuard::Finish() noexcept {
  if (lease_ == nullptr) return;
  lease_->EndWork();
  lease_ = nullptr;
}

Lease::WorkGuard Lease::BeginWork() {
  std::lock_guard<std::mutex> lock(work_mutex_);
  if (handing_over_ || !held()) return WorkGuard();
  ++in_flight_;
  return WorkGuard(this);
}

void Lease::EndWork() noexcept {
  {
    std::lock_guard<std::mutex> lock(work_mutex_);
    --in_flight_;
  }
  work_changed_.notify_all();
}

void Lease::HandOver(milliseconds grace) {
  const Clock::time_point deadline = Clock::now() + grace;
  {
    std::lock_guard<std::mutex> lock(work_mutex_);
    if (handing_over_) {
      hand_over_deadline_ = std::min(hand_over_deadline_, deadline);
    } else {
      handing_over_ = true;
      hand_over_deadline_ = deadline;
      hand_over_thread_ = std::thread(&Lease::HandOverRun, this);
    }
  }
  work_changed_.notify_all();
}

bool Lease::handing_over() const {
  std::lock_guard<std::mutex> lock(work_mutex_);
  return handing_over_;
}

bool Lease::WaitHandedOver(milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(work_mutex_);
  return work_changed_.wait_for(lock, timeout, [this] { return handed_over_; });
}

int Lease::work_in_flight() const {
  std::lock_guard<std::mutex> lock(work_mutex_);
  return in_flight_;
}

void Lease::HandOverRun() {
  {
    std::unique_lock<std::mutex> lock(work_mutex_);
    // The deadline may move forward (a second HandOver): wait in rounds.
    while (!closing_ && in_flight_ > 0 && Clock::now() < hand_over_deadline_) {
      work_changed_.wait_until(lock, hand_over_deadline_);
    }
    if (closing_) return;
  }
  try {
    Release();
  } catch (...) {
    // The server cannot be reached: the lease ends by itself after its ttl,
    // and the heartbeat has stopped renewing it.
  }
  {
    std::lock_guard<std::mutex> lock(work_mutex_);
    handed_over_ = true;
  }
  work_changed_.notify_all();
}

// ---- Reading the leader, revoking --------------------------------------------

std::optional<LeaderInfo> ReadLeader(pqxx::connection &conn, const std::string &lock_name) {
  pqxx::nontransaction tx(conn);
  const pqxx::result result =
      pqxx_compat::ExecParams(tx,
                              "SELECT holder, token::text, payload::text FROM fencing_leases "
                              "WHERE lock_name = $1 AND state = 'live'",
                              lock_name);
  if (result.empty()) return std::nullopt;
  const auto row = result[0];  // a row_ref in libpqxx 8
  LeaderInfo leader;
  leader.holder = row[0].as<std::string>();
  leader.token = *TokenFromField(row[1]);
  if (!row[2].is_null()) leader.payload = row[2].as<std::string>();
  return leader;
}

Token Revoke(pqxx::connection &conn, const std::string &lock_name, const std::string &reason) {
  pqxx::nontransaction tx(conn);
  const pqxx::row row = pqxx_compat::ExecParams1(tx, "SELECT fencing_revoke($1, $2)", lock_name,
                                                 reason.empty() ? nullptr : reason.c_str());
  const std::optional<Token> mark = TokenFromField(row[0]);
  if (!mark) throw std::runtime_error("fencing_revoke returned NULL");
  return *mark;
}

}  // namespace pg_fencing::client
