#include "store/postgres/pg_test_db.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

namespace ringmaster::store::postgres::testing {

std::string FixtureUrl() {
  const char* file = std::getenv("RM_PG_URL_FILE");
  if (!file || !*file) return "";
  std::ifstream in(file);
  std::string url;
  std::getline(in, url);
  return url;
}

std::string SkipReason() {
  if (!std::getenv("RM_PG_URL_FILE")) {
    return "RM_PG_URL_FILE is unset: run under ctest (the postgres fixture) or point it at a file holding a "
           "postgres:// URL";
  }
  return "";
}

std::string WithDatabase(const std::string& url, const std::string& db) {
  const size_t q = url.find('?');
  const std::string base = url.substr(0, q);
  const size_t slash = base.rfind('/');
  return base.substr(0, slash + 1) + db + (q == std::string::npos ? "" : url.substr(q));
}

std::string Query(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  std::string out;
  if (PQstatus(c) != CONNECTION_OK) {
    out = std::string("ERROR: ") + PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    } else if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      out = std::string("ERROR: ") + PQresultErrorMessage(r);
    }
    PQclear(r);
  }
  PQfinish(c);
  return out;
}

std::string CreateDatabase(const std::string& dir) {
  static std::atomic<int> counter{0};
  const std::string admin = FixtureUrl();
  if (admin.empty()) return "";
  const std::string db = "rmt_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  if (Query(admin, "CREATE DATABASE " + db).rfind("ERROR", 0) == 0) return "";
  std::ofstream(dir + "/pgdb") << db;
  return WithDatabase(admin, db);
}

void DropDatabase(const std::string& dir) {
  std::ifstream in(dir + "/pgdb");
  std::string db;
  if (!std::getline(in, db) || db.empty()) return;
  (void)Query(FixtureUrl(), "DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
}

}  // namespace ringmaster::store::postgres::testing
