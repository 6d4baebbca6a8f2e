// Shared pieces of the stress harness: clocks, the event-log line format,
// and the names of the database objects the orchestrator, the workers and
// the checker agree on.
//
// Every event is one line "key=value key=value ... msg=free text", written
// with a single write(2) on a file opened O_APPEND, so that a process killed
// with SIGKILL leaves at worst one incomplete last line (the checker skips
// a line without its newline), and lines from a worker's heartbeat thread
// never interleave with its main thread's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pg_fencing::stress {

// The lock every worker competes for, and the lock-wide fence of kLockTable.
inline constexpr char kLockName[] = "stress";
// Protected per row only (fencing_protect(tbl)).
inline constexpr char kRowTable[] = "stress_rows";
// Protected under the lock kLockName (fencing_protect(tbl, lock_name => ...)).
inline constexpr char kLockTable[] = "stress_lock";
// The short names the logs use for them.
inline constexpr char kRowTableTag[] = "rows";
inline constexpr char kLockTableTag[] = "lock";
// Permit mode (--permits N): the semaphore whose permits the workers take
// instead of the lease kLockName, and its two tables, both protected under
// it.  The per-row table has no place there: under a semaphore a row's own
// token is not compared (holders of different permits write the same rows).
inline constexpr char kSemName[] = "stress_sem";
// Written with the token alone: the guard judges each UPDATE.
inline constexpr char kSemTable[] = "stress_sem_rows";
// Also behind a read fence (row-level security on fencing_reads_allowed):
// its writers present their token first, and the workers' reads count its
// rows.
inline constexpr char kReadTable[] = "stress_sem_read";
inline constexpr char kSemTableTag[] = "sem";
inline constexpr char kReadTableTag[] = "read";
inline constexpr char kDatabase[] = "stress";
inline constexpr char kAppRole[] = "stress_app";

// What every worker process is told, in either mode (worker.hpp,
// fleet.hpp): which of the orchestrator's slots it fills, how many
// processes filled that slot before it, where it connects and logs, and
// the seed of its random choices.
struct WorkerProcessConfig {
  int slot = 0;         // stable across respawns
  int incarnation = 0;  // how many times this slot was started before
  std::string conninfo;
  std::string log_path;
  std::uint64_t seed = 1;
};

// Both clocks at one instant: CLOCK_MONOTONIC (ns, comparable across the
// processes of one boot) and CLOCK_REALTIME (µs since the epoch, the clock
// the server's clock_timestamp() reads on this same host).
struct Stamp {
  std::int64_t mono_ns = 0;
  std::int64_t wall_us = 0;
};
Stamp Now();
std::int64_t MonoMs();

// Appends event lines to a file; thread-safe (one write(2) per line).
class EventLog {
 public:
  explicit EventLog(const std::string &path);
  ~EventLog();
  EventLog(const EventLog &) = delete;
  EventLog &operator=(const EventLog &) = delete;

  // Writes "mono=... wall=... " + fields + "\n".  fields is "k=v k=v ...";
  // if msg is given it goes last as "msg=...", with newlines flattened.
  void Write(const std::string &fields, std::string_view msg = {}) const;
  void Write(const Stamp &stamp, const std::string &fields, std::string_view msg = {}) const;

 private:
  int fd_ = -1;
};

// One parsed line: key -> value; "msg" holds the rest of the line.
using Fields = std::map<std::string, std::string, std::less<>>;
// Parses a line written by EventLog (without its newline).
Fields ParseFields(std::string_view line);
// Splits s on c.
std::vector<std::string> Split(std::string_view s, char c);
// The lines of a log's text, without their newlines and without an
// incomplete last one (a process killed in the middle of writing it),
// which truncated (if given) counts.
std::vector<std::string> CompleteLines(const std::string &text, long *truncated);

// The value of key in fields, or nullopt.
std::optional<std::string> Get(const Fields &fields, std::string_view key);
// Integer value of key, or fallback when missing or malformed.
std::int64_t GetInt(const Fields &fields, std::string_view key, std::int64_t fallback = -1);

// A SQL error message's first line without libpq's "ERROR:  " prefix.
std::string FirstLine(std::string_view message);

// Reads a whole file; throws std::runtime_error when it cannot.
std::string ReadFile(const std::string &path);
// Writes a whole file (truncating); throws std::runtime_error when it cannot.
void WriteFile(const std::string &path, const std::string &contents);

}  // namespace pg_fencing::stress
