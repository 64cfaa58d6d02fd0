// SqliteMetaStore at open: its journal mode, pragmas and the shared migrations (store/schema.h).
#include <algorithm>
#include <string>

#include "store/schema.h"
#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {

Status SqliteMetaStore::Init(int up_to_version) {
  {
    // The pragma answers with the mode it got rather than failing: the
    // group commit syncs the WAL file, so anything else is an error.
    Lock l(mu_);
    Stmt mode(cache_, "PRAGMA journal_mode=WAL");
    if (!mode.valid() || mode.Step() != SQLITE_ROW || mode.Text(0) != "wal") {
      return FailedPrecondition("the database cannot use a write-ahead log (journal_mode " +
                                (mode.valid() ? mode.Text(0) : std::string("?")) + "): its file system may not support it");
    }
  }
  // Commits do not wait for the disk; acknowledgements do (group_commit.h).
  RM_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  RM_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
  sqlite3_busy_timeout(db_, 5000);
  RM_RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  int64_t version = 0;
  {
    Stmt s(cache_, "SELECT MAX(version) FROM schema_version");
    if (s.valid() && s.Step() == SQLITE_ROW) version = s.Int(0);
  }
  const int64_t known = static_cast<int64_t>(Migrations().size());
  const int64_t target = up_to_version > 0 ? std::min<int64_t>(up_to_version, known) : known;
  if (version > known) {
    return FailedPrecondition("database schema version " + std::to_string(version) +
                              " is newer than this binary supports (" +
                              std::to_string(known) + ")");
  }
  if (version >= target) return Status::Ok();
  // Migrations may rebuild tables: with foreign keys on, dropping the old
  // table would cascade-delete its children. The pragma is a no-op inside a
  // transaction, so it is switched off around them, and the keys are
  // checked before the last migration commits.
  RM_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=OFF"));
  for (int64_t v = version; v < target; ++v) {
    Status st = InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(Exec(MigrationSql(Migrations()[v], Dialect::kSqlite)));
      {
        Lock l(mu_);
        Stmt check(cache_, "PRAGMA foreign_key_check");
        if (check.Step() == SQLITE_ROW) {
          return Internal("migration " + std::to_string(v + 1) + " left a dangling reference in table " + check.Text(0));
        }
      }
      return Exec("INSERT INTO schema_version(version) VALUES (" + std::to_string(v + 1) + ")");
    });
    if (!st.ok()) {
      (void)Exec("PRAGMA foreign_keys=ON");
      return st;
    }
  }
  return Exec("PRAGMA foreign_keys=ON");
}

}  // namespace ringmaster::store::sqlite
