// ApiClient: the client of Ringmaster's REST API, used by the CLI and by
// agents, over http::Client. HTTP errors come back as Status with the
// server's code and message; https:// is verified against a CA file (a
// server's <data>/tls/ca.crt) or the system's CAs. Given several servers
// (a leader and its standbys), it follows a standby's 307 to the leader and
// moves on to the next server when one cannot be reached or answers 503.
// Thread-safe: each call opens its own connection.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "http/client.h"

namespace ringmaster::client {

struct CallOptions {
  CallOptions() = default;
  // `{timeout}` at a call: the read timeout, the rest as default.
  CallOptions(std::chrono::milliseconds read) : read_timeout(read) {}  // NOLINT(google-explicit-constructor)

  std::chrono::milliseconds read_timeout{30'000};
  // With several servers: how long a call may cycle through them while none
  // answers (a failover under way). Each try keeps read_timeout.
  std::chrono::milliseconds failover{30'000};
  // Added to the request (e.g. Idempotency-Key), on every try.
  std::vector<std::pair<std::string, std::string>> headers;
  // Whether the request may be sent again once a server may have run it (no
  // answer in time, or a 503 after its handler ran). GET, HEAD, PUT and
  // requests with an Idempotency-Key always may; other POSTs and DELETEs only
  // when the caller says so (the agent's reports: attempt-fenced, offset-keyed).
  // A request no server received (refused, or a standby's redirect or 503
  // with Retry-After) is always tried on the next one.
  bool replayable = false;
};

class ApiClient {
 public:
  // server_url: "http://127.0.0.1:8080" or "https://...", or several,
  // comma-separated ("https://a:8443,https://b:8443"). token: bearer token
  // ("" = none). ca_file: PEM CA certificates to trust for https ("" = the
  // system's).
  ApiClient(std::string server_url, std::string token, std::string ca_file = "");

  StatusOr<nlohmann::json> Get(const std::string& path, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                                CallOptions opts = {}) const;
  StatusOr<nlohmann::json> PostText(const std::string& path, const std::string& body,
                                    const std::string& content_type, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Put(const std::string& path, const nlohmann::json& body, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Delete(const std::string& path) const;
  // Streams a response body to `on_data` as it arrives; on_data returns false to stop.
  // The read timeout bounds the silence between two pieces, not the whole stream.
  Status Stream(const std::string& path, const std::function<bool(const char*, size_t)>& on_data,
                CallOptions opts = {}) const;

  // PUT of `size` bytes that `read(offset, buf, n)` supplies (returning how
  // many it put in buf; 0 or less = fail), streamed, never held whole.
  // `headers` are added to the request. The response's JSON.
  StatusOr<nlohmann::json> Upload(const std::string& path, uint64_t size,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  const std::function<long(uint64_t offset, char* buf, size_t n)>& read,
                                  CallOptions opts = {}) const;
  // GET streamed to `on_data`, after `on_headers(header)` (a lookup of the
  // response's headers by name) is called once for a 2xx answer.
  Status Download(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                  const std::function<void(const std::function<std::string(const std::string&)>&)>& on_headers,
                  const std::function<bool(const char*, size_t)>& on_data, CallOptions opts = {}) const;
  // Every call follows a standby's 307 once. With several servers, a
  // connection failure or a 503 sends it to the next, cycling for up to
  // CallOptions::failover.
  // The servers as given (comma-separated).
  const std::string& server_url() const { return server_url_; }
  // The server that answered last (the first one before any call).
  std::string current_url() const;
  const std::string& ca_file() const { return ca_file_; }

  // Aborts every call in flight (their sockets are shut down) and makes later
  // calls fail with Aborted at once. For shutting down from another thread.
  void Cancel() const;

  struct InFlight;  // calls in progress, shared by copies of this client
  // What one try on one server came to: an answer, a server to leave, or a
  // standby's redirect to the leader.
  struct Try {
    enum What { kDone, kNext, kFollow } what = kDone;
    std::string location;  // kFollow: the standby's Location
  };

  // Exchanges a user's password for a new API token (HTTP Basic on POST
  // /api/v1/tokens): the server's answer, {"id", "token", "scope", ...}.
  static StatusOr<nlohmann::json> Login(const std::string& server_url, const std::string& ca_file,
                                        const std::string& user, const std::string& password,
                                        const std::string& token_name);

 private:
  StatusOr<nlohmann::json> Send(http::ClientRequest request, CallOptions opts) const;
  StatusOr<nlohmann::json> SendJson(std::string method, const std::string& path, const nlohmann::json& body,
                                    CallOptions opts) const;
  // Runs `attempt` on the current server, following a 307 once and, with
  // several servers, moving on while it says kNext, for up to `budget`.
  void Failover(std::chrono::milliseconds budget, const std::function<Try(http::Client& client)>& attempt) const;

  std::string server_url_;
  std::string token_;
  std::string ca_file_;
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace ringmaster::client
