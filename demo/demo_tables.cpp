// SQL of the demo's tables (see demo_tables.hpp).
#include "demo_tables.hpp"

#include "pg_fencing/client.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::demo {

namespace {

constexpr int kRowId = 1;

std::string LogTableOf(const std::string &table) { return table + "_log"; }

// A per-row fence, or a lock-wide one under lock_name.
void Protect(pqxx::work &tx, const std::string &table,
             const std::optional<std::string> &lock_name = std::nullopt,
             bool external_tokens = false) {
  if (lock_name) {
    pqxx_compat::ExecParams(tx, "SELECT fencing_protect($1::regclass, lock_name => $2)",
                            tx.quote_name(table), *lock_name);
  } else if (external_tokens) {
    pqxx_compat::ExecParams(tx,
                            "SELECT fencing_protect($1::regclass, options => "
                            "ARRAY['external_tokens'])",
                            tx.quote_name(table));
  } else {
    pqxx_compat::ExecParams(tx, "SELECT fencing_protect($1::regclass)", tx.quote_name(table));
  }
}

}  // namespace

void CreatePauseTable(pqxx::connection &db, const std::string &table, bool fencing_on,
                      const std::optional<std::string> &lock_name, bool external_tokens) {
  pqxx::work tx(db);
  const std::string name = tx.quote_name(table);
  pqxx_compat::Exec0(tx, "DROP TABLE IF EXISTS " + name);
  pqxx_compat::Exec0(
      tx, "CREATE TABLE " + name + " (id int PRIMARY KEY, token fencing_token, val text)");
  pqxx_compat::ExecParams(tx, "INSERT INTO " + name + " VALUES ($1, NULL, 'initial')", kRowId);
  if (fencing_on) Protect(tx, table, lock_name, external_tokens);
  tx.commit();
}

void WritePauseRow(pqxx::connection &db, const std::string &table, Token token,
                   const std::string &value) {
  client::ExecFenced(db,
                     "UPDATE " + db.quote_name(table) + " SET token = $1, val = $2 WHERE id = $3",
                     token, value, kRowId);
}

PauseRow ReadPauseRow(pqxx::connection &db, const std::string &table) {
  pqxx::work tx(db);
  const pqxx::row row = pqxx_compat::ExecParams1(
      tx, "SELECT token::bigint, val FROM " + tx.quote_name(table) + " WHERE id = $1", kRowId);
  PauseRow result;
  if (!row[0].is_null()) result.token = row[0].as<Token>();
  result.value = row[1].as<std::string>();
  return result;
}

void CreateLeaderTables(pqxx::connection &db, const std::string &table) {
  pqxx::work tx(db);
  const std::string name = tx.quote_name(table);
  const std::string log = tx.quote_name(LogTableOf(table));
  pqxx_compat::Exec0(tx, "DROP TABLE IF EXISTS " + name + ", " + log);
  pqxx_compat::Exec0(tx, "CREATE TABLE " + name +
                             " (id int PRIMARY KEY, token fencing_token, holder text,"
                             "  writes bigint NOT NULL DEFAULT 0)");
  pqxx_compat::ExecParams(tx, "INSERT INTO " + name + " (id) VALUES ($1)", kRowId);
  Protect(tx, table);
  // seq orders the log: the guarded UPDATE holds the row lock until commit,
  // so the writes take their seq values in the order they took the row.
  pqxx_compat::Exec0(
      tx, "CREATE TABLE " + log +
              " (seq bigserial PRIMARY KEY, token fencing_token NOT NULL, holder text NOT NULL,"
              "  written_at timestamptz NOT NULL DEFAULT clock_timestamp())");
  tx.commit();
}

void WriteLeaderRow(pqxx::connection &db, const std::string &table, Token token,
                    const std::string &holder) {
  client::ExecFenced(db,
                     "WITH accepted AS ("
                     "  UPDATE " +
                         db.quote_name(table) +
                         " SET token = $1, holder = $2, writes = writes + 1"
                         " WHERE id = $3 RETURNING token, holder) "
                         "INSERT INTO " +
                         db.quote_name(LogTableOf(table)) +
                         " (token, holder) SELECT token, holder FROM accepted",
                     token, holder, kRowId);
}

std::vector<Token> ReadLeaderLogTokens(pqxx::connection &db, const std::string &table) {
  pqxx::work tx(db);
  std::vector<Token> tokens;
  for (const auto &row :
       tx.exec("SELECT token::bigint FROM " + tx.quote_name(LogTableOf(table)) + " ORDER BY seq")) {
    tokens.push_back(row[0].as<Token>());
  }
  return tokens;
}

std::vector<int> InterleaveSuccessorRows(int rows) {
  std::vector<int> chosen;
  for (int row = rows / 2 + 1; row <= rows; row += 2) chosen.push_back(row);
  return chosen;
}

std::vector<int> RowRange(int first, int last) {
  std::vector<int> range;
  for (int row = first; row <= last; ++row) range.push_back(row);
  return range;
}

std::string RowsText(const std::vector<int> &rows) {
  std::string text;
  for (std::size_t start = 0; start < rows.size();) {
    std::size_t end = start;  // the run of consecutive rows from start
    while (end + 1 < rows.size() && rows[end + 1] == rows[end] + 1) ++end;
    if (!text.empty()) text += ", ";
    text += std::to_string(rows[start]);
    if (end > start) text += "-" + std::to_string(rows[end]);
    start = end + 1;
  }
  if (text.empty()) return "no rows";
  return (rows.size() == 1 ? "row " : "rows ") + text;
}

std::string RowCountText(int count) {
  return std::to_string(count) + (count == 1 ? " row" : " rows");
}

void CreateInterleaveTable(pqxx::connection &db, const std::string &table, int rows,
                           const std::optional<std::string> &lock_name) {
  pqxx::work tx(db);
  const std::string name = tx.quote_name(table);
  pqxx_compat::Exec0(tx, "DROP TABLE IF EXISTS " + name);
  pqxx_compat::Exec0(
      tx, "CREATE TABLE " + name +
              " (id int PRIMARY KEY, token fencing_token, writer text, written_at timestamptz)");
  pqxx_compat::ExecParams(tx, "INSERT INTO " + name + " (id) SELECT generate_series(1, $1)", rows);
  Protect(tx, table, lock_name);
  tx.commit();
}

void WriteInterleaveRow(pqxx::connection &db, const std::string &table, Token token,
                        const std::string &writer, int row) {
  client::ExecFenced(db,
                     "UPDATE " + db.quote_name(table) +
                         " SET token = $1, writer = $2, written_at = clock_timestamp()"
                         " WHERE id = $3",
                     token, writer, row);
}

std::vector<InterleaveRow> ReadInterleaveRows(pqxx::connection &db, const std::string &table,
                                              const std::string &lock_name, Token grant) {
  pqxx::work tx(db);
  std::vector<InterleaveRow> rows;
  for (const auto &row : pqxx_compat::ExecParams(
           tx,
           "SELECT t.id, t.token::bigint, t.writer,"
           "       coalesce(t.written_at > g.granted_at, false)"
           "  FROM " +
               tx.quote_name(table) +
               " t LEFT JOIN (SELECT granted_at FROM fencing_leases"
               "               WHERE lock_name = $1 AND token::bigint = $2) g ON true"
               " ORDER BY t.id",
           lock_name, grant)) {
    InterleaveRow result;
    result.id = row[0].as<int>();
    if (!row[1].is_null()) result.token = row[1].as<Token>();
    if (!row[2].is_null()) result.writer = row[2].as<std::string>();
    result.written_after_grant = row[3].as<bool>();
    rows.push_back(result);
  }
  return rows;
}

}  // namespace pg_fencing::demo
