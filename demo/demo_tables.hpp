// The tables the scenarios write to, and every SQL statement that touches
// them, for the orchestrator (which creates and inspects them) and the
// workers (which write).
#pragma once

#include <chrono>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "pg_fencing/core.hpp"

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
// when fencing is on, but written with tokens either way.
void CreatePauseTable(pqxx::connection &db, const std::string &table, bool fencing_on);
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

}  // namespace pg_fencing::demo
