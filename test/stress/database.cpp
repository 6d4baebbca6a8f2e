// See database.hpp.
#include "database.hpp"

#include "common.hpp"
#include "pg_fencing/pqxx_compat.hpp"

namespace pg_fencing::stress {

void CreateRunDatabase(const Cluster &cluster) {
  pqxx::connection admin(cluster.Conninfo("postgres", "postgres"));
  pqxx::nontransaction tx(admin);
  pqxx_compat::Exec0(tx, std::string("CREATE DATABASE ") + kDatabase);
}

void SetUpApplication(pqxx::work &tx) {
  pqxx_compat::Exec0(tx, "SET client_min_messages = warning");
  pqxx_compat::Exec0(tx, "CREATE EXTENSION pg_fencing");
  pqxx_compat::Exec0(tx, std::string("CREATE ROLE ") + kAppRole + " LOGIN");
  // The application's locks belong to its role (the one line of set-up a
  // single-application database needs).
  tx.exec(std::string("SELECT fencing_allow_create('") + kAppRole + "')");
  pqxx_compat::Exec0(tx, std::string("ALTER ROLE ") + kAppRole + " SET statement_timeout = '10s'");
}

void CreateServerRecord(pqxx::work &tx) {
  // The commit order.  Every write, grant and read takes its number after it
  // has locked what it conflicts on (the row; the lock's fence row or gate;
  // the permit's gate), and keeps those locks until it commits: for two that
  // conflict, the number order is the commit order.  CACHE 1: numbers
  // ordered across sessions.
  pqxx_compat::Exec0(tx, "CREATE SEQUENCE stress_commit_seq CACHE 1");
  pqxx_compat::Exec0(tx, R"(CREATE TABLE stress_history (
      seq bigint PRIMARY KEY, tbl text NOT NULL, row_id int NOT NULL, token bigint,
      val bigint, write_id text, ts timestamptz NOT NULL, pm_start timestamptz NOT NULL))");
  // slot: the permit's, for a grant of a semaphore; NULL for a lease.
  pqxx_compat::Exec0(tx, R"(CREATE TABLE stress_grants (
      seq bigint PRIMARY KEY, lock_name text NOT NULL, holder text NOT NULL, token bigint NOT NULL,
      ts timestamptz NOT NULL, pm_start timestamptz NOT NULL, slot int))");
  // Written in the writing transaction itself: a row here exists iff the
  // write committed.  SECURITY DEFINER: the workers cannot write history.
  pqxx_compat::Exec0(tx, R"(CREATE FUNCTION stress_record_write() RETURNS trigger LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    BEGIN
      INSERT INTO public.stress_history
        VALUES (nextval('public.stress_commit_seq'), TG_ARGV[0], NEW.id, NEW.token::bigint,
                NEW.val, NEW.write_id, clock_timestamp(), pg_postmaster_start_time());
      RETURN NULL;
    END $$)");
  // Every grant, observed on the extension's lease and permit tables in the
  // granting transaction (a lease's grant has locked the lock's fence row by
  // then, a permit's grant its slot's gate).  A renewal or release changes
  // only expires_at (and ended) and is not recorded.  One function for both
  // tables: fencing_lease has no slot.
  pqxx_compat::Exec0(tx, R"(CREATE FUNCTION stress_record_grant() RETURNS trigger LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    BEGIN
      IF TG_OP = 'INSERT' OR NEW.token::bigint IS DISTINCT FROM OLD.token::bigint THEN
        INSERT INTO public.stress_grants
          VALUES (nextval('public.stress_commit_seq'), NEW.lock_name, NEW.holder,
                  NEW.token::bigint, clock_timestamp(), pg_postmaster_start_time(),
                  (to_jsonb(NEW) ->> 'slot')::int);
      END IF;
      RETURN NULL;
    END $$)");
  for (const char *extension_table : {"fencing_lease", "fencing_permit"}) {
    pqxx_compat::Exec0(tx, std::string("CREATE TRIGGER stress_grants AFTER INSERT OR UPDATE ON ") +
                               extension_table +
                               " FOR EACH ROW EXECUTE FUNCTION stress_record_grant()");
  }
}

void CreateWorkedTable(pqxx::work &tx, const std::string &name, const std::string &tag, int rows) {
  pqxx_compat::Exec0(tx,
                     "CREATE TABLE " + name +
                         " (id int PRIMARY KEY, token fencing_token, val bigint, write_id text)");
  pqxx_compat::Exec0(tx, "INSERT INTO " + name + " (id) SELECT g FROM generate_series(0, " +
                             std::to_string(rows - 1) + ") g");
  pqxx_compat::Exec0(tx, "CREATE TRIGGER stress_history AFTER UPDATE ON " + name +
                             " FOR EACH ROW EXECUTE FUNCTION stress_record_write('" + tag + "')");
  pqxx_compat::Exec0(tx, "GRANT SELECT, UPDATE ON " + name + " TO " + kAppRole);
}

void DumpQuery(pqxx::work &tx, const std::string &sql, const std::string &path) {
  std::string out;
  for (const auto &row : tx.exec(sql)) {
    for (pqxx::row::size_type i = 0; i < row.size(); ++i) {
      out += (i ? "\t" : "") + std::string(row[i].is_null() ? "\\N" : row[i].c_str());
    }
    out += '\n';
  }
  WriteFile(path, out);
}

std::string Micros(const std::string &column) {
  return "(extract(epoch FROM " + column + ") * 1000000)::bigint";
}

void DumpServerRecord(pqxx::work &tx, const std::string &dir) {
  DumpQuery(tx,
            "SELECT seq, tbl, row_id, token, val, write_id, " + Micros("ts") + ", " +
                Micros("pm_start") + " FROM stress_history ORDER BY seq",
            dir + "/history.tsv");
  DumpQuery(tx,
            "SELECT seq, lock_name, holder, token, " + Micros("ts") + ", " + Micros("pm_start") +
                ", slot FROM stress_grants ORDER BY seq",
            dir + "/grants.tsv");
}

std::string ExtensionVersion(const Cluster &cluster) {
  pqxx::connection db(cluster.Conninfo("postgres", kDatabase));
  pqxx::nontransaction tx(db);
  return pqxx_compat::Exec1(tx,
                            "SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'")[0]
      .c_str();
}

}  // namespace pg_fencing::stress
