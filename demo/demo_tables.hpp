// The tables the scenarios write to, and every SQL statement that touches
// them, for the orchestrator (which creates and inspects them) and the
// workers (which write).
#pragma once

#include <chrono>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "pg_fencing/token.hpp"

namespace pg_fencing::demo {

// ---- Pause scenario: one row, written by A, then B, then A again -----------

inline constexpr char kHolderFirstValue[] = "A: first write";
inline constexpr char kHolderStaleValue[] = "A: stale write";
inline constexpr char kSuccessorValue[] = "B: new holder's write";

struct PauseRow {
  std::optional<Token> token;
  std::string value;
};

// (Re)creates the table with its one row; protected by fencing_protect only
// when fencing is on (per row, or under lock_name's lock-wide fence when
// given), but written with tokens either way.  external_tokens: the tokens
// come from another service (etcd's revisions), which a per-row fence must
// be told (option external_tokens), or it refuses tokens the database
// never granted.
void CreatePauseTable(pqxx::connection &db, const std::string &table, bool fencing_on,
                      const std::optional<std::string> &lock_name = std::nullopt,
                      bool external_tokens = false);
// A fenced write; throws pg_fencing::client::StaleTokenError on 55Z01.
void WritePauseRow(pqxx::connection &db, const std::string &table, Token token,
                   const std::string &value);
PauseRow ReadPauseRow(pqxx::connection &db, const std::string &table);

// ---- Leader scenario: a protected row, and a log of the writes it accepted --

// How often the leader writes to the row.
inline constexpr std::chrono::milliseconds kLeaderWritePeriod{100};

// (Re)creates `table` (protected) and `table`_log.
void CreateLeaderTables(pqxx::connection &db, const std::string &table);
// Updates the row and logs the write in the same statement, so the log holds
// exactly the writes the guard accepted, in the order they took the row.
// Throws pg_fencing::client::StaleTokenError on 55Z01.
void WriteLeaderRow(pqxx::connection &db, const std::string &table, Token token,
                    const std::string &holder);
// The tokens of the accepted writes, oldest first.
std::vector<Token> ReadLeaderLogTokens(pqxx::connection &db, const std::string &table);

// ---- Interleave scenario: rows 1..N under one lock, written row by row ------

// The pause between two row writes of a worker.
inline constexpr std::chrono::milliseconds kInterleaveWritePeriod{20};

// How many rows A writes before it is stopped: a quarter.
inline int InterleaveRowsBeforePause(int rows) { return rows / 4; }
// The rows B writes: every second row of the second half, so that the rows
// B never touches are spread among its own.
std::vector<int> InterleaveSuccessorRows(int rows);
// first..last.
std::vector<int> RowRange(int first, int last);
// "row 3", "rows 1-5", "rows 11, 13, 15": row numbers for the timeline.
std::string RowsText(const std::vector<int> &rows);
// "1 row", "5 rows".
std::string RowCountText(int count);

struct InterleaveRow {
  int id = 0;
  std::optional<Token> token;
  std::string writer;  // the worker's name; empty if never written
  // Written after the grant given to ReadInterleaveRows, by the server's
  // clock (clock_timestamp() of the write and of the grant).
  bool written_after_grant = false;
};

// (Re)creates the table with rows 1..rows, none written yet; protected with
// a lock-wide fence under lock_name if one is given, a per-row fence if not.
void CreateInterleaveTable(pqxx::connection &db, const std::string &table, int rows,
                           const std::optional<std::string> &lock_name);
// A fenced write of one row; throws pg_fencing::client::StaleTokenError on 55Z01.
void WriteInterleaveRow(pqxx::connection &db, const std::string &table, Token token,
                        const std::string &writer, int row);
// Every row, by id; `grant` is a token that lock_name's lease was granted with
// (fencing_leases), the moment written_after_grant refers to.
std::vector<InterleaveRow> ReadInterleaveRows(pqxx::connection &db, const std::string &table,
                                              const std::string &lock_name, Token grant);

}  // namespace pg_fencing::demo
