// ApiClient: the client of Ringmaster's REST API, used by the CLI and by
// agents, over http::Client. HTTP errors come back as Status with the
// server's code and message; https:// is verified against a CA file (a
// server's <data>/tls/ca.crt) or the system's CAs. Thread-safe: each call
// opens its own connection.
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
  std::chrono::milliseconds read_timeout{30'000};
};

class ApiClient {
 public:
  // server_url: "http://127.0.0.1:8080" or "https://...". token: bearer
  // token ("" = none). ca_file: PEM CA certificates to trust for https ("" =
  // the system's).
  ApiClient(std::string server_url, std::string token, std::string ca_file = "");

  StatusOr<nlohmann::json> Get(const std::string& path, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                                CallOptions opts = {}) const;
  StatusOr<nlohmann::json> PostText(const std::string& path, const std::string& body,
                                    const std::string& content_type, CallOptions opts = {}) const;
  StatusOr<nlohmann::json> Put(const std::string& path, const nlohmann::json& body, CallOptions opts = {}) const;
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
  const std::string& server_url() const { return server_url_; }
  const std::string& ca_file() const { return ca_file_; }

  // Aborts every call in flight (their sockets are shut down) and makes later
  // calls fail with Aborted at once. For shutting down from another thread.
  void Cancel() const;

  struct InFlight;  // calls in progress, shared by copies of this client

  // Exchanges a user's password for a new API token (HTTP Basic on POST
  // /api/v1/tokens): the server's answer, {"id", "token", "scope", ...}.
  static StatusOr<nlohmann::json> Login(const std::string& server_url, const std::string& ca_file,
                                        const std::string& user, const std::string& password,
                                        const std::string& token_name);

 private:
  StatusOr<nlohmann::json> Send(http::ClientRequest request, CallOptions opts) const;

  std::string server_url_;
  std::string token_;
  std::string ca_file_;
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace ringmaster::client
