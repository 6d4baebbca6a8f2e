// The engine's SQL statements, planned once per backend.
//
// The engine runs a few dozen fixed statements through SPI (the line's
// reads and deletes, a first lease's INSERT, a session's lock FOR SHARE,
// rows written through their triggers).  SPI_execute_with_args parses,
// analyzes and plans its text on every call: for the line's six-way read
// that was most of a poll's time.  ExecuteKept keeps each statement's plan
// (SPI_prepare + SPI_keepplan) for the backend's life, found again by its
// text and argument types; PostgreSQL's plan cache re-plans it after DDL
// on what it reads or a change of search_path or role, as for any
// prepared statement.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "postgres.h"
}

namespace pg_fencing {

// SPI_execute_with_args(query, count, types, values, nulls, read_only,
// limit), with the plan kept.  Inside SPI_connect, as SPI_execute_with_args.
// At most kMaxKeptStatements statements are kept; past them a statement
// runs as SPI_execute_with_args would (the engine has fewer: a bound, not a
// size).
int ExecuteKept(const char *query, int count, Oid *types, Datum *values, const char *nulls,
                bool read_only, long limit);

constexpr int kMaxKeptStatements = 64;

}  // namespace pg_fencing
