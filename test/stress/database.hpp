// The run's database as both orchestrators set it up (orchestrator.cpp, and
// the fleet's in fleet_orchestrator.cpp): the extension and the
// application's role, the tables the workers write, and the server's own
// record of every committed write and grant, dumped at the end into the
// files both checkers read (history.tsv, grants.tsv).
#pragma once

#include <pqxx/pqxx>
#include <string>

#include "cluster.hpp"

namespace pg_fencing::stress {

// CREATE DATABASE kDatabase on a fresh cluster.
void CreateRunDatabase(const Cluster &cluster);

// In kDatabase: the extension, and the application's role kAppRole, which
// creates its locks (fencing_allow_create) and whose statements time out
// after 10 s.
void SetUpApplication(pqxx::work &tx);

// The server's record of what committed, written by triggers in the
// committing transactions: stress_history (every write to a table created
// by CreateWorkedTable) and stress_grants (every grant of a lease or a
// permit), numbered from one sequence.
void CreateServerRecord(pqxx::work &tx);

// A table the workers write: rows 0 .. rows-1 (id, token, val, write_id),
// its writes recorded under tag, SELECT and UPDATE granted to kAppRole.
void CreateWorkedTable(pqxx::work &tx, const std::string &name, const std::string &tag, int rows);

// The rows of sql, tab-separated (\N for NULL), into the file at path.
void DumpQuery(pqxx::work &tx, const std::string &sql, const std::string &path);

// The server's record (CreateServerRecord) into dir: history.tsv and
// grants.tsv, times in µs since the epoch.
void DumpServerRecord(pqxx::work &tx, const std::string &dir);

// "(extract(epoch FROM column) * 1000000)::bigint": a timestamp as the
// checkers read it.
std::string Micros(const std::string &column);

// pg_fencing's installed version in kDatabase.
std::string ExtensionVersion(const Cluster &cluster);

}  // namespace pg_fencing::stress
