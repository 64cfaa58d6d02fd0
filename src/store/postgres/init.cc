// PgMetaStore at open: the shared migrations (store/schema.h) under an
// advisory lock, each in one transaction (PostgreSQL's DDL is transactional),
// then a read of every row so that damage is named at start.
#include <string>

#include "store/postgres/pg_meta_store.h"
#include "store/schema.h"

namespace ringmaster::store::postgres {
namespace {

// The advisory lock's key: every Ringmaster server migrating this database.
constexpr const char* kMigrationLock = "SELECT pg_advisory_lock(7262929)";
constexpr const char* kMigrationUnlock = "SELECT pg_advisory_unlock(7262929)";

}  // namespace

Status PgMetaStore::Init() {
  Lock l(mu_);
  RM_RETURN_IF_ERROR(writer_.ExecScript(kMigrationLock).status());
  const auto migrate = [&]() -> Status {
    RM_RETURN_IF_ERROR(writer_.ExecScript("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)").status());
    RM_ASSIGN_OR_RETURN(Result r, writer_.ExecScript("SELECT COALESCE(MAX(version), 0) FROM schema_version"));
    const int64_t version = PgRow(r, 0).Int(0);
    const int64_t known = static_cast<int64_t>(Migrations().size());
    if (version > known) {
      return FailedPrecondition("database schema version " + std::to_string(version) +
                                " is newer than this binary supports (" + std::to_string(known) + ")");
    }
    for (int64_t v = version; v < known; ++v) {
      const std::string sql = "BEGIN;\n" + MigrationSql(Migrations()[v], Dialect::kPostgres) +
                              "\nINSERT INTO schema_version(version) VALUES (" + std::to_string(v + 1) + ");\nCOMMIT;";
      auto applied = writer_.ExecScript(sql);
      if (!applied.ok()) {
        (void)writer_.ExecScript("ROLLBACK");
        return applied.status().Annotate("migration " + std::to_string(v + 1));
      }
    }
    return Status::Ok();
  };
  Status st = migrate();
  (void)writer_.ExecScript(kMigrationUnlock);
  return st;
}

void PgMetaStore::CheckAtOpen() {
  (void)ListUsers();
  (void)ListNodes();
  (void)Many<Job>(std::string("SELECT ") + kJobCols + " FROM jobs", ReadJob);
  (void)Many<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks", ReadTask);
}

}  // namespace ringmaster::store::postgres
