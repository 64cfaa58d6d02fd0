#include "common/strings.h"
#include "client/api_client.h"

#include <fmt/format.h>

#include "common/crypto.h"

namespace ringmaster::client {
namespace {

constexpr std::chrono::seconds kConnectTimeout{5};

StatusCode CodeFromName(const std::string& name, int http_status) {
  static const std::pair<const char*, StatusCode> kNames[] = {
      {"InvalidArgument", StatusCode::kInvalidArgument},
      {"NotFound", StatusCode::kNotFound},
      {"AlreadyExists", StatusCode::kAlreadyExists},
      {"PermissionDenied", StatusCode::kPermissionDenied},
      {"Unauthenticated", StatusCode::kUnauthenticated},
      {"FailedPrecondition", StatusCode::kFailedPrecondition},
      {"ResourceExhausted", StatusCode::kResourceExhausted},
      {"Unavailable", StatusCode::kUnavailable},
      {"DeadlineExceeded", StatusCode::kDeadlineExceeded},
      {"Aborted", StatusCode::kAborted},
      {"InsufficientStorage", StatusCode::kInsufficientStorage},
      {"DataLoss", StatusCode::kDataLoss},
  };
  for (const auto& [n, c] : kNames) {
    if (name == n) return c;
  }
  if (http_status == 401) return StatusCode::kUnauthenticated;
  if (http_status == 403) return StatusCode::kPermissionDenied;
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status == 507) return StatusCode::kInsufficientStorage;
  if (http_status >= 400 && http_status < 500) return StatusCode::kInvalidArgument;
  return StatusCode::kInternal;
}

Status FromHttpError(int http_status, const std::string& body) {
  try {
    auto j = nlohmann::json::parse(body);
    const auto& e = j.at("error");
    return Status(CodeFromName(e.value("code", ""), http_status), e.value("message", body));
  } catch (...) {
    return Status(CodeFromName("", http_status), fmt::format("HTTP {}: {}", http_status, body));
  }
}

StatusOr<nlohmann::json> ParseAnswer(const http::ClientResponse& r) {
  if (r.status >= 300) return FromHttpError(r.status, r.body);
  if (r.body.empty()) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(r.body);
  } catch (const std::exception& e) {
    return Internal(fmt::format("server sent invalid JSON: {}", e.what()));
  }
}

// The client's failures as the API client has always reported them: no
// answer (a timeout included) is Unavailable, naming the server.
Status Unreachable(const Status& s) {
  if (s.code() == StatusCode::kDeadlineExceeded) return Unavailable(s.message());
  return s;
}

}  // namespace

// One http::Client per ApiClient and its copies: Cancel() reaches every
// call of any copy.
struct ApiClient::InFlight {
  InFlight(const std::string& url, const std::string& ca_file) {
    auto target = http::ParseClientUrl(url);
    if (!target.ok()) {
      bad_url = target.status();
      return;
    }
    target->ca_file = ca_file;
    http::ClientOptions o;
    o.connect_timeout = kConnectTimeout;
    o.io_timeout = std::chrono::seconds(30);
    o.peer = "the server at " + url;
    o.untrusted_hint = "pass --ca <its data dir>/tls/ca.crt (or set RINGMASTER_CA)";
    client = std::make_unique<http::Client>(std::move(*target), std::move(o));
  }
  Status bad_url;
  std::unique_ptr<http::Client> client;
};

namespace {

// Connection failures read "cannot reach the server at URL: ...".
http::CallOptions Call(const std::string& what, std::chrono::milliseconds read_timeout) {
  http::CallOptions c;
  c.what = what;
  c.io_timeout = read_timeout;
  c.max_body = 1ull << 32;  // the server's answers, as before without a bound of our own
  return c;
}

http::ClientRequest Request(std::string method, const std::string& path, const std::string& token) {
  http::ClientRequest r;
  r.method = std::move(method);
  r.target = path;
  if (!token.empty()) r.headers.emplace_back("Authorization", "Bearer " + token);
  return r;
}

}  // namespace

void ApiClient::Cancel() const {
  if (in_flight_->client) in_flight_->client->Cancel();
}

ApiClient::ApiClient(std::string server_url, std::string token, std::string ca_file)
    : server_url_(std::move(server_url)), token_(std::move(token)), ca_file_(std::move(ca_file)) {
  while (!server_url_.empty() && server_url_.back() == '/') server_url_.pop_back();
  in_flight_ = std::make_shared<InFlight>(server_url_, ca_file_);
}

StatusOr<nlohmann::json> ApiClient::Send(http::ClientRequest request, CallOptions opts) const {
  RM_RETURN_IF_ERROR(in_flight_->bad_url);
  auto r = in_flight_->client->Do(request, Call(request.method + " " + request.target, opts.read_timeout));
  if (!r.ok()) return Unreachable(r.status());
  return ParseAnswer(*r);
}

StatusOr<nlohmann::json> ApiClient::Get(const std::string& path, CallOptions opts) const {
  return Send(Request("GET", path, token_), opts);
}

StatusOr<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body,
                                         CallOptions opts) const {
  return PostText(path, body.dump(), "application/json", opts);
}

StatusOr<nlohmann::json> ApiClient::PostText(const std::string& path, const std::string& body,
                                             const std::string& content_type, CallOptions opts) const {
  http::ClientRequest r = Request("POST", path, token_);
  r.headers.emplace_back("Content-Type", content_type);
  r.body = body;
  return Send(std::move(r), opts);
}

StatusOr<nlohmann::json> ApiClient::Put(const std::string& path, const nlohmann::json& body, CallOptions opts) const {
  http::ClientRequest r = Request("PUT", path, token_);
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = body.dump();
  return Send(std::move(r), opts);
}

StatusOr<nlohmann::json> ApiClient::Delete(const std::string& path) const {
  return Send(Request("DELETE", path, token_), {});
}

Status ApiClient::Stream(const std::string& path, const std::function<bool(const char*, size_t)>& on_data,
                         CallOptions opts) const {
  return Download(path, {}, [](const std::function<std::string(const std::string&)>&) {}, on_data, opts);
}

StatusOr<nlohmann::json> ApiClient::Upload(const std::string& path, uint64_t size,
                                          const std::vector<std::pair<std::string, std::string>>& headers,
                                          const std::function<long(uint64_t, char*, size_t)>& read,
                                          CallOptions opts) const {
  RM_RETURN_IF_ERROR(in_flight_->bad_url);
  http::ClientRequest r = Request("PUT", path, token_);
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  r.headers.emplace_back("Content-Type", "application/octet-stream");
  r.body_size = size;
  uint64_t offset = 0;
  r.body_source = [&](char* buf, size_t n) -> StatusOr<size_t> {
    long got = read(offset, buf, n);
    if (got <= 0) return Aborted("reading the local file failed");
    offset += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  };
  auto res = in_flight_->client->Do(r, Call("PUT " + path, opts.read_timeout));
  if (!res.ok()) return Unreachable(res.status());
  if (res->status < 300 && !res->send_error.ok()) return Unreachable(res->send_error);
  return ParseAnswer(*res);
}

Status ApiClient::Download(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                           const std::function<void(const std::function<std::string(const std::string&)>&)>& on_headers,
                           const std::function<bool(const char*, size_t)>& on_data, CallOptions opts) const {
  RM_RETURN_IF_ERROR(in_flight_->bad_url);
  http::ClientRequest r = Request("GET", path, token_);
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  r.headers.emplace_back("Accept-Encoding", "identity");
  auto stream = in_flight_->client->Open(r, Call("GET " + path, opts.read_timeout));
  if (!stream.ok()) return Unreachable(stream.status());
  const http::ClientResponse& head = (*stream)->head();
  if (head.status >= 300) {
    auto body = (*stream)->ReadAll(64 << 10);
    return FromHttpError(head.status, body.ok() ? *body : "");
  }
  on_headers([&head](const std::string& name) { return head.Header(name); });
  std::string buf(64 << 10, '\0');
  for (;;) {
    auto n = (*stream)->ReadSome(buf.data(), buf.size());
    if (!n.ok()) {
      if (n.status().code() == StatusCode::kAborted) return Status::Ok();  // cancelled, as before
      return Unavailable(fmt::format("stream from {} broke: {}", server_url_, n.status().message()));
    }
    if (*n == 0) return Status::Ok();
    if (!on_data(buf.data(), *n)) return Status::Ok();
  }
}

StatusOr<nlohmann::json> ApiClient::Login(const std::string& server_url, const std::string& ca_file,
                                          const std::string& user, const std::string& password,
                                          const std::string& token_name) {
  ApiClient anonymous(server_url, "", ca_file);
  http::ClientRequest req = Request("POST", "/api/v1/tokens", "");
  req.headers.emplace_back("Authorization", "Basic " + Base64Encode(user + ":" + password));
  req.headers.emplace_back("Content-Type", "application/json");
  req.body = nlohmann::json{{"name", token_name}}.dump();
  RM_ASSIGN_OR_RETURN(nlohmann::json r, anonymous.Send(std::move(req), {}));
  if (!r.is_object() || !r.contains("token") || !r["token"].is_string()) {
    return Internal(fmt::format("{} answered a login without a token", server_url));
  }
  return r;
}

}  // namespace ringmaster::client
