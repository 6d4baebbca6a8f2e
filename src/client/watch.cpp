// LeaderWatch: the leader of a lock, read from fencing_leases whenever
// fencing_events says it may have changed (see watch.hpp).
//
// One thread owns the connection.  It waits in poll() on the connection's
// socket and on a pipe that the destructor writes to, with a timeout at the
// next read that is due (the fallback period, the live lease's expiry).
//
// Stopping.  A read blocks in libpq, and on a dead network it blocks until
// the kernel gives up (minutes, unless tcp_user_timeout says otherwise).  The
// destructor must not wait that long, so it shuts the socket down, which
// ends any blocking call on it at once.  It does so on a dup() of the
// socket that the watch keeps for that alone: libpq closes its own
// descriptor when it finds the connection broken, and the number could be
// reused for another file by the time the destructor runs; ours stays open
// until the thread closes it under the mutex.
//
// Reconnecting.  Every failure drops the connection and makes a new one:
// libpqxx 6 would otherwise reconnect by itself on the next statement, on
// another socket, without the watch noticing that it missed notifications.
//
// Notifications.  libpqxx 7.10 replaced notification_receiver (deprecated
// there) with connection::listen(); 6.4 has only the former.  Either way the
// handler only keeps the payload: what to do with it is decided after
// get_notifs() returns (a receiver's exceptions are swallowed by 6.4).
#include "pg_fencing/watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "fencing_events.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "pg_fencing/token.hpp"

namespace pg_fencing::client {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The live lease and how long it has to run by the server's clock.  The
// remaining time comes from the same statement, so that the client's clock
// and the server's never meet.
constexpr const char kReadLeader[] =
    "SELECT holder, token::text, payload::text, "
    "ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint "
    "FROM fencing_leases WHERE lock_name = $1 AND state = 'live'";

// The expiry read comes this long after the server's expiry: early, it
// would find the lease still live and have to come again.
constexpr milliseconds kExpirySlack{5};

// Reconnecting: at once after a connection that worked, then after 0.1 s,
// doubling, up to 5 s.
milliseconds Backoff(unsigned failures) {
  if (failures <= 1) return milliseconds(0);
  milliseconds delay(100);
  for (unsigned i = 2; i < failures && delay < milliseconds(5000); ++i) delay *= 2;
  return std::min(delay, milliseconds(5000));
}

bool SameLeader(const std::optional<LeaderInfo> &a, const std::optional<LeaderInfo> &b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->holder == b->holder && a->token == b->token);
}

std::string Describe(const std::string &lock_name) { return "lock \"" + lock_name + "\""; }

// ---- The payload's lock_name (fencing_events.hpp) ----------------------------

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Take(char c) {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

  // A string, decoded into out (UTF-8).
  bool String(std::string *out) {
    if (!Take('"')) return false;
    out->clear();
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return false;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          std::uint32_t code;
          if (!Hex4(&code)) return false;
          if (code >= 0xD800 && code < 0xDC00) {  // a surrogate pair
            std::uint32_t low;
            if (!(Take2('\\', 'u') && Hex4(&low) && low >= 0xDC00 && low < 0xE000)) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code < 0xE000) {
            return false;
          }
          AppendUtf8(code, out);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  // Any value: a string, a scalar, or a nested object or array.
  bool SkipValue() {
    SkipSpace();
    if (pos_ >= text_.size()) return false;
    std::string ignored;
    if (text_[pos_] == '"') return String(&ignored);
    if (text_[pos_] == '{' || text_[pos_] == '[') {
      int depth = 0;
      while (pos_ < text_.size()) {
        const char c = text_[pos_];
        if (c == '"') {
          if (!String(&ignored)) return false;
          continue;
        }
        ++pos_;
        if (c == '{' || c == '[') ++depth;
        if (c == '}' || c == ']') {
          if (--depth == 0) return true;
        }
      }
      return false;
    }
    // A number, true, false or null: up to the next delimiter.
    const std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' && text_[pos_] != ']' &&
           text_[pos_] != ' ' && text_[pos_] != '\t' && text_[pos_] != '\n' &&
           text_[pos_] != '\r') {
      ++pos_;
    }
    return pos_ > start;
  }

 private:
  bool Take2(char a, char b) {
    if (pos_ + 1 >= text_.size() || text_[pos_] != a || text_[pos_ + 1] != b) return false;
    pos_ += 2;
    return true;
  }
  bool Hex4(std::uint32_t *code) {
    if (pos_ + 4 > text_.size()) return false;
    *code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      std::uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      *code = *code * 16 + digit;
    }
    return true;
  }
  static void AppendUtf8(std::uint32_t code, std::string *out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::string> EventLockName(std::string_view payload) {
  JsonScanner json(payload);
  if (!json.Take('{')) return std::nullopt;
  std::optional<std::string> found;
  if (!json.Peek('}')) {
    do {
      std::string key;
      if (!json.String(&key) || !json.Take(':')) return std::nullopt;
      if (key == "lock_name" && !found && json.Peek('"')) {
        std::string value;
        if (!json.String(&value)) return std::nullopt;
        found = std::move(value);
      } else if (!json.SkipValue()) {
        return std::nullopt;
      }
    } while (json.Take(','));
  }
  // The whole payload must be one object: a lock name read from something
  // malformed is no reason to skip a read.
  if (!json.Take('}') || !json.AtEnd()) return std::nullopt;
  return found;
}

// ---- The watch -------------------------------------------------------------

struct LeaderWatch::State {
  explicit State(LeaderWatchOptions o) : options(std::move(o)) {}

  // -- Connection (the constructor's until the thread starts, then the
  // thread's).

  // Connects and LISTENs; throws on failure, leaving what it made for Drop().
  void Connect() {
    conn = std::make_unique<pqxx::connection>(options.conninfo);
    if (!conn->is_open() || conn->sock() < 0) {
      throw pqxx::broken_connection("the watch's connection is not open");
    }
    const int fd = fcntl(conn->sock(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "dup of the socket");
    {
      std::lock_guard<std::mutex> lock(mutex);
      socket = fd;
      // The destructor ran meanwhile and could not reach this socket.
      if (stopping) ::shutdown(socket, SHUT_RDWR);
    }
    backend_pid = conn->backendpid();
#if PG_FENCING_PQXX_HAVE_LISTEN
    conn->listen(kFencingEventsChannel,
                 [this](pqxx::notification n) { pending.emplace_back(n.payload); });
#else
    // libpqxx 6 reports a receiver's trouble (an UNLISTEN on a broken
    // connection, say) on stderr unless a handler takes it.
    quiet = std::make_unique<pqxx::quiet_errorhandler>(*conn);
    receiver = std::make_unique<Receiver>(*conn, pending);
#endif
    CheckOpen();
    std::lock_guard<std::mutex> lock(mutex);
    connected_now = true;
  }

  // The connection is the one LISTENing, still open.
  void CheckOpen() const {
    if (!conn->is_open() || conn->backendpid() != backend_pid) {
      throw pqxx::broken_connection("the watch's connection was lost");
    }
  }

  void Drop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex);
      connected_now = false;
      // The destructor may be waiting for this thread: do not wait for the
      // server to acknowledge anything.
      if (socket >= 0 && stopping) ::shutdown(socket, SHUT_RDWR);
    }
    try {
#if !PG_FENCING_PQXX_HAVE_LISTEN
      receiver.reset();
      quiet.reset();
#endif
      conn.reset();
    } catch (...) {
      // A connection that will not close cleanly is gone all the same.
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (socket >= 0) ::close(socket);
      socket = -1;
    }
    pending.clear();
  }

  // Reads the live lease and schedules the next reads.
  std::optional<LeaderInfo> Read() {
    CheckOpen();
    std::optional<LeaderInfo> leader;
    std::optional<long long> remaining_ms;
    {
      pqxx::nontransaction tx(*conn);
      const pqxx::result result = pqxx_compat::ExecParams(tx, kReadLeader, options.lock_name);
      if (!result.empty()) {
        const auto row = result[0];  // a row_ref in libpqxx 8
        LeaderInfo info;
        info.holder = row[0].as<std::string>();
        const ParseResult token = ParseToken(row[1].c_str());
        if (token.status != ParseStatus::kOk) {
          throw std::runtime_error(std::string("the server returned a malformed token: \"") +
                                   row[1].c_str() + "\"");
        }
        info.token = token.value;
        if (!row[2].is_null()) info.payload = row[2].as<std::string>();
        if (!row[3].is_null()) remaining_ms = row[3].as<long long>();
        leader = std::move(info);
      }
    }
    const Clock::time_point now = Clock::now();
    next_periodic = now + options.reread_period;
    expiry_due.reset();
    if (remaining_ms) {
      expiry_due = now + milliseconds(std::max(*remaining_ms, 0LL)) + kExpirySlack;
    }
    return leader;
  }

  // -- Thread.

  void Run() {
    Report(initial);
    unsigned failures = 0;
    while (!Stopping()) {
      try {
        if (!conn) {
          if (!Sleep(Backoff(failures))) break;
          Connect();
          Report(Read());
          failures = 0;
        } else {
          WaitAndRead();
        }
      } catch (const std::exception &error) {
        const bool stopping_now = Stopping();
        Drop();
        if (stopping_now) break;
        ++failures;
        Error(Describe(options.lock_name) +
              ": the watch's connection failed, reconnecting: " + error.what());
      }
    }
    Drop();
  }

  // Handles what has arrived, then waits for the socket, the pipe or the
  // next read that is due.
  void WaitAndRead() {
    conn->get_notifs();  // also those that came in during the last read
    CheckOpen();
    bool concerned = false;
    for (const std::string &payload : pending) {
      const std::optional<std::string> lock = EventLockName(payload);
      if (!lock || *lock == options.lock_name) concerned = true;
    }
    pending.clear();
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> due = expiry_due;
    if (options.reread_period.count() > 0 && (!due || next_periodic < *due)) due = next_periodic;
    if (concerned || (due && now >= *due)) {
      Report(Read());
      return;
    }
    int timeout = -1;
    if (due) {
      const auto wait = std::chrono::ceil<milliseconds>(*due - now).count();
      timeout = static_cast<int>(std::min<long long>(wait, INT_MAX));
    }
    int fd;
    {
      std::lock_guard<std::mutex> lock(mutex);
      fd = socket;
    }
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
    if (poll(fds, 2, timeout) < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "poll on the watch's connection");
    }
    // Readable (a notification, or the connection's end), or a read is due:
    // the next round sees which.
  }

  // Sleeps unless stopping; false if stopping.
  bool Sleep(milliseconds delay) {
    if (delay.count() > 0) {
      pollfd fd = {wake[0], POLLIN, 0};
      poll(&fd, 1, static_cast<int>(delay.count()));
    }
    return !Stopping();
  }

  void Report(const std::optional<LeaderInfo> &leader) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (reported_once && SameLeader(reported, leader)) return;
      reported_once = true;
      reported = leader;
    }
    try {
      options.on_change(leader);
    } catch (const std::exception &error) {
      Error(Describe(options.lock_name) + ": on_change threw: " + error.what());
    } catch (...) {
      Error(Describe(options.lock_name) + ": on_change threw");
    }
  }

  void Error(const std::string &what) noexcept {
    if (!options.on_error) return;
    try {
      options.on_error(what);
    } catch (...) {
      // Nowhere to go from this thread.
    }
  }

  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mutex);
    return stopping;
  }

  // Called by the destructor: ends the thread and whatever it is blocked in.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      if (socket >= 0) ::shutdown(socket, SHUT_RDWR);
    }
    if (wake[1] >= 0) {
      const char byte = 0;
      while (::write(wake[1], &byte, 1) < 0 && errno == EINTR) {
      }
    }
  }

#if !PG_FENCING_PQXX_HAVE_LISTEN
  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection &conn, std::vector<std::string> &sink)
        : pqxx::notification_receiver(conn, kFencingEventsChannel), sink_(sink) {}
    void operator()(const std::string &payload, int) override { sink_.push_back(payload); }

   private:
    std::vector<std::string> &sink_;
  };
#endif

  LeaderWatchOptions options;

  // Shared with the destructor and the accessors.
  mutable std::mutex mutex;
  bool stopping = false;
  bool connected_now = false;
  int socket = -1;  // our dup() of the connection's socket, or -1
  bool reported_once = false;
  std::optional<LeaderInfo> reported;

  int wake[2] = {-1, -1};  // the destructor writes a byte to wake[1]
  std::thread thread;

  // The thread's own.
  std::unique_ptr<pqxx::connection> conn;
#if !PG_FENCING_PQXX_HAVE_LISTEN
  std::unique_ptr<pqxx::quiet_errorhandler> quiet;
  std::unique_ptr<Receiver> receiver;
#endif
  int backend_pid = 0;
  std::vector<std::string> pending;  // payloads not yet looked at
  std::optional<LeaderInfo> initial;
  Clock::time_point next_periodic;
  std::optional<Clock::time_point> expiry_due;
};

LeaderWatch::LeaderWatch(LeaderWatchOptions options)
    : state_(std::make_unique<State>(std::move(options))) {
  State &s = *state_;
  if (s.options.lock_name.empty()) throw std::invalid_argument("LeaderWatch: lock_name is empty");
  if (!s.options.on_change) throw std::invalid_argument("LeaderWatch: on_change is required");
  if (s.options.reread_period.count() < 0) {
    throw std::invalid_argument("LeaderWatch: reread_period must not be negative");
  }
  if (pipe2(s.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::system_error(errno, std::generic_category(), "LeaderWatch: pipe");
  }
  try {
    s.Connect();
    s.initial = s.Read();
  } catch (...) {
    s.Drop();
    ::close(s.wake[0]);
    ::close(s.wake[1]);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.reported = s.initial;  // leader() answers at once
  }
  s.thread = std::thread([&s] { s.Run(); });
}

LeaderWatch::~LeaderWatch() {
  State &s = *state_;
  s.Stop();
  if (s.thread.joinable()) {
    try {
      s.thread.join();
    } catch (...) {
      // Destroyed from its own callback, which watch.hpp forbids.
      std::terminate();
    }
  }
  ::close(s.wake[0]);
  ::close(s.wake[1]);
}

std::optional<LeaderInfo> LeaderWatch::leader() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reported;
}

bool LeaderWatch::connected() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->connected_now;
}

}  // namespace pg_fencing::client
