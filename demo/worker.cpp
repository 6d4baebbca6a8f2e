// Worker processes (see worker.hpp).  Each is an ordinary client of a lock
// service (by default the extension's leases, through pg_fencing_client): it
// takes the lock, checks held(), and sends its token with every write.
// Everything it does, it reports to the orchestrator.
#include "worker.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "demo_tables.hpp"
#include "events.hpp"
#include "lock_service.hpp"
#include "pg_fencing/client.hpp"
#include "pg_fencing/session.hpp"

namespace pg_fencing::demo {

namespace {

enum class Command { kGo, kStop, kNone };

// Waits for the orchestrator's next command, at most `timeout` (forever if
// nullopt).  A stop stays pending: end of file reads again and again.
Command AwaitCommand(int command_fd, std::optional<std::chrono::milliseconds> timeout) {
  pollfd readable{command_fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&readable, 1, timeout ? static_cast<int>(timeout->count()) : -1);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) return Command::kNone;
  char command;
  ssize_t got;
  do {
    got = read(command_fd, &command, 1);
  } while (got < 0 && errno == EINTR);
  return got == 1 && command == kGoCommand ? Command::kGo : Command::kStop;
}

// The server's words without libpq's "ERROR:  " and anything after the
// first line.
std::string ServerMessage(std::string message) {
  constexpr std::string_view kSeverityPrefix = "ERROR:";
  if (message.rfind(kSeverityPrefix, 0) == 0) message.erase(0, kSeverityPrefix.size());
  message.erase(0, message.find_first_not_of(' '));
  message.erase(std::min(message.find('\n'), message.size()));
  return message;
}

// Takes the worker's lock from its lock service, waiting up to acquire_wait;
// throws client::LeaseUnavailableError if it stays busy.
std::unique_ptr<HeldLock> AcquireLock(const WorkerOptions &options, const EventWriter &events) {
  LockRequest request;
  request.lock_name = options.lock_name;
  request.holder = LeaseHolderName(options.name, getpid());
  request.ttl = options.ttl;
  request.wait = options.acquire_wait;
  request.permits = options.permits;
  request.on_lost = [&events](const std::string &reason) {
    events.Emit(EventKind::kLeaseLost, std::nullopt, reason);
  };
  return AcquireFromService(options.lock_service, options.lock_service_address, options.conninfo,
                            request);
}

// The acquired event's detail: the lock in its service's terms (nothing for
// the pg service, whose leases need no introduction), and `more`.
std::string AcquiredDetail(const WorkerOptions &options, const HeldLock &lock,
                           const std::string &more = {}) {
  const std::string lock_text =
      options.lock_service == LockServiceKind::kPg ? std::string() : lock.Describe();
  if (lock_text.empty() || more.empty()) return lock_text + more;
  return lock_text + ", " + more;
}

// Runs a fenced write and reports its fate; false if the guard rejected it.
// An acceptance is reported with `detail`, a rejection with the server's
// message after `rejected_prefix`.
template <typename Write>
bool ReportFencedWrite(const EventWriter &events, Token token, const std::string &detail,
                       Write &&write, const std::string &rejected_prefix = {}) {
  try {
    write();
  } catch (const client::StaleTokenError &error) {
    events.Emit(EventKind::kWriteRejected, token, rejected_prefix + ServerMessage(error.what()));
    return false;
  }
  events.Emit(EventKind::kWriteAccepted, token, detail);
  return true;
}

void WritePauseValue(pqxx::connection &db, const WorkerOptions &options, const EventWriter &events,
                     Token token, const std::string &value) {
  ReportFencedWrite(events, token, "val = '" + value + "'",
                    [&] { WritePauseRow(db, options.table, token, value); });
}

// Writes `rows` of the interleave table with the token, one every
// kInterleaveWritePeriod, going on after a rejection as a batch job goes on
// after a failed item; reports each write, then the counts.  False if told
// to stop meanwhile.
bool WriteInterleaveRows(pqxx::connection &db, const WorkerOptions &options,
                         const EventWriter &events, Token token, const std::vector<int> &rows) {
  int accepted = 0;
  int rejected = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && AwaitCommand(options.command_fd, kInterleaveWritePeriod) == Command::kStop) {
      return false;
    }
    const std::string row = "row " + std::to_string(rows[i]);
    const bool written = ReportFencedWrite(
        events, token, row,
        [&] { WriteInterleaveRow(db, options.table, token, options.name, rows[i]); }, row + ": ");
    ++(written ? accepted : rejected);
  }
  std::string counts = RowsText(rows) + ": " + std::to_string(accepted) + " accepted";
  if (rejected > 0) counts += ", " + std::to_string(rejected) + " rejected with 55Z01";
  events.Emit(EventKind::kBatchDone, token, counts);
  return true;
}

// A: checks its lease before each write, like a careful client, and still
// writes after its lease is gone, because the pause falls after the check.
void RunPauseHolder(const WorkerOptions &options, const EventWriter &events) {
  pqxx::connection db(options.conninfo);
  const std::unique_ptr<HeldLock> lock = AcquireLock(options, events);
  const Token token = lock->token();
  events.Emit(EventKind::kAcquired, token, AcquiredDetail(options, *lock));

  lock->CheckHeld();
  WritePauseValue(db, options, events, token, kHolderFirstValue);

  lock->CheckHeld();
  events.Emit(EventKind::kAboutToWrite, token);
  // The orchestrator stops this process while it waits here and sends the
  // go-ahead only once it is stopped, so the pause lands exactly between the
  // check above and the write below, a window no client-side check can close.
  if (AwaitCommand(options.command_fd, std::nullopt) != Command::kGo) return;
  WritePauseValue(db, options, events, token, kHolderStaleValue);

  // The lock's client does know by now (its on_lost may even have fired
  // first), but A checked before the pause and has no reason to look again.
  if (!lock->held()) {
    events.Emit(EventKind::kNote, token, "held() = false now: too late, the write has been sent");
  }
}

// A of the interleave scenario: checks its lease once, before it starts on
// the rows, like a batch job (a check before each row would only narrow the
// window, as the pause scenario shows), and is stopped between two rows.
// Resumed, it carries on with the rest of them.
void RunInterleaveHolder(const WorkerOptions &options, const EventWriter &events) {
  pqxx::connection db(options.conninfo);
  const std::unique_ptr<HeldLock> lock = AcquireLock(options, events);
  const Token token = lock->token();
  events.Emit(EventKind::kAcquired, token, AcquiredDetail(options, *lock));

  lock->CheckHeld();
  events.Emit(EventKind::kAboutToWrite, token,
              RowsText(RowRange(1, options.rows)) + ", one every " +
                  std::to_string(kInterleaveWritePeriod.count()) +
                  " ms, without looking at the lease again");
  const int before_pause = InterleaveRowsBeforePause(options.rows);
  if (!WriteInterleaveRows(db, options, events, token, RowRange(1, before_pause))) return;
  // The orchestrator stops this process here, between two rows, and sends
  // the go-ahead once it is stopped.  (Stopped inside a write's transaction,
  // A would hold the row, and under a lock-wide fence the fence, until it
  // resumed: "a paused writer holds the fence" in docs/functions.md.)
  if (AwaitCommand(options.command_fd, std::nullopt) != Command::kGo) return;
  if (!WriteInterleaveRows(db, options, events, token, RowRange(before_pause + 1, options.rows))) {
    return;
  }
  if (!lock->held()) {
    events.Emit(EventKind::kNote, token,
                "held() = false now: it never looked again, and sent every write regardless");
  }
}

// B: waits for the lock while A is paused, makes its writes, and holds the
// lease, as a live holder would, until the run is over.
template <typename Writes>
void RunSuccessor(const WorkerOptions &options, const EventWriter &events, Writes &&writes) {
  pqxx::connection db(options.conninfo);
  const Clock::time_point asked = Clock::now();
  const std::unique_ptr<HeldLock> lock = AcquireLock(options, events);
  const Token token = lock->token();
  const std::string waited =
      "after waiting " + std::to_string(ToMilliseconds(Clock::now() - asked)) + " ms";
  events.Emit(EventKind::kAcquired, token, AcquiredDetail(options, *lock, waited));

  lock->CheckHeld();
  writes(db, token);

  AwaitCommand(options.command_fd, std::nullopt);
  lock->Release();
  events.Emit(EventKind::kReleased, token);
}

void RunPauseSuccessor(const WorkerOptions &options, const EventWriter &events) {
  RunSuccessor(options, events, [&](pqxx::connection &db, Token token) {
    WritePauseValue(db, options, events, token, kSuccessorValue);
  });
}

// B of the interleave scenario: every second row of the second half.
void RunInterleaveSuccessor(const WorkerOptions &options, const EventWriter &events) {
  RunSuccessor(options, events, [&](pqxx::connection &db, Token token) {
    WriteInterleaveRows(db, options, events, token, InterleaveSuccessorRows(options.rows));
  });
}

// With --sessions: takes the leader lease in the candidate's session,
// opening one first if it has none or lost the last (its on_lost reports the
// loss, which is every lease's in it); throws as AcquireLock does.
std::unique_ptr<HeldLock> AcquireInSession(const WorkerOptions &options, const EventWriter &events,
                                           std::unique_ptr<client::Session> &session) {
  if (!session || !session->held()) {
    session.reset();  // closes a lost one before its successor opens
    client::SessionOptions opened;
    opened.conninfo = options.conninfo;
    opened.holder = LeaseHolderName(options.name, getpid());
    opened.ttl = options.ttl;
    opened.on_lost = [&events](const std::string &reason) {
      events.Emit(EventKind::kLeaseLost, std::nullopt, "its session: " + reason);
    };
    session = std::make_unique<client::Session>(std::move(opened));
  }
  client::SessionLockOptions lock;
  lock.wait = options.acquire_wait;
  return session->Lock(options.lock_name, lock);
}

// Competes for the leader lease until told to stop; while it leads, writes
// to the protected row every kLeaderWritePeriod.
void RunLeaderCandidate(const WorkerOptions &options, const EventWriter &events) {
  pqxx::connection db(options.conninfo);
  const std::string holder = LeaseHolderName(options.name, getpid());
  std::unique_ptr<client::Session> session;  // --sessions only; outlives the leases
  while (AwaitCommand(options.command_fd, std::chrono::milliseconds{0}) != Command::kStop) {
    std::unique_ptr<HeldLock> lease;
    try {
      lease = options.sessions ? AcquireInSession(options, events, session)
                               : AcquireLock(options, events);
    } catch (const client::LeaseUnavailableError &) {
      continue;  // someone else leads; the wait is short so a stop is seen soon
    }
    const Token token = lease->token();
    events.Emit(EventKind::kAcquired, token,
                session ? "in fencing session " + std::to_string(session->id()) : std::string());

    while (lease->held()) {
      if (!ReportFencedWrite(events, token, {},
                             [&] { WriteLeaderRow(db, options.table, token, holder); })) {
        break;  // a newer leader has written: this one is stale
      }
      if (AwaitCommand(options.command_fd, kLeaderWritePeriod) == Command::kStop) {
        lease->Release();
        events.Emit(EventKind::kReleased, token);
        return;
      }
    }
    events.Emit(EventKind::kNote, token, "stepped down: no longer the leader");
  }
}

}  // namespace

int RunWorker(const WorkerOptions &options) {
  // Outlives the leases: their on_lost callbacks report through it.
  const EventWriter events(options.event_fd, options.name);
  try {
    switch (options.role) {
      case WorkerRole::kPauseHolder:
        RunPauseHolder(options, events);
        break;
      case WorkerRole::kPauseSuccessor:
        RunPauseSuccessor(options, events);
        break;
      case WorkerRole::kLeaderCandidate:
        RunLeaderCandidate(options, events);
        break;
      case WorkerRole::kInterleaveHolder:
        RunInterleaveHolder(options, events);
        break;
      case WorkerRole::kInterleaveSuccessor:
        RunInterleaveSuccessor(options, events);
        break;
    }
    return 0;
  } catch (const std::exception &error) {
    events.Emit(EventKind::kError, std::nullopt, ServerMessage(error.what()));
    return 1;
  }
}

}  // namespace pg_fencing::demo
