// One boolean statement on a connection, waited for no later than a
// deadline: what a heartbeat's renewal needs (Lease, Session), so that a
// renewal stuck behind a row lock or a dead network does not delay the
// loss's report.  Internal to the client library.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <pqxx/pqxx>

namespace pg_fencing::client::detail {

// Waits until conn's socket has something to read, or deadline passes
// (at most 60 s a call).  Throws pqxx::broken_connection when conn has no
// socket, std::runtime_error when poll() fails.
void AwaitInput(pqxx::connection &conn, std::chrono::steady_clock::time_point deadline);

// Sends sql, which returns one boolean, on conn (through a pqxx::pipeline,
// then poll() on the socket) and returns its answer; nullopt once the
// deadline has passed with no answer, after calling on_timeout (before the
// pipeline's destructor cancels the query, which needs a connection of its
// own and may itself hang).  in_flight is set while the statement is on the
// wire: the connection cannot take another until it is cleared (the caller
// clears it, and drops a connection whose answer never came).  Throws the
// server's error, and pqxx or std::runtime_error for a broken connection.
std::optional<bool> BooleanByDeadline(pqxx::connection &conn, const std::string &sql,
                                      std::chrono::steady_clock::time_point deadline,
                                      bool &in_flight, const std::function<void()> &on_timeout);

}  // namespace pg_fencing::client::detail
