// An online backup of a live SQLite metadata database (`ringmaster admin
// backup`): SQLite's backup API on a connection of its own, so a server that
// has the database open keeps writing while it runs. Thread-compatible: one
// call copies one database; it shares nothing with the server's store object.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace ringmaster::store::sqlite {

// Pages copied so far and the database's pages, after each step.
using BackupProgress = std::function<void(int64_t done, int64_t total)>;

// Copies the database at `path` to `to`: a consistent snapshot (one read
// transaction: writes committed after it began are not in the copy), checked
// with SQLite's quick_check, written to `to`.tmp (0600), synced, then renamed
// over `to`. Copies `pages_per_step` pages per step. NotFound if `path` is
// not there; nothing is left at `to` on failure.
Status Backup(const std::string& path, const std::string& to, const BackupProgress& progress = nullptr,
              int pages_per_step = 1024);

}  // namespace ringmaster::store::sqlite
