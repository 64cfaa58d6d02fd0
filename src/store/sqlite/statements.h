// Prepared statements of the SQLite MetaStore: kept per connection
// (StmtCache) and used through RAII statements with positional binding (Stmt).
// Internal to store/sqlite/. Thread-compatible: under the connection's mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "store/rows.h"

namespace ringmaster::store::sqlite {

// Prepared statements of one connection, by their SQL. A statement in use
// (a nested call running the same SQL) is not shared: the second user gets
// one of its own, finalized after use. REQUIRES: the connection's mutex held.
class StmtCache {
 public:
  explicit StmtCache(sqlite3* db) : db_(db) {}
  ~StmtCache() {
    for (auto& [sql, e] : cache_) sqlite3_finalize(e.stmt);
  }
  sqlite3* db() const { return db_; }
  // The statement, and whether it is the cached one (to be given back with Return).
  std::pair<sqlite3_stmt*, bool> Take(const char* sql) {
    auto it = cache_.find(sql);
    if (it != cache_.end() && !it->second.in_use) {
      it->second.in_use = true;
      return {it->second.stmt, true};
    }
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) return {nullptr, false};
    if (it != cache_.end()) return {stmt, false};
    cache_.emplace(sql, Entry{stmt, true});
    return {stmt, true};
  }
  void Return(sqlite3_stmt* stmt, bool cached) {
    if (!cached) {
      sqlite3_finalize(stmt);
      return;
    }
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    for (auto& [sql, e] : cache_) {
      if (e.stmt == stmt) {
        e.in_use = false;
        return;
      }
    }
  }

 private:
  struct Entry {
    sqlite3_stmt* stmt;
    bool in_use;
  };
  sqlite3* db_;
  std::unordered_map<std::string, Entry> cache_;
};

// A value bound where the number of parameters varies (a filter's clauses).
using SqlValue = std::variant<int64_t, std::string>;

// What Stmt::Step answers when a bound text cannot be stored (TextProblem):
// SQLITE_MISMATCH with extended codes of Ringmaster's own (Error() maps them
// to InvalidArgument).
inline constexpr int kTextWithNul = SQLITE_MISMATCH | (98 << 8);
inline constexpr int kTextNotUtf8 = SQLITE_MISMATCH | (99 << 8);

// RAII prepared statement with positional binding.
class Stmt final : public Row {
 public:
  Stmt(StmtCache& cache, const char* sql) : cache_(cache) { std::tie(stmt_, cached_) = cache.Take(sql); }
  Stmt(StmtCache& cache, const std::string& sql) : Stmt(cache, sql.c_str()) {}
  ~Stmt() override {
    if (stmt_) cache_.Return(stmt_, cached_);
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool valid() const { return stmt_ != nullptr; }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(stmt_, ++idx_, v);
    return *this;
  }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v) {
    sqlite3_bind_double(stmt_, ++idx_, v);
    return *this;
  }
  Stmt& Bind(const std::string& v) {
    if (bad_text_ == 0) {
      if (const char* why = TextProblem(v)) {
        bad_text_ = std::string_view(why).find("NUL") != std::string_view::npos ? kTextWithNul : kTextNotUtf8;
      }
    }
    sqlite3_bind_text(stmt_, ++idx_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(const char* v) { return Bind(std::string(v)); }
  Stmt& Bind(std::optional<int> v) {
    if (v) return Bind(*v);
    sqlite3_bind_null(stmt_, ++idx_);
    return *this;
  }

  Stmt& Bind(const std::vector<SqlValue>& values) {
    for (const SqlValue& v : values) std::visit([this](const auto& x) { Bind(x); }, v);
    return *this;
  }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return bad_text_ ? bad_text_ : sqlite3_step(stmt_); }

  int64_t Int(int col) const override { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const override { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const override { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const override {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, sqlite3_column_bytes(stmt_, col)) : std::string();
  }

 private:
  StmtCache& cache_;
  sqlite3_stmt* stmt_ = nullptr;
  bool cached_ = false;
  int idx_ = 0;
  int bad_text_ = 0;  // kTextWithNul or kTextNotUtf8 once a bound text cannot be stored
};

}  // namespace ringmaster::store::sqlite
