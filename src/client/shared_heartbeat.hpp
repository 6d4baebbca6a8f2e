// A Client's shared heartbeat (client.hpp): one thread and one connection
// renew every session and lease made with the Client, all of them in one
// statement, each waited for no later than its deadline.  Internal to the
// client library.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <pqxx/pqxx>

#include "pg_fencing/heartbeat.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::client::detail {

// What a Client's heartbeat renews for one of its locks: a session
// (fencing_session_renew(session, ttl)) or, when session is 0, a lease
// (fencing_renew(lock_name, token, ttl)).
struct HeartbeatTarget {
  std::int64_t session = 0;
  std::string lock_name;
  Token token = 0;
  std::chrono::milliseconds ttl{0};
};

// A Client's shared heartbeat (client.hpp): one HeartbeatGroup, whose
// thread renews every session and lease made with the Client, and the one
// connection it does so on (shared_heartbeat.cpp).  Kept by the Client and by
// each of them, so that it outlives them all.
class SharedHeartbeat {
 public:
  explicit SharedHeartbeat(std::string conninfo);
  ~SharedHeartbeat();
  SharedHeartbeat(const SharedHeartbeat &) = delete;
  SharedHeartbeat &operator=(const SharedHeartbeat &) = delete;

  const std::string &conninfo() const noexcept { return conninfo_; }
  // The group, for Heartbeat::Options::group; it keeps this object.
  static std::shared_ptr<HeartbeatGroup> Group(const std::shared_ptr<SharedHeartbeat> &self);
  // What the heartbeat renews for a lock, before its Start(); forgotten
  // after its Stop().
  void Track(const Heartbeat *heartbeat, HeartbeatTarget target);
  void Untrack(const Heartbeat *heartbeat);
  std::size_t size() const { return group_.size(); }

 private:
  struct Connecting;  // a connection being made on a thread of its own

  // HeartbeatGroup::Options::renew and idle, on the group's thread.
  void Renew(HeartbeatGroup::Round &round);
  void Idle();
  // Runs sql on the connection until round.deadline(): its rows, or
  // nullopt after round.TimedOut().  Throws the server's error
  // (pqxx::sql_error; the connection is kept while it is open), or what
  // broke the connection (then dropped).
  std::optional<pqxx::result> Run(const std::string &sql, HeartbeatGroup::Round &round);
  // Makes the connection, waiting for it until round.deadline(): false
  // when it is not there by then (after round.TimedOut()).  Throws what
  // stopped it.
  bool Connect(HeartbeatGroup::Round &round);
  // Renews targets[i] for each i of which, each in a statement of its own.
  void RenewEach(HeartbeatGroup::Round &round,
                 const std::vector<std::optional<HeartbeatTarget>> &targets,
                 const std::vector<std::size_t> &which);
  // The statement renewing targets[i] for each i of which.
  std::string Sql(const std::vector<std::optional<HeartbeatTarget>> &targets,
                  const std::vector<std::size_t> &which) const;

  const std::string conninfo_;
  mutable std::mutex mutex_;  // targets_
  std::unordered_map<const Heartbeat *, HeartbeatTarget> targets_;
  // The group's thread's only.
  std::unique_ptr<pqxx::connection> conn_;
  std::shared_ptr<Connecting> connecting_;
  // Last: destroyed first, which ends its thread while the rest is there.
  HeartbeatGroup group_;
};

}  // namespace pg_fencing::client::detail
