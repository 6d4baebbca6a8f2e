// pg_fencing::client::Session: one keepalive for many leases (extension
// 1.8, fencing_session_open).  One heartbeat renews the session, and with
// it every lease taken in it; the loss is reported once, for the whole
// session (on_lost), and from then on held() is false: every lease in it has
// ended by the server's clock, and writes under their tokens are refused.
//
//   pg_fencing::client::Session session({conninfo, "worker-17", std::chrono::seconds(10)});
//   std::optional<Token> p3 = session.Acquire("partition-3");
//   auto both = session.AcquireAll({"acct-7", "acct-9"});   // every lock or none
//   ... write with *p3 while session.held() ...
//   std::unique_ptr<HeldLock> leader = session.Lock("leader");  // the Lease API
//   session.Close();                                         // releases them all
//
// Connections.  A Session made with a Client (client.hpp) is renewed by the
// client's one heartbeat, with the client's other sessions and leases, and
// has one connection of its own, the work connection: the open, Acquire,
// AcquireAll, Release and Close, and its waits in line, which between their
// polls hold no server connection behind a transaction pooler.  One made
// without a Client has a heartbeat thread and connection of its own too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

#include "pg_fencing/client.hpp"  // LeaseLostError, Heartbeat, Token

namespace pg_fencing::client {

struct SessionOptions {
  std::string conninfo;  // libpq connection string (with a Client: empty, or the client's)
  std::string holder;    // unique per process, e.g. host:pid
  std::chrono::milliseconds ttl{10000};
  // Heartbeat period; zero means ttl / 3.
  std::chrono::milliseconds heartbeat{0};
  // Called once, from the heartbeat thread (with a Client, the client's
  // heartbeat thread, shared), when the session is lost: its
  // renewal refused (it ended, or was closed by a superuser) or failed, or
  // no renewal can land before the deadline any more.  Not called after
  // Close() or once destruction began.  It must not destroy the Session.
  std::function<void(const std::string &reason)> on_lost;
  // A wait in the session (Acquire, or Lock with a wait, of any kind) is
  // a place in the lock's line (fencing_line_join): polled
  // (fencing_line_poll) every line_poll, in short statements outside any
  // transaction block, with nothing running on the server in between.
  // Must be positive.
  std::chrono::milliseconds line_poll{500};
  // Also LISTEN on fencing_line on the work connection while such a wait
  // lasts, and poll at once when the place's number is heard.  Only for a
  // conninfo that reaches the server itself (or a session-pooling pooler):
  // behind a transaction pooler a LISTEN is lost, so it is off by default
  // and the timer alone serves.  While it sleeps on the socket, the wait
  // keeps the work connection, so the session's other calls wait for it.
  bool line_listen = false;
};

// How Session::Lock takes its lock: the kinds of LeaseOptions, with a wait
// (a place in the lock's line, SessionOptions::line_poll) and a payload.
// No holder, ttl or heartbeat: those are the session's.
struct SessionLockOptions {
  LeaseOptions::Mode mode = LeaseOptions::Mode::kExclusive;
  int permits = 0;  // kPermit only: the semaphore's number of permits
  std::optional<std::chrono::milliseconds> wait;
  std::optional<std::string> payload;  // JSON text; exclusive leases only
};

class Session;

// A lease taken in a Session, behind the same HeldLock interface as a Lease
// (the demo's scenarios and any code written against a Lease take it as it
// is): held() is the session's, and false once Release()d.  Its destructor
// releases it if still held, and never throws.  It must not outlive its
// Session.
class SessionLease final : public HeldLock {
 public:
  ~SessionLease() override;
  SessionLease(const SessionLease &) = delete;
  SessionLease &operator=(const SessionLease &) = delete;

  Token token() const noexcept override { return token_; }
  const std::string &lock_name() const noexcept { return lock_name_; }
  // 'lock "name" in fencing session 7'.
  std::string Describe() const override;
  bool held() const override;
  void CheckHeld() const override;
  std::string lost_reason() const override;
  // fencing_release of this lease only; the session and its other leases
  // live on.  Idempotent: later calls return false.
  bool Release() override;

 private:
  friend class Session;
  SessionLease(Session &session, std::string lock_name, LeaseOptions::Mode mode, Token token)
      : session_(session), lock_name_(std::move(lock_name)), mode_(mode), token_(token) {}

  Session &session_;
  const std::string lock_name_;
  const LeaseOptions::Mode mode_;
  const Token token_;
  std::atomic<bool> released_{false};
};

class Session {
 public:
  // Opens the session (fencing_session_open) and starts its heartbeat, a
  // thread and a connection of its own.  Throws std::invalid_argument for a
  // bad ttl or heartbeat, pqxx errors for database trouble (42883 on a
  // database not updated to 1.8).
  explicit Session(SessionOptions options);
  // The same, renewed by the client's heartbeat (Client), with no
  // connection of its own but the work connection, on which it opens.
  // options.conninfo must be empty (the client's) or the client's
  // (std::invalid_argument).
  Session(Client &client, SessionOptions options);
  // Stops the heartbeat and closes the session if it is still held, which
  // releases every lease in it; never throws.
  ~Session();

  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  // The session's id (fencing_sessions.session_id).
  std::int64_t id() const noexcept { return id_; }
  // False once the session is known lost, judged on the monotonic clock as
  // a Lease's held() is (Heartbeat): a paused process wakes up to false.
  // False after Close() too.
  bool held() const;
  // Throws LeaseLostError unless held().
  void CheckHeld() const;
  // Why the session was lost; empty while held.
  std::string lost_reason() const;

  // Takes lock_name in the session (fencing_session_acquire), waiting up to
  // `wait` if given, as a place in the lock's line (fencing_line_join, then
  // fencing_line_poll every line_poll; at the deadline fencing_line_leave,
  // which gives back a grant made meanwhile): its token, or nullopt when
  // the lock is busy.  The lease ends when the session does, unless
  // released first.  Throws LeaseLostError unless held() (also when the
  // session is closed during the wait), and pqxx errors (55Z05: the session
  // has ended on the server).  Safe to call from several threads: the calls
  // take turns on one connection of the session's, statement by statement
  // (a wait in line lets the others in between its polls, unless
  // line_listen).
  std::optional<Token> Acquire(const std::string &lock_name,
                               std::optional<std::chrono::milliseconds> wait = std::nullopt);
  // The Lease API over the session: takes lock_name in it, of any kind
  // (fencing_session_acquire with kind, permits and payload; given
  // options.wait, it waits in line as Acquire does, with the kind and
  // permits; one more shared lease or permit of a lock whose line has the
  // session's place already, a lease's or another thread's wait's, waits in
  // CALL fencing_await(..., session =>), since the line keeps one place per
  // session and lock), as a HeldLock whose held() is the session's.
  // Throws LeaseUnavailableError when the lock stays busy,
  // std::invalid_argument for a payload on a lease that is not exclusive,
  // and otherwise as Acquire.
  std::unique_ptr<SessionLease> Lock(const std::string &lock_name,
                                     const SessionLockOptions &options = {});
  // Every lock of lock_names or none, exclusive leases: their tokens in the
  // order given, or nullopt when not all could be had within `wait`.  Never
  // deadlocks with another session's AcquireAll.  Without a wait (nullopt,
  // or 0), one fencing_session_acquire_all, which never sleeps.  With a
  // wait, one lock after the other in byte order of the names, each a place
  // in its line as Acquire waits (no snapshot and nothing running on the
  // server between its polls), with what is left of the wait; a lock taken
  // stays taken -- visible to others -- while the next is waited for (all
  // or none holds for the answer, not for every instant), and when one is
  // not had in time, or an error ends the wait, every lease it took is
  // given back and every place left.  A lock the session held already is
  // kept.  On a database without the line (before 1.10),
  // fencing_session_acquire_all with the wait.
  std::optional<std::vector<Token>> AcquireAll(
      const std::vector<std::string> &lock_names,
      std::optional<std::chrono::milliseconds> wait = std::nullopt);
  // Releases one lease of the session (fencing_release), and leaves the
  // place in line it was taken through, if any; whether it was still live.
  bool Release(const std::string &lock_name, Token token);
  // Stops the heartbeat and closes the session (fencing_session_close):
  // how many leases it released.  Idempotent: later calls return 0.
  int Close();

 private:
  Session(SessionOptions options, std::shared_ptr<detail::SharedHeartbeat> shared);

  Heartbeat::Renewal Renew(Heartbeat::Clock::time_point deadline);
  // One lease in the session, as options say: its token, nullopt when the
  // lock is busy (after the wait, if one was given).
  std::optional<Token> AcquireOne(const std::string &lock_name, const SessionLockOptions &options);
  // AcquireOne's wait: a place in the lock's line, of the kind options say
  // (session.cpp); the token as text, nullopt when the wait ran out.  On a
  // database without the line, AwaitInSession's answer, or, given no_line,
  // nullopt with *no_line set.
  std::optional<std::string> WaitInLine(const std::string &lock_name,
                                        const SessionLockOptions &options, bool *no_line = nullptr);
  // AcquireAll's wait in line: nullopt when the wait ran out (what it took
  // given back), or with *no_line set when the database has no line
  // (nothing taken).
  std::optional<std::vector<Token>> AcquireAllInLine(const std::vector<std::string> &lock_names,
                                                     std::chrono::milliseconds wait, bool *no_line);
  // Of the names, those the session holds an exclusive lease of now, with
  // their tokens: AcquireAll keeps them rather than wait for them (and give
  // them back with what it took).
  std::map<std::string, Token> HeldInSession(const std::vector<std::string> &order);
  // Releases each lease (and leaves its place), quietly, the last first.
  void GiveBack(const std::vector<std::pair<std::string, Token>> &taken) noexcept;
  // The waits the line cannot hold (WaitInLine): CALL fencing_await on the
  // work connection, under work_mutex_ (the caller's); the token as text,
  // nullopt when the wait ran out.
  std::optional<std::string> AwaitInSession(const std::string &lock_name,
                                            const SessionLockOptions &options);
  // fencing_line_leave(place) on the work connection, under work_mutex_,
  // unless the session is closed (its places went with it); errors are
  // swallowed: the caller is on its way out with an error of its own.
  void LeaveLineQuietly(std::int64_t place) noexcept;
  // Runs sql($1 the session, $2 locks, $3 the wait, then `more`) on the
  // work connection at READ COMMITTED: its value as text, nullopt for NULL
  // (not granted).
  template <typename... More>
  std::optional<std::string> AcquireInSession(const char *sql, const std::string &locks,
                                              std::optional<std::chrono::milliseconds> wait,
                                              More &&...more);

  SessionOptions options_;
  std::int64_t id_ = 0;
  // A Client's heartbeat, which renews the session; null: its own.
  std::shared_ptr<detail::SharedHeartbeat> shared_;
  // The own heartbeat's (none with a Client's): the heartbeat thread's,
  // once it runs; the constructor's before.
  std::unique_ptr<pqxx::connection> heartbeat_conn_;
  bool renew_in_flight_ = false;  // the heartbeat thread's only
  std::unique_ptr<Heartbeat> heartbeat_;
  // Acquire, AcquireAll and Release take turns on it.
  std::mutex work_mutex_;
  std::unique_ptr<pqxx::connection> work_conn_;
  bool closed_ = false;  // under work_mutex_
  // Wakes the waits in line that sleep between polls, when closed_ is set.
  std::condition_variable line_wake_;
  // The place in line each lease taken through the line came from (lock
  // name -> token, place), left when the lease is released; under
  // work_mutex_.
  std::map<std::string, std::pair<Token, std::int64_t>> line_places_;
  // The locks whose line has a place of a wait for a shared lease or a
  // permit in progress in this session; under work_mutex_.
  std::set<std::string> line_waits_;
};

}  // namespace pg_fencing::client
