// Integration tests of pg_fencing_client (include/pg_fencing/client.hpp,
// watch.hpp) against a live server with the extension created.
//
// The connection string comes from PG_FENCING_TEST_DSN (an empty value means
// "libpq's environment": PGHOST, PGPORT, ...).  Without it, the tests that
// need a server skip; test/integration/run.sh provides one.  Some tests
// tamper with the extension's lease table, which needs a superuser; they skip
// otherwise.  Every test uses lock and table names of its own.
#include "pg_fencing/client.hpp"
#include "pg_fencing/session.hpp"
#include "pg_fencing/watch.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../src/client/fencing_events.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::client {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char *Dsn() { return std::getenv("PG_FENCING_TEST_DSN"); }

// Whole milliseconds, as plain numbers so that assertion messages print them.
long long Ms(Clock::duration duration) {
  return std::chrono::duration_cast<milliseconds>(duration).count();
}
long long Since(Clock::time_point start) { return Ms(Clock::now() - start); }

// Records on_lost calls; must outlive the Lease it is given to.
class LostProbe {
 public:
  std::function<void(const std::string &)> Callback() {
    return [this](const std::string &reason) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++calls_;
      reason_ = reason;
      at_ = Clock::now();
      thread_ = std::this_thread::get_id();
      cv_.notify_all();
    };
  }
  // Waits up to timeout for the first call; true if there was one.
  bool WaitFor(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return calls_ > 0; });
  }
  int calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reason_;
  }
  Clock::time_point at() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return at_;
  }
  std::thread::id thread() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return thread_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int calls_ = 0;
  std::string reason_;
  Clock::time_point at_;
  std::thread::id thread_;
};

// A forked child; killed and reaped on destruction if the test left early.
class Child {
 public:
  // Runs body in a child process, which exits with body's return value.
  // body gets the write end of a pipe to the parent.
  template <typename Body>
  explicit Child(Body body) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      close(fds[0]);
      int code = 99;
      try {
        code = body(fds[1]);
      } catch (const std::exception &error) {
        WriteLine(fds[1], std::string("child error: ") + error.what());
      } catch (...) {
        WriteLine(fds[1], "child error: unknown exception");
      }
      // No atexit handlers, no destructors of the parent's objects.
      _exit(code);
    }
    close(fds[1]);
    read_fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
    }
    if (read_fd_ >= 0) close(read_fd_);
  }
  Child(const Child &) = delete;
  Child &operator=(const Child &) = delete;

  pid_t pid() const { return pid_; }

  static void WriteLine(int fd, const std::string &line) {
    const std::string text = line + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

  // The next line from the child, or nullopt on EOF or timeout.
  std::optional<std::string> ReadLine(milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::string line;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left <= 0ms) return std::nullopt;
      pollfd pfd{read_fd_, POLLIN, 0};
      const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      char c;
      const ssize_t n = read(read_fd_, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      if (c == '\n') return line;
      line += c;
    }
  }

  // All remaining output, until EOF.
  std::string ReadRest(milliseconds timeout) {
    std::string all;
    while (std::optional<std::string> line = ReadLine(timeout)) all += *line + "\n";
    return all;
  }

  void Signal(int sig) { ASSERT_EQ(kill(pid_, sig), 0) << std::strerror(errno); }

  // Waits for the child to stop (after SIGSTOP).
  void WaitStopped() {
    int status = 0;
    ASSERT_EQ(waitpid(pid_, &status, WUNTRACED), pid_);
    ASSERT_TRUE(WIFSTOPPED(status));
  }

  // Reaps the child; returns its wait status.
  int Wait() {
    int status = 0;
    const pid_t reaped = waitpid(pid_, &status, 0);
    pid_ = -1;
    return reaped < 0 ? -1 : status;
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Dsn() == nullptr)
      GTEST_SKIP() << "PG_FENCING_TEST_DSN is not set (see test/integration/run.sh)";
    conn_ = std::make_unique<pqxx::connection>(Dsn());
  }

  // A name for this test's lock or table, unique across tests and processes.
  std::string Name(const std::string &what) const {
    const ::testing::TestInfo *info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name =
        std::string("ct_") + info->name() + "_" + what + "_" + std::to_string(getpid());
    for (char &c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
  }

  LeaseOptions Options(const std::string &lock, const std::string &holder, milliseconds ttl) const {
    LeaseOptions options;
    options.conninfo = Dsn();
    options.lock_name = lock;
    options.holder = holder;
    options.ttl = ttl;
    return options;
  }

  bool IsSuperuser() {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::Exec1(tx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0]
        .as<bool>();
  }

  std::optional<std::string> Leader(const std::string &lock) {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(tx, "SELECT fencing_leader($1)", lock);
    if (row[0].is_null()) return std::nullopt;
    return row[0].as<std::string>();
  }

  struct LeaseRow {
    Token token;
    bool live;
    double expires_epoch;
  };
  LeaseRow Row(const std::string &lock) {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(
        tx,
        "SELECT token::bigint, live, extract(epoch FROM expires_at)::float8 "
        "FROM fencing_leases WHERE lock_name = $1",
        lock);
    return {row[0].as<Token>(), row[1].as<bool>(), row[2].as<double>()};
  }

  // A protected table (id int, token fencing_token, val text) with row 1.
  std::string MakeProtectedTable(const std::string &what) {
    const std::string table = Name(what);
    pqxx::work tx(*conn_);
    const std::string quoted = tx.quote_name(table);
    pqxx_compat::Exec0(
        tx, "CREATE TABLE " + quoted + " (id int PRIMARY KEY, token fencing_token, val text)");
    pqxx_compat::ExecParams(tx, "SELECT fencing_protect($1::regclass)", quoted);
    pqxx_compat::Exec0(tx, "INSERT INTO " + quoted + " VALUES (1, NULL, 'initial')");
    tx.commit();
    return quoted;
  }

  // An empty table (id int, token fencing_token, val text) under lock's
  // lock-wide fence.
  std::string MakeTableUnderLock(const std::string &what, const std::string &lock) {
    const std::string table = Name(what);
    pqxx::work tx(*conn_);
    const std::string quoted = tx.quote_name(table);
    pqxx_compat::Exec0(
        tx, "CREATE TABLE " + quoted + " (id int PRIMARY KEY, token fencing_token, val text)");
    pqxx_compat::ExecParams(tx, "SELECT fencing_protect($1::regclass, lock_name => $2)", quoted,
                            lock);
    tx.commit();
    return quoted;
  }

  // Looks at the connection named app while it sleeps for a lock
  // (wait_event_type Extension: on its latch, between attempts), five
  // times: it must be seen waiting, and never with an xmin or an xid.
  void ExpectWaitingWithoutSnapshot(const std::string &app) {
    int sleeping_looks = 0;
    int holding_looks = 0;
    const Clock::time_point start = Clock::now();
    while (sleeping_looks < 5 && Since(start) < 10000) {
      pqxx::nontransaction tx(*conn_);
      const pqxx::result r = pqxx_compat::ExecParams(
          tx,
          "SELECT backend_xmin IS NOT NULL OR backend_xid IS NOT NULL FROM pg_stat_activity "
          "WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Extension'",
          app);
      if (!r.empty()) {
        ++sleeping_looks;
        if (r[0][0].as<bool>()) ++holding_looks;
      }
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_GE(sleeping_looks, 5) << app << " was never seen waiting";
    EXPECT_EQ(holding_looks, 0) << app << " held a snapshot or an xid while it waited";
  }

  std::unique_ptr<pqxx::connection> conn_;
};

// ---- Acquire ------------------------------------------------------------------

TEST_F(ClientTest, AcquireReturnsIncreasingTokens) {
  const std::string lock = Name("lock");
  Token previous = 0;
  for (int i = 0; i < 3; ++i) {
    Lease lease(Options(lock, "holder", 5s));
    EXPECT_GT(lease.token(), previous);
    EXPECT_TRUE(lease.held());
    EXPECT_EQ(lease.lost_reason(), "");
    EXPECT_EQ(lease.lock_name(), lock);
    EXPECT_EQ(Leader(lock), std::optional<std::string>("holder"));
    EXPECT_EQ(Row(lock).token, lease.token());
    previous = lease.token();
  }
  Lease other(Options(Name("other"), "holder", 5s));
  EXPECT_GT(other.token(), previous);
}

TEST_F(ClientTest, SecondLeaseOnSameLockIsUnavailable) {
  const std::string lock = Name("lock");
  Lease first(Options(lock, "first", 5s));
  EXPECT_THROW(Lease{Options(lock, "second", 5s)}, LeaseUnavailableError);

  LeaseOptions waiting = Options(lock, "second", 5s);
  waiting.wait = 300ms;
  const Clock::time_point start = Clock::now();
  EXPECT_THROW(Lease{waiting}, LeaseUnavailableError);
  EXPECT_GE(Since(start), 250);

  EXPECT_TRUE(first.held());
  EXPECT_EQ(Leader(lock), std::optional<std::string>("first"));
  EXPECT_EQ(Row(lock).token, first.token());
}

TEST_F(ClientTest, WaitingAcquireGetsLockAfterReleaseOrDestruction) {
  const std::string lock = Name("lock");
  for (const bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "first lease destroyed" : "first lease released");
    auto first = std::make_unique<Lease>(Options(lock, "first", 10s));
    const Token first_token = first->token();
    std::thread letter_go([&] {
      std::this_thread::sleep_for(300ms);
      if (destroy) {
        first.reset();
      } else {
        first->Release();
      }
    });
    LeaseOptions options = Options(lock, "second", 5s);
    options.wait = 5s;
    const Clock::time_point start = Clock::now();
    std::unique_ptr<Lease> second;
    EXPECT_NO_THROW(second = std::make_unique<Lease>(options));
    const long long waited = Since(start);
    letter_go.join();
    ASSERT_NE(second, nullptr);
    EXPECT_GT(second->token(), first_token);
    EXPECT_TRUE(second->held());
    // Granted when the first let go, long before its 10 s ttl.
    EXPECT_GE(waited, 250);
    EXPECT_LT(waited, 3000);
    EXPECT_EQ(Leader(lock), std::optional<std::string>("second"));
  }
}

// A waiting Lease holds no snapshot and no transaction id while it waits, in
// each mode: its connection shows backend_xmin and backend_xid NULL at every
// look while it sleeps for the lock (so VACUUM is not held back however long
// a follower waits), then gets the lock when the holder lets go.
TEST_F(ClientTest, WaitingLeaseHoldsNoSnapshotWhileItWaits) {
  for (const LeaseOptions::Mode mode :
       {LeaseOptions::Mode::kExclusive, LeaseOptions::Mode::kShared, LeaseOptions::Mode::kPermit}) {
    const int index = static_cast<int>(mode);
    SCOPED_TRACE("mode " + std::to_string(index));
    const std::string lock = Name("lock" + std::to_string(index));
    LeaseOptions options = Options(lock, "holder", 30s);
    options.mode = mode;
    options.permits = 1;
    // A shared lease waits for an exclusive holder.
    if (mode == LeaseOptions::Mode::kShared) options.mode = LeaseOptions::Mode::kExclusive;
    auto first = std::make_unique<Lease>(options);
    const Token first_token = first->token();

    const std::string app = "ct_wait_" + std::to_string(getpid()) + "_" + std::to_string(index);
    LeaseOptions waiting = options;
    waiting.mode = mode;
    waiting.holder = "follower";
    waiting.conninfo = std::string(Dsn()) + " application_name=" + app;
    waiting.wait = 20s;
    std::unique_ptr<Lease> second;
    std::string failure;
    std::thread follower([&] {
      try {
        second = std::make_unique<Lease>(waiting);
      } catch (const std::exception &e) {
        failure = e.what();
      }
    });

    ExpectWaitingWithoutSnapshot(app);

    EXPECT_TRUE(first->Release());
    follower.join();
    ASSERT_EQ(failure, "");
    ASSERT_NE(second, nullptr);
    EXPECT_GT(second->token(), first_token);
    EXPECT_TRUE(second->held());
  }
}

// The server starts the ttl when it grants, after the wait: a lease granted
// after waiting longer than its ttl is held, not born expired.
TEST_F(ClientTest, LeaseGrantedAfterWaitingLongerThanItsTtlIsHeld) {
  const std::string lock = Name("lock");
  auto first = std::make_unique<Lease>(Options(lock, "first", 10s));
  std::thread letter_go([&] {
    std::this_thread::sleep_for(1000ms);
    first.reset();
  });
  LostProbe lost;
  LeaseOptions options = Options(lock, "second", 400ms);
  options.wait = 5s;
  options.on_lost = lost.Callback();
  const Clock::time_point start = Clock::now();
  std::unique_ptr<Lease> second;
  EXPECT_NO_THROW(second = std::make_unique<Lease>(options));
  letter_go.join();
  ASSERT_NE(second, nullptr);
  EXPECT_GE(Since(start), 900);
  EXPECT_TRUE(second->held()) << second->lost_reason();
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(second->held()) << second->lost_reason();
  EXPECT_TRUE(Row(lock).live);
  EXPECT_EQ(lost.calls(), 0) << lost.reason();
}

// ---- Heartbeat ------------------------------------------------------------------

TEST_F(ClientTest, HeartbeatKeepsLeaseAliveAcrossSeveralTtls) {
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "steady", 600ms);
  options.on_lost = lost.Callback();
  Lease lease(options);
  const LeaseRow initial = Row(lock);
  EXPECT_EQ(initial.token, lease.token());

  const Clock::time_point start = Clock::now();
  while (Since(start) < 2000) {
    std::this_thread::sleep_for(100ms);
    const LeaseRow now = Row(lock);
    ASSERT_TRUE(now.live) << "after " << Since(start) << " ms";
    ASSERT_EQ(now.token, lease.token());
    ASSERT_TRUE(lease.held()) << lease.lost_reason();
  }
  // Renewed, not just granted for long: the expiry moved with the heartbeat.
  EXPECT_GT(Row(lock).expires_epoch, initial.expires_epoch + 1.4);
  EXPECT_EQ(lost.calls(), 0) << lost.reason();
  EXPECT_NO_THROW(lease.CheckHeld());
}

TEST(LeaseOptionsTest, InvalidHeartbeatIsRefusedBeforeConnecting) {
  LeaseOptions options;
  options.conninfo = "host=/nonexistent";  // never reached
  options.lock_name = "l";
  options.holder = "h";
  options.ttl = 600ms;
  options.heartbeat = 600ms;  // would let the lease lapse between renewals
  EXPECT_THROW(Lease{options}, std::invalid_argument);
  options.heartbeat = 0ms;
  options.ttl = 0ms;
  EXPECT_THROW(Lease{options}, std::invalid_argument);
}

// A holder whose whole process is paused past its ttl (SIGSTOP) wakes up not
// holding the lease, is told so, and cannot write with its old token.
// ---- Permits and shared leases ---------------------------------------------------

// ---- Sessions (1.8) --------------------------------------------------------

SessionOptions SessionOf(const std::string &holder, milliseconds ttl) {
  SessionOptions options;
  options.conninfo = Dsn();
  options.holder = holder;
  options.ttl = ttl;
  return options;
}

TEST_F(ClientTest, SessionKeepsAllItsLeasesAliveWithOneHeartbeat) {
  const std::string a = Name("a"), b = Name("b");
  LostProbe lost;
  SessionOptions options = SessionOf("many", 600ms);
  options.on_lost = lost.Callback();
  Session session(options);
  const std::optional<Token> ta = session.Acquire(a);
  const std::optional<Token> tb = session.Acquire(b);
  ASSERT_TRUE(ta && tb);
  EXPECT_LT(*ta, *tb);
  const Clock::time_point start = Clock::now();
  while (Since(start) < 2000) {  // over three ttls: only the session is renewed
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(Row(a).live && Row(b).live) << "after " << Since(start) << " ms";
    ASSERT_TRUE(session.held()) << session.lost_reason();
  }
  EXPECT_EQ(Row(a).token, *ta);
  EXPECT_EQ(lost.calls(), 0) << lost.reason();
  // Another holder cannot take them; Close releases both at once.
  SessionOptions other = SessionOf("other", 5s);
  Session second(other);
  EXPECT_FALSE(second.Acquire(a));
  EXPECT_EQ(session.Close(), 2);
  EXPECT_EQ(session.Close(), 0) << "idempotent";
  EXPECT_FALSE(session.held());
  EXPECT_THROW(session.Acquire(a), LeaseLostError);
  EXPECT_TRUE(second.Acquire(a));
}

TEST_F(ClientTest, SessionAcquireAllTakesEveryLockOrNone) {
  const std::string a = Name("a"), b = Name("b"), c = Name("c\"quoted");
  Session first(SessionOf("first", 5s));
  Session second(SessionOf("second", 5s));
  const auto all = first.AcquireAll({c, a, c});
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], (*all)[2]);
  EXPECT_EQ((*all)[1], Row(a).token);
  EXPECT_EQ((*all)[0], Row(c).token);
  // One of them held by the first session: none, after a short wait.
  EXPECT_FALSE(second.AcquireAll({b, a}, 200ms));
  EXPECT_TRUE(first.Release(a, (*all)[1]));
  const auto now_both = second.AcquireAll({b, a});
  ASSERT_TRUE(now_both);
  EXPECT_EQ((*now_both)[0], Row(b).token);
}

// The sessions in a lock's line (superuser: fencing_line is the extension
// owner's), in order of place.
std::vector<std::int64_t> LineSessions(pqxx::connection &conn, const std::string &lock) {
  pqxx::nontransaction tx(conn);
  std::vector<std::int64_t> sessions;
  for (const auto &row : pqxx_compat::ExecParams(
           tx,
           "SELECT l.session_id FROM fencing_line l JOIN fencing_lock k USING (lock_id) "
           "WHERE k.lock_name = $1 ORDER BY l.place",
           lock)) {
    sessions.push_back(row[0].as<std::int64_t>());
  }
  return sessions;
}

// Waits up to 5 s for the lock's line to have `count` places.
bool WaitForPlaces(pqxx::connection &conn, const std::string &lock, std::size_t count) {
  const Clock::time_point start = Clock::now();
  while (Since(start) < 5000) {
    if (LineSessions(conn, lock).size() == count) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A plain fencing_acquire by a third party: whether it got the lock (given
// back at once if it did).
bool ThirdPartyGetsIt(pqxx::connection &conn, const std::string &lock) {
  pqxx::nontransaction tx(conn);
  const pqxx::row row = pqxx_compat::ExecParams1(
      tx, "SELECT fencing_acquire($1, 'third', '10 s'::interval)::text", lock);
  if (row[0].is_null()) return false;
  pqxx_compat::ExecParams(tx, "SELECT fencing_release($1, $2::fencing_token)", lock,
                          row[0].as<std::string>());
  return true;
}

// The places waiting in lock's line for session (fencing_lines, which any
// role reads for the locks it may use).
int WaitingPlaces(pqxx::connection &conn, const std::string &lock, std::int64_t session) {
  pqxx::nontransaction tx(conn);
  return pqxx_compat::ExecParams1(
             tx, "SELECT count(*)::int FROM fencing_lines WHERE lock_name = $1 AND session_id = $2",
             lock, session)[0]
      .as<int>();
}

// What the connections of application `app` were seen doing, looked at every
// 50 ms for `ms`: idle with no snapshot and no xid, running a statement, or
// anything else (idle in a transaction, a snapshot held while idle); and
// how often the statement was a CALL fencing_await.  Without the
// heartbeat's connection (its last statement a fencing_session_ call) when
// skip_heartbeat.
struct ConnectionLooks {
  int idle = 0;
  int active = 0;
  int other = 0;
  int awaiting = 0;
};

ConnectionLooks LookAtConnections(pqxx::connection &conn, const std::string &app, long long ms,
                                  bool skip_heartbeat) {
  ConnectionLooks looks;
  const Clock::time_point start = Clock::now();
  while (Since(start) < ms) {
    pqxx::nontransaction tx(conn);
    const pqxx::result r = pqxx_compat::ExecParams(
        tx,
        std::string("SELECT state, query LIKE '%fencing_await%', "
                    "backend_xmin IS NOT NULL OR backend_xid IS NOT NULL FROM pg_stat_activity "
                    "WHERE application_name = $1") +
            (skip_heartbeat ? " AND query NOT LIKE '%fencing_session_%'" : ""),
        app);
    for (const auto &row : r) {
      if (row[1].as<bool>()) ++looks.awaiting;
      const std::string state = row[0].as<std::string>();
      if (state == "idle" && !row[2].as<bool>()) {
        ++looks.idle;
      } else if (state == "active") {
        ++looks.active;
      } else {
        ++looks.other;
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  return looks;
}

// AcquireAll with a wait for two busy locks waits in line, one lock after
// the other in byte order: nothing runs on the server for it between its
// polls (no snapshot, no xid, no statement that waits), the lock it took
// first is the session's while it waits for the next, and once both are
// released it has both, tokens in the caller's order.
TEST_F(ClientTest, SessionAcquireAllWithAWaitWaitsInLineWithNothingRunning) {
  const std::string a = Name("a"), b = Name("b");
  Session holder(SessionOf("holder", 20s));
  std::optional<Token> held_a = holder.Acquire(a), held_b = holder.Acquire(b);
  ASSERT_TRUE(held_a && held_b);
  const std::string app = "ct_session_all_" + std::to_string(getpid());
  SessionOptions options = SessionOf("waiter", 20s);
  options.conninfo = std::string(Dsn()) + " application_name=" + app;
  options.line_poll = 200ms;
  Session session(options);
  std::optional<std::vector<Token>> granted;
  std::string failure;
  std::thread waiter([&] {
    try {
      granted = session.AcquireAll({b, a}, 10s);
    } catch (const std::exception &e) {
      failure = e.what();
    }
  });
  // Busy: a statement running (a poll, or one that waits), or a transaction.
  const ConnectionLooks looks = LookAtConnections(*conn_, app, 1000, false);
  EXPECT_GE(looks.idle, 15) << "the waiting connection was not seen idle between polls";
  EXPECT_LE(looks.active + looks.other, 3)
      << "a statement ran for the wait, or a snapshot was held";
  EXPECT_EQ(WaitingPlaces(*conn_, a, session.id()), 1) << "it waits for the first in byte order";

  EXPECT_TRUE(holder.Release(a, *held_a));
  const Clock::time_point released = Clock::now();
  while (WaitingPlaces(*conn_, b, session.id()) == 0 && Since(released) < 5000) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(WaitingPlaces(*conn_, b, session.id()), 1)
      << "it took the first and waits for the second";
  EXPECT_TRUE(Row(a).live) << "the first is the session's while it waits";
  EXPECT_GT(Row(a).token, *held_a);

  EXPECT_TRUE(holder.Release(b, *held_b));
  waiter.join();
  ASSERT_EQ(failure, "");
  ASSERT_TRUE(granted);
  ASSERT_EQ(granted->size(), 2u);
  EXPECT_EQ((*granted)[0], Row(b).token) << "in the caller's order";
  EXPECT_EQ((*granted)[1], Row(a).token);
  EXPECT_TRUE(Row(a).live && Row(b).live);
  EXPECT_EQ(Leader(a), std::optional<std::string>("waiter"));
  EXPECT_EQ(Leader(b), std::optional<std::string>("waiter"));
  EXPECT_TRUE(session.Release(b, (*granted)[0]));
  EXPECT_TRUE(session.Release(a, (*granted)[1]));
  if (IsSuperuser()) {
    EXPECT_TRUE(LineSessions(*conn_, a).empty() && LineSessions(*conn_, b).empty())
        << "released: their places left too";
  }
}

// All or none on timeout: AcquireAll with a wait takes the free lock, waits
// in line for the busy one, and when its wait runs out gives back the lock
// it took and leaves no place; a lock the session held before is kept.
TEST_F(ClientTest, SessionAcquireAllThatRunsOutGivesBackWhatItTook) {
  const std::string before = Name("a"), free = Name("b"), busy = Name("c");
  Session holder(SessionOf("holder", 20s));
  const std::optional<Token> blocker = holder.Acquire(busy);
  ASSERT_TRUE(blocker);
  SessionOptions options = SessionOf("waiter", 20s);
  options.line_poll = 100ms;
  Session session(options);
  const std::optional<Token> kept = session.Acquire(before);
  ASSERT_TRUE(kept);
  std::atomic<bool> seen_taken{false};
  std::thread watcher([&] {
    pqxx::connection watch(Dsn());
    const Clock::time_point start = Clock::now();
    while (Since(start) < 1400 && !seen_taken) {
      pqxx::nontransaction tx(watch);
      seen_taken = pqxx_compat::ExecParams1(
                       tx,
                       "SELECT count(*) = 1 FROM fencing_leases WHERE lock_name = $1 AND live "
                       "AND session_id = $2",
                       free, session.id())[0]
                       .as<bool>();
      std::this_thread::sleep_for(50ms);
    }
  });
  const Clock::time_point start = Clock::now();
  const std::optional<std::vector<Token>> all = session.AcquireAll({busy, free, before}, 1500ms);
  const long long took = Since(start);
  watcher.join();
  EXPECT_FALSE(all) << "busy: not all could be had";
  EXPECT_GE(took, 1400);
  EXPECT_LT(took, 4000);
  EXPECT_TRUE(seen_taken) << "it took the free lock while it waited for the busy one";
  {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(
        tx, "SELECT state, session_id IS NULL FROM fencing_leases WHERE lock_name = $1", free);
    EXPECT_EQ(row[0].as<std::string>(), "released") << "the lock it took is given back";
    EXPECT_TRUE(row[1].as<bool>());
  }
  EXPECT_EQ(WaitingPlaces(*conn_, busy, session.id()), 0) << "no place of the session remains";
  EXPECT_EQ(WaitingPlaces(*conn_, free, session.id()), 0);
  if (IsSuperuser()) {
    EXPECT_TRUE(LineSessions(*conn_, busy).empty() && LineSessions(*conn_, free).empty());
  }
  EXPECT_TRUE(Row(before).live) << "the lock it held before is kept";
  EXPECT_EQ(Row(before).token, *kept);
  EXPECT_EQ(Leader(before), std::optional<std::string>("waiter"));
  EXPECT_EQ(Leader(busy), std::optional<std::string>("holder"));
  EXPECT_TRUE(ThirdPartyGetsIt(*conn_, free)) << "the freed lock is anyone's";
}

// A Session::Lock with a wait on its own thread.
class LineWaiter {
 public:
  LineWaiter(Session &session, const std::string &lock, milliseconds wait)
      : LineWaiter(session, lock, [wait] {
          SessionLockOptions options;
          options.wait = wait;
          return options;
        }()) {}
  LineWaiter(Session &session, const std::string &lock, const SessionLockOptions &options) {
    thread_ = std::thread([this, &session, lock, options] {
      try {
        std::unique_ptr<SessionLease> lease = session.Lock(lock, options);
        std::lock_guard<std::mutex> guard(mutex_);
        lease_ = std::move(lease);
      } catch (const std::exception &e) {
        std::lock_guard<std::mutex> guard(mutex_);
        failure_ = e.what();
      }
      std::lock_guard<std::mutex> guard(mutex_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~LineWaiter() {
    if (thread_.joinable()) thread_.join();
  }
  // Waits up to timeout for Lock to return; true if it did.
  bool WaitDone(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return done_; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  // After WaitDone: the lease, or nullptr and failure().
  SessionLease *lease() {
    thread_.join();
    return lease_.get();
  }
  const std::string &failure() const { return failure_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::unique_ptr<SessionLease> lease_;
  std::string failure_;
  std::thread thread_;
};

// A Session's wait for an exclusive lease is a place in the lock's line
// (1.10): between its polls nothing runs on the server for it (no CALL
// fencing_await, no snapshot, no xid); the work connection is idle.
TEST_F(ClientTest, SessionAcquireWaitsInLineWithNothingRunning) {
  const std::string a = Name("a");
  auto holder = std::make_unique<Lease>(Options(a, "holder", 20s));
  const std::string app = "ct_session_wait_" + std::to_string(getpid());
  SessionOptions options = SessionOf("waiter", 20s);
  options.conninfo = std::string(Dsn()) + " application_name=" + app;
  Session session(options);
  std::optional<Token> granted;
  std::string failure;
  std::thread waiter([&] {
    try {
      granted = session.Acquire(a, 20s);
    } catch (const std::exception &e) {
      failure = e.what();
    }
  });
  const ConnectionLooks looks = LookAtConnections(*conn_, app, 1500, true);
  EXPECT_GE(looks.idle, 20) << "the waiting connection was not seen idle between polls";
  EXPECT_EQ(looks.other, 0) << "idle in a transaction, or a snapshot held while idle";
  EXPECT_EQ(looks.awaiting, 0) << "the wait ran CALL fencing_await";
  EXPECT_TRUE(holder->Release());
  waiter.join();
  ASSERT_EQ(failure, "");
  ASSERT_TRUE(granted);
  EXPECT_GT(*granted, holder->token());
  EXPECT_EQ(Row(a).token, *granted);
  EXPECT_EQ(Leader(a), std::optional<std::string>("waiter"));
  EXPECT_TRUE(session.Release(a, *granted));
  if (IsSuperuser()) {
    EXPECT_TRUE(LineSessions(*conn_, a).empty()) << "the place left after release";
  }
  EXPECT_EQ(session.Close(), 0);
}

// Two sessions wait in line: the first to arrive gets the lock on the
// holder's release, before the second; meanwhile a plain fencing_acquire
// gets nothing, even in the moment the lock is free and the first place has
// not polled yet.
TEST_F(ClientTest, SessionWaitsInLineInArrivalOrder) {
  if (!IsSuperuser()) GTEST_SKIP() << "reads fencing_line, which needs a superuser";
  const std::string lock = Name("lock");
  Session holder(SessionOf("holder", 20s));
  std::unique_ptr<SessionLease> held = holder.Lock(lock);
  SessionOptions first_options = SessionOf("first", 20s);
  first_options.line_poll = 1000ms;  // a window between the release and the poll
  SessionOptions second_options = SessionOf("second", 20s);
  second_options.line_poll = 100ms;  // polls far more often: order is the line's, not luck
  Session first(first_options);
  Session second(second_options);

  LineWaiter first_waits(first, lock, 20s);
  ASSERT_TRUE(WaitForPlaces(*conn_, lock, 1));
  LineWaiter second_waits(second, lock, 20s);
  ASSERT_TRUE(WaitForPlaces(*conn_, lock, 2));
  EXPECT_EQ(LineSessions(*conn_, lock), (std::vector<std::int64_t>{first.id(), second.id()}));
  EXPECT_FALSE(ThirdPartyGetsIt(*conn_, lock)) << "held";

  ASSERT_TRUE(held->Release());
  EXPECT_FALSE(ThirdPartyGetsIt(*conn_, lock)) << "free, but the line's first place's";
  ASSERT_TRUE(first_waits.WaitDone(5s)) << "the first place never got the lock";
  SessionLease *first_lease = first_waits.lease();
  ASSERT_NE(first_lease, nullptr) << first_waits.failure();
  EXPECT_FALSE(second_waits.done()) << "the second place got the lock before the first released";
  EXPECT_EQ(Leader(lock), std::optional<std::string>("first"));
  EXPECT_EQ(Row(lock).token, first_lease->token());
  EXPECT_FALSE(ThirdPartyGetsIt(*conn_, lock));
  std::this_thread::sleep_for(300ms);  // three of the second's polls
  EXPECT_FALSE(second_waits.done());

  EXPECT_TRUE(first_lease->Release());
  ASSERT_TRUE(second_waits.WaitDone(5s)) << "the second place never got the lock";
  SessionLease *second_lease = second_waits.lease();
  ASSERT_NE(second_lease, nullptr) << second_waits.failure();
  EXPECT_GT(second_lease->token(), first_lease->token());
  EXPECT_EQ(Leader(lock), std::optional<std::string>("second"));
  EXPECT_EQ(LineSessions(*conn_, lock), (std::vector<std::int64_t>{second.id()}))
      << "the first place left with its release; the second is kept while its lease lives";
  EXPECT_TRUE(second_lease->Release());
  EXPECT_TRUE(LineSessions(*conn_, lock).empty());
}

// A wait in line that runs out leaves the line and holds nothing: not even
// a lease its place took meanwhile (here by a poll from another connection,
// as a poll whose answer was lost would), which it gives back.
TEST_F(ClientTest, SessionWaitInLineThatRunsOutLeavesNothing) {
  if (!IsSuperuser()) GTEST_SKIP() << "reads fencing_line, which needs a superuser";
  const std::string lock = Name("lock");
  Session holder(SessionOf("holder", 20s));
  std::unique_ptr<SessionLease> held = holder.Lock(lock);
  SessionOptions options = SessionOf("waiter", 20s);
  options.line_poll = 100ms;
  Session waiter(options);

  SessionLockOptions briefly;
  briefly.wait = 400ms;
  Clock::time_point start = Clock::now();
  EXPECT_THROW(waiter.Lock(lock, briefly), LeaseUnavailableError);
  EXPECT_GE(Since(start), 400);
  EXPECT_LT(Since(start), 3000);
  EXPECT_FALSE(waiter.Acquire(lock, 300ms));
  EXPECT_TRUE(LineSessions(*conn_, lock).empty());
  EXPECT_EQ(Leader(lock), std::optional<std::string>("holder"));

  // Polled on a timer longer than its wait: it polls at its deadline too,
  // and finds the lease another connection's poll took for its place (a
  // place that never polled would hold the line up).
  options.line_poll = 10s;
  Session slow(options);
  LineWaiter waits(slow, lock, 1500ms);
  ASSERT_TRUE(WaitForPlaces(*conn_, lock, 1));
  ASSERT_TRUE(held->Release());
  {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::Exec1(
        tx,
        "SELECT p.state FROM fencing_line l JOIN fencing_lock k USING (lock_id), "
        "LATERAL fencing_line_poll(ARRAY[l.place]) p WHERE k.lock_name = " +
            tx.quote(lock));
    ASSERT_EQ(row[0].as<std::string>(), "granted");
  }
  EXPECT_TRUE(Row(lock).live) << "taken in the waiting session";
  ASSERT_TRUE(waits.WaitDone(5s));
  SessionLease *taken = waits.lease();
  ASSERT_NE(taken, nullptr) << waits.failure();
  EXPECT_TRUE(taken->Release());
  EXPECT_TRUE(LineSessions(*conn_, lock).empty());
  EXPECT_FALSE(Row(lock).live) << "released";
  EXPECT_EQ(slow.Close(), 0);
  EXPECT_EQ(waiter.Close(), 0);
  EXPECT_TRUE(ThirdPartyGetsIt(*conn_, lock));
}

// With line_listen, the wait LISTENs on fencing_line and polls as soon as
// its place is named: on the release it gets the lock long before its
// (here 10 s) timer.
TEST_F(ClientTest, SessionWaitInLineWakesOnNotification) {
  const std::string lock = Name("lock");
  Session holder(SessionOf("holder", 20s));
  std::unique_ptr<SessionLease> held = holder.Lock(lock);
  SessionOptions options = SessionOf("listener", 20s);
  options.line_poll = 10s;
  options.line_listen = true;
  Session session(options);
  LineWaiter waits(session, lock, 20s);
  std::this_thread::sleep_for(300ms);  // joined and asleep
  ASSERT_FALSE(waits.done());
  const Clock::time_point released = Clock::now();
  ASSERT_TRUE(held->Release());
  ASSERT_TRUE(waits.WaitDone(5s)) << "not woken by the notification";
  EXPECT_LT(Since(released), 2000);
  SessionLease *lease = waits.lease();
  ASSERT_NE(lease, nullptr) << waits.failure();
  EXPECT_EQ(Leader(lock), std::optional<std::string>("listener"));
  EXPECT_TRUE(lease->Release());
}

// A permit of a semaphore of 2, waiting up to `wait` (none: one attempt).
SessionLockOptions PermitOf2(std::optional<milliseconds> wait) {
  SessionLockOptions options;
  options.mode = LeaseOptions::Mode::kPermit;
  options.permits = 2;
  options.wait = wait;
  return options;
}

// A Session's wait for a permit (both of 2 held) and for a shared lease
// (behind a live exclusive lease) are places in line too: between their
// polls nothing runs on the server for them (no CALL fencing_await, no
// snapshot, no xid), and each takes its lease when it is freed.
TEST_F(ClientTest, SessionWaitsForAPermitAndASharedLeaseInLineWithNothingRunning) {
  const std::string sem = Name("sem"), rw = Name("rw");
  Session holder(SessionOf("holder", 20s));
  std::unique_ptr<SessionLease> first_permit = holder.Lock(sem, PermitOf2(std::nullopt));
  std::unique_ptr<SessionLease> second_permit = holder.Lock(sem, PermitOf2(std::nullopt));
  std::unique_ptr<SessionLease> writer = holder.Lock(rw);
  const std::string app = "ct_session_kinds_" + std::to_string(getpid());
  SessionOptions options = SessionOf("waiter", 20s);
  options.conninfo = std::string(Dsn()) + " application_name=" + app;
  Session permit_session(options);
  Session shared_session(options);
  SessionLockOptions shared;
  shared.mode = LeaseOptions::Mode::kShared;
  shared.wait = 20s;
  LineWaiter permit_waits(permit_session, sem, PermitOf2(20s));
  LineWaiter shared_waits(shared_session, rw, shared);

  const ConnectionLooks looks = LookAtConnections(*conn_, app, 1500, true);
  EXPECT_GE(looks.idle, 40) << "the waiting connections were not seen idle between polls";
  EXPECT_EQ(looks.other, 0) << "idle in a transaction, or a snapshot held while idle";
  EXPECT_EQ(looks.awaiting, 0) << "a wait ran CALL fencing_await";
  if (IsSuperuser()) {
    EXPECT_EQ(LineSessions(*conn_, sem), (std::vector<std::int64_t>{permit_session.id()}));
    EXPECT_EQ(LineSessions(*conn_, rw), (std::vector<std::int64_t>{shared_session.id()}));
  }
  EXPECT_FALSE(permit_waits.done());
  EXPECT_FALSE(shared_waits.done());

  ASSERT_TRUE(first_permit->Release());
  ASSERT_TRUE(permit_waits.WaitDone(5s)) << "the permit's wait never got the freed permit";
  SessionLease *permit = permit_waits.lease();
  ASSERT_NE(permit, nullptr) << permit_waits.failure();
  EXPECT_GT(permit->token(), second_permit->token());
  ASSERT_TRUE(writer->Release());
  ASSERT_TRUE(shared_waits.WaitDone(5s)) << "the shared wait never got its lease";
  SessionLease *reader = shared_waits.lease();
  ASSERT_NE(reader, nullptr) << shared_waits.failure();
  EXPECT_GT(reader->token(), writer->token());
  {
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(pqxx_compat::ExecParams1(tx,
                                       "SELECT count(*) FROM fencing_permits WHERE lock_name IN "
                                       "($1, $2) AND holder = 'waiter' AND live",
                                       sem, rw)[0]
                  .as<int>(),
              2)
        << "the permit and the shared lease, each a live slot";
  }
  EXPECT_TRUE(permit->Release());
  EXPECT_TRUE(reader->Release());
  if (IsSuperuser()) {
    EXPECT_TRUE(LineSessions(*conn_, sem).empty()) << "the place left after release";
    EXPECT_TRUE(LineSessions(*conn_, rw).empty()) << "the place left after release";
  }
}

// Three sessions wait for one of 2 permits (both held), in the order A, B,
// C: the first permit freed is A's, though B and C poll twenty times as
// often; the second is B's.  One more permit in B's session, whose place
// holds one, is a permit of its own.
TEST_F(ClientTest, SessionPermitWaitsTakeFreedPermitsInArrivalOrder) {
  if (!IsSuperuser()) GTEST_SKIP() << "reads fencing_line, which needs a superuser";
  const std::string sem = Name("sem");
  Session holder(SessionOf("holder", 20s));
  std::unique_ptr<SessionLease> first_permit = holder.Lock(sem, PermitOf2(std::nullopt));
  std::unique_ptr<SessionLease> second_permit = holder.Lock(sem, PermitOf2(std::nullopt));
  SessionOptions rare = SessionOf("a", 20s);
  rare.line_poll = 1000ms;  // a window between the release and its poll
  SessionOptions often_b = SessionOf("b", 20s);
  often_b.line_poll = 50ms;
  SessionOptions often_c = SessionOf("c", 20s);
  often_c.line_poll = 50ms;
  Session a(rare), b(often_b), c(often_c);

  LineWaiter a_waits(a, sem, PermitOf2(20s));
  ASSERT_TRUE(WaitForPlaces(*conn_, sem, 1));
  LineWaiter b_waits(b, sem, PermitOf2(20s));
  ASSERT_TRUE(WaitForPlaces(*conn_, sem, 2));
  LineWaiter c_waits(c, sem, PermitOf2(20s));
  ASSERT_TRUE(WaitForPlaces(*conn_, sem, 3));
  EXPECT_EQ(LineSessions(*conn_, sem), (std::vector<std::int64_t>{a.id(), b.id(), c.id()}));

  ASSERT_TRUE(first_permit->Release());
  ASSERT_TRUE(a_waits.WaitDone(5s)) << "A never got the first permit freed";
  SessionLease *a_lease = a_waits.lease();
  ASSERT_NE(a_lease, nullptr) << a_waits.failure();
  EXPECT_FALSE(b_waits.done()) << "B took the first permit freed";
  EXPECT_FALSE(c_waits.done()) << "C took the first permit freed";
  ASSERT_TRUE(second_permit->Release());
  ASSERT_TRUE(b_waits.WaitDone(5s)) << "B never got the second permit freed";
  SessionLease *b_lease = b_waits.lease();
  ASSERT_NE(b_lease, nullptr) << b_waits.failure();
  EXPECT_FALSE(c_waits.done()) << "C took the second permit freed";

  ASSERT_TRUE(a_lease->Release());
  ASSERT_TRUE(c_waits.WaitDone(5s)) << "C never got A's permit";
  SessionLease *c_lease = c_waits.lease();
  ASSERT_NE(c_lease, nullptr) << c_waits.failure();
  LineWaiter more(b, sem, PermitOf2(10s));
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(more.done()) << "one more permit while both are taken";
  ASSERT_TRUE(c_lease->Release());
  ASSERT_TRUE(more.WaitDone(5s)) << "B's second permit never came";
  SessionLease *another = more.lease();
  ASSERT_NE(another, nullptr) << more.failure();
  EXPECT_NE(another->token(), b_lease->token()) << "each permit has its own token";
  EXPECT_TRUE(another->held() && b_lease->held());
  EXPECT_TRUE(another->Release());
  EXPECT_TRUE(b_lease->Release());
  EXPECT_TRUE(LineSessions(*conn_, sem).empty());
}

TEST(SessionOptionsTest, NonPositiveLinePollIsRefusedBeforeConnecting) {
  SessionOptions options;
  options.conninfo = "host=/nonexistent";  // never reached
  options.holder = "h";
  options.line_poll = 0ms;
  EXPECT_THROW(Session session(options), std::invalid_argument);
}

TEST_F(ClientTest, SessionOnLostFiresOnceWhenClosedFromAnotherConnection) {
  const std::string a = Name("a");
  LostProbe lost;
  SessionOptions options = SessionOf("victim", 3s);
  options.heartbeat = 300ms;
  options.on_lost = lost.Callback();
  Session session(options);
  ASSERT_TRUE(session.Acquire(a));
  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_EQ(
        pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", session.id())[0].as<int>(),
        1);
  }
  ASSERT_TRUE(lost.WaitFor(2s)) << "on_lost not called";
  EXPECT_FALSE(session.held());
  EXPECT_THROW(session.CheckHeld(), LeaseLostError);
  EXPECT_FALSE(Row(a).live);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(lost.calls(), 1);
}

// The Lease API over a session: Session::Lock gives a HeldLock of any kind,
// whose held() is the session's, whose Release() ends that lease only, and
// whose destructor releases it.
TEST_F(ClientTest, SessionLockIsAHeldLockOfAnyKind) {
  const std::string leader = Name("leader"), pool = Name("pool"), reads = Name("reads");
  Session session(SessionOf("locker", 5s));
  SessionLockOptions exclusive;
  exclusive.payload = R"({"addr": "10.0.0.7:5000"})";
  const std::unique_ptr<SessionLease> lead = session.Lock(leader, exclusive);
  const HeldLock &as_lock = *lead;  // what code written for a Lease takes
  EXPECT_TRUE(as_lock.held());
  EXPECT_EQ(as_lock.token(), Row(leader).token);
  EXPECT_EQ(as_lock.Describe(),
            "lock \"" + leader + "\" in fencing session " + std::to_string(session.id()));
  const std::optional<LeaderInfo> info = ReadLeader(*conn_, leader);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->holder, "locker");
  EXPECT_EQ(info->payload, std::optional<std::string>(R"({"addr": "10.0.0.7:5000"})"));

  SessionLockOptions permit;
  permit.mode = LeaseOptions::Mode::kPermit;
  permit.permits = 2;
  const std::unique_ptr<SessionLease> p1 = session.Lock(pool, permit);
  const std::unique_ptr<SessionLease> p2 = session.Lock(pool, permit);
  EXPECT_NE(p1->token(), p2->token());
  Session other(SessionOf("other", 5s));
  EXPECT_THROW(other.Lock(pool, permit), LeaseUnavailableError) << "both permits are taken";
  EXPECT_THROW(other.Lock(leader), LeaseUnavailableError);
  SessionLockOptions payload_on_permit = permit;
  payload_on_permit.payload = "{}";
  EXPECT_THROW(other.Lock(pool, payload_on_permit), std::invalid_argument);

  SessionLockOptions shared;
  shared.mode = LeaseOptions::Mode::kShared;
  const std::unique_ptr<SessionLease> r1 = session.Lock(reads, shared);
  const std::unique_ptr<SessionLease> r2 = other.Lock(reads, shared);
  EXPECT_TRUE(r1->held() && r2->held());

  // Release ends one lease; the session and the rest live on.
  EXPECT_TRUE(p1->Release());
  EXPECT_FALSE(p1->Release()) << "idempotent";
  EXPECT_FALSE(p1->held());
  EXPECT_EQ(p1->lost_reason(), "released");
  EXPECT_THROW(p1->CheckHeld(), LeaseLostError);
  EXPECT_TRUE(p2->held() && lead->held() && session.held());
  const std::unique_ptr<SessionLease> p3 = other.Lock(pool, permit);
  EXPECT_GT(p3->token(), p2->token());

  {
    // The destructor releases: the lock is free for a waiter at once.
    const std::unique_ptr<SessionLease> scoped = other.Lock(Name("scoped"));
  }
  EXPECT_FALSE(Row(Name("scoped")).live);

  // The session's loss is every lease's.
  EXPECT_EQ(session.Close(), 3) << "the leader, p2 and r1";
  EXPECT_FALSE(lead->held());
  EXPECT_FALSE(p2->held());
  EXPECT_FALSE(r1->held());
  EXPECT_FALSE(lead->Release()) << "closed with its session";
  EXPECT_TRUE(r2->held());
  SessionLockOptions waiting;
  waiting.wait = 2s;
  const std::unique_ptr<SessionLease> next = other.Lock(leader, waiting);
  EXPECT_GT(next->token(), lead->token());
}

TEST(SessionOptionsTest, InvalidHeartbeatIsRefusedBeforeConnecting) {
  SessionOptions options;
  options.conninfo = "host=/nonexistent";  // never reached
  options.holder = "h";
  options.ttl = 1000ms;
  options.heartbeat = 1000ms;
  EXPECT_THROW(Session session(options), std::invalid_argument);
}

TEST_F(ClientTest, PermitsAreCountedAndEachIsFencedOnItsOwn) {
  const std::string lock = Name("sem");
  const std::string table = MakeTableUnderLock("sem_tbl", lock);
  LeaseOptions options = Options(lock, "permit-a", 5s);
  options.mode = LeaseOptions::Mode::kPermit;
  options.permits = 2;
  auto a = std::make_unique<Lease>(options);
  options.holder = "permit-b";
  Lease b(options);
  EXPECT_TRUE(a->held());
  EXPECT_TRUE(b.held());
  EXPECT_GT(b.token(), a->token());
  options.holder = "permit-c";
  EXPECT_THROW(Lease{options}, LeaseUnavailableError);

  // Both permits write, to the same row.
  ExecFenced(*conn_, "INSERT INTO " + table + " VALUES (1, $1, 'a')", a->token());
  ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'b' WHERE id = 1", b.token());
  ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'a' WHERE id = 1", a->token());

  // a's permit goes to c: a's token is refused, b's and c's are not.
  const Token a_token = a->token();
  EXPECT_TRUE(a->Release());
  Lease c(options);
  EXPECT_GT(c.token(), b.token());
  EXPECT_THROW(
      ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'late a' WHERE id = 1",
                 a_token),
      StaleTokenError);
  ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'b' WHERE id = 1", b.token());
  ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'c' WHERE id = 1", c.token());
  EXPECT_EQ(c.Describe(), "a permit of semaphore \"" + lock + "\"");
}

TEST_F(ClientTest, SharedLeasesShareAndAnExclusiveGrantFencesThem) {
  const std::string lock = Name("rw");
  const std::string table = MakeTableUnderLock("rw_tbl", lock);
  LeaseOptions shared = Options(lock, "reader-1", 5s);
  shared.mode = LeaseOptions::Mode::kShared;
  auto r1 = std::make_unique<Lease>(shared);
  shared.holder = "reader-2";
  auto r2 = std::make_unique<Lease>(shared);
  EXPECT_TRUE(r1->held());
  EXPECT_TRUE(r2->held());
  ExecFenced(*conn_, "INSERT INTO " + table + " VALUES (1, $1, 'r2')", r2->token());
  ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = 'r1' WHERE id = 1", r1->token());
  EXPECT_THROW(Lease{Options(lock, "writer", 5s)}, LeaseUnavailableError);

  const Token r1_token = r1->token();
  EXPECT_TRUE(r1->Release());
  EXPECT_TRUE(r2->Release());
  Lease writer(Options(lock, "writer", 5s));
  EXPECT_GT(writer.token(), r1_token);
  EXPECT_THROW(ExecFenced(*conn_, "UPDATE " + table + " SET token = $1 WHERE id = 1", r1_token),
               StaleTokenError);
  EXPECT_THROW(Lease{shared}, LeaseUnavailableError);

  shared.payload = "{}";
  EXPECT_THROW(Lease{shared}, std::invalid_argument);
}

TEST_F(ClientTest, PausedHolderLosesLeaseAndIsFenced) {
  const std::string lock = Name("lock");
  const std::string table = MakeProtectedTable("tbl");
  const milliseconds ttl = 600ms;
  const std::string dsn = Dsn();

  Child child([&](int out) -> int {
    std::atomic<bool> lost{false};
    std::atomic<bool> lost_on_other_thread{false};
    const std::thread::id main_thread = std::this_thread::get_id();
    LeaseOptions options = Options(lock, "paused-child", ttl);
    options.on_lost = [&](const std::string &) {
      lost_on_other_thread = std::this_thread::get_id() != main_thread;
      lost = true;
    };
    Lease lease(options);
    Child::WriteLine(out, "token " + std::to_string(lease.token()));
    // The parent stops us about now.  held() turns false by the clock alone,
    // as soon as we run again.
    const Clock::time_point start = Clock::now();
    while (lease.held() && Since(start) < 10000) std::this_thread::sleep_for(2ms);
    if (lease.held()) {
      Child::WriteLine(out, "still held after 10 s");
      return 10;
    }
    const Clock::time_point noticed = Clock::now();
    while (!lost && Since(noticed) < 2000) std::this_thread::sleep_for(1ms);
    if (!lost) {
      Child::WriteLine(out, "on_lost not called within 2 s of held() turning false");
      return 11;
    }
    Child::WriteLine(out, "on_lost " + std::to_string(Since(noticed)) +
                              " ms after held() turned false: " + lease.lost_reason());
    if (Since(noticed) > 500) return 12;
    if (!lost_on_other_thread) return 13;
    try {
      lease.CheckHeld();
      return 14;
    } catch (const LeaseLostError &) {
    }
    // Acting anyway, with the old token: the database refuses.
    pqxx::connection conn(dsn);
    try {
      ExecFenced(conn, "UPDATE " + table + " SET token = $1, val = $2 WHERE id = 1", lease.token(),
                 "child");
      Child::WriteLine(out, "stale write accepted");
      return 15;
    } catch (const StaleTokenError &error) {
      Child::WriteLine(out, std::string("stale write refused: ") + error.what());
    }
    return 0;
  });

  const std::optional<std::string> first = child.ReadLine(10s);
  ASSERT_TRUE(first && first->rfind("token ", 0) == 0) << first.value_or("<nothing>");
  const Token child_token = std::stoll(first->substr(6));

  child.Signal(SIGSTOP);
  child.WaitStopped();
  const Clock::time_point stopped = Clock::now();

  // The lock frees up once the paused child's lease lapses on the server.
  LeaseOptions options = Options(lock, "parent", 10s);
  options.wait = 5s;
  Lease newer(options);
  EXPECT_GT(newer.token(), child_token);
  EXPECT_GE(Since(stopped), 250) << "the lock was free before the child's lease lapsed";
  const pqxx::result written =
      ExecFenced(*conn_, "UPDATE " + table + " SET token = $1, val = $2 WHERE id = 1 RETURNING val",
                 newer.token(), "parent");
  ASSERT_EQ(written.size(), 1u);

  // Paused for longer than the ttl in all.
  std::this_thread::sleep_until(stopped + ttl + 200ms);
  child.Signal(SIGCONT);
  const std::string output = child.ReadRest(10s);
  const int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("stale write refused"), std::string::npos) << output;

  pqxx::nontransaction tx(*conn_);
  const pqxx::row row =
      pqxx_compat::Exec1(tx, "SELECT token::bigint, val FROM " + table + " WHERE id = 1");
  EXPECT_EQ(row[0].as<Token>(), newer.token());
  EXPECT_EQ(row[1].as<std::string>(), "parent");
}

TEST_F(ClientTest, KilledHolderFreesLockAfterTtl) {
  const std::string lock = Name("lock");
  const milliseconds ttl = 600ms;
  Child child([&](int out) -> int {
    Lease lease(Options(lock, "doomed", ttl));
    Child::WriteLine(out, "token " + std::to_string(lease.token()));
    std::this_thread::sleep_for(60s);
    return 0;
  });
  const std::optional<std::string> first = child.ReadLine(10s);
  ASSERT_TRUE(first && first->rfind("token ", 0) == 0) << first.value_or("<nothing>");
  const Token child_token = std::stoll(first->substr(6));

  child.Signal(SIGKILL);
  const int status = child.Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  const Clock::time_point killed = Clock::now();

  // The lease outlives its holder, for at most a ttl.
  EXPECT_THROW(Lease{Options(lock, "heir", 5s)}, LeaseUnavailableError);
  LeaseOptions options = Options(lock, "heir", 5s);
  options.wait = 5s;
  Lease heir(options);
  EXPECT_GT(heir.token(), child_token);
  EXPECT_LT(Since(killed), ttl.count() + 400);
  EXPECT_EQ(Leader(lock), std::optional<std::string>("heir"));
}

// ---- on_lost ------------------------------------------------------------------

TEST_F(ClientTest, OnLostFiresWhenLeaseExpiredBehindItsBack) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to write fencing_lease";
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "victim", 3s);
  options.heartbeat = 300ms;
  options.on_lost = lost.Callback();
  Lease lease(options);
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(lease.held());

  const Clock::time_point expired = Clock::now();
  {
    pqxx::work tx(*conn_);
    pqxx_compat::ExecParams0(tx, "UPDATE fencing_lease SET expires_at = now() WHERE lock_name = $1",
                             lock);
    tx.commit();
  }
  ASSERT_TRUE(lost.WaitFor(2s)) << "on_lost not called";
  EXPECT_LT(Ms(lost.at() - expired), 300 + 300) << "later than about one heartbeat";
  EXPECT_NE(lost.thread(), std::this_thread::get_id());
  EXPECT_FALSE(lease.held());
  EXPECT_NE(lost.reason().find("refused"), std::string::npos) << lost.reason();
  EXPECT_EQ(lease.lost_reason(), lost.reason());
  EXPECT_THROW(lease.CheckHeld(), LeaseLostError);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(lost.calls(), 1);
  EXPECT_FALSE(lease.Release());  // the server no longer had it
}

TEST_F(ClientTest, OnLostFiresWhenReleasedFromAnotherConnection) {
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "victim", 3s);
  options.heartbeat = 300ms;
  options.on_lost = lost.Callback();
  Lease lease(options);
  ASSERT_TRUE(lease.held());

  const Clock::time_point released = Clock::now();
  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_TRUE(
        pqxx_compat::ExecParams1(tx, "SELECT fencing_release($1, $2)", lock, lease.token())[0]
            .as<bool>());
  }
  ASSERT_TRUE(lost.WaitFor(2s)) << "on_lost not called";
  EXPECT_LT(Ms(lost.at() - released), 300 + 300) << "later than about one heartbeat";
  EXPECT_FALSE(lease.held());
  EXPECT_THROW(lease.CheckHeld(), LeaseLostError);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(lost.calls(), 1);
}

TEST_F(ClientTest, OnLostFiresWhenHeartbeatConnectionDies) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to terminate another role's backend";
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "cut-off", 3s);
  options.heartbeat = 300ms;
  options.on_lost = lost.Callback();
  Lease lease(options);
  std::this_thread::sleep_for(400ms);  // at least one renewal on the heartbeat connection

  const Clock::time_point cut = Clock::now();
  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_EQ(
        pqxx_compat::ExecParams1(tx,
                                 "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE pid <> pg_backend_pid() "
                                 "AND query LIKE 'SELECT fencing_renew(%' || $1 || '%'",
                                 lock)[0]
            .as<int>(),
        1);
  }
  ASSERT_TRUE(lost.WaitFor(2s)) << "on_lost not called";
  EXPECT_LT(Ms(lost.at() - cut), 300 + 300) << "later than about one heartbeat";
  EXPECT_FALSE(lease.held());
  EXPECT_NE(lost.reason().find("failed"), std::string::npos) << lost.reason();
  // The server still has the lease: the holder can give it back on a new
  // connection rather than leave it to expire.
  EXPECT_TRUE(lease.Release());
  EXPECT_EQ(Leader(lock), std::nullopt);
}

// A renewal that cannot complete (here: the lease row is locked by another
// transaction) must not delay on_lost past the lease's safe deadline.
TEST_F(ClientTest, OnLostFiresWhileRenewalIsStuck) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to lock fencing_lease";
  const std::string lock = Name("lock");
  const milliseconds ttl = 600ms;
  LostProbe lost;
  LeaseOptions options = Options(lock, "stuck", ttl);
  options.on_lost = lost.Callback();
  auto lease = std::make_unique<Lease>(options);

  pqxx::connection blocker_conn(Dsn());
  pqxx::work blocker(blocker_conn);
  pqxx_compat::ExecParams1(blocker, "SELECT 1 FROM fencing_lease WHERE lock_name = $1 FOR UPDATE",
                           lock);
  const Clock::time_point blocked = Clock::now();

  // The next renewal queues behind the row lock.
  const std::string waiting_renewals =
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
      "AND query LIKE 'SELECT fencing_renew(%' AND query LIKE '%' || $1 || '%'";
  auto count_waiting = [&] {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::ExecParams1(tx, waiting_renewals, lock)[0].as<int>();
  };
  const Clock::time_point look = Clock::now();
  while (count_waiting() == 0 && Since(look) < 1000) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(count_waiting(), 1) << "no renewal is waiting for the row lock";

  ASSERT_TRUE(lost.WaitFor(3s)) << "on_lost not called while the renewal hung";
  // The last renewal that got through was sent before the row was locked.
  EXPECT_LT(Ms(lost.at() - blocked), (ttl - Lease::SafetyMargin(ttl)).count() + 150);
  EXPECT_FALSE(lease->held());
  EXPECT_NE(lost.reason().find("no answer"), std::string::npos) << lost.reason();
  // The abandoned renewal is cancelled, not left queued behind the lock.
  const Clock::time_point cancel = Clock::now();
  while (count_waiting() != 0 && Since(cancel) < 2000) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(count_waiting(), 0) << "the stuck renewal was not cancelled";
  blocker.abort();
  const Clock::time_point start = Clock::now();
  lease.reset();  // must not hang, must not throw
  EXPECT_LT(Since(start), 2000);
}

// ---- Payload, leader, revoke ----------------------------------------------------

TEST_F(ClientTest, PayloadIsPublishedWithEitherAcquireAndReadBack) {
  const std::string lock = Name("lock");
  EXPECT_EQ(ReadLeader(*conn_, lock), std::nullopt) << "no lease yet";
  Token first_token = 0;
  {
    LeaseOptions options = Options(lock, "first", 10s);
    options.payload = R"({"addr": "10.0.0.1:5000"})";
    auto first = std::make_unique<Lease>(options);
    first_token = first->token();
    const std::optional<LeaderInfo> leader = ReadLeader(*conn_, lock);
    ASSERT_TRUE(leader);
    EXPECT_EQ(leader->holder, "first");
    EXPECT_EQ(leader->token, first->token());
    EXPECT_EQ(leader->payload, std::optional<std::string>(R"({"addr": "10.0.0.1:5000"})"));

    // The waiting form carries it too.
    std::thread letter_go([&] {
      std::this_thread::sleep_for(300ms);
      first.reset();
    });
    LeaseOptions waiting = Options(lock, "second", 10s);
    waiting.wait = 5s;
    waiting.payload = R"({"addr": "10.0.0.2:5000", "zone": 2})";
    Lease second(waiting);
    letter_go.join();
    const std::optional<LeaderInfo> next = ReadLeader(*conn_, lock);
    ASSERT_TRUE(next);
    EXPECT_EQ(next->holder, "second");
    EXPECT_GT(next->token, first_token);
    EXPECT_EQ(next->payload, std::optional<std::string>(R"({"addr": "10.0.0.2:5000", "zone": 2})"));
  }
  EXPECT_EQ(ReadLeader(*conn_, lock), std::nullopt) << "released: no live lease";
  {
    Lease plain(Options(lock, "plain", 10s));
    const std::optional<LeaderInfo> leader = ReadLeader(*conn_, lock);
    ASSERT_TRUE(leader);
    EXPECT_EQ(leader->holder, "plain");
    EXPECT_EQ(leader->payload, std::nullopt);
  }
  LeaseOptions bad = Options(lock, "bad", 10s);
  bad.payload = "{not json";
  EXPECT_THROW(Lease{bad}, pqxx::data_exception);
}

TEST_F(ClientTest, RevokeEndsTheLeaseAndRaisesTheMark) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs the lock's owner or a superuser to revoke";
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "victim", 10s);
  options.heartbeat = 300ms;
  options.on_lost = lost.Callback();
  Lease lease(options);

  const Clock::time_point revoked = Clock::now();
  const Token mark = Revoke(*conn_, lock, "incident 42");
  EXPECT_GT(mark, lease.token());
  EXPECT_EQ(ReadLeader(*conn_, lock), std::nullopt);
  ASSERT_TRUE(lost.WaitFor(2s)) << "on_lost not called";
  EXPECT_LT(Ms(lost.at() - revoked), 300 + 300) << "later than about one heartbeat";
  EXPECT_NE(lost.reason().find("revoked"), std::string::npos) << lost.reason();
  EXPECT_FALSE(lease.held());
  {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(
        tx, "SELECT state, end_reason FROM fencing_leases WHERE lock_name = $1", lock);
    EXPECT_EQ(row[0].as<std::string>(), "revoked");
    EXPECT_EQ(row[1].as<std::string>(), "incident 42");
  }
  // Free at once, above the mark; a revoke without a reason records none.
  Lease next(Options(lock, "next", 10s));
  EXPECT_GT(next.token(), mark);
  EXPECT_GT(Revoke(*conn_, lock, ""), next.token());
  pqxx::nontransaction tx(*conn_);
  EXPECT_TRUE(pqxx_compat::ExecParams1(
                  tx, "SELECT end_reason FROM fencing_leases WHERE lock_name = $1", lock)[0]
                  .is_null());
}

// ---- on_at_risk -----------------------------------------------------------------

// A renewal stuck behind a row lock: the warning comes while the lease is
// still held, about at_risk_fraction * ttl after the last good renewal, and
// before on_lost.
TEST_F(ClientTest, OnAtRiskFiresBeforeOnLostWhileRenewalIsStuck) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to lock fencing_lease";
  const std::string lock = Name("lock");
  const milliseconds ttl = 1200ms;  // renew every 400 ms, at risk after 600, lost after 1080
  LostProbe lost;
  LostProbe at_risk;
  std::atomic<bool> held_at_risk{false};
  std::atomic<bool> lost_before_at_risk{false};
  Lease *self = nullptr;
  LeaseOptions options = Options(lock, "shaky", ttl);
  options.on_lost = lost.Callback();
  options.at_risk_fraction = 0.5;
  options.on_at_risk = [&, record = at_risk.Callback()](const std::string &reason) {
    held_at_risk = self->held();
    lost_before_at_risk = lost.calls() > 0;
    record(reason);
  };
  auto lease = std::make_unique<Lease>(options);
  self = lease.get();

  pqxx::connection blocker_conn(Dsn());
  pqxx::work blocker(blocker_conn);
  pqxx_compat::ExecParams1(blocker, "SELECT 1 FROM fencing_lease WHERE lock_name = $1 FOR UPDATE",
                           lock);
  const Clock::time_point blocked = Clock::now();

  ASSERT_TRUE(at_risk.WaitFor(3s)) << "on_at_risk not called while the renewal hung";
  ASSERT_TRUE(lost.WaitFor(3s)) << "on_lost not called while the renewal hung";
  EXPECT_TRUE(held_at_risk.load());
  EXPECT_FALSE(lost_before_at_risk.load());
  EXPECT_LT(at_risk.at(), lost.at());
  // The last good renewal was sent at most a period before the row was locked.
  EXPECT_LT(Ms(at_risk.at() - blocked), 600 + 150);
  EXPECT_NE(at_risk.reason().find("no renewal has succeeded"), std::string::npos)
      << at_risk.reason();
  EXPECT_EQ(at_risk.calls(), 1);
  blocker.abort();
  lease.reset();
}

// ---- Graceful hand-over ---------------------------------------------------------

// Acquires lock with a wait on a thread; records when it got it.
class Waiter {
 public:
  Waiter(LeaseOptions options) {
    thread_ = std::thread([this, options] {
      try {
        auto lease = std::make_unique<Lease>(options);
        std::lock_guard<std::mutex> lock(mutex_);
        granted_at_ = Clock::now();
        lease_ = std::move(lease);
      } catch (const std::exception &error) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = error.what();
      }
      cv_.notify_all();
    });
  }
  ~Waiter() {
    if (thread_.joinable()) thread_.join();
  }
  bool granted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lease_ != nullptr;
  }
  // Waits for the outcome; the lease, or nullptr with error() set.
  Lease *Wait(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [this] { return lease_ != nullptr || !error_.empty(); });
    return lease_.get();
  }
  Clock::time_point granted_at() {
    std::lock_guard<std::mutex> lock(mutex_);
    return granted_at_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::unique_ptr<Lease> lease_;
  Clock::time_point granted_at_;
  std::string error_;
  std::thread thread_;
};

TEST_F(ClientTest, HandOverReleasesWhenTheUnitOfWorkFinishes) {
  const std::string lock = Name("lock");
  Lease lease(Options(lock, "outgoing", 10s));
  Lease::WorkGuard work = lease.BeginWork();
  ASSERT_TRUE(work);
  EXPECT_EQ(lease.work_in_flight(), 1);

  LeaseOptions waiting = Options(lock, "incoming", 10s);
  waiting.wait = 10s;
  Waiter waiter(waiting);
  std::this_thread::sleep_for(200ms);  // queued in the waiting room

  lease.HandOver(5s);
  EXPECT_TRUE(lease.handing_over());
  EXPECT_FALSE(lease.BeginWork()) << "new work is refused during a hand-over";
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(waiter.granted()) << "handed over while a unit of work was in flight";
  EXPECT_TRUE(lease.held());
  EXPECT_EQ(Leader(lock), std::optional<std::string>("outgoing"));
  EXPECT_FALSE(lease.WaitHandedOver(0ms));

  const Clock::time_point finished = Clock::now();
  work.Finish();
  Lease *incoming = waiter.Wait(5s);
  ASSERT_NE(incoming, nullptr) << waiter.error();
  EXPECT_GE(Ms(waiter.granted_at() - finished), 0);
  EXPECT_LT(Ms(waiter.granted_at() - finished), 500) << "not promptly after the unit finished";
  EXPECT_GT(incoming->token(), lease.token());
  EXPECT_TRUE(lease.WaitHandedOver(2s));
  EXPECT_FALSE(lease.held());
  EXPECT_EQ(lease.lost_reason(), "released by its holder");
  EXPECT_EQ(lease.work_in_flight(), 0);
}

TEST_F(ClientTest, HandOverReleasesAtTheDeadlineWithWorkStillInFlight) {
  const std::string lock = Name("lock");
  auto lease = std::make_unique<Lease>(Options(lock, "outgoing", 10s));
  Lease::WorkGuard stuck = lease->BeginWork();
  ASSERT_TRUE(stuck);

  LeaseOptions waiting = Options(lock, "incoming", 10s);
  waiting.wait = 10s;
  Waiter waiter(waiting);
  std::this_thread::sleep_for(200ms);

  const Clock::time_point asked = Clock::now();
  lease->HandOver(800ms);
  Lease *incoming = waiter.Wait(5s);
  ASSERT_NE(incoming, nullptr) << waiter.error();
  EXPECT_GE(Ms(waiter.granted_at() - asked), 750) << "released before the deadline";
  EXPECT_LT(Ms(waiter.granted_at() - asked), 800 + 500) << "not promptly at the deadline";
  EXPECT_TRUE(stuck) << "still in flight";
  EXPECT_EQ(lease->work_in_flight(), 1);
  EXPECT_TRUE(lease->WaitHandedOver(1s));
  EXPECT_FALSE(lease->held());
  EXPECT_THROW(lease->CheckHeld(), LeaseLostError);
  stuck.Finish();
  EXPECT_EQ(lease->work_in_flight(), 0);
  lease.reset();
  EXPECT_EQ(Leader(lock), std::optional<std::string>("incoming"));
}

TEST_F(ClientTest, HandOverWithoutWorkReleasesAtOnceAndDestructionDuringOneDoesNotHang) {
  const std::string lock = Name("lock");
  {
    Lease lease(Options(lock, "idle", 10s));
    lease.HandOver(10s);
    EXPECT_TRUE(lease.WaitHandedOver(2s));
    EXPECT_EQ(Leader(lock), std::nullopt);
    EXPECT_FALSE(lease.BeginWork());
  }
  const Clock::time_point start = Clock::now();
  {
    Lease lease(Options(lock, "busy", 10s));
    Lease::WorkGuard work = lease.BeginWork();
    lease.HandOver(10s);
    work.Finish();
    Lease::WorkGuard none = lease.BeginWork();
    EXPECT_FALSE(none);
  }  // destroyed mid-hand-over (or just after): released either way
  EXPECT_LT(Since(start), 3000);
  EXPECT_EQ(Leader(lock), std::nullopt);
  {
    Lease lease(Options(lock, "busy", 10s));
    Lease::WorkGuard work = lease.BeginWork();
    lease.HandOver(10s);
  }  // destroyed with work in flight: the destructor releases, now
  EXPECT_LT(Since(start), 3000);
  EXPECT_EQ(Leader(lock), std::nullopt);
}

// ---- Release and destruction ----------------------------------------------------

TEST_F(ClientTest, ReleaseIsIdempotent) {
  const std::string lock = Name("lock");
  LostProbe lost;
  LeaseOptions options = Options(lock, "holder", 10s);
  options.on_lost = lost.Callback();
  Lease lease(options);
  EXPECT_TRUE(lease.Release());
  EXPECT_FALSE(lease.held());
  EXPECT_EQ(Leader(lock), std::nullopt);
  EXPECT_FALSE(lease.Release());
  EXPECT_FALSE(lease.Release());
  EXPECT_FALSE(lease.held());
  EXPECT_EQ(lease.lost_reason(), "released by its holder");
  EXPECT_THROW(lease.CheckHeld(), LeaseLostError);
  EXPECT_EQ(lost.calls(), 0) << "releasing is not losing";
  // Free at once for the next holder.
  Lease next(Options(lock, "next", 5s));
  EXPECT_GT(next.token(), lease.token());
}

TEST_F(ClientTest, DestructorReleasesImmediately) {
  const std::string lock = Name("lock");
  Token token = 0;
  {
    Lease lease(Options(lock, "scoped", 30s));
    token = lease.token();
    EXPECT_EQ(Leader(lock), std::optional<std::string>("scoped"));
  }
  EXPECT_EQ(Leader(lock), std::nullopt);
  EXPECT_FALSE(Row(lock).live);
  Lease next(Options(lock, "next", 5s));  // no wait needed
  EXPECT_GT(next.token(), token);
}

// ---- Fenced writes --------------------------------------------------------------

TEST_F(ClientTest, ExecFencedMapsGuardErrorsAndReturnsRows) {
  const std::string table = MakeProtectedTable("tbl");
  const std::string update =
      "UPDATE " + table + " SET token = $1, val = $2 WHERE id = $3 RETURNING id, val";
  // A grant first, so that the small tokens below are below the highest
  // token the database has granted (1.5 refuses one above it).
  {
    pqxx::work tx(*conn_);
    pqxx_compat::Exec1(tx, "SELECT fencing_grant()");
    tx.commit();
  }

  const pqxx::result ok = ExecFenced(*conn_, update, Token{10}, "ten", 1);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0][0].as<int>(), 1);
  EXPECT_EQ(ok[0][1].as<std::string>(), "ten");

  EXPECT_THROW(ExecFenced(*conn_, update, Token{9}, "nine", 1), StaleTokenError);
  // Forgot the token column: the guard calls that missing.
  EXPECT_THROW(
      ExecFenced(*conn_,
                 "UPDATE " + table + " SET val = $2 WHERE id = $3 AND $1::bigint IS NOT NULL",
                 Token{11}, "eleven", 1),
      MissingTokenError);
  // A token nobody granted (the largest there is): a caller's bug.
  EXPECT_THROW(ExecFenced(*conn_, update, Token{9223372036854775807}, "made up", 1),
               NeverGrantedTokenError);
  // Other errors pass unchanged, with their own type.
  EXPECT_THROW(
      ExecFenced(*conn_, "INSERT INTO " + table + " (id, token) VALUES ($2, $1)", Token{12}, 1),
      pqxx::unique_violation);

  // Nothing of the failed writes stuck; the connection is still usable.
  const pqxx::result equal = ExecFenced(*conn_, update, Token{10}, "ten again", 1);
  ASSERT_EQ(equal.size(), 1u);
  pqxx::nontransaction tx(*conn_);
  const pqxx::row row =
      pqxx_compat::Exec1(tx, "SELECT token::bigint, val FROM " + table + " WHERE id = 1");
  EXPECT_EQ(row[0].as<Token>(), 10);
  EXPECT_EQ(row[1].as<std::string>(), "ten again");
}

// A COMMIT after the lease the write was made under ran out (1.6): refused
// by the server, thrown as LeaseEndedError, and nothing of the write kept.
TEST_F(ClientTest, ExecFencedThrowsLeaseEndedErrorForACommitAfterTheLease) {
  const std::string table = MakeProtectedTable("ended");
  Token token = 0;
  {
    pqxx::work tx(*conn_);
    token = pqxx_compat::ExecParams(tx, "SELECT fencing_acquire($1, 'h', '100 ms')",
                                    Name("ended-lock"))[0][0]
                .as<Token>();
    tx.commit();
  }
  // The statement outlasts the lease: the write is made while it lives, the
  // COMMIT comes after its end.
  EXPECT_THROW(ExecFenced(*conn_,
                          "WITH slept AS (SELECT pg_sleep(0.3)) UPDATE " + table +
                              " SET token = $1, val = $2 FROM slept WHERE id = $3",
                          token, "late", 1),
               LeaseEndedError);
  pqxx::nontransaction tx(*conn_);
  EXPECT_NE(pqxx_compat::Exec1(tx, "SELECT coalesce(val, '') FROM " + table + " WHERE id = 1")[0]
                .as<std::string>(),
            "late");
}

// ---- One heartbeat per Client ---------------------------------------------------

// What pg_stat_activity shows of the connections named `app`: how many,
// the pids of those whose last statement renewed (the heartbeat's), and
// whether one of those, idle, holds a transaction, a snapshot or an xid.
struct ClientBackends {
  int total = 0;
  std::set<int> heartbeats;
  bool heartbeat_holds = false;
};
ClientBackends BackendsOf(pqxx::connection &conn, const std::string &app) {
  pqxx::nontransaction tx(conn);
  const pqxx::result rows = pqxx_compat::ExecParams(
      tx,
      "SELECT pid, query LIKE '%fencing_session_renew(%' OR query LIKE '%fencing_renew(%', "
      "state = 'idle in transaction' OR state = 'idle in transaction (aborted)' "
      "OR (state = 'idle' AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)) "
      "FROM pg_stat_activity WHERE application_name = $1",
      app);
  ClientBackends backends;
  for (pqxx::result::size_type i = 0; i < rows.size(); ++i) {
    const auto row = rows[i];
    ++backends.total;
    if (!row[1].as<bool>()) continue;
    backends.heartbeats.insert(row[0].as<int>());
    if (row[2].as<bool>()) backends.heartbeat_holds = true;
  }
  return backends;
}

// Waits up to a second for the client's heartbeat connection (made with
// its first renewal): its pid, or 0.
int HeartbeatPid(pqxx::connection &conn, const std::string &app) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    const ClientBackends backends = BackendsOf(conn, app);
    if (backends.heartbeats.size() == 1) return *backends.heartbeats.begin();
    if (Since(start) > 1000) return 0;
    std::this_thread::sleep_for(20ms);
  }
}

// A plain lease made with client (options with the client's conninfo), its
// loss told to lost.
std::unique_ptr<Lease> ClientLease(Client &client, LeaseOptions options, LostProbe &lost) {
  options.conninfo.clear();  // the client's
  options.on_lost = lost.Callback();
  return std::make_unique<Lease>(client, options);
}

// Twenty sessions (each with a lease) and a plain lease from one Client:
// the server sees their twenty work connections and one heartbeat
// connection, the same one for several ttls, idle between its rounds with
// no transaction and no snapshot, and every one of them renewed throughout;
// once they are gone, so is the heartbeat connection.
TEST_F(ClientTest, ClientRenewsManySessionsAndALeaseOnOneHeartbeatConnection) {
  constexpr int kSessions = 20;
  const std::string app = "ct_client_one_" + std::to_string(getpid());
  Client client(std::string(Dsn()) + " application_name=" + app);
  std::vector<std::unique_ptr<LostProbe>> lost;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::string> ids;
  for (int i = 0; i < kSessions; ++i) {
    lost.push_back(std::make_unique<LostProbe>());
    SessionOptions options;  // no conninfo: the client's
    options.holder = "many-" + std::to_string(i);
    options.ttl = 1000ms;
    options.on_lost = lost.back()->Callback();
    sessions.push_back(std::make_unique<Session>(client, options));
    ids.push_back(std::to_string(sessions.back()->id()));
    ASSERT_TRUE(sessions.back()->Acquire(Name("s" + std::to_string(i))));
  }
  const std::string lock = Name("plain");
  LostProbe lease_lost;
  LeaseOptions lease_options = Options(lock, "plain", 1000ms);
  lease_options.on_lost = lease_lost.Callback();
  lease_options.conninfo = client.conninfo();  // given, it must be the client's
  auto lease = std::make_unique<Lease>(client, lease_options);
  EXPECT_EQ(client.renewing(), static_cast<std::size_t>(kSessions + 1));

  const Clock::time_point start = Clock::now();
  std::set<int> heartbeat_pids;
  int looks = 0;
  while (Since(start) < 3000) {  // three ttls
    std::this_thread::sleep_for(250ms);
    for (int i = 0; i < kSessions; ++i) {
      ASSERT_TRUE(sessions[i]->held())
          << "session " << i << " after " << Since(start) << " ms: " << sessions[i]->lost_reason();
    }
    ASSERT_TRUE(lease->held()) << lease->lost_reason();
    const ClientBackends backends = BackendsOf(*conn_, app);
    EXPECT_LE(backends.heartbeats.size(), 1u) << "after " << Since(start) << " ms";
    if (backends.heartbeats.empty()) continue;  // the first renewal is not sent yet
    ++looks;
    EXPECT_EQ(backends.total, kSessions + 1)
        << "the sessions' work connections and one heartbeat connection";
    EXPECT_FALSE(backends.heartbeat_holds)
        << "the heartbeat connection holds a transaction or a snapshot between rounds";
    heartbeat_pids.insert(backends.heartbeats.begin(), backends.heartbeats.end());
  }
  EXPECT_GE(looks, 10);
  EXPECT_EQ(heartbeat_pids.size(), 1u) << "one heartbeat connection all along";
  {
    // Renewed, not just opened for long: every end moved past 2.5 ttls.
    std::string array = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) array += (i ? "," : "") + ids[i];
    array += "}";
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(pqxx_compat::ExecParams1(
                  tx,
                  "SELECT count(*)::int FROM fencing_sessions WHERE session_id = ANY($1::bigint[]) "
                  "AND live AND expires_at > opened_at + interval '2.5 seconds'",
                  array)[0]
                  .as<int>(),
              kSessions);
  }
  EXPECT_TRUE(Row(lock).live);
  for (int i = 0; i < kSessions; ++i) EXPECT_EQ(lost[i]->calls(), 0) << lost[i]->reason();
  EXPECT_EQ(lease_lost.calls(), 0) << lease_lost.reason();

  // Nothing left to renew: the heartbeat connection is closed.
  lease.reset();
  sessions.clear();
  EXPECT_EQ(client.renewing(), 0u);
  const Clock::time_point gone = Clock::now();
  while (BackendsOf(*conn_, app).total > 0 && Since(gone) < 2000) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(BackendsOf(*conn_, app).total, 0) << "a connection outlived what it served";
  EXPECT_EQ(Leader(lock), std::nullopt) << "the lease was not released";
}

// One session closed and one lease released behind the client's back: each
// is reported lost once, with the words of its own heartbeat, by the
// client's one heartbeat thread, while the other sessions live on, renewed
// on the same connection.
TEST_F(ClientTest, ClientReportsALossForItsLockAloneAndRenewsTheOthers) {
  constexpr int kSessions = 4;
  const std::string app = "ct_client_loss_" + std::to_string(getpid());
  Client client(std::string(Dsn()) + " application_name=" + app);
  std::vector<std::unique_ptr<LostProbe>> lost;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < kSessions; ++i) {
    lost.push_back(std::make_unique<LostProbe>());
    SessionOptions options;
    options.holder = "loss-" + std::to_string(i);
    options.ttl = 1000ms;
    options.on_lost = lost.back()->Callback();
    sessions.push_back(std::make_unique<Session>(client, options));
    ASSERT_TRUE(sessions.back()->Acquire(Name("s" + std::to_string(i))));
  }
  const std::string lock = Name("plain");
  LostProbe lease_lost;
  const std::unique_ptr<Lease> lease = ClientLease(client, Options(lock, "plain", 1000ms), lease_lost);
  const int pid = HeartbeatPid(*conn_, app);
  ASSERT_NE(pid, 0) << "no heartbeat connection";

  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_EQ(pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", sessions[1]->id())[0]
                  .as<int>(),
              1);
    ASSERT_TRUE(
        pqxx_compat::ExecParams1(tx, "SELECT fencing_release($1, $2)", lock, lease->token())[0]
            .as<bool>());
  }
  ASSERT_TRUE(lost[1]->WaitFor(2s)) << "the closed session's on_lost not called";
  ASSERT_TRUE(lease_lost.WaitFor(2s)) << "the released lease's on_lost not called";
  EXPECT_EQ(lost[1]->reason(), "renewal refused: the session ended, or was closed");
  EXPECT_EQ(lease_lost.reason(),
            "renewal refused: the lease expired, was released or revoked, or was taken over");
  EXPECT_EQ(lost[1]->thread(), lease_lost.thread()) << "not the client's one heartbeat thread";
  EXPECT_FALSE(sessions[1]->held());
  EXPECT_FALSE(lease->held());

  const Clock::time_point start = Clock::now();
  while (Since(start) < 1500) {  // a ttl and a half more
    std::this_thread::sleep_for(200ms);
    for (int i = 0; i < kSessions; ++i) {
      if (i == 1) continue;
      ASSERT_TRUE(sessions[i]->held()) << "session " << i << ": " << sessions[i]->lost_reason();
    }
  }
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(lost[i]->calls(), i == 1 ? 1 : 0) << "session " << i << ": " << lost[i]->reason();
  }
  EXPECT_EQ(lease_lost.calls(), 1);
  const ClientBackends backends = BackendsOf(*conn_, app);
  EXPECT_EQ(backends.heartbeats, std::set<int>{pid}) << "the heartbeat connection changed";
  EXPECT_EQ(client.renewing(), static_cast<std::size_t>(kSessions + 1))
      << "a lost lock leaves the heartbeat when its holder lets it go";
}

// The heartbeat connection terminated: what it renewed is lost, once each,
// as a renewal that fails is, and the next session of the client is renewed
// on a new connection.
TEST_F(ClientTest, ClientHeartbeatConnectionThatDiesLosesWhatItRenewedAndIsMadeAgain) {
  const std::string app = "ct_client_cut_" + std::to_string(getpid());
  Client client(std::string(Dsn()) + " application_name=" + app);
  std::vector<std::unique_ptr<LostProbe>> lost;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 3; ++i) {
    lost.push_back(std::make_unique<LostProbe>());
    SessionOptions options;
    options.holder = "cut-" + std::to_string(i);
    options.ttl = 3000ms;
    options.heartbeat = 300ms;
    options.on_lost = lost.back()->Callback();
    sessions.push_back(std::make_unique<Session>(client, options));
  }
  const int pid = HeartbeatPid(*conn_, app);
  ASSERT_NE(pid, 0) << "no heartbeat connection";
  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_TRUE(pqxx_compat::ExecParams1(tx, "SELECT pg_terminate_backend($1)", pid)[0].as<bool>());
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(lost[i]->WaitFor(2s)) << "session " << i << ": on_lost not called";
    EXPECT_NE(lost[i]->reason().find("renewal failed"), std::string::npos) << lost[i]->reason();
    EXPECT_FALSE(sessions[i]->held());
  }

  SessionOptions options;
  options.holder = "after";
  options.ttl = 1000ms;
  LostProbe after_lost;
  options.on_lost = after_lost.Callback();
  Session after(client, options);
  const Clock::time_point start = Clock::now();
  while (Since(start) < 1500) {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(after.held()) << after.lost_reason();
  }
  const int again = HeartbeatPid(*conn_, app);
  EXPECT_NE(again, 0);
  EXPECT_NE(again, pid);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lost[i]->calls(), 1);
  EXPECT_EQ(after_lost.calls(), 0) << after_lost.reason();
}

// The server refuses one lock's renewal with an error (a lease of a role
// whose use of the lock was revoked: 42501), which fails the whole batch
// statement: that lease alone is lost, as a renewal that fails is, and the
// sessions it shared the statement with are renewed on, on the same
// connection.
TEST_F(ClientTest, ClientRenewsTheOthersWhenTheServerRefusesOneLocksRenewal) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to create a role";
  const std::string lock = Name("granted");
  const std::string role = "ct_client_user_" + std::to_string(getpid());
  const std::string app = "ct_client_refused_" + std::to_string(getpid());
  struct RoleGuard {
    pqxx::connection &conn;
    std::string role;
    ~RoleGuard() {
      try {
        pqxx::nontransaction tx(conn);
        pqxx_compat::Exec0(tx, "DROP ROLE IF EXISTS " + tx.quote_name(role));
      } catch (...) {
      }
    }
  };
  {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::Exec0(tx, "CREATE ROLE " + tx.quote_name(role) + " LOGIN PASSWORD 'client'");
    pqxx_compat::ExecParams(tx, "SELECT fencing_create_lock($1)", lock);
    pqxx_compat::ExecParams(tx, "SELECT fencing_grant_lock($1, $2::regrole)", lock, role);
  }
  RoleGuard guard{*conn_, role};
  {
    Client client(std::string(Dsn()) + " user=" + role +
                  " password=client application_name=" + app);
    std::vector<std::unique_ptr<LostProbe>> lost;
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < 2; ++i) {
      lost.push_back(std::make_unique<LostProbe>());
      SessionOptions options;
      options.holder = "granted-" + std::to_string(i);
      options.ttl = 1000ms;
      options.on_lost = lost.back()->Callback();
      sessions.push_back(std::make_unique<Session>(client, options));
    }
    LostProbe lease_lost;
    const std::unique_ptr<Lease> lease = ClientLease(client, Options(lock, "granted", 1000ms), lease_lost);
    const int pid = HeartbeatPid(*conn_, app);
    ASSERT_NE(pid, 0) << "no heartbeat connection";
    {
      pqxx::nontransaction tx(*conn_);
      ASSERT_TRUE(
          pqxx_compat::ExecParams1(tx, "SELECT fencing_revoke_lock($1, $2::regrole)", lock, role)[0]
              .as<bool>());
    }
    ASSERT_TRUE(lease_lost.WaitFor(2s)) << "the lease's on_lost not called";
    EXPECT_NE(lease_lost.reason().find("renewal failed: "), std::string::npos)
        << lease_lost.reason();
    const Clock::time_point start = Clock::now();
    while (Since(start) < 1500) {  // a ttl and a half
      std::this_thread::sleep_for(200ms);
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(sessions[i]->held()) << "session " << i << ": " << sessions[i]->lost_reason();
      }
    }
    for (int i = 0; i < 2; ++i) EXPECT_EQ(lost[i]->calls(), 0) << lost[i]->reason();
    EXPECT_EQ(lease_lost.calls(), 1);
    EXPECT_EQ(BackendsOf(*conn_, app).heartbeats, std::set<int>{pid})
        << "the heartbeat connection changed";
  }
  // Everything of the role's is closed before the role goes.
  const Clock::time_point gone = Clock::now();
  while (BackendsOf(*conn_, app).total > 0 && Since(gone) < 2000) {
    std::this_thread::sleep_for(20ms);
  }
}

// One session's renewal stuck behind a lock on its row: the statement is
// given until the earliest deadline in it, that session is reported lost
// by its own deadline, the stuck statement is cancelled, and the session
// with the longer ttl is renewed on, on a new connection.
TEST_F(ClientTest, ClientReportsAStuckRenewalByItsDeadlineAndRenewsTheRestOnANewConnection) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to lock fencing_session";
  const std::string app = "ct_client_stuck_" + std::to_string(getpid());
  Client client(std::string(Dsn()) + " application_name=" + app);
  const milliseconds short_ttl = 1000ms;
  LostProbe stuck_lost, other_lost;
  SessionOptions options;
  options.holder = "stuck";
  options.ttl = short_ttl;
  options.on_lost = stuck_lost.Callback();
  Session stuck(client, options);
  options.holder = "other";
  options.ttl = 3000ms;
  options.on_lost = other_lost.Callback();
  Session other(client, options);
  const int pid = HeartbeatPid(*conn_, app);
  ASSERT_NE(pid, 0) << "no heartbeat connection";

  pqxx::connection blocker_conn(Dsn());
  pqxx::work blocker(blocker_conn);
  pqxx_compat::ExecParams1(
      blocker, "SELECT 1 FROM fencing_session WHERE session_id = $1 FOR UPDATE", stuck.id());
  const Clock::time_point blocked = Clock::now();
  ASSERT_TRUE(stuck_lost.WaitFor(3s)) << "on_lost not called while the renewal hung";
  // The last renewal that got through was sent before the row was locked.
  EXPECT_LT(Ms(stuck_lost.at() - blocked),
            (short_ttl - Lease::SafetyMargin(short_ttl)).count() + 150);
  EXPECT_NE(stuck_lost.reason().find("renewal got no answer before the lock's safe deadline"),
            std::string::npos)
      << stuck_lost.reason();
  // The stuck statement is cancelled, not left waiting for the row.
  const auto waiting = [&] {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::ExecParams1(tx,
                                    "SELECT count(*)::int FROM pg_stat_activity WHERE "
                                    "application_name = $1 AND wait_event_type = 'Lock'",
                                    app)[0]
        .as<int>();
  };
  const Clock::time_point cancel = Clock::now();
  while (waiting() != 0 && Since(cancel) < 2000) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(waiting(), 0) << "the stuck renewal was not cancelled";
  const Clock::time_point start = Clock::now();
  while (Since(start) < 1200) {  // the other's next renewal, on a new connection
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(other.held()) << other.lost_reason();
  }
  EXPECT_EQ(other_lost.calls(), 0) << other_lost.reason();
  EXPECT_EQ(stuck_lost.calls(), 1);
  const ClientBackends backends = BackendsOf(*conn_, app);
  EXPECT_EQ(backends.heartbeats.size(), 1u);
  EXPECT_EQ(backends.heartbeats.count(pid), 0u) << "the stuck connection was reused";
  blocker.abort();
}

// ---- A wait of more than a minute (PG_FENCING_LONG_WAIT) ------------------------

// The places waiting in a lock's line as fencing_lines shows them, in
// order of place: (place, position).
using LinePlaces = std::vector<std::pair<std::int64_t, std::int64_t>>;
LinePlaces LinePositions(pqxx::connection &conn, const std::string &lock) {
  pqxx::nontransaction tx(conn);
  LinePlaces places;
  for (const auto &row : pqxx_compat::ExecParams(
           tx, "SELECT place, position FROM fencing_lines WHERE lock_name = $1 ORDER BY place",
           lock)) {
    places.emplace_back(row[0].as<std::int64_t>(), row[1].as<std::int64_t>());
  }
  return places;
}

// A session's wait of 150 s in line keeps its place for more than a minute:
// behind a 3 s holder that the client's heartbeat keeps renewing, session A
// waits (polling; no LISTEN), and B joins behind it in plain SQL.  For 65 s,
// looked at every 5 s and once at the end, A's wait has not returned and the
// line is exactly A's first place at position 1 and B's at 2; on the
// release A takes the lease within 10 s, and B still waits.  It catches a
// client that re-queues its wait (leaves and joins again, say every 30 s:
// A's place number changes, and B moves ahead of it) and one whose wait
// ends early (a 30 s slice: the wait returns, A's place goes).  About 70 s,
// so skipped unless PG_FENCING_LONG_WAIT=1 (test/clients/long_waits.sh runs
// it with the other clients' long waits).
TEST_F(ClientTest, LongWaitInLineKeepsItsPlaceForMoreThanAMinute) {
  const char *long_wait = std::getenv("PG_FENCING_LONG_WAIT");
  if (long_wait == nullptr || std::string(long_wait) != "1")
    GTEST_SKIP() << "takes about 70 s: set PG_FENCING_LONG_WAIT=1 to run it";
  const std::string lock = Name("lock");
  Client client(Dsn());
  LostProbe holder_lost, a_lost;
  std::unique_ptr<Lease> holder = ClientLease(client, Options(lock, "holder", 3s), holder_lost);
  SessionOptions options;  // no conninfo: the client's; line_poll 500 ms, no line_listen
  options.holder = "long-wait-A";
  options.on_lost = a_lost.Callback();
  Session a(client, options);
  LineWaiter a_waits(a, lock, 150s);
  // Should an assertion end the test early, A's wait is not left to run out
  // its 150 s in LineWaiter's destructor: closing A's session ends it.
  struct CloseOnExit {
    Session &session;
    ~CloseOnExit() {
      try {
        session.Close();
      } catch (...) {
      }
    }
  } close_a{a};

  LinePlaces line;
  const Clock::time_point joined = Clock::now();
  while ((line = LinePositions(*conn_, lock)).size() != 1 && Since(joined) < 5000) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(line.size(), 1u) << "A's place never showed in fencing_lines";
  const std::int64_t a_place = line[0].first;
  std::int64_t b_session = 0, b_place = 0;
  {
    pqxx::nontransaction tx(*conn_);
    b_session = pqxx_compat::Exec1(tx, "SELECT fencing_session_open('long-wait-B', '5 min')")[0]
                    .as<std::int64_t>();
    b_place = pqxx_compat::ExecParams1(tx, "SELECT place FROM fencing_line_join($1, $2)", b_session,
                                       lock)[0]
                  .as<std::int64_t>();
  }
  const LinePlaces a_then_b{{a_place, 1}, {b_place, 2}};

  const Clock::time_point start = Clock::now();
  for (;;) {
    ASSERT_FALSE(a_waits.done()) << "A's wait of 150 s returned after " << Since(start)
                                 << " ms: " << a_waits.failure();
    ASSERT_EQ(LinePositions(*conn_, lock), a_then_b)
        << "after " << Since(start) << " ms: A's place left or rejoined";
    ASSERT_TRUE(holder->held()) << holder->lost_reason();
    ASSERT_TRUE(a.held()) << a.lost_reason();
    const long long left = 65000 - Since(start);
    if (left <= 0) break;
    a_waits.WaitDone(milliseconds(std::min(left, 5000LL)));  // woken early if A's wait returns
  }
  EXPECT_EQ(Row(lock).token, holder->token()) << "still the holder's lease";

  ASSERT_TRUE(holder->Release());
  ASSERT_TRUE(a_waits.WaitDone(10s)) << "A did not get the lease within 10 s of the release";
  SessionLease *a_lease = a_waits.lease();
  ASSERT_NE(a_lease, nullptr) << a_waits.failure();
  EXPECT_GT(a_lease->token(), holder->token());
  EXPECT_EQ(Leader(lock), std::optional<std::string>("long-wait-A"));
  EXPECT_EQ(LinePositions(*conn_, lock), (LinePlaces{{b_place, 1}}))
      << "B's place waits, first now";
  {
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(pqxx_compat::ExecParams1(tx, "SELECT state FROM fencing_line_poll(ARRAY[$1::bigint])",
                                       b_place)[0]
                  .as<std::string>(),
              "waiting");
  }

  EXPECT_TRUE(a_lease->Release());
  EXPECT_EQ(a.Close(), 0);
  {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", b_session);
  }
  EXPECT_TRUE(LinePositions(*conn_, lock).empty());
  EXPECT_EQ(holder_lost.calls(), 0) << holder_lost.reason();
  EXPECT_EQ(a_lost.calls(), 0) << a_lost.reason();
}

TEST(ClientOptionsTest, ASessionOrLeaseOfAClientTakesItsConninfo) {
  Client client("host=/nonexistent");  // never reached
  SessionOptions session;
  session.conninfo = "host=/elsewhere";
  session.holder = "h";
  EXPECT_THROW((Session{client, session}), std::invalid_argument);
  LeaseOptions lease;
  lease.conninfo = "host=/elsewhere";
  lease.lock_name = "l";
  lease.holder = "h";
  EXPECT_THROW((Lease{client, lease}), std::invalid_argument);
  EXPECT_EQ(client.renewing(), 0u);
}

// ---- LeaderWatch (watch.hpp) -----------------------------------------------------
//
// The watches here use reread_period 0 unless a test is about the period:
// then nothing but a notification, a reconnect or the lease's expiry makes
// them read, and each test fails if the path it is about is missing.

// Records on_change and on_error calls; must outlive the watch.
class WatchProbe {
 public:
  void Attach(LeaderWatchOptions &options) {
    options.on_change = [this](const std::optional<LeaderInfo> &leader) {
      std::lock_guard<std::mutex> lock(mutex_);
      changes_.push_back(leader);
      cv_.notify_all();
    };
    options.on_error = [this](const std::string &what) {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_.push_back(what);
      cv_.notify_all();
    };
  }
  // Waits until the last change reported is `holder` (nullopt: no leader).
  bool WaitForLeader(const std::optional<std::string> &holder, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] {
      if (changes_.empty()) return false;
      const std::optional<LeaderInfo> &last = changes_.back();
      return holder ? (last && last->holder == *holder) : !last;
    });
  }
  bool WaitForErrors(std::size_t count, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return errors_.size() >= count; });
  }
  std::vector<std::optional<LeaderInfo>> changes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return changes_;
  }
  std::size_t errors() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_.size();
  }
  // "none, a#12, b#13": what was reported, for assertion messages.
  std::string History() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string text;
    for (const std::optional<LeaderInfo> &change : changes_) {
      if (!text.empty()) text += ", ";
      text += change ? change->holder + "#" + std::to_string(change->token) : "none";
    }
    return text;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::optional<LeaderInfo>> changes_;
  std::vector<std::string> errors_;
};

class WatchTest : public ClientTest {
 protected:
  // Creates the lock and sets whether it is announced on fencing_events.
  void MakeLock(const std::string &lock, bool announce) {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::ExecParams(tx, "SELECT fencing_create_lock($1)", lock);
    pqxx_compat::ExecParams(tx, "SELECT fencing_set_announce($1, $2)", lock, announce);
  }

  LeaderWatchOptions WatchOptions(const std::string &lock, WatchProbe &probe,
                                  const std::string &extra_conninfo = "") {
    LeaderWatchOptions options;
    options.conninfo = std::string(Dsn()) + " application_name=" + AppName() + " " + extra_conninfo;
    options.lock_name = lock;
    options.reread_period = 0ms;
    probe.Attach(options);
    return options;
  }

  // The watches' application_name, for finding their backends: unique like
  // Name(), and short enough to be kept whole (63 bytes).
  std::string AppName() const {
    return "ct_watch_" + std::to_string(std::hash<std::string>{}(Name("watch")));
  }

  int TerminateWatchBackends() {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::ExecParams1(tx,
                                    "SELECT count(pg_terminate_backend(pid))::int "
                                    "FROM pg_stat_activity WHERE application_name = $1",
                                    AppName())[0]
        .as<int>();
  }

  // fencing_acquire in a statement of its own: a lease nobody renews.
  Token AcquireBySql(const std::string &lock, const std::string &holder, const char *ttl) {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::ExecParams1(tx, "SELECT fencing_acquire($1, $2, $3::interval)::bigint",
                                    lock, holder, ttl)[0]
        .as<Token>();
  }

  void Notify(const std::string &payload) {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::ExecParams(tx, "SELECT pg_notify('fencing_events', $1)", payload);
  }
};

TEST_F(WatchTest, ReportsTheLeaderAtStartThenEachGrantReleaseAndRevoke) {
  const std::string lock = Name("lock");
  MakeLock(lock, true);
  auto first = std::make_unique<Lease>(Options(lock, "first", 30s));
  WatchProbe probe;
  LeaderWatch watch(WatchOptions(lock, probe));
  ASSERT_TRUE(watch.leader()) << "the constructor read the leader";
  EXPECT_EQ(watch.leader()->holder, "first");
  EXPECT_EQ(watch.leader()->token, first->token());
  ASSERT_TRUE(probe.WaitForLeader("first", 5s)) << probe.History();
  EXPECT_TRUE(watch.connected());

  ASSERT_TRUE(first->Release());
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << "release not seen: " << probe.History();
  EXPECT_EQ(watch.leader(), std::nullopt);

  // A grant by another connection.
  LeaseOptions options = Options(lock, "second", 30s);
  options.payload = R"({"addr": "10.0.0.2:5000"})";
  Lease second(options);
  ASSERT_TRUE(probe.WaitForLeader("second", 5s)) << "grant not seen: " << probe.History();
  const std::optional<LeaderInfo> seen = watch.leader();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->token, second.token());
  EXPECT_EQ(seen->payload, std::optional<std::string>(R"({"addr": "10.0.0.2:5000"})"));

  if (IsSuperuser()) {
    Revoke(*conn_, lock, "watch test");
    ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << "revoke not seen: " << probe.History();
  }
  EXPECT_EQ(probe.errors(), 0u);
}

// Between reads the watch's connection sits idle outside any transaction:
// a follower that watches for hours holds back no VACUUM.
TEST_F(WatchTest, HoldsNoSnapshotBetweenReads) {
  const std::string lock = Name("lock");
  MakeLock(lock, true);
  Lease leader(Options(lock, "leader", 30s));
  WatchProbe probe;
  LeaderWatch watch(WatchOptions(lock, probe));
  ASSERT_TRUE(probe.WaitForLeader("leader", 5s)) << probe.History();
  for (int look = 0; look < 5; ++look) {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = pqxx_compat::ExecParams1(
        tx,
        "SELECT state, backend_xmin IS NULL AND backend_xid IS NULL FROM pg_stat_activity "
        "WHERE application_name = $1",
        AppName());
    EXPECT_EQ(row[0].as<std::string>(), "idle");
    EXPECT_TRUE(row[1].as<bool>()) << "the idle watch holds a snapshot or an xid";
    std::this_thread::sleep_for(50ms);
  }
}

// What the watch reports is fencing_leases, never a notification's word: a
// grant that rolled back (even while the watch read because of another
// notification) and a forged notification (any role may NOTIFY) are not
// reported; a renewal or a re-acquire by the live holder is no change.
TEST_F(WatchTest, ReportsOnlyCommittedChangesOfHolderOrToken) {
  const std::string lock = Name("lock");
  MakeLock(lock, true);
  WatchProbe probe;
  LeaderWatchOptions watch_options = WatchOptions(lock, probe);
  watch_options.reread_period = 100ms;  // many reads, each of which could report wrongly
  LeaderWatch watch(watch_options);
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << probe.History();

  {
    pqxx::connection other(Dsn());
    pqxx::work tx(other);
    pqxx_compat::ExecParams1(tx, "SELECT fencing_acquire($1, 'ghost', '30 s'::interval)", lock);
    // The watch reads while the grant is pending.
    Notify(R"({"lock_name": ")" + lock + R"(", "event": "granted"})");
    std::this_thread::sleep_for(300ms);
    tx.abort();
  }
  Notify(R"({"lock_name": ")" + lock +
         R"(", "lock_id": "1", "event": "granted", "holder": "forged", "token": "999999"})");
  Notify(R"({"lock_id": "1", "event": "granted", "token": "999998", "truncated": true})");

  LeaseOptions options = Options(lock, "real", 30s);
  options.heartbeat = 100ms;
  Lease real(options);
  ASSERT_TRUE(probe.WaitForLeader("real", 5s)) << probe.History();
  // Renewals, a re-acquire by the holder with a new payload, more forgeries.
  {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::ExecParams1(tx,
                             "SELECT fencing_acquire($1, 'real', '30 s'::interval, "
                             "payload => '{\"v\": 2}'::jsonb)",
                             lock);
  }
  Notify(R"({"lock_name": ")" + lock + R"(", "event": "released", "holder": "real"})");
  std::this_thread::sleep_for(800ms);

  const std::vector<std::optional<LeaderInfo>> changes = probe.changes();
  ASSERT_EQ(changes.size(), 2u) << probe.History();
  EXPECT_EQ(changes[0], std::nullopt);
  ASSERT_TRUE(changes[1]);
  EXPECT_EQ(changes[1]->holder, "real");
  EXPECT_EQ(changes[1]->token, real.token());
  EXPECT_EQ(probe.errors(), 0u);
}

// Without the background worker nobody announces an expiry until the next
// grant; the watch reads when the lease is due to end, by the server's clock.
TEST_F(WatchTest, SeesAnExpiryThatNobodyAnnounces) {
  const std::string lock = Name("lock");
  MakeLock(lock, false);
  const Token token = AcquireBySql(lock, "short", "700 milliseconds");
  WatchProbe probe;
  LeaderWatch watch(WatchOptions(lock, probe));
  ASSERT_TRUE(probe.WaitForLeader("short", 5s)) << probe.History();
  EXPECT_EQ(probe.changes().back()->token, token);
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << "expiry not seen: " << probe.History();
}

// A lock that is not announced is watched by the period alone.
TEST_F(WatchTest, RereadPeriodCatchesChangesOfALockThatIsNotAnnounced) {
  const std::string lock = Name("lock");
  MakeLock(lock, false);
  WatchProbe probe;
  LeaderWatchOptions options = WatchOptions(lock, probe);
  options.reread_period = 200ms;
  LeaderWatch watch(options);
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << probe.History();
  Lease lease(Options(lock, "quiet", 30s));
  ASSERT_TRUE(probe.WaitForLeader("quiet", 5s)) << probe.History();
  ASSERT_TRUE(lease.Release());
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << probe.History();
}

// The watch's backend is terminated: it reconnects, LISTENs again and reads,
// and so finds a grant that was never announced (the lock is not) and that
// nothing else would make it read (no period, a long ttl).
TEST_F(WatchTest, ReadsAgainAfterItsConnectionIsTerminated) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to terminate another role's backend";
  const std::string lock = Name("lock");
  MakeLock(lock, false);
  WatchProbe probe;
  LeaderWatch watch(WatchOptions(lock, probe));
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << probe.History();
  Lease lease(Options(lock, "unannounced", 60s));
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(probe.changes().size(), 1u) << "read without a reason: " << probe.History();

  ASSERT_EQ(TerminateWatchBackends(), 1);
  ASSERT_TRUE(probe.WaitForErrors(1, 5s)) << "on_error not called";
  ASSERT_TRUE(probe.WaitForLeader("unannounced", 10s)) << probe.History();
  EXPECT_EQ(probe.changes().back()->token, lease.token());
  // It listens again: an announced change is seen without any other read.
  {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::ExecParams(tx, "SELECT fencing_set_announce($1, true)", lock);
  }
  ASSERT_TRUE(lease.Release());
  ASSERT_TRUE(probe.WaitForLeader(std::nullopt, 5s)) << "not listening again: " << probe.History();
}

// The watch is cut off and cannot reconnect (its role may not log in) while
// the leader changes, announced: the notification is lost, and the watch
// catches up when it is back.
TEST_F(WatchTest, CatchesUpWithAChangeMadeWhileItWasDisconnected) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to create a role and stop its logins";
  const std::string lock = Name("lock");
  const std::string role = "ct_watch_follower_" + std::to_string(getpid());  // kept whole
  MakeLock(lock, true);
  struct RoleGuard {
    pqxx::connection &conn;
    std::string role, lock;
    ~RoleGuard() {
      try {
        pqxx::nontransaction tx(conn);
        pqxx_compat::ExecParams(tx, "SELECT fencing_revoke_lock($1, $2::regrole)", lock, role);
        pqxx_compat::Exec0(tx, "DROP ROLE IF EXISTS " + tx.quote_name(role));
      } catch (...) {
      }
    }
  };
  {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::Exec0(tx, "CREATE ROLE " + tx.quote_name(role) + " LOGIN PASSWORD 'watch'");
    pqxx_compat::ExecParams(tx, "SELECT fencing_grant_lock($1, $2::regrole)", lock, role);
  }
  RoleGuard guard{*conn_, role, lock};
  auto set_login = [&](bool login) {
    pqxx::nontransaction tx(*conn_);
    pqxx_compat::Exec0(tx, "ALTER ROLE " + tx.quote_name(role) + (login ? " LOGIN" : " NOLOGIN"));
  };

  auto first = std::make_unique<Lease>(Options(lock, "before", 60s));
  WatchProbe probe;
  auto watch =
      std::make_unique<LeaderWatch>(WatchOptions(lock, probe, "user=" + role + " password=watch"));
  ASSERT_TRUE(probe.WaitForLeader("before", 5s)) << probe.History();

  set_login(false);
  ASSERT_EQ(TerminateWatchBackends(), 1);
  // The break, then at least one reconnect refused.
  ASSERT_TRUE(probe.WaitForErrors(2, 5s)) << "no failed reconnect reported";
  EXPECT_FALSE(watch->connected());
  ASSERT_TRUE(first->Release());
  first.reset();
  Lease during(Options(lock, "during", 60s));  // announced; nobody hears it
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(probe.changes().size(), 1u) << probe.History();

  set_login(true);
  // Reconnects within its back-off (at most 5 s).
  ASSERT_TRUE(probe.WaitForLeader("during", 15s)) << probe.History();
  EXPECT_EQ(probe.changes().back()->token, during.token());
  EXPECT_EQ(probe.changes().size(), 2u)
      << "the release in between is no leader to report: " << probe.History();
  EXPECT_TRUE(watch->connected());

  // Destroying a watch that is reconnecting does not wait for its back-off.
  set_login(false);
  ASSERT_EQ(TerminateWatchBackends(), 1);
  const std::size_t before = probe.errors();
  // Failures 1 to 6: at once, then after 0.1, 0.2, 0.4 and 0.8 s; now 1.6 s.
  ASSERT_TRUE(probe.WaitForErrors(before + 6, 10s)) << "no back-off to interrupt";
  const Clock::time_point start = Clock::now();
  watch.reset();
  EXPECT_LT(Since(start), 1000);
}

// A read blocked on the server does not hold up the destructor.
TEST_F(WatchTest, DestructorInterruptsABlockedRead) {
  if (!IsSuperuser()) GTEST_SKIP() << "needs a superuser to lock fencing_lease";
  const std::string lock = Name("lock");
  MakeLock(lock, false);
  Lease lease(Options(lock, "holder", 30s));
  WatchProbe probe;
  LeaderWatchOptions options = WatchOptions(lock, probe);
  options.reread_period = 100ms;
  auto watch = std::make_unique<LeaderWatch>(options);
  ASSERT_TRUE(probe.WaitForLeader("holder", 5s)) << probe.History();

  // The view's read waits behind an exclusive lock on the table.
  pqxx::connection blocker_conn(Dsn());
  pqxx::work blocker(blocker_conn);
  pqxx_compat::Exec0(blocker, "LOCK TABLE fencing_lease IN ACCESS EXCLUSIVE MODE");
  auto blocked_reads = [&] {
    pqxx::nontransaction tx(*conn_);
    return pqxx_compat::ExecParams1(tx,
                                    "SELECT count(*)::int FROM pg_stat_activity "
                                    "WHERE application_name = $1 AND wait_event_type = 'Lock'",
                                    AppName())[0]
        .as<int>();
  };
  const Clock::time_point look = Clock::now();
  while (blocked_reads() == 0 && Since(look) < 3000) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(blocked_reads(), 1) << "the watch's read is not waiting";

  // On a thread of its own, so that a destructor that waits for the read
  // fails the test instead of hanging it: the blocker gives way after 3 s.
  const Clock::time_point start = Clock::now();
  std::atomic<long long> took{-1};
  std::thread destroy([&] {
    watch.reset();
    took = Since(start);
  });
  while (took < 0 && Since(start) < 3000) std::this_thread::sleep_for(10ms);
  blocker.abort();
  destroy.join();
  EXPECT_LT(took.load(), 1000);
}

TEST(LeaderWatchOptionsTest, AreCheckedBeforeConnecting) {
  LeaderWatchOptions options;
  options.conninfo = "host=/nonexistent";
  options.lock_name = "x";
  EXPECT_THROW(LeaderWatch{options}, std::invalid_argument) << "no on_change";
  options.on_change = [](const std::optional<LeaderInfo> &) {};
  options.reread_period = -1ms;
  EXPECT_THROW(LeaderWatch{options}, std::invalid_argument);
  options.reread_period = 0ms;
  options.lock_name = "";
  EXPECT_THROW(LeaderWatch{options}, std::invalid_argument);
  options.lock_name = "x";
  EXPECT_THROW(LeaderWatch{options}, pqxx::broken_connection) << "connects in the constructor";
}

TEST(EventLockNameTest, ReadsTheTopLevelLockNameOnly) {
  // As the server spells them (jsonb and json_build_object text).
  EXPECT_EQ(EventLockName(R"({"lock_name": "orders", "event": "granted", "token": "12"})"),
            std::optional<std::string>("orders"));
  EXPECT_EQ(EventLockName(R"({"lock_name" : "orders", "lock_id" : "17"})"),
            std::optional<std::string>("orders"));
  EXPECT_EQ(EventLockName(R"({"event": "granted", "takeover": false, "previous_token": null,)"
                          R"( "lock_name": "a\"b\\c\u00e9\ud83d\ude00\n"})"),
            std::optional<std::string>("a\"b\\c\xc3\xa9\xf0\x9f\x98\x80\n"));
  EXPECT_EQ(EventLockName(R"({"lock_name": "caf\u00e9"})"),
            std::optional<std::string>("caf\xc3\xa9"));
  // A holder that looks like a lock_name member is a string, not a member.
  EXPECT_EQ(EventLockName(R"({"holder": "\", \"lock_name\": \"victim", "lock_name": "real"})"),
            std::optional<std::string>("real"));
  EXPECT_EQ(EventLockName(R"({"nested": {"lock_name": "inner"}, "lock_name": "outer"})"),
            std::optional<std::string>("outer"));
  // Nothing to go on: truncated, not a string, not an object, malformed.
  EXPECT_EQ(EventLockName(R"({"lock_id": "17", "event": "granted", "truncated": true})"),
            std::nullopt);
  EXPECT_EQ(EventLockName(R"({"lock_name": 17})"), std::nullopt);
  EXPECT_EQ(EventLockName(R"({"nested": {"lock_name": "inner"}})"), std::nullopt);
  EXPECT_EQ(EventLockName(R"(["lock_name", "x"])"), std::nullopt);
  EXPECT_EQ(EventLockName(""), std::nullopt);
  EXPECT_EQ(EventLockName("orders"), std::nullopt);
  EXPECT_EQ(EventLockName(R"({"lock_name": "orders")"), std::nullopt);
  EXPECT_EQ(EventLockName(R"({"lock_name": "orders"} trailing)"), std::nullopt);
  EXPECT_EQ(EventLockName(R"({"lock_name": "bad \x escape"})"), std::nullopt);
  EXPECT_EQ(EventLockName(R"({"lock_name": "\ud83d alone"})"), std::nullopt);
  EXPECT_EQ(EventLockName("{\"lock_name\": \"raw\nnewline\"}"), std::nullopt);
}

// ---- RethrowMapped without a server ---------------------------------------------

TEST(RethrowMappedTest, MapsGuardStatesOutsideAHandler) {
  EXPECT_THROW(RethrowMapped(pqxx::sql_error("stale", "UPDATE", "55Z01")), StaleTokenError);
  EXPECT_THROW(RethrowMapped(pqxx::sql_error("missing", "UPDATE", "55Z02")), MissingTokenError);
  EXPECT_THROW(RethrowMapped(pqxx::sql_error("never granted", "UPDATE", "55Z03")),
               NeverGrantedTokenError);
  EXPECT_THROW(RethrowMapped(pqxx::sql_error("lease ended", "COMMIT", "55Z04")), LeaseEndedError);
  // Not being handled: a copy of the sql_error, not a terminate().
  EXPECT_THROW(RethrowMapped(pqxx::unique_violation("dup", "INSERT", "23505")), pqxx::sql_error);
}

TEST(RethrowMappedTest, RethrowsTheHandledObjectUnchanged) {
  try {
    try {
      throw pqxx::unique_violation("dup", "INSERT", "23505");
    } catch (const pqxx::sql_error &error) {
      RethrowMapped(error);
    }
    FAIL() << "nothing thrown";
  } catch (const pqxx::unique_violation &error) {
    EXPECT_EQ(pqxx_compat::SqlState(error), "23505");
  }
  // Handling one exception, mapping another: the other is thrown.
  try {
    try {
      throw std::runtime_error("unrelated");
    } catch (const std::exception &) {
      RethrowMapped(pqxx::sql_error("other", "SELECT", "42P01"));
    }
    FAIL() << "nothing thrown";
  } catch (const pqxx::sql_error &error) {
    EXPECT_EQ(pqxx_compat::SqlState(error), "42P01");
  }
}

}  // namespace
}  // namespace pg_fencing::client
