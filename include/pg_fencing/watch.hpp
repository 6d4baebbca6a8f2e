// pg_fencing::client::LeaderWatch: who leads a lock, told as it changes.
//
//   pg_fencing::client::LeaderWatchOptions opts;
//   opts.conninfo = "dbname=app";
//   opts.lock_name = "nightly-report";
//   opts.on_change = [](const std::optional<pg_fencing::client::LeaderInfo> &leader) {
//     if (leader) route_to(leader->holder, leader->payload);  // a new holder or token
//     else        hold_requests();                             // no live lease
//   };
//   pg_fencing::client::LeaderWatch watch(opts);               // throws if it cannot connect
//
// The watch LISTENs on channel fencing_events on a connection of its own and
// takes the notifications as hints only: what it reports is always what it
// read from fencing_leases, the authoritative state, so a notification that
// was missed (the connection was down), forged (any role may NOTIFY on any
// channel) or about a transaction it cannot see changes nothing.  It reads
//  - when it starts, and after each reconnect (LISTEN first, then read, so
//    that nothing committed in between slips through);
//  - on each notification that may concern its lock (one read for a burst);
//  - when the live lease is due to expire, as the server's clock has it: an
//    expiry that nobody announces (no background worker) is seen at once;
//  - every reread_period (default 5 s), as a fallback for changes that are
//    not announced: announcements are opt-in per lock (the lock's owner
//    calls fencing_set_announce(lock, true)), and a lock that is not
//    announced is then watched by this period alone.
// It reports a change only when (holder, token) differs from what it last
// reported; a renewal, or a re-acquire by the live holder that replaces its
// payload, is no change.  A change and its reversal between two reads (a
// lease granted and released at once) may be reported as no change at all:
// the watch tells who leads, not every grant.  fencing_history lists those.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pg_fencing/client.hpp"

namespace pg_fencing::client {

struct LeaderWatchOptions {
  // libpq connection string.  The watch's connection must be a session of
  // its own (direct, or session pooling: LISTEN does not survive
  // transaction pooling).  How soon a dead network is noticed is libpq's
  // affair: keepalives and tcp_user_timeout here.
  std::string conninfo;
  std::string lock_name;
  // Called from the watch's thread: first with the leader when the watch
  // started (nullopt: no live lease), then each time the (holder, token)
  // read differs from the last one reported.  One call at a time, in the
  // order read.  It may call leader(), but must not destroy the watch; an
  // exception it throws is handed to on_error.  Required.
  std::function<void(const std::optional<LeaderInfo> &leader)> on_change;
  // Reads fencing_leases at least this often, whatever was announced.
  // Zero: only when it starts, on notifications, after reconnects and when
  // the live lease is due to expire.  Must not be negative.
  std::chrono::milliseconds reread_period{5000};
  // Called from the watch's thread when the connection breaks, cannot be
  // made, or a read fails (the role may not read the view, say).  The watch
  // carries on: it reconnects at once, then after 0.1 s, doubling up to 5 s,
  // and reads again on its new connection.  Optional.
  std::function<void(const std::string &what)> on_error;
};

class LeaderWatch {
 public:
  // Connects, LISTENs and reads the leader on the calling thread, then
  // starts the watch's thread, whose first act is on_change with what was
  // read.  Throws pqxx errors when it cannot (a later failure is retried,
  // see on_error), std::invalid_argument for options it cannot use.
  explicit LeaderWatch(LeaderWatchOptions options);
  // Stops the thread, interrupting a read in progress, and waits for an
  // on_change or on_error in progress to return.  Never throws.
  ~LeaderWatch();

  LeaderWatch(const LeaderWatch &) = delete;
  LeaderWatch &operator=(const LeaderWatch &) = delete;

  // The leader last reported to on_change (or about to be: it is set
  // before the call); nullopt when there is no live lease.
  std::optional<LeaderInfo> leader() const;
  // Whether the watch has a working connection, LISTENing, now; false
  // while it reconnects.
  bool connected() const;

 private:
  struct State;  // the connection and the thread, in watch.cpp
  std::unique_ptr<State> state_;
};

}  // namespace pg_fencing::client
