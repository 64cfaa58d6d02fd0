// `ringmaster admin backup|migrate` (admin.cc): what an operator runs on the
// server's machine against its metadata store directly, not over the API: an
// online backup of an SQLite database, and moving a site's metadata from one
// store to another (docs/operations.md).
#pragma once

#include <string>

namespace ringmaster::cli {

// Backs up the SQLite database of `meta` (sqlite:PATH or a PATH; "" =
// <data>/meta.db) into `to` while a server may be using it. PostgreSQL: says
// which pg_dump to run, and exits 2.
int AdminBackup(const std::string& data, const std::string& meta, const std::string& to);
// Copies every row of the store at `from` into the empty store at `to`
// (OpenMetaStore URLs). Refuses a source a server has open unless `online`
// (SQLite only: it then copies an online backup's snapshot).
int AdminMigrate(const std::string& from, const std::string& to, bool online);

}  // namespace ringmaster::cli
