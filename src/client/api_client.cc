#include "common/strings.h"
#include "client/api_client.h"

#include <strings.h>

#include <algorithm>
#include <mutex>
#include <thread>

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
    if (strcasecmp(name.c_str(), n) == 0) return c;  // a standby's "unavailable" too
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

std::vector<std::string> SplitServerUrls(const std::string& urls) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= urls.size()) {
    size_t comma = urls.find(',', start);
    if (comma == std::string::npos) comma = urls.size();
    std::string u = urls.substr(start, comma - start);
    while (!u.empty() && (u.back() == '/' || u.back() == ' ')) u.pop_back();
    while (!u.empty() && u.front() == ' ') u.erase(0, 1);
    if (!u.empty()) out.push_back(u);
    start = comma + 1;
  }
  return out;
}

// "http://a:1/api/v1/jobs?x" -> "http://a:1".
std::string OriginOf(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  return url.substr(0, url.find('/', scheme + 3));
}

// A failure of the connection (not an answer) that another server may not have.
bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

// A failure before the request left (no connection): no server ran it.
bool NeverSent(const Status& s) { return s.message().find("cannot reach") != std::string::npos; }

// The client's failures as the API client has always reported them: no
// answer (a timeout included) is Unavailable, naming the server.
Status Unreachable(const Status& s) {
  if (s.code() == StatusCode::kDeadlineExceeded) return Unavailable(s.message());
  return s;
}

}  // namespace

// One http::Client per server of an ApiClient and its copies: Cancel()
// reaches every call of any copy.
struct ApiClient::InFlight {
  InFlight(const std::string& urls, const std::string& ca) : ca_file(ca) {
    for (std::string url : SplitServerUrls(urls)) {
      auto c = MakeClient(url);
      if (!c.ok()) {
        bad_url = c.status();
        return;
      }
      this->urls.push_back(url);
      clients.push_back(std::move(*c));
    }
    if (clients.empty()) bad_url = InvalidArgument("server: no URL given (expected https://HOST:PORT[,https://...])");
  }
  StatusOr<std::unique_ptr<http::Client>> MakeClient(const std::string& url) const {
    auto target = http::ParseClientUrl(url);
    if (!target.ok()) return target.status();
    target->ca_file = ca_file;
    http::ClientOptions o;
    o.connect_timeout = kConnectTimeout;
    o.io_timeout = std::chrono::seconds(30);
    o.peer = "the server at " + url;
    o.untrusted_hint = "pass --ca <its data dir>/tls/ca.crt (or set RINGMASTER_CA)";
    return std::make_unique<http::Client>(std::move(*target), std::move(o));
  }
  // The client for a redirect's origin: one of ours, else one made for it.
  // *index: its place in the list, or npos.
  http::Client* ForOrigin(const std::string& origin, size_t* index) {
    for (size_t i = 0; i < urls.size(); ++i) {
      if (urls[i] == origin) {
        *index = i;
        return clients[i].get();
      }
    }
    *index = std::string::npos;
    std::lock_guard<std::mutex> l(mu);
    auto it = others.find(origin);
    if (it != others.end()) return it->second.get();
    if (others.size() >= 16) return nullptr;  // a server that sends us everywhere
    auto c = MakeClient(origin);
    if (!c.ok()) return nullptr;
    if (cancelled) (*c)->Cancel();
    return others.emplace(origin, std::move(*c)).first->second.get();
  }
  void Cancel() {
    cancelled = true;
    for (auto& c : clients) c->Cancel();
    std::lock_guard<std::mutex> l(mu);
    for (auto& [origin, c] : others) c->Cancel();
  }

  const std::string ca_file;
  Status bad_url;
  std::vector<std::string> urls;
  std::vector<std::unique_ptr<http::Client>> clients;
  std::atomic<size_t> current{0};  // the server that answered last
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::map<std::string, std::unique_ptr<http::Client>> others;  // GUARDED_BY(mu): redirect targets not in the list
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

void ApiClient::Cancel() const { in_flight_->Cancel(); }

ApiClient::ApiClient(std::string server_url, std::string token, std::string ca_file)
    : server_url_(std::move(server_url)), token_(std::move(token)), ca_file_(std::move(ca_file)) {
  while (!server_url_.empty() && server_url_.back() == '/') server_url_.pop_back();
  in_flight_ = std::make_shared<InFlight>(server_url_, ca_file_);
}

std::string ApiClient::current_url() const {
  if (in_flight_->urls.empty()) return server_url_;
  return in_flight_->urls[in_flight_->current.load() % in_flight_->urls.size()];
}

namespace {

// An answer's verdict: a standby's redirect, a server that cannot serve now, or the answer.
ApiClient::Try Judge(int status, const std::function<std::string(const std::string&)>& header) {
  if (status == 307 && !header("Location").empty()) return {ApiClient::Try::kFollow, header("Location")};
  if (status == 503) return {ApiClient::Try::kNext, ""};
  return {};
}

}  // namespace

void ApiClient::Failover(std::chrono::milliseconds budget,
                         const std::function<Try(http::Client& client)>& attempt) const {
  InFlight& f = *in_flight_;
  const size_t n = f.clients.size();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  size_t i = f.current.load() % n;
  for (size_t tries = 1;; ++tries) {
    Try t = attempt(*f.clients[i]);
    size_t answered = i;
    if (t.what == Try::kFollow) {
      // A standby names the leader: there, once, with the same request; never
      // from https to plain http, where the token would travel in clear.
      const std::string origin = OriginOf(t.location);
      const bool downgrade = f.urls[i].rfind("https://", 0) == 0 && origin.rfind("https://", 0) != 0;
      http::Client* leader = downgrade ? nullptr : f.ForOrigin(origin, &answered);
      t = leader ? attempt(*leader) : Try{Try::kNext, ""};
    }
    if (t.what == Try::kDone) {
      if (answered != std::string::npos) f.current = answered;
      return;
    }
    if (n < 2 || f.cancelled || std::chrono::steady_clock::now() >= deadline) return;
    i = (i + 1) % n;
    if (tries % n == 0) {
      // Every server refused: a failover is under way. Wait a little, not past the budget.
      auto pause = std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(500),
                                                                 deadline - std::chrono::steady_clock::now());
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
    }
  }
}

StatusOr<nlohmann::json> ApiClient::Send(http::ClientRequest request, CallOptions opts) const {
  RM_RETURN_IF_ERROR(in_flight_->bad_url);
  request.headers.insert(request.headers.end(), opts.headers.begin(), opts.headers.end());
  bool replayable = opts.replayable || request.method == "GET" || request.method == "HEAD" || request.method == "PUT";
  for (const auto& [name, value] : request.headers) replayable = replayable || name == "Idempotency-Key";
  StatusOr<nlohmann::json> result = Unavailable("no server tried");
  Failover(opts.failover, [&](http::Client& c) -> Try {
    auto r = c.Do(request, Call(request.method + " " + request.target, opts.read_timeout));
    if (!r.ok()) {
      result = Unreachable(r.status());
      return {Retryable(r.status()) && (replayable || NeverSent(r.status())) ? Try::kNext : Try::kDone, ""};
    }
    result = ParseAnswer(*r);
    Try t = Judge(r->status, [&](const std::string& name) { return r->Header(name); });
    // A 503 without Retry-After came after the handler ran: its writes may stand.
    if (t.what == Try::kNext && !replayable && r->Header("Retry-After").empty()) return {};
    return t;
  });
  return result;
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
  return SendJson("PUT", path, body, opts);
}

StatusOr<nlohmann::json> ApiClient::Patch(const std::string& path, const nlohmann::json& body, CallOptions opts) const {
  return SendJson("PATCH", path, body, opts);
}

StatusOr<nlohmann::json> ApiClient::SendJson(std::string method, const std::string& path, const nlohmann::json& body,
                                             CallOptions opts) const {
  http::ClientRequest r = Request(std::move(method), path, token_);
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
  StatusOr<nlohmann::json> result = Unavailable("no server tried");
  Failover(opts.failover, [&](http::Client& c) -> Try {
    offset = 0;  // each try sends the whole body
    auto res = c.Do(r, Call("PUT " + path, opts.read_timeout));
    if (!res.ok()) {
      result = Unreachable(res.status());
      return {Retryable(res.status()) ? Try::kNext : Try::kDone, ""};
    }
    if (res->status < 300 && !res->send_error.ok()) {
      result = Unreachable(res->send_error);
      return {};
    }
    result = ParseAnswer(*res);
    return Judge(res->status, [&](const std::string& name) { return res->Header(name); });
  });
  return result;
}

Status ApiClient::Download(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                           const std::function<void(const std::function<std::string(const std::string&)>&)>& on_headers,
                           const std::function<bool(const char*, size_t)>& on_data, CallOptions opts) const {
  RM_RETURN_IF_ERROR(in_flight_->bad_url);
  http::ClientRequest r = Request("GET", path, token_);
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  r.headers.emplace_back("Accept-Encoding", "identity");
  std::unique_ptr<http::ResponseStream> stream;
  Status failed = Unavailable("no server tried");
  std::string from;
  Failover(opts.failover, [&](http::Client& c) -> Try {
    auto s = c.Open(r, Call("GET " + path, opts.read_timeout));
    if (!s.ok()) {
      failed = Unreachable(s.status());
      return {Retryable(s.status()) ? Try::kNext : Try::kDone, ""};
    }
    const http::ClientResponse& head = (*s)->head();
    if (head.status >= 300) {
      auto body = (*s)->ReadAll(64 << 10);
      failed = FromHttpError(head.status, body.ok() ? *body : "");
      return Judge(head.status, [&](const std::string& name) { return head.Header(name); });
    }
    stream = std::move(*s);
    from = c.target().Describe();
    return {};
  });
  if (!stream) return failed;
  const http::ClientResponse& head = stream->head();
  on_headers([&head](const std::string& name) { return head.Header(name); });
  std::string buf(64 << 10, '\0');
  for (;;) {
    auto n = stream->ReadSome(buf.data(), buf.size());
    if (!n.ok()) {
      if (n.status().code() == StatusCode::kAborted) return Status::Ok();  // cancelled, as before
      return Unavailable(fmt::format("stream from {} broke: {}", from, n.status().message()));
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
