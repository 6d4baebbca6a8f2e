// The differences between the libpqxx releases the client library, demo,
// stress harness and tests build against, named by feature: 6.4 (Debian 12),
// 7.10 (Debian 13) and 8 (Debian unstable; it needs C++20, which
// CMakeLists.txt asks for when it finds libpqxx 8).  Every PQXX_VERSION test
// lives here; the rest of the code calls these functions.
#pragma once

#include <pqxx/pqxx>
#include <string>
#include <string_view>
#include <utility>

// 7.10 deprecated exec_params(), exec_params1(), exec0() and exec1() for
// exec(query, params{...}) followed by one_row() or no_rows(); 8 removed
// them.  Older releases have only the former.
#if PQXX_VERSION_MAJOR > 7 || (PQXX_VERSION_MAJOR == 7 && PQXX_VERSION_MINOR >= 10)
#define PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS 1
#else
#define PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS 0
#endif

// 7.10 added connection::listen(channel, handler) and deprecated
// notification_receiver, which 8 removed.
#if PQXX_VERSION_MAJOR > 7 || (PQXX_VERSION_MAJOR == 7 && PQXX_VERSION_MINOR >= 10)
#define PG_FENCING_PQXX_HAVE_LISTEN 1
#else
#define PG_FENCING_PQXX_HAVE_LISTEN 0
#endif

// 8 hands out rows and fields of a result as light references (row_ref,
// field_ref) where older releases hand out pqxx::row and pqxx::field.
#if PQXX_VERSION_MAJOR >= 8
#define PG_FENCING_PQXX_HAVE_FIELD_REF 1
#else
#define PG_FENCING_PQXX_HAVE_FIELD_REF 0
#endif

namespace pg_fencing::pqxx_compat {

#if PG_FENCING_PQXX_HAVE_FIELD_REF
using Field = pqxx::field_ref;
#else
using Field = pqxx::field;
#endif

// A statement with $1, $2, ... bound to args.
template <typename... Args>
pqxx::result ExecParams(pqxx::transaction_base &tx, const std::string &sql, Args &&...args) {
#if PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS
  return tx.exec(sql, pqxx::params{std::forward<Args>(args)...});
#else
  return tx.exec_params(sql, std::forward<Args>(args)...);
#endif
}

// The same, for a statement that returns exactly one row.
template <typename... Args>
pqxx::row ExecParams1(pqxx::transaction_base &tx, const std::string &sql, Args &&...args) {
#if PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS
  return tx.exec(sql, pqxx::params{std::forward<Args>(args)...}).one_row();
#else
  return tx.exec_params1(sql, std::forward<Args>(args)...);
#endif
}

// The same, for a statement that returns no rows.
template <typename... Args>
pqxx::result ExecParams0(pqxx::transaction_base &tx, const std::string &sql, Args &&...args) {
#if PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS
  pqxx::result r = tx.exec(sql, pqxx::params{std::forward<Args>(args)...});
  r.no_rows();
  return r;
#else
  return tx.exec_params0(sql, std::forward<Args>(args)...);
#endif
}

// A statement without parameters that returns exactly one row.
inline pqxx::row Exec1(pqxx::transaction_base &tx, const std::string &sql) {
#if PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS
  return tx.exec(sql).one_row();
#else
  return tx.exec1(sql);
#endif
}

// A statement without parameters that returns no rows.
inline pqxx::result Exec0(pqxx::transaction_base &tx, const std::string &sql) {
#if PG_FENCING_PQXX_HAVE_EXEC_WITH_PARAMS
  pqxx::result r = tx.exec(sql);
  r.no_rows();
  return r;
#else
  return tx.exec0(sql);
#endif
}

// The SQLSTATE of an error (a std::string before 8, a std::string_view in 8).
inline std::string SqlState(const pqxx::sql_error &error) { return std::string(error.sqlstate()); }

}  // namespace pg_fencing::pqxx_compat
