// SQL of the demo's tables (see demo_tables.hpp).
#include "demo_tables.hpp"

#include "pg_fencing/client.hpp"

namespace pg_fencing::demo {

namespace {

constexpr int kRowId = 1;

std::string LogTableOf(const std::string &table) { return table + "_log"; }

void Protect(pqxx::work &tx, const std::string &table) {
  tx.exec_params("SELECT fencing_protect($1::regclass)", tx.quote_name(table));
}

}  // namespace

void CreatePauseTable(pqxx::connection &db, const std::string &table, bool fencing_on) {
  pqxx::work tx(db);
  const std::string name = tx.quote_name(table);
  tx.exec0("DROP TABLE IF EXISTS " + name);
  tx.exec0("CREATE TABLE " + name + " (id int PRIMARY KEY, token fencing_token, val text)");
  tx.exec_params("INSERT INTO " + name + " VALUES ($1, NULL, 'initial')", kRowId);
  if (fencing_on) Protect(tx, table);
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
  const pqxx::row row = tx.exec_params1(
      "SELECT token::bigint, val FROM " + tx.quote_name(table) + " WHERE id = $1", kRowId);
  PauseRow result;
  if (!row[0].is_null()) result.token = row[0].as<Token>();
  result.value = row[1].as<std::string>();
  return result;
}

void CreateLeaderTables(pqxx::connection &db, const std::string &table) {
  pqxx::work tx(db);
  const std::string name = tx.quote_name(table);
  const std::string log = tx.quote_name(LogTableOf(table));
  tx.exec0("DROP TABLE IF EXISTS " + name + ", " + log);
  tx.exec0("CREATE TABLE " + name +
           " (id int PRIMARY KEY, token fencing_token, holder text,"
           "  writes bigint NOT NULL DEFAULT 0)");
  tx.exec_params("INSERT INTO " + name + " (id) VALUES ($1)", kRowId);
  Protect(tx, table);
  // seq orders the log: the guarded UPDATE holds the row lock until commit,
  // so the writes take their seq values in the order they took the row.
  tx.exec0("CREATE TABLE " + log +
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
  for (const pqxx::row &row :
       tx.exec("SELECT token::bigint FROM " + tx.quote_name(LogTableOf(table)) + " ORDER BY seq")) {
    tokens.push_back(row[0].as<Token>());
  }
  return tokens;
}

}  // namespace pg_fencing::demo
