// Lease: a fencing_acquire'd lock kept alive by a heartbeat thread.
//
// Timing.  The server starts a lease's ttl when it runs the request, which is
// after the client sent it, so "send time + ttl" on the client's monotonic
// clock is never later than the server's expiry (clock rates aside).  held()
// answers from that alone, minus SafetyMargin(), so a process that was
// paused, or a heartbeat that is stuck, can never make held() claim a lease
// the server may already have given away.  The heartbeat thread only moves
// that deadline forward, and reports the loss (on_lost) as soon as it sees
// that no renewal can land before the deadline any more.
//
// Connections.  The lease uses one connection, heartbeat_conn_, for the
// acquire, every renewal and the release:
//  - acquiring on it proves, before the constructor returns, that the
//    connection the heartbeat depends on works; there is no window in which
//    the lease is granted but its heartbeat cannot connect;
//  - renew and release must come from the role that acquired, which the same
//    connection guarantees whatever the connection string resolves to;
//  - one connection per lease, not two.
// The connection belongs to the constructor until the thread starts, then to
// the thread, then (after the thread has been joined) to Release().
//
// Renewals are sent asynchronously (pqxx::pipeline, then poll() on the
// socket) so that the thread can give up waiting for an answer at the
// deadline: a renewal stuck behind a row lock or a dead network must not
// delay on_lost.  A pipeline takes plain SQL text, so the renewal's values
// are quoted literals (PQescapeStringConn) rather than parameters.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "pg_fencing/client.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::client {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// '1500 milliseconds': the text form the SQL casts to interval.
std::string IntervalText(milliseconds duration) {
  return std::to_string(duration.count()) + " milliseconds";
}

std::string TokenText(Token token) {
  char buf[kTokenTextBufferSize];
  const std::size_t length = FormatToken(token, buf);
  return std::string(buf, length);
}

// The value fencing_acquire returned: a token, or NULL when the lock is busy.
std::optional<Token> TokenFromField(const pqxx_compat::Field &field) {
  if (field.is_null()) return std::nullopt;
  const ParseResult parsed = ParseToken(field.c_str());
  if (parsed.status != ParseStatus::kOk) {
    throw std::runtime_error(std::string("fencing_acquire returned a malformed token: \"") +
                             field.c_str() + "\"");
  }
  return parsed.value;
}

// The caller's view of a lock for messages: 'lock "name"'.
std::string Describe(const LeaseOptions &options) { return "lock \"" + options.lock_name + "\""; }

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

}  // namespace

milliseconds Lease::SafetyMargin(milliseconds ttl) noexcept {
  return std::min(std::max(ttl / 10, milliseconds(50)), ttl / 2);
}

milliseconds Lease::HeartbeatPeriod() const noexcept {
  if (options_.heartbeat.count() > 0) return options_.heartbeat;
  return std::max(options_.ttl / 3, milliseconds(1));
}

Lease::Lease(LeaseOptions options) : options_(std::move(options)) {
  if (options_.ttl <= milliseconds(0)) {
    throw std::invalid_argument("lease ttl must be positive (" + Describe(options_) + ")");
  }
  if (options_.heartbeat < milliseconds(0)) {
    throw std::invalid_argument("heartbeat must not be negative (" + Describe(options_) + ")");
  }
  if (HeartbeatPeriod() >= options_.ttl - SafetyMargin(options_.ttl)) {
    throw std::invalid_argument(
        "heartbeat must be shorter than ttl minus the safety margin, or the lease lapses between "
        "renewals (" +
        Describe(options_) + ")");
  }

  heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);

  const Clock::time_point sent = Clock::now();
  std::optional<Token> granted;
  {
    pqxx::work tx(*heartbeat_conn_);
    // The waiting form needs READ COMMITTED; pqxx's BEGIN leaves the level to
    // default_transaction_isolation, which may say otherwise.  The other
    // form then cannot fail on a serialization conflict either.
    pqxx_compat::Exec0(tx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
    const pqxx::row row =
        options_.wait ? pqxx_compat::ExecParams1(
                            tx, "SELECT fencing_acquire($1, $2, $3::interval, $4::interval)",
                            options_.lock_name, options_.holder, IntervalText(options_.ttl),
                            IntervalText(*options_.wait))
                      : pqxx_compat::ExecParams1(tx, "SELECT fencing_acquire($1, $2, $3::interval)",
                                                 options_.lock_name, options_.holder,
                                                 IntervalText(options_.ttl));
    granted = TokenFromField(row[0]);
    tx.commit();
  }
  if (!granted) {
    throw LeaseUnavailableError(
        Describe(options_) + " is held by another holder" +
        (options_.wait ? " (waited " + std::to_string(options_.wait->count()) + " ms)" : ""));
  }
  token_ = *granted;
  valid_from_ = sent;

  try {
    // A wait can outlast the ttl: the server started the lease when it
    // granted it, not when we asked, so our send time would make the lease
    // look expired (or nearly) already.  One renewal right away gives a send
    // time close to the grant.
    if (options_.wait && Clock::now() - sent > SafetyMargin(options_.ttl)) {
      const Clock::time_point renew_sent = Clock::now();
      if (!RenewOn(*heartbeat_conn_, options_.lock_name, token_, options_.ttl)) {
        throw LeaseUnavailableError(Describe(options_) + " was granted (token " +
                                    TokenText(token_) +
                                    ") but expired before it could be renewed; ttl too short?");
      }
      valid_from_ = renew_sent;
    }
    // The thread's first act is to take the mutex, so it sees heartbeat_id_.
    std::lock_guard<std::mutex> lock(mutex_);
    heartbeat_ = std::thread(&Lease::HeartbeatLoop, this);
    heartbeat_id_ = heartbeat_.get_id();
  } catch (...) {
    // No destructor will run: give the lock back rather than let it linger
    // for a whole ttl.
    try {
      ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
    } catch (...) {
    }
    throw;
  }
}

Lease::~Lease() {
  try {
    bool on_heartbeat_thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      on_heartbeat_thread = std::this_thread::get_id() == heartbeat_id_;
    }
    wake_.notify_all();
    if (heartbeat_.joinable()) {
      // Destroying the lease from its own on_lost cannot wait for the thread
      // it runs on; see on_lost in client.hpp.
      if (on_heartbeat_thread) {
        heartbeat_.detach();
      } else {
        heartbeat_.join();
      }
    }
    if (held()) Release();
  } catch (...) {
    // A destructor must not throw; the server ends the lease after ttl.
  }
  // std::thread's destructor terminates the process if it is still joinable.
  if (heartbeat_.joinable()) {
    try {
      heartbeat_.detach();
    } catch (...) {
    }
  }
}

Clock::time_point Lease::DeadlineLocked() const {
  return valid_from_ + options_.ttl - SafetyMargin(options_.ttl);
}

bool Lease::HeldLocked(Clock::time_point now) const {
  return !released_ && lost_reason_.empty() && now < DeadlineLocked();
}

bool Lease::held() const {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  return HeldLocked(now);
}

void Lease::CheckHeld() const {
  if (!held()) {
    throw LeaseLostError(Describe(options_) + " (token " + TokenText(token_) +
                         ") is no longer held: " + lost_reason());
  }
}

std::string Lease::lost_reason() const {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!lost_reason_.empty()) return lost_reason_;
  if (released_) return "released by its holder";
  if (now >= DeadlineLocked()) {
    // The heartbeat thread has not run since the deadline passed (say, the
    // whole process was paused); it will report the same when it does.
    return "not renewed within ttl minus the safety margin";
  }
  return std::string();
}

bool Lease::Release() {
  bool on_heartbeat_thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (released_) return false;
    released_ = true;
    stopping_ = true;
    on_heartbeat_thread = std::this_thread::get_id() == heartbeat_id_;
  }
  wake_.notify_all();
  if (on_heartbeat_thread) {
    // Called from on_lost.  If the renewal that timed out is still on the
    // wire, the connection cannot take the release; the lease is lost anyway.
    if (renew_in_flight_) return false;
  } else if (heartbeat_.joinable()) {
    heartbeat_.join();  // from here on the connection is ours
  }
  // The heartbeat may have dropped its connection (a renewal timed out), or
  // found it broken: release on a new one rather than leave the lock to
  // expire.  Likewise if it broke since the last renewal; retrying is safe,
  // a second fencing_release of the same token just returns false.
  if (!heartbeat_conn_ || !heartbeat_conn_->is_open()) {
    heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  }
  try {
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  } catch (const pqxx::broken_connection &) {
    heartbeat_conn_ = std::make_unique<pqxx::connection>(options_.conninfo);
    return ReleaseOn(*heartbeat_conn_, options_.lock_name, token_);
  }
}

void Lease::MarkLost(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Once: and not after the holder let go or began destroying the lease.
    if (stopping_ || released_ || !lost_reason_.empty()) return;
    lost_reason_ = reason;
  }
  if (options_.on_lost) {
    try {
      options_.on_lost(reason);
    } catch (...) {
      // The callback's exception has nowhere to go on this thread.
    }
  }
}

Lease::RenewOutcome Lease::RenewOnce(Clock::time_point deadline, Clock::time_point &sent) {
  pqxx::connection &conn = *heartbeat_conn_;
  const std::string sql = "SELECT fencing_renew(" + conn.quote(options_.lock_name) + ", " +
                          conn.quote(TokenText(token_)) + ", " +
                          conn.quote(IntervalText(options_.ttl)) + "::interval)";
  sent = Clock::now();
  pqxx::nontransaction tx(conn);
  pqxx::pipeline pipe(tx);
  renew_in_flight_ = true;
  const pqxx::pipeline::query_id id = pipe.insert(sql);  // sent at once: retain is 0
  for (;;) {
    pipe.resume();  // reads what has arrived, without blocking
    if (pipe.is_finished(id)) break;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      // Report before the pipeline's destructor cancels the query, which
      // needs a connection of its own and may itself hang.
      MarkLost("renewal got no answer before the lease's safe deadline (ttl minus " +
               std::to_string(SafetyMargin(options_.ttl).count()) +
               " ms since the last successful renewal was sent)");
      return RenewOutcome::kTimedOut;
    }
    const int fd = conn.sock();
    if (fd < 0) throw pqxx::broken_connection("heartbeat connection has no socket");
    pollfd pfd{};
    pfd.fd = fd;
    pfd.events = POLLIN;
    // Round up, so that we never spin on a sub-millisecond remainder.
    const auto wait = std::chrono::ceil<milliseconds>(deadline - now);
    if (poll(&pfd, 1, static_cast<int>(std::min<milliseconds::rep>(wait.count(), 60000))) < 0 &&
        errno != EINTR) {
      throw std::runtime_error(std::string("poll on the heartbeat connection: ") +
                               std::strerror(errno));
    }
  }
  const pqxx::result result = pipe.retrieve(id);  // throws the server's error, if any
  const bool renewed = result.at(0).at(0).as<bool>();
  return renewed ? RenewOutcome::kRenewed : RenewOutcome::kRefused;
}

void Lease::HeartbeatLoop() {
  try {
    const milliseconds period = HeartbeatPeriod();
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (stopping_ || !lost_reason_.empty()) return;
      const Clock::time_point now = Clock::now();
      const Clock::time_point deadline = DeadlineLocked();
      if (now >= deadline) {
        // Woken late (the process was paused) or too late to renew in time.
        lock.unlock();
        MarkLost("not renewed before the lease's safe deadline (ttl minus " +
                 std::to_string(SafetyMargin(options_.ttl).count()) +
                 " ms since the last successful renewal was sent); was the process paused?");
        return;
      }
      const Clock::time_point next = valid_from_ + period;
      if (now < next) {
        // Wake for the deadline too, in case the renewal is due after it.
        wake_.wait_until(lock, std::min(next, deadline));
        continue;
      }
      lock.unlock();

      Clock::time_point sent;
      std::string failure;
      RenewOutcome outcome = RenewOutcome::kRefused;
      try {
        outcome = RenewOnce(deadline, sent);
      } catch (const std::exception &error) {
        failure = error.what();
      } catch (...) {
        failure = "unknown exception";
      }
      // The pipeline is gone: the connection may take statements again.
      renew_in_flight_ = false;
      if (outcome == RenewOutcome::kTimedOut) {
        // An answer may still be on its way; start afresh if ever needed.
        heartbeat_conn_.reset();
        return;  // RenewOnce has reported the loss
      }
      if (outcome == RenewOutcome::kRenewed) {
        lock.lock();
        valid_from_ = std::max(valid_from_, sent);
        continue;
      }
      MarkLost(failure.empty()
                   ? "renewal refused: the lease expired, was released, or was taken over"
                   : "renewal failed: " + failure);
      return;
    }
  } catch (...) {
    // Nothing above should throw (only the mutex could); never let anything
    // out of the thread.
    try {
      MarkLost("heartbeat thread failed");
    } catch (...) {
    }
  }
}

}  // namespace pg_fencing::client
