#include "store/postgres/connection.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdlib>
#include <utility>

#include "common/status.h"

namespace ringmaster::store::postgres {
namespace {

// A query parameter's value, percent-decoded.
std::string Decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// PostgreSQL's notices (NOTICE, WARNING) go to the log, never to stderr.
void LogNotice(void*, const char* message) {
  std::string msg = message ? message : "";
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  spdlog::debug("PostgreSQL: {}", msg);
}

bool ParseInt(const std::string& s, int lo, int hi, int* out) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

StatusOr<ConnInfo> ParseUrl(const std::string& url) {
  ConnInfo info;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return InvalidArgument("metadata store: expected postgres://USER@HOST:PORT/DB");
  // The password (between the user's ':' and '@') never goes into a message.
  const size_t at = url.find('@', scheme_end + 3);
  const size_t slash = url.find('/', scheme_end + 3);
  info.redacted = url;
  std::string tool_base = url.substr(0, url.find('?'));
  if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
    const size_t colon = url.find(':', scheme_end + 3);
    if (colon != std::string::npos && colon < at) {
      info.redacted = url.substr(0, colon) + ":***" + url.substr(at);
      tool_base = url.substr(0, colon) + tool_base.substr(at);
    }
  }
  const size_t q = url.find('?');
  std::string base = url.substr(0, q);
  std::string kept, tool_kept;
  if (q != std::string::npos) {
    size_t pos = q + 1;
    while (pos <= url.size()) {
      size_t amp = url.find('&', pos);
      if (amp == std::string::npos) amp = url.size();
      const std::string kv = url.substr(pos, amp - pos);
      pos = amp + 1;
      if (kv.empty()) continue;
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : Decode(kv.substr(eq + 1));
      if (key == "pool") {
        if (!ParseInt(value, 1, 256, &info.pool)) return InvalidArgument("metadata store: pool=" + value + " is not 1..256");
      } else if (key == "statement_timeout") {
        if (!ParseInt(value, 100, 3600000, &info.statement_timeout_ms)) {
          return InvalidArgument("metadata store: statement_timeout=" + value + " is not 100..3600000 (ms)");
        }
      } else {
        kept += (kept.empty() ? "?" : "&") + kv;
        if (key != "password") tool_kept += (tool_kept.empty() ? "?" : "&") + kv;
      }
    }
    const size_t rq = info.redacted.find('?');
    if (rq != std::string::npos) info.redacted.resize(rq);
  }
  info.url = base + kept;
  info.tool_url = tool_base + tool_kept;
  return info;
}

Params& Params::Add(double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  return Push(std::string(buf, p));
}

int64_t Result::affected() const {
  const char* n = r_ ? PQcmdTuples(r_.get()) : "";
  return *n ? std::strtoll(n, nullptr, 10) : 0;
}

int64_t PgRow::Int(int col) const {
  const char* v = PQgetvalue(r_, row_, col);
  if (*v == 't') return 1;  // a boolean
  return std::strtoll(v, nullptr, 10);
}

double PgRow::Real(int col) const { return std::strtod(PQgetvalue(r_, row_, col), nullptr); }

Status ErrorOf(const PGresult* r, const std::string& what) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  const std::string code = state ? state : "";
  std::string msg = r ? PQresultErrorMessage(r) : "no result";
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  const std::string text = what + ": " + msg;
  if (code == "23505") return AlreadyExists(text);
  if (code == "23503") return NotFound(text);
  // Text the database cannot take (bad encoding, a value of the wrong form):
  // the caller's data, not the server, is at fault.
  if (code == "22021" || code == "22P05" || code == "22P02") return InvalidArgument(text);
  if (code == "53100") return ServerDiskFull(text);
  if (code == "XX001" || code == "XX002") return DataLoss("the server's database is damaged (" + text + ")");
  // Connection trouble, a shutdown, a timeout, a lost serialization race:
  // the same call may succeed later.
  if (code.rfind("08", 0) == 0 || code.rfind("57P0", 0) == 0 || code == "57014" || code == "40001" ||
      code == "40P01" || code == "53300" || code == "55P03") {
    return Unavailable(text);
  }
  return Internal(text);
}

Connection::Connection(const ConnInfo& info, std::vector<std::string> setup, std::chrono::milliseconds call_timeout,
                       std::atomic<int64_t>* retry_at)
    : info_(info), setup_(std::move(setup)), call_timeout_(call_timeout), retry_at_(retry_at) {}

Connection::~Connection() { Close(); }

void Connection::Close() {
  if (conn_) PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
}

void Connection::BackOff() {
  if (retry_at_) retry_at_->store(NowMs() + kConnectBackOff.count());
}

Status Connection::Lost(const std::string& why) {
  Close();
  BackOff();
  return Unavailable("PostgreSQL at " + info_.redacted + ": " + why);
}

Status Connection::Ensure() {
  if (conn_) return Status::Ok();
  if (pinned_) return Unavailable("PostgreSQL at " + info_.redacted + ": the connection was lost inside a transaction");
  if (retry_at_) {
    const int64_t wait_ms = retry_at_->load() - NowMs();
    if (wait_ms > 0) {
      return Unavailable("PostgreSQL at " + info_.redacted + ": the database did not answer; retrying in " +
                         std::to_string((wait_ms + 999) / 1000) + "s");
    }
  }
  const std::string timeout_s = std::to_string(std::max<int64_t>(2, call_timeout_.count() / 1000));
  const char* keys[] = {"dbname", "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "tcp_user_timeout", "application_name", nullptr};
  const std::string user_timeout = std::to_string(call_timeout_.count());
  const char* values[] = {info_.url.c_str(), timeout_s.c_str(), "1", "5", "2", "3", user_timeout.c_str(),
                          "ringmaster", nullptr};
  conn_ = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
    std::string msg = conn_ ? PQerrorMessage(conn_) : "out of memory";
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    Close();
    BackOff();
    return Unavailable("cannot connect to PostgreSQL at " + info_.redacted + ": " + msg);
  }
  // Sends never block past a call's deadline (Flush); notices are logged, not printed.
  if (PQsetnonblocking(conn_, 1) != 0) return Lost("cannot make the connection non-blocking");
  PQsetNoticeProcessor(conn_, LogNotice, nullptr);
  for (const std::string& sql : setup_) {
    auto r = ExecScript(sql);
    if (!r.ok()) {
      Close();
      return r.status();
    }
  }
  return Status::Ok();
}

Status Connection::Flush(const std::string& what, Deadline deadline) {
  while (true) {
    const int rc = PQflush(conn_);
    if (rc == 0) return Status::Ok();
    if (rc < 0) return Lost(what + ": " + PQerrorMessage(conn_));
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Lost(what + ": not sent within " + std::to_string(call_timeout_.count()) + " ms");
    pollfd p{PQsocket(conn_), POLLOUT | POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return Lost(what + ": poll failed");
    // The server may answer (an error) before it has read everything.
    if (n > 0 && (p.revents & POLLIN) && !PQconsumeInput(conn_)) return Lost(what + ": " + PQerrorMessage(conn_));
  }
}

StatusOr<Result> Connection::Collect(const std::string& what, Deadline deadline) {
  Result first_error;
  Result last;
  while (true) {
    while (PQisBusy(conn_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Lost(what + ": no answer within " + std::to_string(call_timeout_.count()) + " ms");
      pollfd p{PQsocket(conn_), POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno != EINTR) return Lost(what + ": poll failed");
      if (n > 0 && !PQconsumeInput(conn_)) return Lost(what + ": " + PQerrorMessage(conn_));
    }
    PGresult* r = PQgetResult(conn_);
    if (!r) break;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
      if (!first_error.get()) {
        first_error = Result(r);
      } else {
        PQclear(r);
      }
    } else {
      last = Result(r);
    }
  }
  if (PQstatus(conn_) == CONNECTION_BAD) {
    Status st = first_error.get() ? ErrorOf(first_error.get(), what) : Status(StatusCode::kUnavailable, what);
    return Lost(std::string(st.message()));
  }
  if (first_error.get()) return ErrorOf(first_error.get(), what);
  return last;
}

StatusOr<Result> Connection::Exec(const std::string& sql, const Params& params) {
  if (!params.problem().empty()) return InvalidArgument(params.problem());
  RM_RETURN_IF_ERROR(Ensure());
  const Deadline deadline = std::chrono::steady_clock::now() + call_timeout_;
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    const std::string name = "s" + std::to_string(prepared_.size());
    if (!PQsendPrepare(conn_, name.c_str(), sql.c_str(), static_cast<int>(params.size()), nullptr)) {
      return Lost(std::string("prepare: ") + PQerrorMessage(conn_));
    }
    RM_RETURN_IF_ERROR(Flush("prepare", deadline));
    RM_RETURN_IF_ERROR(Collect("prepare", deadline).status());
    it = prepared_.emplace(sql, name).first;
  }
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& v : params.values()) values.push_back(v ? v->c_str() : nullptr);
  if (!PQsendQueryPrepared(conn_, it->second.c_str(), static_cast<int>(values.size()), values.data(), nullptr, nullptr,
                           0)) {
    return Lost(std::string("send: ") + PQerrorMessage(conn_));
  }
  RM_RETURN_IF_ERROR(Flush("send", deadline));
  return Collect("query", deadline);
}

StatusOr<Result> Connection::ExecScript(const std::string& sql) {
  RM_RETURN_IF_ERROR(Ensure());
  const Deadline deadline = std::chrono::steady_clock::now() + call_timeout_;
  if (!PQsendQuery(conn_, sql.c_str())) return Lost(std::string("send: ") + PQerrorMessage(conn_));
  RM_RETURN_IF_ERROR(Flush("send", deadline));
  return Collect("statement", deadline);
}

}  // namespace ringmaster::store::postgres
