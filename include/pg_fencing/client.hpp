// pg_fencing_client: leases and fenced writes from C++, on libpqxx.
//
//   pg_fencing::client::LeaseOptions opts;
//   opts.conninfo = "dbname=app";
//   opts.lock_name = "nightly-job";
//   opts.holder = "worker-17";
//   opts.ttl = std::chrono::seconds(10);
//   opts.on_lost = [](const std::string &why) { /* stop acting */ };
//   pg_fencing::client::Lease lease(opts);          // throws LeaseUnavailableError if busy
//   pqxx::connection db("dbname=app");
//   pg_fencing::client::ExecFenced(db, "UPDATE jobs SET token = $1, state = $2 WHERE id = $3",
//                                  lease.token(), "done", 42);   // throws StaleTokenError (55Z01)
//
// The lease is a row in the database (see the extension's fencing_acquire);
// this class keeps it alive with a heartbeat on a connection of its own and
// tells the holder, as early as it can know, that it may no longer act.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <string>
#include <thread>

#include <pqxx/pqxx>

#include "pg_fencing/pqxx_compat.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::client {

// SQLSTATE 55Z01: the write carried a token lower than the resource has seen.
class StaleTokenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SQLSTATE 55Z02: the write carried no token.
class MissingTokenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The lock is held by someone else (after the wait, if one was given).
class LeaseUnavailableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The lease was lost (renewal refused or failed, or it can no longer be
// renewed before it expires); raised by Lease::CheckHeld().
class LeaseLostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LeaseOptions {
  std::string conninfo;   // libpq connection string
  std::string lock_name;  // fencing_acquire's lock_name
  std::string holder;     // unique per process, e.g. host:pid
  std::chrono::milliseconds ttl{10000};
  // Wait up to this long for a busy lock; nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // Heartbeat period; zero means ttl / 3.
  std::chrono::milliseconds heartbeat{0};
  // Called once, from the heartbeat thread, when the lease is lost: renewal
  // refused or failed, or no renewal can land before the deadline any more
  // (see held()).  Not called after Release() or once destruction began.  It
  // may call Release() (which then returns without waiting for the thread),
  // but must not destroy the Lease.
  std::function<void(const std::string &reason)> on_lost;
};

class Lease {
 public:
  // Acquires the lease (fencing_acquire with or without wait) and starts the
  // heartbeat.  Throws LeaseUnavailableError when the lock is busy, and
  // pqxx errors for database trouble; std::invalid_argument if ttl is not
  // positive or the heartbeat is not shorter than ttl - SafetyMargin(ttl).
  explicit Lease(LeaseOptions options);
  // Stops the heartbeat and releases the lease if it is still held; never
  // throws.
  ~Lease();

  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;

  Token token() const noexcept { return token_; }
  const std::string &lock_name() const noexcept { return options_.lock_name; }

  // False once the lease is known lost.  Judged conservatively on the
  // client's monotonic clock: the lease counts as lost when the last
  // successful renewal's request was sent more than ttl - SafetyMargin(ttl)
  // ago, whether or not the heartbeat thread has run since (it may have been
  // paused with the rest of the process).  False after Release() too.
  bool held() const;
  // Throws LeaseLostError unless held().
  void CheckHeld() const;
  // Why the lease was lost; empty while held.
  std::string lost_reason() const;

  // Releases now (fencing_release); returns whether the server still had it
  // live.  Idempotent: later calls return false.  Stops the heartbeat first.
  // Throws pqxx errors if the server cannot be reached (the lease then ends
  // by itself after ttl).
  bool Release();

  // How much earlier than the server the client gives the lease up:
  // max(ttl / 10, 50 ms), but at most ttl / 2.  held() is false from
  // (send time of the last successful acquire or renew) + ttl - margin on.
  // The margin absorbs the client's and the server's clocks running at
  // slightly different rates, and leaves a little room between a true
  // held() and the write that follows it (the token, not the margin, is what
  // makes a late write harmless).
  static std::chrono::milliseconds SafetyMargin(std::chrono::milliseconds ttl) noexcept;

 private:
  enum class RenewOutcome { kRenewed, kRefused, kTimedOut };

  void HeartbeatLoop();
  void MarkLost(const std::string &reason);
  std::chrono::milliseconds HeartbeatPeriod() const noexcept;
  std::chrono::steady_clock::time_point DeadlineLocked() const;
  bool HeldLocked(std::chrono::steady_clock::time_point now) const;
  RenewOutcome RenewOnce(std::chrono::steady_clock::time_point deadline,
                         std::chrono::steady_clock::time_point &sent);

  LeaseOptions options_;
  Token token_ = 0;
  std::unique_ptr<pqxx::connection> heartbeat_conn_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool released_ = false;
  std::string lost_reason_;
  // Send time of the request that last set the server-side expiry.
  std::chrono::steady_clock::time_point valid_from_;
  // Set (under mutex_) when the thread starts: Release() and the destructor
  // called from on_lost must not join the thread they run on.
  std::thread::id heartbeat_id_;
  // Only the heartbeat thread reads or writes this: a renewal is on the wire
  // and heartbeat_conn_ cannot take another statement.
  bool renew_in_flight_ = false;
  std::thread heartbeat_;
};

// Runs sql in its own transaction on conn with the token bound as $1 and the
// remaining arguments as $2, $3, ...; commits and returns the result.
// Throws StaleTokenError for SQLSTATE 55Z01, MissingTokenError for 55Z02,
// and lets every other pqxx exception through.
template <typename... Args>
pqxx::result ExecFenced(pqxx::connection &conn, const std::string &sql, Token token,
                        Args &&...args);

// Maps a pqxx::sql_error to our exception types; rethrows others unchanged.
[[noreturn]] void RethrowMapped(const pqxx::sql_error &error);

template <typename... Args>
pqxx::result ExecFenced(pqxx::connection &conn, const std::string &sql, Token token,
                        Args &&...args) {
  try {
    pqxx::work tx(conn);
    pqxx::result result = pqxx_compat::ExecParams(tx, sql, token, std::forward<Args>(args)...);
    tx.commit();
    return result;
  } catch (const pqxx::sql_error &error) {
    RethrowMapped(error);
  }
}

}  // namespace pg_fencing::client
