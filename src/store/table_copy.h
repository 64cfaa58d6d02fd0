// Moving a site from one backend to another (`ringmaster admin migrate`):
// the tables every SQL backend shares (one schema, store/schema.h), read and
// written as rows of text with their ids kept. Implemented by the SQL
// backends (MetaStore::tables()); memory: has none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::store {

// The tables in an order that keeps references valid when written in it.
inline constexpr const char* kCopiedTables[] = {"users", "tokens", "nodes", "jobs", "tasks", "events",
                                                "audit", "registry_credentials"};

struct TableRows {
  std::vector<std::string> columns;                          // the table's, in schema order
  std::vector<std::vector<std::optional<std::string>>> rows;  // values as text; nullopt = NULL
  // Per column: a text column (its values compare as they are between
  // backends; numbers and booleans are written differently). ReadTable sets it.
  std::vector<bool> text;
};

class TableCopy {
 public:
  virtual ~TableCopy() = default;
  // Every row of `table` (one of kCopiedTables), by id (or primary key).
  virtual StatusOr<TableRows> ReadTable(const std::string& table) = 0;
  // Inserts the rows, ids included, in one transaction; `rows.columns` must be
  // the table's. FailedPrecondition if the table is not empty.
  virtual Status WriteTable(const std::string& table, const TableRows& rows) = 0;
  // The highest id the table has ever handed out (deleted rows included: ids
  // are never reused); 0 for none or a table without ids.
  virtual StatusOr<int64_t> LastId(const std::string& table) = 0;
  // Ids handed out from now on are > `id`.
  virtual Status SetLastId(const std::string& table, int64_t id) = 0;
};

}  // namespace ringmaster::store
