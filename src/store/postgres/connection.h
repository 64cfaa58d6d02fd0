// One libpq connection of the PostgreSQL MetaStore: statements prepared once
// per connection, text parameters, every call bounded by a deadline (a server
// that stops answering fails the call with Unavailable, never hangs it), and
// a broken connection reopened by the next call. Internal to store/postgres/.
// Thread-compatible: one user at a time (the store's lock or its pool).
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "store/rows.h"

namespace ringmaster::store::postgres {

// Where and how to connect, from a store URL (ParseUrl).
struct ConnInfo {
  std::string url;        // libpq's URI, without the store's own parameters
  std::string redacted;   // the URL without its password nor its parameters, for messages
  std::string tool_url;   // for libpq's own tools (pg_dump): no password, none of the store's parameters
  int pool = 8;           // connections for reads outside a transaction
  int statement_timeout_ms = 10000;
};

// "postgres://USER[:PASSWORD]@HOST:PORT/DB[?sslmode=...&pool=N&statement_timeout=MS]".
StatusOr<ConnInfo> ParseUrl(const std::string& url);

// Statement parameters as text (PostgreSQL casts them to the column's type); nullopt = NULL.
class Params {
 public:
  Params() = default;
  template <typename... Args>
  explicit Params(const Args&... args) {
    (Add(args), ...);
  }
  Params& Add(int64_t v) { return Push(std::to_string(v)); }
  Params& Add(int v) { return Push(std::to_string(v)); }
  Params& Add(bool v) { return Push(v ? "1" : "0"); }
  Params& Add(double v);
  Params& Add(const std::string& v) { return Push(v); }
  Params& Add(const char* v) { return Push(v); }
  Params& Add(std::optional<int> v) {
    values_.push_back(v ? std::optional<std::string>(std::to_string(*v)) : std::nullopt);
    return *this;
  }
  Params& Add(const std::optional<std::string>& v) {
    if (v) Check(*v);
    values_.push_back(v);
    return *this;
  }
  size_t size() const { return values_.size(); }
  const std::vector<std::optional<std::string>>& values() const { return values_; }
  // Why a value cannot be sent (TextProblem), "" if all can: libpq's text
  // ends at a NUL, and PostgreSQL refuses invalid UTF-8.
  const std::string& problem() const { return problem_; }

 private:
  Params& Push(std::string v) {
    Check(v);
    values_.emplace_back(std::move(v));
    return *this;
  }
  void Check(const std::string& v) {
    if (!problem_.empty()) return;
    if (const char* why = TextProblem(v)) problem_ = "parameter $" + std::to_string(values_.size() + 1) + ": " + why;
  }
  std::vector<std::optional<std::string>> values_;
  std::string problem_;
};

// A query's result; rows read through PgRow.
class Result {
 public:
  Result() = default;
  explicit Result(PGresult* r) : r_(r, PQclear) {}
  int rows() const { return r_ ? PQntuples(r_.get()) : 0; }
  int columns() const { return r_ ? PQnfields(r_.get()) : 0; }
  // Rows a write touched.
  int64_t affected() const;
  PGresult* get() const { return r_.get(); }

 private:
  std::shared_ptr<PGresult> r_;
};

class PgRow final : public Row {
 public:
  PgRow(const Result& r, int row) : r_(r.get()), row_(row) {}
  int64_t Int(int col) const override;
  double Real(int col) const override;
  bool IsNull(int col) const override { return PQgetisnull(r_, row_, col) != 0; }
  std::string Text(int col) const override {
    return std::string(PQgetvalue(r_, row_, col), PQgetlength(r_, row_, col));
  }

 private:
  PGresult* r_;
  int row_;
};

class Connection {
 public:
  // `setup`: statements run on every new connection (its session settings).
  // `retry_at` (shared by a store's connections; may be null): after a failed
  // connect or a call that got no answer, connecting again waits until then
  // (steady clock, ms), so that callers fail fast instead of each waiting on
  // a database that does not answer.
  Connection(const ConnInfo& info, std::vector<std::string> setup, std::chrono::milliseconds call_timeout,
             std::atomic<int64_t>* retry_at = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `sql` (one statement, $1.. parameters), prepared on first use.
  StatusOr<Result> Exec(const std::string& sql, const Params& params = Params());
  // Runs `sql` as it is (several statements, no parameters): DDL, BEGIN/COMMIT.
  StatusOr<Result> ExecScript(const std::string& sql);
  // While pinned (inside a transaction) a lost connection is not reopened:
  // the rest of the transaction fails instead of running outside it.
  void Pin(bool pinned) { pinned_ = pinned; }
  bool broken() const { return conn_ == nullptr; }

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  Status Ensure();
  // Sends what libpq holds (the connection is non-blocking) by `deadline`.
  Status Flush(const std::string& what, Deadline deadline);
  // Waits for the results of what was sent; the first error wins.
  StatusOr<Result> Collect(const std::string& what, Deadline deadline);
  // Closes the connection; connecting again backs off (retry_at).
  Status Lost(const std::string& why);
  void BackOff();
  void Close();

  const ConnInfo info_;
  const std::vector<std::string> setup_;
  const std::chrono::milliseconds call_timeout_;
  std::atomic<int64_t>* const retry_at_;
  PGconn* conn_ = nullptr;
  bool pinned_ = false;
  std::unordered_map<std::string, std::string> prepared_;  // SQL -> statement name
};

// How long connecting backs off after a database did not answer.
inline constexpr std::chrono::milliseconds kConnectBackOff{2000};

// The Status for a failed result: by SQLSTATE (23505 AlreadyExists, 23503
// NotFound, 53100 disk full, 08*/57P0* Unavailable, XX001/XX002 DataLoss, ...).
Status ErrorOf(const PGresult* r, const std::string& what);

}  // namespace ringmaster::store::postgres
