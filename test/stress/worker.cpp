// A stress worker (see worker.hpp).  It is an ordinary client of
// pg_fencing_client: Lease for the lock, ExecFenced for the writes.  It is
// also a deliberately bad one: some holds ignore held() and write on after the
// lease is lost, and some go on writing with the old token after they let
// go ("zombies"), so that stale writes reach the server all the time, not
// only when the nemesis pauses someone.
//
// Log events (one line each, see common.hpp):
//   start                                    the process started
//   acq_invoke holder=H                      before fencing_acquire (waiting form)
//   grant tok=T holder=H inv=WALL_US         a token was received
//   acq_fail holder=H out=timeout|info       busy after the wait | an error: maybe granted
//   lost tok=T src=heartbeat|held            the client library says the lease is lost
//   release tok=T out=true|false|info        fencing_release's answer
//   zombie tok=T                             writing on with a token let go of
//   freeze wid=W tok=T ms=MS then=TH [end=E] the write W is made, and the whole process
//                                            stops for MS ms before its COMMIT; TH: what
//                                            it does first when it resumes (commit: nothing;
//                                            close|open|reacquire, a variant: E is its
//                                            lease's end, wall µs on the server's clock)
//   thaw wid=W stopped=1|0                   the process resumed (0: it could not stop)
//   thaw_call wid=W then=TH answer=A         a variant's call answered, in the frozen
//                                            transaction (A: what the function returned)
//   w_inv wid=W tbl=rows|lock row=R tok=T|none lease=T val=V     before a write is sent
//   w_done wid=W out=ok|55Z01|55Z02|err|info [state=SQLSTATE] [n=ROWS]
//   r_inv rid=R tok=T present=keep|undo      before a read is sent (permit mode)
//   r_done rid=R out=ok present=ok|55Z01 rows=N | out=err|info [state=SQLSTATE]
//   stop                                     clean exit after SIGTERM
// The freeze fault (the orchestrator's SIGUSR1, its value the ms): the
// worker's next write stops the whole process -- its heartbeat too, as a GC
// pause or a VM stop would -- after the UPDATE and before the COMMIT, and a
// child it forked resumes it.  Its lease runs out meanwhile; the server must
// end the transaction so that the next holder is not held up (issue 24).
// Its variant (the request's Thaw, worker.hpp; issue 42): the worker's next
// acquisition is a hold of its own without a heartbeat -- in a session for
// close and open -- whose one write freezes until just after the lease's
// end; then, in the frozen transaction, the worker closes the session, opens
// another one or acquires the lock again, and sends COMMIT, which the server
// must refuse (55Z04) if it has not ended the transaction already.
//
// out=info means the outcome is unknown (the connection broke, or COMMIT's
// answer was lost): the write may or may not have committed.  A w_inv with
// no w_done (the process was killed) means the same; likewise for reads.
//
// Permit mode (config.permits > 0): the worker takes a permit of the
// semaphore kSemName instead of the lease, writes kSemTable (the guard judges
// the UPDATE) and kReadTable (behind a read fence: the writer presents its
// token first), and some of its operations are reads of kReadTable under the
// read fence, recorded on the server in the reading transaction.
#include "worker.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <stdexcept>

#include "common.hpp"
#include "pg_fencing/client.hpp"
#include "pg_fencing/pqxx_compat.hpp"
#include "process.hpp"

namespace pg_fencing::stress {

namespace client = pg_fencing::client;

namespace {

// How many kinds of Thaw a request's value carries (FreezeSignalValue).
constexpr int kThawKinds = 4;
static_assert(static_cast<int>(Thaw::kReacquire) + 1 == kThawKinds,
              "a Thaw the value cannot carry");

// The freeze fault's request: how long to stay stopped (0: none pending).
volatile sig_atomic_t g_freeze_ms = 0;
// Its variant's: the Thaw it ends with (0: none pending).
volatile sig_atomic_t g_thaw_pending = 0;

void OnFreeze(int, siginfo_t *info, void *) {
  const int value = info->si_value.sival_int;
  const int thaw = value % kThawKinds;
  if (thaw == static_cast<int>(Thaw::kCommit)) {
    g_freeze_ms = value / kThawKinds;
  } else {
    g_thaw_pending = thaw;
  }
}

// How long after its lease's end a variant's freeze ends: past the end by
// the server's clock (the same host's), and well before the server
// terminates a transaction idle past its lease (100 ms after cancelling it
// at the end), so that the COMMIT is usually what refuses.
constexpr int kThawMarginMinMs = 5;
constexpr int kThawMarginMaxMs = 40;

// Stops the whole process for ms: a child sleeps, then sends SIGCONT.
// False if it could not stop.
bool FreezeProcess(int ms) {
  const pid_t self = getpid();
  const pid_t waker = fork();
  if (waker < 0) return false;  // no freeze this time
  if (waker == 0) {
    struct timespec pause = {ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
    while (nanosleep(&pause, &pause) != 0) {
    }
    kill(self, SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  (void)waitpid(waker, nullptr, 0);
  return true;
}

std::string Ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()); }

std::string Interval(std::chrono::milliseconds ms) { return Ms(ms) + " milliseconds"; }

// The lease a variant's write freezes under, and what its thaw needs.
struct FrozenLease {
  Thaw thaw = Thaw::kCommit;
  std::string holder;
  std::int64_t session = 0;  // the session it is held in (0: none)
};

class Worker {
 public:
  explicit Worker(const WorkerConfig &config)
      : config_(config),
        log_(config.log_path),
        rng_(config.seed),
        prefix_("w=" + std::to_string(config.slot) + " inc=" + std::to_string(config.incarnation) +
                " ") {}

  int Run() {
    log_.Write(prefix_ + "ev=start pid=" + std::to_string(getpid()));
    while (!StopRequested()) {
      if (!EnsureDb()) {
        SleepMs(100);
        continue;
      }
      // The variant takes the exclusive lock only (the orchestrator asks
      // for it only then).
      if (g_thaw_pending != 0 && config_.permits == 0) {
        FrozenHold(static_cast<Thaw>(static_cast<int>(g_thaw_pending)));
      } else {
        std::unique_ptr<client::Lease> lease = Acquire();
        if (lease) Hold(std::move(lease));
      }
      SleepMs(Uniform(0, 30));
    }
    log_.Write(prefix_ + "ev=stop");
    return 0;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  bool EnsureDb() {
    if (db_ && db_->is_open()) return true;
    db_.reset();
    try {
      db_ = std::make_unique<pqxx::connection>(config_.conninfo);
      connect_failures_ = 0;
      return true;
    } catch (const std::exception &error) {
      // One line per outage, not one per retry.
      if (connect_failures_++ == 0) {
        log_.Write(prefix_ + "ev=conn_fail", FirstLine(error.what()));
      }
      return false;
    }
  }

  // Unique per acquisition, not per process: a holder that thinks its
  // lease is lost while the server still has it live would otherwise get
  // the same token back, and a token must mean one grant.
  std::string NextHolder() {
    return std::to_string(config_.slot) + "." + std::to_string(config_.incarnation) + "." +
           std::to_string(acquires_++);
  }

  std::unique_ptr<client::Lease> Acquire() {
    const std::string holder = NextHolder();
    auto token = std::make_shared<std::atomic<Token>>(0);
    client::LeaseOptions options;
    options.conninfo = config_.conninfo;
    options.lock_name = kLockName;
    if (config_.permits > 0) {
      options.mode = client::LeaseOptions::Mode::kPermit;
      options.permits = config_.permits;
      options.lock_name = kSemName;
    }
    options.holder = holder;
    options.ttl = config_.ttl;
    options.wait = config_.acquire_wait;
    options.on_lost = [this, token](const std::string &reason) {
      log_.Write(prefix_ + "ev=lost tok=" + std::to_string(token->load()) + " src=heartbeat",
                 reason);
    };

    const Stamp invoked = Now();
    log_.Write(invoked, prefix_ + "ev=acq_invoke holder=" + holder);
    try {
      auto lease = std::make_unique<client::Lease>(options);
      token->store(lease->token());
      log_.Write(prefix_ + "ev=grant tok=" + std::to_string(lease->token()) + " holder=" + holder +
                 " inv=" + std::to_string(invoked.wall_us));
      return lease;
    } catch (const client::LeaseUnavailableError &error) {
      log_.Write(prefix_ + "ev=acq_fail holder=" + holder + " out=timeout", error.what());
    } catch (const std::exception &error) {
      // The server may have granted it before the error: the grant history
      // on the server knows.
      log_.Write(prefix_ + "ev=acq_fail holder=" + holder + " out=info", FirstLine(error.what()));
      SleepMs(100);  // the server is probably restarting
    }
    return nullptr;
  }

  void Hold(std::unique_ptr<client::Lease> lease) {
    const Token token = lease->token();
    const std::int64_t hold_end = MonoMs() + Uniform(static_cast<int>(config_.hold_min.count()),
                                                     static_cast<int>(config_.hold_max.count()));
    const bool careless = Chance(config_.p_careless);
    const bool zombie = Chance(config_.p_zombie);
    bool saw_lost = false;
    while (!StopRequested() && MonoMs() < hold_end) {
      if (!lease->held()) {
        if (!saw_lost) {
          saw_lost = true;
          log_.Write(prefix_ + "ev=lost tok=" + std::to_string(token) + " src=held" +
                         (careless ? " careless=1" : ""),
                     lease->lost_reason());
        }
        if (!careless) break;
      }
      Operate(token);
      Gap();
    }
    try {
      const bool released = lease->Release();
      log_.Write(prefix_ + "ev=release tok=" + std::to_string(token) +
                 " out=" + (released ? "true" : "false"));
    } catch (const std::exception &error) {
      log_.Write(prefix_ + "ev=release tok=" + std::to_string(token) + " out=info",
                 FirstLine(error.what()));
    }
    lease.reset();
    if (zombie && !StopRequested()) {
      log_.Write(prefix_ + "ev=zombie tok=" + std::to_string(token));
      const std::int64_t until =
          MonoMs() + Uniform(0, static_cast<int>(config_.zombie_max.count()));
      while (!StopRequested() && MonoMs() < until) {
        Operate(token);
        Gap();
      }
    }
  }

  // The freeze fault's variant (see the top of this file): a hold with no
  // heartbeat, so that nothing moves its lease's end while the worker is
  // stopped and the end the worker reads before it freezes is the end.  In
  // a session for close and open (open for the wait and a ttl, renewed to
  // a ttl at the grant: the write has a whole ttl whatever the wait took),
  // a plain lease for reacquire.  It waits longer than a hold's acquire:
  // one wait keeps its place in the lock's queue, where a worker that
  // waited again and again would go to its back each time, and the fault
  // would come seconds later.  The request stays pending until a grant.
  void FrozenHold(Thaw thaw) {
    FrozenLease lease{thaw, NextHolder(), 0};
    const bool in_session = thaw != Thaw::kReacquire;
    const std::chrono::milliseconds wait = 4 * config_.acquire_wait;
    const Stamp invoked = Now();
    log_.Write(invoked,
               prefix_ + "ev=acq_invoke holder=" + lease.holder + " then=" + ThawName(thaw));
    std::optional<Token> token;
    try {
      pqxx::nontransaction tx(*db_);
      if (in_session) {
        lease.session =
            pqxx_compat::ExecParams1(tx, "SELECT fencing_session_open($1, $2::interval)",
                                     lease.holder, Interval(wait + config_.ttl))[0]
                .as<std::int64_t>();
        const pqxx::row granted = pqxx_compat::ExecParams1(
            tx, "SELECT fencing_session_acquire($1, $2, $3::interval)::bigint", lease.session,
            kLockName, Interval(wait));
        if (!granted[0].is_null()) token = granted[0].as<Token>();
      } else {
        const pqxx::row granted = pqxx_compat::ExecParams1(
            tx, "SELECT fencing_acquire($1, $2, $3::interval, $4::interval)::bigint", kLockName,
            lease.holder, Interval(config_.ttl), Interval(wait));
        if (!granted[0].is_null()) token = granted[0].as<Token>();
      }
      if (token) {
        log_.Write(prefix_ + "ev=grant tok=" + std::to_string(*token) + " holder=" + lease.holder +
                   " inv=" + std::to_string(invoked.wall_us));
        if (in_session &&
            !pqxx_compat::ExecParams1(tx, "SELECT fencing_session_renew($1, $2::interval)",
                                      lease.session, Interval(config_.ttl))[0]
                 .as<bool>()) {
          // The wait took the session's whole ttl: nothing left to freeze in.
          log_.Write(prefix_ + "ev=lost tok=" + std::to_string(*token) + " src=session");
          token.reset();
        }
      } else {
        log_.Write(prefix_ + "ev=acq_fail holder=" + lease.holder + " out=timeout");
      }
    } catch (const std::exception &error) {
      log_.Write(prefix_ + "ev=acq_fail holder=" + lease.holder + " out=info",
                 FirstLine(error.what()));
      if (db_ && !db_->is_open()) db_.reset();
    }
    if (token) {
      g_thaw_pending = 0;
      Write(*token, &lease);
    }
    // An ended session stays until swept: close it (it answers 0).
    if (lease.session != 0 && db_ && db_->is_open()) {
      try {
        pqxx::nontransaction tx(*db_);
        pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", lease.session);
      } catch (const std::exception &) {
        // Swept later, by the expiry worker or the role's next open.
      }
    }
  }

  // Stops the process inside tx, after the write wid under token, for ms
  // (a plain freeze), or for a variant's frozen lease until just after the
  // lease's end; then makes the variant's call in tx.  The caller commits.
  void FreezeInTransaction(pqxx::work &tx, const std::string &wid, Token token, int ms,
                           const FrozenLease *variant) {
    std::string lease_end;
    if (variant != nullptr) {
      // The lease's end as committed now, which nothing moves from here on;
      // its row gone, the lock was granted again: the lease has ended.
      const pqxx::row row = pqxx_compat::ExecParams1(
          tx,
          "SELECT (SELECT (extract(epoch FROM expires_at) * 1000000)::bigint FROM fencing_leases "
          "WHERE token::bigint = $1)",
          token);
      const std::int64_t now_us = Now().wall_us;
      const std::int64_t end_us = row[0].is_null() ? now_us : row[0].as<std::int64_t>();
      ms = static_cast<int>(std::max<std::int64_t>(0, end_us - now_us) / 1000) +
           Uniform(kThawMarginMinMs, kThawMarginMaxMs);
      lease_end = " end=" + std::to_string(end_us);
    }
    const Thaw thaw = variant != nullptr ? variant->thaw : Thaw::kCommit;
    log_.Write(prefix_ + "ev=freeze wid=" + wid + " tok=" + std::to_string(token) +
               " ms=" + std::to_string(ms) + " then=" + ThawName(thaw) + lease_end);
    const bool stopped = FreezeProcess(ms);
    log_.Write(prefix_ + "ev=thaw wid=" + wid + " stopped=" + (stopped ? "1" : "0"));
    if (variant == nullptr || !stopped) return;
    std::string answer;
    switch (thaw) {
      case Thaw::kCloseSession:
        answer =
            pqxx_compat::ExecParams1(tx, "SELECT fencing_session_close($1)", variant->session)[0]
                .c_str();
        break;
      case Thaw::kOpenSession:
        answer =
            pqxx_compat::ExecParams1(tx, "SELECT fencing_session_open('unrelated', $1::interval)",
                                     Interval(config_.ttl))[0]
                .c_str();
        break;
      case Thaw::kReacquire: {
        const pqxx::row granted =
            pqxx_compat::ExecParams1(tx, "SELECT fencing_acquire($1, $2, $3::interval)::bigint",
                                     kLockName, variant->holder, Interval(config_.ttl));
        answer = granted[0].is_null() ? "null" : granted[0].c_str();
        break;
      }
      case Thaw::kCommit:
        break;
    }
    log_.Write(prefix_ + "ev=thaw_call wid=" + wid + " then=" + ThawName(thaw) +
               " answer=" + answer);
  }

  void Gap() { SleepMs(Uniform(0, static_cast<int>(config_.write_gap_max.count()))); }

  // One operation under token: a write, or in permit mode sometimes a read.
  void Operate(Token token) {
    if (config_.permits > 0 && Chance(config_.p_read)) {
      Read(token);
    } else {
      Write(token);
    }
  }

  // Runs one attempt's transaction (body returns the outcome of a success,
  // "ok ...") and turns what it throws into the outcome the checker reads:
  // a refusal, an error on a connection still up (not committed), or info
  // (unknown: the connection went away, maybe after COMMIT did its work).
  template <typename Body>
  std::string Attempt(Body &&body, std::string *detail) {
    try {
      return body();
    } catch (const client::StaleTokenError &error) {
      *detail = FirstLine(error.what());
      return "55Z01";
    } catch (const client::MissingTokenError &error) {
      *detail = FirstLine(error.what());
      return "55Z02";
    } catch (const client::LeaseEndedError &error) {
      // A transaction that outlived its lease, refused (at its COMMIT): not
      // committed, unless the connection went with the answer.
      *detail = FirstLine(error.what());
      if (db_ && db_->is_open()) return "err state=55Z04";
      db_.reset();
      return "info state=55Z04";
    } catch (const pqxx::in_doubt_error &error) {
      *detail = FirstLine(error.what());
      db_.reset();
      return "info phase=commit";
    } catch (const pqxx::broken_connection &error) {
      *detail = FirstLine(error.what());
      db_.reset();
      return "info";
    } catch (const pqxx::sql_error &error) {
      // An error answer on a connection that is still up: the transaction
      // did not commit.  One that came with the connection going away (a
      // FATAL) may have come after COMMIT did its work: unknown.
      *detail = FirstLine(error.what());
      if (db_ && db_->is_open()) return "err state=" + pqxx_compat::SqlState(error);
      db_.reset();
      return "info state=" + pqxx_compat::SqlState(error);
    } catch (const std::exception &error) {
      *detail = FirstLine(error.what());
      db_.reset();
      return "info";
    }
  }

  // One write, logged before it is sent and after its outcome is known.  A
  // variant's (the freeze fault's, frozen non-null) always freezes.
  void Write(Token token, const FrozenLease *frozen = nullptr) {
    if (!EnsureDb()) {
      SleepMs(50);
      return;
    }
    const bool permit = config_.permits > 0;
    const bool first_table = Chance(0.5);
    const char *table =
        permit ? (first_table ? kSemTable : kReadTable) : (first_table ? kLockTable : kRowTable);
    const char *tag = permit ? (first_table ? kSemTableTag : kReadTableTag)
                             : (first_table ? kLockTableTag : kRowTableTag);
    // Behind the read fence the UPDATE's WHERE sees rows only once the
    // transaction has presented a token.
    const bool present_first = permit && !first_table;
    const int row = Uniform(0, config_.rows - 1);
    const std::string wid = std::to_string(config_.slot) + "." +
                            std::to_string(config_.incarnation) + "." + std::to_string(writes_++);
    const std::int64_t val = static_cast<std::int64_t>(rng_() >> 2);
    // A token-less write behind the read fence would find no row rather
    // than be refused: those go to the other table only.
    const bool missing = frozen == nullptr && Chance(config_.p_missing) && !present_first;

    log_.Write(prefix_ + "ev=w_inv wid=" + wid + " tbl=" + tag + " row=" + std::to_string(row) +
               " tok=" + (missing ? std::string("none") : std::to_string(token)) +
               " lease=" + std::to_string(token) + " val=" + std::to_string(val));
    const std::string update =
        std::string("UPDATE ") + table + " SET token = $1, val = $2, write_id = $3 WHERE id = $4";
    const int freeze_ms =
        missing || present_first || frozen != nullptr ? 0 : static_cast<int>(g_freeze_ms);
    if (freeze_ms > 0) g_freeze_ms = 0;
    const bool freeze = freeze_ms > 0 || frozen != nullptr;
    std::string detail;
    const std::string outcome = Attempt(
        [&] {
          pqxx::result result;
          if (freeze) {
            try {
              pqxx::work tx(*db_);
              result = pqxx_compat::ExecParams(tx, update, token, val, wid, row);
              FreezeInTransaction(tx, wid, token, freeze_ms, frozen);
              tx.commit();
            } catch (const pqxx::sql_error &error) {
              client::RethrowMapped(error);
            }
          } else if (missing || present_first) {
            try {
              pqxx::work tx(*db_);
              if (missing) {
                // A writer that forgot its token: the guard must refuse it (55Z02).
                result = pqxx_compat::ExecParams(
                    tx,
                    std::string("UPDATE ") + table + " SET val = $1, write_id = $2 WHERE id = $3",
                    val, wid, row);
              } else {
                pqxx_compat::ExecParams(tx, "SELECT fencing_present($1, $2)", kSemName, token);
                result = pqxx_compat::ExecParams(tx, update, token, val, wid, row);
              }
              tx.commit();
            } catch (const pqxx::sql_error &error) {
              client::RethrowMapped(error);
            }
          } else {
            result = client::ExecFenced(*db_, update, token, val, wid, row);
          }
          return "ok n=" + std::to_string(result.affected_rows());
        },
        &detail);
    log_.Write(prefix_ + "ev=w_done wid=" + wid + " out=" + outcome, detail);
  }

  // One read under the read fence (permit mode), logged like a write.  One
  // transaction: present the token in a savepoint (so that a refusal leaves
  // the transaction usable), count the rows of kReadTable the fence lets
  // through, and record that on the server, whose record takes its seq
  // after the presentation took its permit's gate.  An "undo" read rolls
  // the presentation back before it counts: like a refused one, it must see
  // no row.
  void Read(Token token) {
    if (!EnsureDb()) {
      SleepMs(50);
      return;
    }
    const std::string rid = std::to_string(config_.slot) + "." +
                            std::to_string(config_.incarnation) + "." + std::to_string(reads_++);
    const bool undo = Chance(config_.p_undo);
    log_.Write(prefix_ + "ev=r_inv rid=" + rid + " tok=" + std::to_string(token) +
               " present=" + (undo ? "undo" : "keep"));
    std::string detail;
    const std::string outcome = Attempt(
        [&] {
          pqxx::work tx(*db_);
          std::string presented = "ok";
          // Savepoints by hand: libpqxx 6.4's subtransaction sends no
          // SAVEPOINT when its first statement has parameters.
          pqxx_compat::Exec0(tx, "SAVEPOINT present");
          try {
            pqxx_compat::ExecParams(tx, "SELECT fencing_present($1, $2)", kSemName, token);
            pqxx_compat::Exec0(
                tx, undo ? "ROLLBACK TO SAVEPOINT present" : "RELEASE SAVEPOINT present");
          } catch (const pqxx::sql_error &error) {
            if (pqxx_compat::SqlState(error) != "55Z01") throw;
            presented = "55Z01";  // expected: the permit has moved on
            detail = FirstLine(error.what());
            pqxx_compat::Exec0(tx, "ROLLBACK TO SAVEPOINT present");
          }
          const bool in_force = presented == "ok" && !undo;
          const pqxx::row seen = pqxx_compat::ExecParams1(
              tx,
              std::string("SELECT stress_record_read($1, $2, $3, (SELECT count(*) FROM ") +
                  kReadTable + "))",
              rid, token, in_force);
          tx.commit();
          return "ok present=" + presented + " rows=" + seen[0].c_str();
        },
        &detail);
    log_.Write(prefix_ + "ev=r_done rid=" + rid + " out=" + outcome, detail);
  }

  const WorkerConfig config_;
  const EventLog log_;
  std::mt19937_64 rng_;
  const std::string prefix_;
  std::unique_ptr<pqxx::connection> db_;
  std::int64_t acquires_ = 0;
  std::int64_t writes_ = 0;
  std::int64_t reads_ = 0;
  int connect_failures_ = 0;
};

}  // namespace

const char *ThawName(Thaw thaw) {
  switch (thaw) {
    case Thaw::kCommit:
      return "commit";
    case Thaw::kCloseSession:
      return "close";
    case Thaw::kOpenSession:
      return "open";
    case Thaw::kReacquire:
      return "reacquire";
  }
  return "?";
}

int FreezeSignalValue(int ms, Thaw thaw) { return ms * kThawKinds + static_cast<int>(thaw); }

std::vector<std::string> WorkerArguments(const WorkerConfig &c) {
  return {"--slot",        std::to_string(c.slot),
          "--incarnation", std::to_string(c.incarnation),
          "--conninfo",    c.conninfo,
          "--log",         c.log_path,
          "--rows",        std::to_string(c.rows),
          "--ttl",         Ms(c.ttl),
          "--wait",        Ms(c.acquire_wait),
          "--hold-min",    Ms(c.hold_min),
          "--hold-max",    Ms(c.hold_max),
          "--zombie-max",  Ms(c.zombie_max),
          "--gap-max",     Ms(c.write_gap_max),
          "--p-careless",  std::to_string(c.p_careless),
          "--p-zombie",    std::to_string(c.p_zombie),
          "--p-missing",   std::to_string(c.p_missing),
          "--permits",     std::to_string(c.permits),
          "--p-read",      std::to_string(c.p_read),
          "--p-undo",      std::to_string(c.p_undo),
          "--seed",        std::to_string(c.seed)};
}

WorkerConfig ParseWorkerArguments(const std::vector<std::string> &args) {
  WorkerConfig c;
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string &key = args[i];
    const std::string &value = args[i + 1];
    const auto ms = [&] { return std::chrono::milliseconds(std::stoll(value)); };
    if (key == "--slot")
      c.slot = std::stoi(value);
    else if (key == "--incarnation")
      c.incarnation = std::stoi(value);
    else if (key == "--conninfo")
      c.conninfo = value;
    else if (key == "--log")
      c.log_path = value;
    else if (key == "--rows")
      c.rows = std::stoi(value);
    else if (key == "--ttl")
      c.ttl = ms();
    else if (key == "--wait")
      c.acquire_wait = ms();
    else if (key == "--hold-min")
      c.hold_min = ms();
    else if (key == "--hold-max")
      c.hold_max = ms();
    else if (key == "--zombie-max")
      c.zombie_max = ms();
    else if (key == "--gap-max")
      c.write_gap_max = ms();
    else if (key == "--p-careless")
      c.p_careless = std::stod(value);
    else if (key == "--p-zombie")
      c.p_zombie = std::stod(value);
    else if (key == "--p-missing")
      c.p_missing = std::stod(value);
    else if (key == "--permits")
      c.permits = std::stoi(value);
    else if (key == "--p-read")
      c.p_read = std::stod(value);
    else if (key == "--p-undo")
      c.p_undo = std::stod(value);
    else if (key == "--seed")
      c.seed = std::stoull(value);
    else
      throw std::invalid_argument("unknown worker argument " + key);
  }
  if (args.size() % 2 != 0) throw std::invalid_argument("worker arguments come in pairs");
  if (c.log_path.empty()) throw std::invalid_argument("worker needs --log");
  return c;
}

int RunWorker(const WorkerConfig &config) {
  CatchStopSignals();
  struct sigaction freeze {};
  freeze.sa_sigaction = OnFreeze;
  freeze.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&freeze.sa_mask);
  sigaction(SIGUSR1, &freeze, nullptr);
  try {
    Worker worker(config);
    return worker.Run();
  } catch (const std::exception &error) {
    std::fprintf(stderr, "worker %d: %s\n", config.slot, error.what());
    return 1;
  }
}

}  // namespace pg_fencing::stress
