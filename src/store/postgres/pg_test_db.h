// Test-only: databases of their own on the `postgres` fixture's server
// (its URL in the file RM_PG_URL_FILE names), made per test and dropped after.
#pragma once

#include <string>

namespace ringmaster::store::postgres::testing {

// The fixture's URL; "" when RM_PG_URL_FILE is unset or unreadable.
std::string FixtureUrl();
// Why PostgreSQL tests cannot run here ("" = they can).
std::string SkipReason();
// A new empty database; its name is kept in `dir` (for DropDatabase). Its URL, "" on failure.
std::string CreateDatabase(const std::string& dir);
void DropDatabase(const std::string& dir);
// `url` with its database replaced by `db`.
std::string WithDatabase(const std::string& url, const std::string& db);
// Runs `sql` on `url` outside any store; its first value ("" if none), or "ERROR: ...".
std::string Query(const std::string& url, const std::string& sql);

}  // namespace ringmaster::store::postgres::testing
