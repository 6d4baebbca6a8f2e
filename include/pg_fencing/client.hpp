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
// this class keeps it alive with a heartbeat and tells the holder, as early
// as it can know, that it may no longer act.
//
// Connections.  A Client (below) is one per process (per role): every
// Lease and Session (session.hpp) made with it is renewed by its one
// heartbeat thread, on its one connection, in one statement for all that
// are due.  A Lease made with a Client connects for its acquire and for its
// release only; one made without has a heartbeat thread and a connection
// of its own for its whole life.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <string>
#include <thread>

#include "pg_fencing/heartbeat.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::client {

namespace detail {
class SharedHeartbeat;  // src/client/shared_heartbeat.hpp, internal
}

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

// SQLSTATE 55Z03 (1.5): the write carried a token the database never
// granted (above every grant, or above the mark of a lock whose leases it
// grants): a bug in the caller, not a lost lease.
class NeverGrantedTokenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SQLSTATE 55Z04 (1.6): the COMMIT of a transaction that wrote under a
// lease which ended before it (ran out, released, revoked, granted again):
// nothing the transaction did was kept.  Acquire again and redo it.
class LeaseEndedError : public std::runtime_error {
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

// One heartbeat for every Lease and Session made with it (their
// constructors that take a Client): one thread and one connection (made
// when the first renewal is sent, closed when nothing is left to renew)
// renew them all, one statement for all that are due
// (fencing_session_renew and fencing_renew over arrays; no transaction, no
// snapshot and no named prepared statement, so a transaction-pooling
// PgBouncer's conninfo does).  Each keeps its own ttl, heartbeat period,
// held(), on_lost and on_at_risk, with the rules of Heartbeat
// (heartbeat.hpp).  A refusal, or an error the server raises for one of
// them (the statement is then sent again one by one), is the loss of that
// one alone; a broken connection, of every one in the statement (the next
// makes a new connection); and as the statement is one, a renewal that
// hangs on the server holds up those it shares the statement with, each
// reported lost at its own safe deadline.  on_lost is called from the
// client's heartbeat thread: a slow one delays every renewal.  (A lease's
// on_at_risk, if set, keeps a watch thread of its own; no connection.)
//
// One Client per process and role is the idea: a process of 1,000
// sessions makes one heartbeat connection, not 1,000.  What they make
// besides: a Session a work connection of its own (Acquire, Release,
// Close, its waits in line); a Lease a connection for its acquire (which
// its wait, CALL fencing_await, holds for the whole wait) and one for its
// release; a LeaderWatch its LISTEN connection.
//
//   pg_fencing::client::Client client("dbname=app application_name=worker-17");
//   pg_fencing::client::Session session(client, session_options);  // conninfo left empty
//   pg_fencing::client::Lease lease(client, lease_options);
//
// The Client may be destroyed before what it made: they keep its heartbeat
// until the last of them is gone.
class Client {
 public:
  // Connects to nothing yet: the heartbeat's connection is made when its
  // first renewal is sent.  Every connection of the client, and of the
  // sessions and leases made with it, uses this conninfo, so that renewals
  // come from the role that acquired.
  explicit Client(std::string conninfo);
  ~Client();

  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  const std::string &conninfo() const noexcept;
  // How many sessions and leases are in its heartbeat: made with it, and
  // not yet released, closed or destroyed (a lost one stays until then,
  // though it is never renewed again).
  std::size_t renewing() const;

 private:
  friend class Lease;
  friend class Session;
  // A Lease's or Session's conninfo: empty (the client's) or the client's;
  // std::invalid_argument otherwise.
  std::string ConninfoFor(const std::string &given, const std::string &what) const;

  std::shared_ptr<detail::SharedHeartbeat> heartbeat_;
};

struct LeaseOptions {
  // How the lock is taken: alone (fencing_acquire), shared with other
  // shared holders (fencing_acquire_shared), or as one of `permits` permits
  // of a semaphore (fencing_acquire_permit).  The token, the heartbeat and
  // the release work the same way for all three.
  enum class Mode { kExclusive, kShared, kPermit };
  Mode mode = Mode::kExclusive;
  int permits = 0;  // kPermit only: the semaphore's number of permits

  std::string conninfo;   // libpq connection string (with a Client: empty, or the client's)
  std::string lock_name;  // fencing_acquire's lock_name
  std::string holder;     // unique per process, e.g. host:pid
  std::chrono::milliseconds ttl{10000};
  // Wait up to this long for a busy lock (CALL fencing_await: the waiting
  // connection holds no snapshot, however long it waits); nullopt: try once.
  std::optional<std::chrono::milliseconds> wait;
  // Heartbeat period; zero means ttl / 3.
  std::chrono::milliseconds heartbeat{0};
  // Called once, from the heartbeat thread (with a Client, the client's
  // heartbeat thread, shared: a Release() from it connects on that thread),
  // when the lease is lost: renewal refused or failed, or no renewal can
  // land before the deadline any more (see held()).  Not called after
  // Release() or once destruction began.  It may call Release() (which then
  // returns without waiting for the thread), but must not destroy the Lease.
  std::function<void(const std::string &reason)> on_lost;
  // What the holder publishes with its lease, as JSON text (say, where it can
  // be reached): fencing_leases.payload, read back with ReadLeader().
  // nullopt: none.  Sent with either form of the acquire; invalid JSON is
  // the server's error (pqxx::data_exception).  Exclusive leases only (the
  // constructor throws std::invalid_argument otherwise).
  std::optional<std::string> payload;
  // Called from a watch thread once no renewal has succeeded for
  // at_risk_fraction * ttl while the lease is still held (a renewal hangs,
  // the network is slow): the lease may be lost soon.  Once per stall, and
  // never together with or after on_lost (see Heartbeat::Options).  A
  // refused or failed renewal is no stall: it is lost at once (on_lost).
  // The fraction must lie between heartbeat / ttl and (ttl - SafetyMargin) /
  // ttl, or the constructor throws std::invalid_argument.
  std::function<void(const std::string &reason)> on_at_risk;
  double at_risk_fraction = 0.5;
};

class Lease final : public HeldLock {
 public:
  // Acquires the lease (the acquire function of its mode, or CALL
  // fencing_await when it may wait) and starts the heartbeat.  Throws LeaseUnavailableError when the lock is busy, and
  // pqxx errors for database trouble; std::invalid_argument if ttl is not
  // positive or the heartbeat is not shorter than ttl - SafetyMargin(ttl).
  // For a permit, "busy" means every permit is taken.  Its heartbeat thread
  // renews it on the connection it acquired on, which it keeps.
  explicit Lease(LeaseOptions options);
  // The same, renewed by the client's heartbeat (Client): it acquires on a
  // connection that it closes once it holds the lease, and releases on a
  // new one.  options.conninfo must be empty (the client's) or the
  // client's (std::invalid_argument).
  Lease(Client &client, LeaseOptions options);
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

  // ---- Graceful hand-over ----
  //
  //   while (auto work = lease.BeginWork()) { /* one unit of work */ }
  //   // elsewhere, on shutdown:  lease.HandOver(std::chrono::seconds(20));
  //
  // One unit of work in progress under the lease: the lease is not handed
  // over while it lives.  Ends when destroyed (or at Finish()).  Must not
  // outlive its Lease.  Empty (false) when BeginWork() refused.
  class WorkGuard {
   public:
    WorkGuard() = default;
    WorkGuard(WorkGuard &&other) noexcept : lease_(other.lease_) { other.lease_ = nullptr; }
    WorkGuard &operator=(WorkGuard &&other) noexcept;
    ~WorkGuard() { Finish(); }
    WorkGuard(const WorkGuard &) = delete;
    WorkGuard &operator=(const WorkGuard &) = delete;

    explicit operator bool() const noexcept { return lease_ != nullptr; }
    // Ends the unit now; idempotent.
    void Finish() noexcept;

   private:
    friend class Lease;
    explicit WorkGuard(Lease *lease) noexcept : lease_(lease) {}
    Lease *lease_ = nullptr;
  };

  // Starts a unit of work: an empty guard once a hand-over was asked for, or
  // when the lease is not held() (lost, released).
  WorkGuard BeginWork();
  // Gives the lease up gracefully: from now on BeginWork() refuses, and the
  // lease is released (fencing_release, so a waiter gets it at once) as soon
  // as no unit of work is in progress, or when `grace` has passed, whichever
  // comes first.  At that deadline it is released anyway, with the units
  // still running: held() turns false for them, and their writes are refused
  // once the next holder has written with its higher token, as after any
  // loss.  Releasing rather than letting the lease lapse frees the lock for
  // the next holder at once instead of after a ttl.  Returns at once; the
  // release runs on a thread of the lease's.  A second call can only bring
  // the deadline forward.  Nothing happens if the lease is no longer held;
  // it ends as it would have.
  void HandOver(std::chrono::milliseconds grace);
  // Whether HandOver() was called: the application stops starting work.
  bool handing_over() const;
  // Waits until the hand-over released the lease; false on timeout (or when
  // there is no hand-over).
  bool WaitHandedOver(std::chrono::milliseconds timeout) const;
  // Units of work in progress.
  int work_in_flight() const;

 private:
  Lease(LeaseOptions options, std::shared_ptr<detail::SharedHeartbeat> shared);

  void EndWork() noexcept;
  void HandOverRun();

  // The heartbeat's renewal: pipelined, given up at the deadline.
  Heartbeat::Renewal Renew(Heartbeat::Clock::time_point deadline);
  Heartbeat::Renewal RenewPipelined(Heartbeat::Clock::time_point deadline);
  // fencing_release, on a new connection if the heartbeat's is gone.
  bool GiveBack();

  LeaseOptions options_;
  Token token_ = 0;
  // A Client's heartbeat, which renews the lease; null: its own.
  std::shared_ptr<detail::SharedHeartbeat> shared_;
  // The connection belongs to the constructor until the heartbeat starts,
  // then to the heartbeat thread, then (once it stopped) to GiveBack().
  // With a Client's heartbeat, the constructor's only.
  std::unique_ptr<pqxx::connection> heartbeat_conn_;
  // Only the heartbeat thread reads or writes this: a renewal is on the wire
  // and heartbeat_conn_ cannot take another statement.
  bool renew_in_flight_ = false;
  std::unique_ptr<Heartbeat> heartbeat_;

  // The hand-over: units of work in progress, and the thread that releases
  // the lease when they are done or the deadline passed.
  mutable std::mutex work_mutex_;
  mutable std::condition_variable work_changed_;
  int in_flight_ = 0;
  bool handing_over_ = false;
  bool handed_over_ = false;
  bool closing_ = false;  // the destructor runs: the hand-over thread leaves
  Heartbeat::Clock::time_point hand_over_deadline_;
  std::thread hand_over_thread_;
};

// The live lease of a lock as fencing_leases shows it: who leads, and what
// it published.  For followers (where to send requests) and operators.
struct LeaderInfo {
  std::string holder;
  Token token = 0;
  std::optional<std::string> payload;  // JSON text, as the server prints it
};

// Reads the live lease of lock_name from fencing_leases on conn, in a
// statement of its own; nullopt when no lease is live (or the caller's role
// may not see the lock).  Throws pqxx errors.
std::optional<LeaderInfo> ReadLeader(pqxx::connection &conn, const std::string &lock_name);

// fencing_revoke on conn, for the lock's owner or a superuser, in a statement
// of its own: ends the live lease at once and raises the lock's mark to a
// new token above the holder's, which it returns.  From then on the holder's
// renewals are refused (its on_lost fires) and its writes under the lock are
// refused with 55Z01.  An empty reason is sent as NULL.  Throws pqxx errors
// (pqxx::insufficient_privilege for a role that may not revoke).
Token Revoke(pqxx::connection &conn, const std::string &lock_name, const std::string &reason);

// Runs sql in its own transaction on conn with the token bound as $1 and the
// remaining arguments as $2, $3, ...; commits and returns the result.
// Throws StaleTokenError for SQLSTATE 55Z01, MissingTokenError for 55Z02,
// NeverGrantedTokenError for 55Z03, LeaseEndedError for 55Z04 (a COMMIT
// refused), and lets every other pqxx exception
// through.
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
