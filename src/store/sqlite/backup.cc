#include "store/sqlite/backup.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

namespace ringmaster::store::sqlite {
namespace {

struct Close {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, Close>;

std::string Msg(sqlite3* db) { return db ? sqlite3_errmsg(db) : "out of memory"; }

Status Exec(sqlite3* db, const char* sql, const std::string& what) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return Unavailable(what + ": " + Msg(db));
  return Status::Ok();
}

Status SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Internal("open " + path + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Internal("fsync " + path + ": " + std::strerror(err));
  return Status::Ok();
}

void RemoveCopy(const std::string& tmp) {
  std::error_code ec;
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) std::filesystem::remove(tmp + suffix, ec);
}

// Copies into `tmp` (which exists, 0600, empty) and checks the copy.
Status CopyInto(sqlite3* src, const std::string& tmp, const BackupProgress& progress, int pages_per_step) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(tmp.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  Db dst(raw);
  if (rc != SQLITE_OK) return Unavailable("open " + tmp + ": " + Msg(raw));
  sqlite3_backup* b = sqlite3_backup_init(dst.get(), "main", src, "main");
  if (b == nullptr) return Internal("backup into " + tmp + ": " + Msg(dst.get()));
  do {
    rc = sqlite3_backup_step(b, pages_per_step);
    if (progress) {
      const int64_t total = sqlite3_backup_pagecount(b);
      progress(total - sqlite3_backup_remaining(b), total);
    }
    // Only the destination can be busy (the source is read in the snapshot
    // this connection holds): wait a moment for whoever holds the copy.
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) return Internal("backup into " + tmp + ": " + sqlite3_errstr(rc));
  // A copy nobody checked is not a backup.
  sqlite3_stmt* check = nullptr;
  if (sqlite3_prepare_v2(dst.get(), "PRAGMA quick_check", -1, &check, nullptr) != SQLITE_OK) {
    return Internal("check " + tmp + ": " + Msg(dst.get()));
  }
  std::string verdict;
  if (sqlite3_step(check) == SQLITE_ROW) {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(check, 0));
    verdict = p ? p : "";
  }
  sqlite3_finalize(check);
  if (verdict != "ok") return DataLoss("the copy fails SQLite's quick_check: " + verdict);
  return Status::Ok();
}

}  // namespace

Status Backup(const std::string& path, const std::string& to, const BackupProgress& progress, int pages_per_step) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFound("no database at " + path);
  if (pages_per_step <= 0) pages_per_step = -1;  // all at once
  sqlite3* raw = nullptr;
  // Read-write (never created): a database in WAL mode is read through its
  // shared-memory index, which a read-only connection may not be able to map.
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  Db src(raw);
  if (rc != SQLITE_OK) return Unavailable("open " + path + ": " + Msg(raw));
  sqlite3_busy_timeout(src.get(), 5000);
  // One read transaction for the whole copy: its snapshot is what every step
  // reads, so the copy is consistent while the server goes on writing (in
  // WAL mode a reader never blocks a writer), and the steps never restart.
  RM_RETURN_IF_ERROR(Exec(src.get(), "BEGIN", "read " + path));
  RM_RETURN_IF_ERROR(Exec(src.get(), "SELECT COUNT(*) FROM sqlite_master", "read " + path));

  const std::string tmp = to + ".tmp";
  RemoveCopy(tmp);  // an earlier run's leftovers
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("create " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, 0600);  // whatever the umask: the database holds token hashes
  ::close(fd);
  Status copied = CopyInto(src.get(), tmp, progress, pages_per_step);
  (void)Exec(src.get(), "COMMIT", "end the read of " + path);
  if (copied.ok()) copied = SyncPath(tmp, O_RDONLY);
  if (copied.ok() && ::rename(tmp.c_str(), to.c_str()) != 0) {
    copied = Unavailable("rename " + tmp + " to " + to + ": " + std::strerror(errno));
  }
  if (!copied.ok()) {
    RemoveCopy(tmp);
    return copied;
  }
  std::filesystem::path dir = std::filesystem::absolute(to).parent_path();
  return SyncPath(dir.string(), O_RDONLY | O_DIRECTORY);
}

}  // namespace ringmaster::store::sqlite
