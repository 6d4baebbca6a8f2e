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

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <pqxx/pqxx>

#include "pg_fencing/heartbeat.hpp"
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

// A lock this process holds, kept alive by a heartbeat until released: a
// Lease, or a RenewedLock from another service (renewed_lock.hpp).
// Destroying one releases it if it is still held, and never throws.
class HeldLock {
 public:
  virtual ~HeldLock() = default;

  // The fencing token to send with every write made under the lock.
  virtual Token token() const noexcept = 0;
  // The lock in its service's terms, for messages: 'lock "x"', "Redis key lock:x".
  virtual std::string Describe() const = 0;
  // False once the lock is known lost, judged on the monotonic clock (see
  // Heartbeat): a paused process wakes up to held() = false, if it looks.
  // False after Release() too.
  virtual bool held() const = 0;
  // Throws LeaseLostError unless held().
  virtual void CheckHeld() const = 0;
  // Why the lock was lost; empty while held.
  virtual std::string lost_reason() const = 0;
  // Gives the lock back now; whether the service still had it as ours.
  // Idempotent: later calls return false.
  virtual bool Release() = 0;
};

struct LeaseOptions {
  std::string conninfo;            // libpq connection string
  std::string lock_name;           // fencing_acquire's lock_name
  std::string holder;              // unique per process, e.g. host:pid
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

class Lease final : public HeldLock {
 public:
  // Acquires the lease (fencing_acquire with or without wait) and starts the
  // heartbeat.  Throws LeaseUnavailableError when the lock is busy, and
  // pqxx errors for database trouble; std::invalid_argument if ttl is not
  // positive or the heartbeat is not shorter than ttl - SafetyMargin(ttl).
  explicit Lease(LeaseOptions options);
  // Stops the heartbeat and releases the lease if it is still held; never
  // throws.
  ~Lease() override;

  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;

  Token token() const noexcept override { return token_; }
  const std::string &lock_name() const noexcept { return options_.lock_name; }
  // 'lock "name"'.
  std::string Describe() const override;

  // False once the lease is known lost.  Judged conservatively on the
  // client's monotonic clock: the lease counts as lost when the last
  // successful renewal's request was sent more than ttl - SafetyMargin(ttl)
  // ago, whether or not the heartbeat thread has run since (it may have been
  // paused with the rest of the process).  False after Release() too.
  bool held() const override;
  // Throws LeaseLostError unless held().
  void CheckHeld() const override;
  // Why the lease was lost; empty while held.
  std::string lost_reason() const override;

  // Releases now (fencing_release); returns whether the server still had it
  // live.  Idempotent: later calls return false.  Stops the heartbeat first.
  // Throws pqxx errors if the server cannot be reached (the lease then ends
  // by itself after ttl).
  bool Release() override;

  // How much earlier than the server the client gives the lease up (see
  // Heartbeat::SafetyMargin): held() is false from (send time of the last
  // successful acquire or renew) + ttl - margin on.
  static std::chrono::milliseconds SafetyMargin(std::chrono::milliseconds ttl) noexcept {
    return Heartbeat::SafetyMargin(ttl);
  }

 private:
  // The heartbeat's renewal: pipelined, given up at the deadline.
  Heartbeat::Renewal Renew(Heartbeat::Clock::time_point deadline);
  Heartbeat::Renewal RenewPipelined(Heartbeat::Clock::time_point deadline);
  // fencing_release, on a new connection if the heartbeat's is gone.
  bool GiveBack();

  LeaseOptions options_;
  Token token_ = 0;
  // The connection belongs to the constructor until the heartbeat starts,
  // then to the heartbeat thread, then (once it stopped) to GiveBack().
  std::unique_ptr<pqxx::connection> heartbeat_conn_;
  // Only the heartbeat thread reads or writes this: a renewal is on the wire
  // and heartbeat_conn_ cannot take another statement.
  bool renew_in_flight_ = false;
  std::unique_ptr<Heartbeat> heartbeat_;
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
    pqxx::result result = tx.exec_params(sql, token, std::forward<Args>(args)...);
    tx.commit();
    return result;
  } catch (const pqxx::sql_error &error) {
    RethrowMapped(error);
  }
}

}  // namespace pg_fencing::client
