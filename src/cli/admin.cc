#include "cli/admin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "cli/connect.h"
#include "common/units.h"
#include "store/meta_store.h"
#include "store/migrate.h"
#include "store/sqlite/backup.h"

namespace ringmaster::cli {
namespace {

bool IsPostgres(const std::string& url) { return url.rfind("postgres://", 0) == 0 || url.rfind("postgresql://", 0) == 0; }

// The URL as it may be printed: the store's own redaction (no password, in
// the user part or a parameter).
std::string Redacted(const std::string& url) { return store::RedactedStoreUrl(url); }

// The database file of an SQLite URL as OpenMetaStore reads it (sqlite:PATH,
// or a bare path); nullopt for any other store.
std::optional<std::string> SqlitePath(const std::string& url) {
  if (url.rfind("sqlite:", 0) == 0) return url.substr(7);
  const size_t colon = url.find(':');
  bool scheme = colon != std::string::npos && colon > 0;
  for (size_t i = 0; scheme && i < colon; ++i) scheme = std::islower(static_cast<unsigned char>(url[i]));
  if (scheme || url.empty()) return std::nullopt;
  return url;
}

// The pid of another process that has the SQLite database at `path` open, or
// 0. Every connection to a database in WAL mode holds a shared lock on one
// byte of its -shm file (SQLite's "dead man switch", offset 128) for as long
// as it is open: a lock another process holds there is an open connection.
pid_t SqliteHolder(const std::string& path) {
  int fd = ::open((path + "-shm").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock lk = {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  lk.l_start = 128;
  lk.l_len = 1;
  const int rc = ::fcntl(fd, F_GETLK, &lk);
  ::close(fd);
  return rc == 0 && lk.l_type != F_UNLCK ? lk.l_pid : 0;
}

// Why `url` looks in use by a running server ("" if it does not): an SQLite
// file another process has open, or a PostgreSQL lease a server holds.
std::string InUse(const std::string& url, store::MetaStore* opened) {
  if (auto path = SqlitePath(url)) {
    if (pid_t pid = SqliteHolder(*path)) return url + " is open in process " + std::to_string(pid) + " (a running server?)";
    return "";
  }
  if (opened != nullptr && opened->leadership() != nullptr) {
    auto lease = opened->leadership()->Current();
    if (lease.ok() && !lease->holder.empty() && lease->remaining_ms > 0) {
      return Redacted(url) + " is in use: server " + lease->holder + " holds its lease";
    }
  }
  return "";
}

std::unique_ptr<store::MetaStore> MustOpen(const std::string& url, const std::string& what) {
  auto s = store::OpenMetaStore(url);
  if (!s.ok()) Die(what + " " + Redacted(url) + ": " + s.status().message());
  return std::move(*s);
}

// A line of progress on stderr: redrawn in place on a terminal, else a line
// per tenth.
class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), tty_(::isatty(2)) {}
  void Show(int64_t done, int64_t total) {
    if (total <= 0) return;
    const int pct = static_cast<int>(100 * done / total);
    if (tty_) {
      const int filled = pct / 5;
      std::cerr << "\r" << what_ << " [" << std::string(filled, '#') << std::string(20 - filled, '.') << "] " << pct
                << "%" << (done == total ? "\n" : "") << std::flush;
    } else if (pct / 10 != last_ / 10 || (done == total && last_ != 100)) {
      std::cerr << what_ << ": " << pct << "%\n";
    }
    last_ = pct;
  }

 private:
  std::string what_;
  bool tty_;
  int last_ = -1;
};

}  // namespace

int AdminBackup(const std::string& data, const std::string& meta, const std::string& to) {
  const std::string url = meta.empty() ? "sqlite:" + (data.empty() ? DefaultDataDir() : data) + "/meta.db" : meta;
  if (IsPostgres(url)) {
    auto tool = store::PostgresToolUrl(url);
    if (!tool.ok()) Die("admin backup: --meta " + Redacted(url) + ": " + tool.status().message());
    Die("admin backup: the metadata is in PostgreSQL: back it up with pg_dump: pg_dump -Fc -f " + to + " '" + *tool +
        "' (docs/operations.md)");
  }
  auto path = SqlitePath(url);
  if (!path) Die("admin backup: " + url + " keeps nothing on disk to back up (expected sqlite:PATH)");
  std::error_code ec;
  if (std::filesystem::equivalent(*path, to, ec)) Die("admin backup: --to is the database itself");
  // Databases of a few MiB copy in a blink: progress only for bigger ones.
  constexpr int64_t kQuietPages = 2560;
  Progress progress("backup of " + *path);
  Status st = store::sqlite::Backup(*path, to, [&](int64_t done, int64_t total) {
    if (total > kQuietPages) progress.Show(done, total);
  });
  if (!st.ok()) Die("admin backup: " + st.message());
  struct stat sb = {};
  ::stat(to.c_str(), &sb);
  std::cout << "backed up " << *path << " to " << to << " (" << FormatBytes(sb.st_size) << "B)\n";
  return 0;
}

int AdminMigrate(const std::string& from, const std::string& to, bool online) {
  if (from == to) Die("admin migrate: --from and --to are the same store");
  if (from.rfind("memory:", 0) == 0 || to.rfind("memory:", 0) == 0) {
    Die("admin migrate: memory: keeps nothing to copy, from or to (expected sqlite:PATH or postgres://...)");
  }
  const auto from_path = SqlitePath(from);
  if (online && !from_path) {
    Die("admin migrate: --online copies a snapshot of an SQLite database only; stop the servers of " + Redacted(from) +
        " first (docs/operations.md)");
  }
  // Opening an SQLite path that is not there would make an empty database to copy.
  std::error_code ec;
  if (from_path && !std::filesystem::exists(*from_path, ec)) Die("admin migrate: --from: no database at " + *from_path);
  // Checked before either store is opened: opening may migrate its schema.
  if (std::string why = InUse(from, nullptr); !why.empty() && !online) {
    Die("admin migrate: " + why + ": stop the server first, or pass --online to copy a snapshot of it as it is now "
        "(docs/operations.md)");
  }
  if (std::string why = InUse(to, nullptr); !why.empty()) Die("admin migrate: the destination " + why);
  // Online: the copy is made from an online backup, one consistent snapshot
  // (the tables are read one by one, and a server goes on writing between).
  std::string snapshot;
  if (online) {
    snapshot = *from_path + ".migrate-snapshot";
    Status st = store::sqlite::Backup(*from_path, snapshot);
    if (!st.ok()) Die("admin migrate: snapshot of " + from + ": " + st.message());
  }
  auto src = MustOpen(online ? "sqlite:" + snapshot : from, "admin migrate: --from");
  auto dst = MustOpen(to, "admin migrate: --to");
  if (std::string why = InUse(from, src.get()); !why.empty() && !online) {
    Die("admin migrate: " + why + ": stop its servers first (docs/operations.md)");
  }
  if (std::string why = InUse(to, dst.get()); !why.empty()) Die("admin migrate: the destination " + why);

  std::cerr << "migrating " << Redacted(from) << (online ? " (a snapshot taken now)" : "") << " to " << Redacted(to)
            << "\n";
  size_t n = 0;
  int64_t rows = 0;
  const size_t tables = std::size(store::kCopiedTables);
  auto copied = store::CopyStore(*src, *dst, [&](const store::CopiedTable& t, bool done) {
    if (!done) {
      if (::isatty(2)) std::cerr << "  " << t.table << " ..." << std::flush;
      return;
    }
    ++n;
    rows += t.rows;
    const size_t filled = 20 * n / tables;
    const std::string ids = t.last_id > 0 ? ", ids up to " + std::to_string(t.last_id) : "";
    // Values no backend stores now are copied repaired, and said so.
    const std::string repaired =
        t.repaired > 0 ? "; " + std::to_string(t.repaired) +
                             " values had NUL bytes or bytes that are not UTF-8, copied with U+FFFD in their place"
                       : "";
    std::cerr << (::isatty(2) ? "\r" : "") << "  [" << std::string(filled, '#') << std::string(20 - filled, '.')
              << "] " << t.table << ": " << t.rows << " rows" << ids << ", counts match, text matches" << repaired
              << "\n";
  });
  src.reset();
  if (!snapshot.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(snapshot + suffix, ec);
  }
  // The copy is one transaction of the destination: a failure leaves nothing of it.
  if (!copied.ok()) Die("admin migrate: " + copied.status().message() + " (nothing was copied)");
  std::cout << "migrated " << rows << " rows in " << copied->size() << " tables; start the server with --meta "
            << Redacted(to) << "\n";
  return 0;
}

}  // namespace ringmaster::cli
