// Command-line parsing for pg_fencing_demo (see options.hpp).
#include "options.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <utility>

namespace pg_fencing::demo {

namespace {

constexpr char kWorkerFlag[] = "--worker";
constexpr char kConninfoVariable[] = "PG_FENCING_DEMO_CONNINFO";
// Below this, connection round trips eat a visible share of the lease and
// the timeline stops telling the story.
constexpr std::chrono::milliseconds kMinimumTtl{100};
// The interleave scenario needs a quarter of the rows before the pause, and
// rows after it that B does not write; above the maximum, a run takes minutes.
constexpr int kMinimumRows = 4;
constexpr int kMaximumRows = 1000;
// Where --redis and --etcd point when not given: the services' own defaults.
constexpr char kDefaultRedisAddress[] = "127.0.0.1:6379";
constexpr char kDefaultEtcdUrl[] = "http://127.0.0.1:2379";

struct RoleName {
  WorkerRole role;
  const char *name;
};
constexpr RoleName kRoleNames[] = {
    {WorkerRole::kPauseHolder, "pause-holder"},
    {WorkerRole::kPauseSuccessor, "pause-successor"},
    {WorkerRole::kLeaderCandidate, "leader-candidate"},
    {WorkerRole::kInterleaveHolder, "interleave-holder"},
    {WorkerRole::kInterleaveSuccessor, "interleave-successor"},
};

// Walks argv option by option; accepts both "--name value" and "--name=value".
class ArgumentCursor {
 public:
  ArgumentCursor(int argc, char **argv) : arguments_(argv + 1, argv + argc) {}

  bool done() const { return next_ >= arguments_.size(); }

  std::string NextOption() {
    std::string argument = arguments_[next_++];
    inline_value_.reset();
    const std::size_t equals = argument.find('=');
    if (argument.rfind("--", 0) == 0 && equals != std::string::npos) {
      inline_value_ = argument.substr(equals + 1);
      argument.resize(equals);
    }
    return argument;
  }

  std::string ValueOf(const std::string &option) {
    if (inline_value_) return *std::exchange(inline_value_, std::nullopt);
    if (done()) throw UsageError("option " + option + " needs a value");
    return arguments_[next_++];
  }

  // For flags: "--json=yes" is a mistake, not a value to ignore.
  void RejectValue(const std::string &option) const {
    if (inline_value_) throw UsageError("option " + option + " takes no value");
  }

 private:
  std::vector<std::string> arguments_;
  std::size_t next_ = 0;
  std::optional<std::string> inline_value_;
};

long long ParseNonNegative(const std::string &option, const std::string &text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) {
    throw UsageError("option " + option + " needs a non-negative whole number, got '" + text + "'");
  }
  return value;
}

std::chrono::milliseconds ParseMilliseconds(const std::string &option, const std::string &text,
                                            std::chrono::milliseconds minimum) {
  const std::chrono::milliseconds value{ParseNonNegative(option, text)};
  if (value < minimum) {
    throw UsageError("option " + option + " must be at least " + std::to_string(minimum.count()) +
                     " ms, got " + text);
  }
  return value;
}

int ParseRows(const std::string &option, const std::string &text) {
  const long long value = ParseNonNegative(option, text);
  if (value < kMinimumRows || value > kMaximumRows) {
    throw UsageError("option " + option + " must be between " + std::to_string(kMinimumRows) +
                     " and " + std::to_string(kMaximumRows) + ", got " + text);
  }
  return static_cast<int>(value);
}

struct LockServiceEntry {
  LockServiceKind kind;
  const char *name;
};
constexpr LockServiceEntry kLockServiceNames[] = {
    {LockServiceKind::kPg, "pg"},
    {LockServiceKind::kRedis, "redis"},
    {LockServiceKind::kEtcd, "etcd"},
};

LockServiceKind ParseLockService(const std::string &option, const std::string &text) {
  for (const LockServiceEntry &entry : kLockServiceNames) {
    if (text == entry.name) return entry.kind;
  }
  throw UsageError(option + " takes pg, redis or etcd, got '" + text + "'");
}

// --lock, --redis and --etcd, checked together once the whole command line
// is read, so that their order does not matter.
void ApplyLockServiceOptions(DemoOptions &options, const std::optional<std::string> &redis,
                             const std::optional<std::string> &etcd) {
  const LockServiceKind kind = options.lock_service;
  if (redis && kind != LockServiceKind::kRedis) throw UsageError("--redis is for --lock redis");
  if (etcd && kind != LockServiceKind::kEtcd) throw UsageError("--etcd is for --lock etcd");
  if (kind == LockServiceKind::kPg) return;
  const std::string lock = std::string("--lock ") + LockServiceName(kind);
  if (options.run_leader_scenario || options.run_interleave_scenario ||
      options.run_permit_scenario) {
    throw UsageError(lock + " applies to the pause scenario only: add --scenario pause");
  }
  if (kind == LockServiceKind::kRedis) {
    options.lock_service_address = redis.value_or(kDefaultRedisAddress);
  } else {
    if (options.ttl.count() % 1000 != 0) {
      throw UsageError(lock + " needs --ttl in whole seconds, as etcd lease TTLs are; got " +
                       std::to_string(options.ttl.count()) + " ms");
    }
    options.lock_service_address = etcd.value_or(kDefaultEtcdUrl);
  }
}

WorkerRole ParseRole(const std::string &text) {
  for (const RoleName &entry : kRoleNames) {
    if (text == entry.name) return entry.role;
  }
  throw UsageError("unknown worker role '" + text + "'");
}

const char *RoleNameOf(WorkerRole role) {
  for (const RoleName &entry : kRoleNames) {
    if (role == entry.role) return entry.name;
  }
  return "unknown";
}

// Fills command_line.demo, or asks for help.
void ParseDemoOptions(ArgumentCursor &cursor, CommandLine &command_line) {
  DemoOptions &options = command_line.demo;
  bool pause_given = false;
  std::optional<std::string> redis_address;
  std::optional<std::string> etcd_url;
  while (!cursor.done()) {
    const std::string option = cursor.NextOption();
    if (option == "-h" || option == "--help") {
      command_line.action = CommandLine::Action::kShowHelp;
      return;
    } else if (option == "--db") {
      options.conninfo = cursor.ValueOf(option);
    } else if (option == "--fencing") {
      const std::string mode = cursor.ValueOf(option);
      if (mode != "on" && mode != "off" && mode != "both") {
        throw UsageError("--fencing takes on, off or both, got '" + mode + "'");
      }
      options.with_fencing_off = mode != "on";
      options.with_fencing_on = mode != "off";
    } else if (option == "--scenario") {
      const std::string scenario = cursor.ValueOf(option);
      if (scenario != "pause" && scenario != "leader" && scenario != "interleave" &&
          scenario != "permit" && scenario != "all") {
        throw UsageError("--scenario takes pause, leader, interleave, permit or all, got '" +
                         scenario + "'");
      }
      options.run_pause_scenario = scenario == "pause" || scenario == "all";
      options.run_leader_scenario = scenario == "leader" || scenario == "all";
      options.run_interleave_scenario = scenario == "interleave" || scenario == "all";
      options.run_permit_scenario = scenario == "permit" || scenario == "all";
    } else if (option == "--lock") {
      options.lock_service = ParseLockService(option, cursor.ValueOf(option));
    } else if (option == "--redis") {
      redis_address = cursor.ValueOf(option);
    } else if (option == "--etcd") {
      etcd_url = cursor.ValueOf(option);
    } else if (option == "--rows") {
      options.rows = ParseRows(option, cursor.ValueOf(option));
    } else if (option == "--ttl") {
      options.ttl = ParseMilliseconds(option, cursor.ValueOf(option), kMinimumTtl);
    } else if (option == "--pause") {
      options.pause =
          ParseMilliseconds(option, cursor.ValueOf(option), std::chrono::milliseconds{1});
      pause_given = true;
    } else if (option == "--sessions") {
      cursor.RejectValue(option);
      options.sessions = true;
    } else if (option == "--json") {
      cursor.RejectValue(option);
      options.json = true;
    } else if (option == "--no-color") {
      cursor.RejectValue(option);
      options.allow_color = false;
    } else {
      throw UsageError("unknown option '" + option + "'");
    }
  }
  ApplyLockServiceOptions(options, redis_address, etcd_url);
  if (options.sessions && !options.run_leader_scenario) {
    throw UsageError("--sessions applies to the leader scenario: add --scenario leader (or all)");
  }
  // Long enough past the ttl for the lease to expire and B to take over and
  // write, short enough to keep the run brisk.
  if (!pause_given) options.pause = options.ttl * 5 / 2;
}

WorkerOptions ParseWorkerOptions(ArgumentCursor &cursor) {
  WorkerOptions options;
  options.role = ParseRole(cursor.ValueOf(kWorkerFlag));
  while (!cursor.done()) {
    const std::string option = cursor.NextOption();
    const std::string value = cursor.ValueOf(option);
    if (option == "--name") {
      options.name = value;
    } else if (option == "--lock") {
      options.lock_name = value;
    } else if (option == "--lock-service") {
      options.lock_service = ParseLockService(option, value);
    } else if (option == "--lock-address") {
      options.lock_service_address = value;
    } else if (option == "--table") {
      options.table = value;
    } else if (option == "--ttl") {
      options.ttl = ParseMilliseconds(option, value, std::chrono::milliseconds{1});
    } else if (option == "--acquire-wait") {
      options.acquire_wait = ParseMilliseconds(option, value, std::chrono::milliseconds{0});
    } else if (option == "--rows") {
      options.rows = static_cast<int>(ParseNonNegative(option, value));
    } else if (option == "--permits") {
      options.permits = static_cast<int>(ParseNonNegative(option, value));
    } else if (option == "--sessions") {
      options.sessions = value == "1";
    } else if (option == "--event-fd") {
      options.event_fd = static_cast<int>(ParseNonNegative(option, value));
    } else if (option == "--command-fd") {
      options.command_fd = static_cast<int>(ParseNonNegative(option, value));
    } else {
      throw UsageError("unknown worker option '" + option + "'");
    }
  }
  if (options.name.empty() || options.lock_name.empty() || options.table.empty() ||
      options.ttl.count() == 0 || options.event_fd < 0 || options.command_fd < 0 ||
      ((options.role == WorkerRole::kInterleaveHolder ||
        options.role == WorkerRole::kInterleaveSuccessor) &&
       options.rows < kMinimumRows)) {
    throw UsageError("incomplete worker command line (workers are started by the demo itself)");
  }
  if (const char *conninfo = std::getenv(kConninfoVariable)) options.conninfo = conninfo;
  return options;
}

}  // namespace

CommandLine ParseCommandLine(int argc, char **argv) {
  CommandLine command_line;
  ArgumentCursor cursor(argc, argv);
  if (argc > 1 && std::string(argv[1]) == kWorkerFlag) {
    cursor.NextOption();
    command_line.action = CommandLine::Action::kRunWorker;
    command_line.worker = ParseWorkerOptions(cursor);
  } else {
    ParseDemoOptions(cursor, command_line);
  }
  return command_line;
}

std::string UsageText() {
  return R"(Usage: pg_fencing_demo [OPTION]...

Shows, on a real PostgreSQL database and with real processes, why a lease is
not enough and what fencing tokens add:

  pause   Worker A holds a lease, checks that it still does, and is stopped
          (SIGSTOP, standing in for a GC pause) just before it writes. Its lease
          expires; B takes the lock with a newer token and writes. A resumes and
          writes with its stale token. Run with fencing off (the stale write
          lands and B's write is lost) and on (fencing_protect rejects it with
          SQLSTATE 55Z01 and B's value survives). With --lock redis or etcd,
          the lock is a Redis or etcd lock instead, and the outcome the same.
  leader  Three workers compete for a leader lease; the leader writes with its
          token every 100 ms. The leader is killed (kill -9) twice; each time
          another takes over once the lease expires. The log of accepted
          writes must show the tokens in order.
  interleave
          One lock covers a table of N rows. A holds the lease, checks it once
          and writes the rows one by one with its token; after a quarter of
          them it is stopped between two rows. Its lease expires; B takes the
          lock with a newer token and writes every second row of the second
          half. A resumes and carries on with the rest of the rows. Run with a
          per-row fence only (fencing_protect(table): A's stale writes bounce
          off B's rows but land on every row B did not write) and with a
          lock-wide fence (fencing_protect(table, lock_name => the lock): every
          one of them is rejected with SQLSTATE 55Z01).
  permit  The pause scenario on a semaphore of 3 permits
          (fencing_acquire_permit): a bystander holds two of them throughout;
          A takes the last one and is stopped before its write; its permit
          expires and B is granted that same permit (slot) with a newer token
          and writes. A resumes and writes. Fencing off: the table has no
          guard and A's write lands; on: the table is protected under the
          semaphore (fencing_protect(table, lock_name => the semaphore)), whose
          permits are each fenced on their own, and A's write is rejected with
          SQLSTATE 55Z01 while the bystander's permits are untouched.

Options:
  --db CONNSTR            libpq connection string (default: empty, so the PG*
                          environment variables decide)
  --fencing on|off|both   which pause and interleave runs to make (default:
                          both). off: the pause run without a guard and the
                          interleave run with a per-row fence only; on: the
                          pause run with fencing_protect and the interleave
                          run with a lock-wide fence. The leader run is always
                          fenced
  --scenario pause|leader|interleave|permit|all
                          which scenarios to run (default: all)
  --lock pg|redis|etcd    where the pause scenario's lock and token come from
                          (default: pg). pg: the extension's lease
                          (fencing_acquire). redis: SET lock:NAME ID NX PX ttl
                          on a running Redis, then a token from
                          fencing_grant(). etcd: a key put under an etcd lease
                          if absent; its create_revision is the token, and
                          --ttl must be whole seconds. redis and etcd need
                          --scenario pause; the demo does not start them
  --redis HOST:PORT       the Redis for --lock redis (default: 127.0.0.1:6379)
  --etcd URL              the etcd for --lock etcd, its client URL (default:
                          http://127.0.0.1:2379)
  --rows N                rows of the interleave table, 4 to 1000 (default: 20)
  --ttl MS                lease time to live, at least 100 (default: 1000)
  --pause MS              how long A stays stopped (default: 2.5 x ttl); in the
                          interleave scenario, how long B has to take the
                          lock: A resumes once B has written its rows
  --sessions              in the leader scenario, each candidate opens a
                          session (fencing_session_open) and takes the leader
                          lease in it: one heartbeat renews the session, and
                          the killed leader's lease ends when its session
                          expires
  --json                  one JSON object per timeline line, then a summary
                          object, instead of text
  --no-color              no colours (they are only used on a terminal, and
                          never when NO_COLOR is set)
  -h, --help              this text

The demo runs CREATE EXTENSION IF NOT EXISTS pg_fencing (a superuser's job
when the extension is not there yet), and recreates the tables
fencing_demo_pause_off, fencing_demo_pause_on, fencing_demo_leader,
fencing_demo_leader_log, fencing_demo_interleave_per_row,
fencing_demo_interleave_lock_wide, fencing_demo_permit_off and
fencing_demo_permit_on (with --lock redis or etcd:
fencing_demo_pause_redis_off and so on), which it leaves behind for
inspection.

Exit status: 0 when every run showed what it should (for fencing off, that
stale writes land), 1 when one did not, 2 for a bad command line or database.
)";
}

std::vector<std::string> WorkerArguments(const WorkerOptions &options) {
  return {kWorkerFlag,      RoleNameOf(options.role),
          "--name",         options.name,
          "--lock",         options.lock_name,
          "--lock-service", LockServiceName(options.lock_service),
          "--lock-address", options.lock_service_address,
          "--table",        options.table,
          "--ttl",          std::to_string(options.ttl.count()),
          "--acquire-wait", std::to_string(options.acquire_wait.count()),
          "--rows",         std::to_string(options.rows),
          "--permits",      std::to_string(options.permits),
          "--sessions",     options.sessions ? "1" : "0",
          "--event-fd",     std::to_string(options.event_fd),
          "--command-fd",   std::to_string(options.command_fd)};
}

const char *LockServiceName(LockServiceKind kind) {
  for (const LockServiceEntry &entry : kLockServiceNames) {
    if (kind == entry.kind) return entry.name;
  }
  return "unknown";
}

void ExportConninfoToWorkers(const std::string &conninfo) {
  setenv(kConninfoVariable, conninfo.c_str(), /*overwrite=*/1);
}

std::string LeaseHolderName(const std::string &worker_name, pid_t pid) {
  return worker_name + "@pid" + std::to_string(pid);
}

}  // namespace pg_fencing::demo
