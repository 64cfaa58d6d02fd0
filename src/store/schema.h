// The schema both SQL backends share, as the migrations that build it: each
// applied once, in order, recorded by number in the schema_version table.
// A migration is one SQL text in SQLite's dialect, translated for PostgreSQL,
// or a text per dialect where they must differ. Never edit a released
// migration; append a new one. Thread-safe (constant data).
#pragma once

#include <span>
#include <string>

namespace ringmaster::store {

enum class Dialect { kSqlite, kPostgres };

struct Migration {
  const char* common;    // both dialects (translated for PostgreSQL); nullptr: per dialect
  const char* sqlite = nullptr;    // SQLite's own text, where it differs
  const char* postgres = nullptr;  // PostgreSQL's own text, where it differs
};

std::span<const Migration> Migrations();

// The SQL that applies `m` in `dialect`.
std::string MigrationSql(const Migration& m, Dialect dialect);

// SQLite DDL in PostgreSQL's types: INTEGER PRIMARY KEY [AUTOINCREMENT] is an
// identity column (ids never go back), INTEGER is BIGINT, REAL is DOUBLE
// PRECISION. Words inside quotes are left alone.
std::string ToPostgres(const std::string& sqlite_ddl);

}  // namespace ringmaster::store
