// TableCopy for SQLite: the rows `ringmaster admin migrate` reads and writes,
// through the store's own connection and lock. Ids come from AUTOINCREMENT,
// so the highest one ever handed out is sqlite_sequence's.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {
namespace {

bool IsCopiedTable(const std::string& table) {
  return std::find_if(std::begin(kCopiedTables), std::end(kCopiedTables),
                      [&](const char* t) { return table == t; }) != std::end(kCopiedTables);
}

Status UnknownTable(const std::string& table) {
  return InvalidArgument("table \"" + table + "\" is not one a migration copies");
}

// A statement prepared for one use (not kept in the store's cache).
struct Finalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using OneShot = std::unique_ptr<sqlite3_stmt, Finalize>;

std::string Quoted(const std::string& name) { return "\"" + name + "\""; }

}  // namespace

class SqliteTableCopy final : public TableCopy {
 public:
  explicit SqliteTableCopy(SqliteMetaStore* store) : s_(store) {}

  StatusOr<TableRows> ReadTable(const std::string& table) override {
    if (!IsCopiedTable(table)) return UnknownTable(table);
    SqliteMetaStore::Lock l(s_->mu_);
    RM_ASSIGN_OR_RETURN(OneShot st, Prepare("SELECT * FROM " + Quoted(table) + " ORDER BY rowid"));
    TableRows out;
    const int n = sqlite3_column_count(st.get());
    for (int i = 0; i < n; ++i) {
      out.columns.emplace_back(sqlite3_column_name(st.get(), i));
      const char* type = sqlite3_column_decltype(st.get(), i);
      out.text.push_back(type != nullptr && sqlite3_stricmp(type, "TEXT") == 0);
    }
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      auto& row = out.rows.emplace_back();
      row.reserve(n);
      for (int i = 0; i < n; ++i) {
        switch (sqlite3_column_type(st.get(), i)) {
          case SQLITE_NULL:
            row.emplace_back(std::nullopt);
            break;
          case SQLITE_FLOAT: {
            // sqlite3_column_text rounds to 15 digits; 17 keep the double exact.
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(st.get(), i));
            row.emplace_back(buf);
            break;
          }
          default: {
            auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), i));
            row.emplace_back(std::string(p ? p : "", sqlite3_column_bytes(st.get(), i)));
          }
        }
      }
    }
    if (rc != SQLITE_DONE) return s_->Error(rc, "read table " + table);
    return out;
  }

  Status WriteTable(const std::string& table, const TableRows& rows) override {
    if (!IsCopiedTable(table)) return UnknownTable(table);
    RM_ASSIGN_OR_RETURN(std::set<std::string> known, Columns(table));
    if (rows.columns.empty()) return InvalidArgument("table " + table + ": no columns given");
    std::string cols, marks;
    for (const std::string& c : rows.columns) {
      if (!known.count(c)) return InvalidArgument("table " + table + " has no column \"" + c + "\"");
      cols += (cols.empty() ? "" : ",") + Quoted(c);
      marks += marks.empty() ? "?" : ",?";
    }
    return s_->InTransaction([&]() -> Status {
      SqliteMetaStore::Lock l(s_->mu_);
      if (table == "users" || table == "tokens") s_->mu_.TouchAuth();
      {
        RM_ASSIGN_OR_RETURN(OneShot any, Prepare("SELECT 1 FROM " + Quoted(table) + " LIMIT 1"));
        int rc = sqlite3_step(any.get());
        if (rc == SQLITE_ROW) return FailedPrecondition("table " + table + " already holds rows");
        if (rc != SQLITE_DONE) return s_->Error(rc, "read table " + table);
      }
      RM_ASSIGN_OR_RETURN(OneShot ins, Prepare("INSERT INTO " + Quoted(table) + "(" + cols + ") VALUES (" + marks + ")"));
      for (const auto& row : rows.rows) {
        if (row.size() != rows.columns.size()) {
          return InvalidArgument("table " + table + ": a row of " + std::to_string(row.size()) + " values for " +
                                 std::to_string(rows.columns.size()) + " columns");
        }
        sqlite3_reset(ins.get());
        for (size_t i = 0; i < row.size(); ++i) {
          // Text into a column of INTEGER or REAL affinity is stored as the number it spells.
          if (row[i]) {
            sqlite3_bind_text(ins.get(), static_cast<int>(i + 1), row[i]->data(), static_cast<int>(row[i]->size()),
                              SQLITE_STATIC);
          } else {
            sqlite3_bind_null(ins.get(), static_cast<int>(i + 1));
          }
        }
        int rc = sqlite3_step(ins.get());
        if (rc != SQLITE_DONE) return s_->Error(rc, "write table " + table);
      }
      return Status::Ok();
    });
  }

  StatusOr<int64_t> LastId(const std::string& table) override {
    if (!IsCopiedTable(table)) return UnknownTable(table);
    SqliteMetaStore::Lock l(s_->mu_);
    RM_ASSIGN_OR_RETURN(OneShot st, Prepare("SELECT seq FROM sqlite_sequence WHERE name=?"));
    sqlite3_bind_text(st.get(), 1, table.c_str(), -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) return static_cast<int64_t>(sqlite3_column_int64(st.get(), 0));
    if (rc == SQLITE_DONE) return int64_t{0};  // no row ever inserted, or a table without ids
    return s_->Error(rc, "read the last id of " + table);
  }

  Status SetLastId(const std::string& table, int64_t id) override {
    if (!IsCopiedTable(table)) return UnknownTable(table);
    RM_ASSIGN_OR_RETURN(std::set<std::string> known, Columns(table));
    if (!known.count("id")) {
      if (id == 0) return Status::Ok();
      return InvalidArgument("table " + table + " has no ids to advance");
    }
    return s_->InTransaction([&]() -> Status {
      SqliteMetaStore::Lock l(s_->mu_);
      RM_ASSIGN_OR_RETURN(OneShot up, Prepare("UPDATE sqlite_sequence SET seq=MAX(seq, ?) WHERE name=?"));
      sqlite3_bind_int64(up.get(), 1, id);
      sqlite3_bind_text(up.get(), 2, table.c_str(), -1, SQLITE_TRANSIENT);
      int rc = sqlite3_step(up.get());
      if (rc != SQLITE_DONE) return s_->Error(rc, "advance the ids of " + table);
      if (sqlite3_changes(s_->db_) > 0) return Status::Ok();
      RM_ASSIGN_OR_RETURN(OneShot ins, Prepare("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)"));
      sqlite3_bind_text(ins.get(), 1, table.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(ins.get(), 2, id);
      rc = sqlite3_step(ins.get());
      if (rc != SQLITE_DONE) return s_->Error(rc, "advance the ids of " + table);
      return Status::Ok();
    });
  }

 private:
  // REQUIRES: s_->mu_ held.
  StatusOr<OneShot> Prepare(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(s_->db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      return Internal(s_->Err("prepare " + sql));
    }
    return OneShot(st);
  }

  StatusOr<std::set<std::string>> Columns(const std::string& table) {
    SqliteMetaStore::Lock l(s_->mu_);
    RM_ASSIGN_OR_RETURN(OneShot st, Prepare("SELECT name FROM pragma_table_info(?)"));
    sqlite3_bind_text(st.get(), 1, table.c_str(), -1, SQLITE_TRANSIENT);
    std::set<std::string> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      out.insert(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)));
    }
    if (rc != SQLITE_DONE) return s_->Error(rc, "read the columns of " + table);
    if (out.empty()) return NotFound("table " + table + " not found");
    return out;
  }

  SqliteMetaStore* s_;
};

TableCopy* SqliteMetaStore::tables() {
  Lock l(mu_);
  if (!table_copy_) table_copy_ = std::make_unique<SqliteTableCopy>(this);
  return table_copy_.get();
}

}  // namespace ringmaster::store::sqlite
