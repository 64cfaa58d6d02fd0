// What SqliteMetaStore finds damaged: at open, and in every error it sees.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/files.h"
#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {

std::vector<std::string> SqliteMetaStore::Damage() {
  std::lock_guard<std::mutex> l(damage_mu_);
  return damage_;
}

// At open: SQLite's quick_check of every page (a few ms per MB), and a read
// of every row of every table, so that damage is named at start, not found
// by the first request that touches it. Nothing is repaired.
void SqliteMetaStore::CheckAtOpen() {
  {
    Lock l(mu_);
    Stmt check(cache_, "PRAGMA quick_check(20)");
    int rc;
    while ((rc = check.Step()) == SQLITE_ROW) {
      if (check.Text(0) != "ok") NoteDamage("quick_check: " + check.Text(0));
    }
    if (rc != SQLITE_DONE) (void)Error(rc, "quick_check");
  }
  for (const char* table : {"users", "tokens", "nodes", "jobs", "tasks", "events", "audit", "registry_credentials"}) {
    Status st = ScanTable(table);
    if (!st.ok()) NoteDamage(std::string("table ") + table + ": " + st.message());
  }
  (void)ListUsers();
  (void)ListNodes();
  (void)Many<Job>(std::string("SELECT ") + kJobCols + " FROM jobs", ReadJob);
  (void)Many<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks", ReadTask);
}

Status SqliteMetaStore::ScanTable(const char* table) {
  Lock l(mu_);
  Stmt s(cache_, std::string("SELECT * FROM ") + table);
  if (!s.valid()) return Error(sqlite3_errcode(db_), std::string("reading ") + table);
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
  }
  return rc == SQLITE_DONE ? Status::Ok() : Status(StatusCode::kInternal, Err(std::string("reading ") + table));
}

// The error of a call that returned `rc`. A full disk (SQLITE_FULL, or an
// I/O error of ENOSPC or EDQUOT) is InsufficientStorage: the statement or
// transaction was rolled back, and the same write succeeds once space is freed.
Status SqliteMetaStore::Error(int rc, const std::string& what) {
  if (rc == kTextWithNul) return InvalidArgument(what + ": text with a NUL byte cannot be stored");
  if (rc == kTextNotUtf8) return InvalidArgument(what + ": text that is not valid UTF-8 cannot be stored");
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Unavailable(Err(what));
  if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && IsDiskFull(sqlite3_system_errno(db_)))) {
    return ServerDiskFull(Err(what));
  }
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) {
    NoteDamage(Err(what));
    return DataLoss("the server's database is damaged (" + Err(what) + "): an admin must restore it (docs/operations.md)");
  }
  return Internal(Err(what));
}

// Damage seen (kept for /healthz; bounded), logged once each.
void SqliteMetaStore::NoteDamage(const std::string& what) {
  std::lock_guard<std::mutex> l(damage_mu_);
  if (std::find(damage_.begin(), damage_.end(), what) != damage_.end() || damage_.size() >= 64) return;
  spdlog::error("database damaged: {}", what);
  damage_.push_back(what);
}

}  // namespace ringmaster::store::sqlite
