#include "deadline_query.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace pg_fencing::client::detail {

void AwaitInput(pqxx::connection &conn, std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  const int fd = conn.sock();
  if (fd < 0) throw pqxx::broken_connection("the heartbeat connection has no socket");
  pollfd pfd{};
  pfd.fd = fd;
  pfd.events = POLLIN;
  // Rounded up, so that we never spin on a sub-millisecond remainder.
  const auto wait = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now());
  if (poll(&pfd, 1, static_cast<int>(std::clamp<milliseconds::rep>(wait.count(), 0, 60000))) < 0 &&
      errno != EINTR) {
    throw std::runtime_error(std::string("poll on the heartbeat connection: ") +
                             std::strerror(errno));
  }
}

std::optional<bool> BooleanByDeadline(pqxx::connection &conn, const std::string &sql,
                                      std::chrono::steady_clock::time_point deadline,
                                      bool &in_flight, const std::function<void()> &on_timeout) {
  pqxx::nontransaction tx(conn);
  pqxx::pipeline pipe(tx);
  in_flight = true;
  const pqxx::pipeline::query_id id = pipe.insert(sql);  // sent at once: retain is 0
  for (;;) {
    pipe.resume();  // reads what has arrived, without blocking
    if (pipe.is_finished(id)) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      on_timeout();
      return std::nullopt;
    }
    AwaitInput(conn, deadline);
  }
  const pqxx::result result = pipe.retrieve(id);  // throws the server's error, if any
  return result.at(0).at(0).as<bool>();
}

}  // namespace pg_fencing::client::detail
