#include "client/api_client.h"

#include <httplib.h>

#include <mutex>
#include <set>

#include <fmt/format.h>

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

std::unique_ptr<httplib::Client> MakeClient(const std::string& url, const std::string& token, const std::string& ca,
                                            const CallOptions& opts) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_connection_timeout(kConnectTimeout);
  c->set_read_timeout(opts.read_timeout);
  c->set_write_timeout(std::chrono::seconds(30));
  c->set_keep_alive(false);
  c->set_tcp_nodelay(true);
  if (url.rfind("https://", 0) == 0) {
    c->enable_server_certificate_verification(true);
    if (!ca.empty()) c->set_ca_cert_path(ca.c_str());
  }
  if (!token.empty()) c->set_bearer_token_auth(token);
  return c;
}

// Why a call got no answer, saying what to do about it.
Status Unreachable(const std::string& url, httplib::Error e) {
  const bool https = url.rfind("https://", 0) == 0;
  switch (e) {
    case httplib::Error::SSLServerVerification:
      return Unavailable(fmt::format("the server at {} has a certificate this client does not trust: pass --ca "
                                     "<its data dir>/tls/ca.crt (or set RINGMASTER_CA)", url));
    case httplib::Error::SSLConnection:
      return Unavailable(fmt::format("TLS handshake with {} failed (does it speak plain HTTP? then use http://)", url));
    case httplib::Error::SSLLoadingCerts:
      return Unavailable("cannot load the CA file given with --ca / RINGMASTER_CA");
    case httplib::Error::Read:
      if (https) return Unavailable(fmt::format("the server at {} closed the connection (TLS mismatch?)", url));
      break;
    default:
      break;
  }
  return Unavailable(fmt::format("cannot reach the server at {}: {}", url, httplib::to_string(e)));
}

StatusOr<nlohmann::json> Finish(const httplib::Result& res, const std::string& url) {
  if (!res) return Unreachable(url, res.error());
  if (res->status >= 300) return FromHttpError(res->status, res->body);
  if (res->body.empty()) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(res->body);
  } catch (const std::exception& e) {
    return Internal(fmt::format("server sent invalid JSON: {}", e.what()));
  }
}

}  // namespace

struct ApiClient::InFlight {
  std::mutex mu;
  std::set<httplib::Client*> clients;  // GUARDED_BY(mu)
  bool cancelled = false;              // GUARDED_BY(mu)
};

namespace {

// Registers a client for Cancel() for the length of one call.
class Registration {
 public:
  Registration(ApiClient::InFlight* f, httplib::Client* c) : f_(f), c_(c) {
    std::lock_guard<std::mutex> l(f_->mu);
    ok_ = !f_->cancelled;
    if (ok_) f_->clients.insert(c_);
  }
  ~Registration() {
    std::lock_guard<std::mutex> l(f_->mu);
    f_->clients.erase(c_);
  }
  bool ok() const { return ok_; }

 private:
  ApiClient::InFlight* f_;
  httplib::Client* c_;
  bool ok_ = false;
};

}  // namespace

void ApiClient::Cancel() const {
  std::lock_guard<std::mutex> l(in_flight_->mu);
  in_flight_->cancelled = true;
  for (httplib::Client* c : in_flight_->clients) c->stop();
}

ApiClient::ApiClient(std::string server_url, std::string token, std::string ca_file)
    : server_url_(std::move(server_url)),
      token_(std::move(token)),
      ca_file_(std::move(ca_file)),
      in_flight_(std::make_shared<InFlight>()) {
  while (!server_url_.empty() && server_url_.back() == '/') server_url_.pop_back();
}

StatusOr<nlohmann::json> ApiClient::Get(const std::string& path, CallOptions opts) const {
  auto c = MakeClient(server_url_, token_, ca_file_, opts);
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  return Finish(c->Get(path), server_url_);
}

StatusOr<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body,
                                         CallOptions opts) const {
  return PostText(path, body.dump(), "application/json", opts);
}

StatusOr<nlohmann::json> ApiClient::PostText(const std::string& path, const std::string& body,
                                             const std::string& content_type, CallOptions opts) const {
  auto c = MakeClient(server_url_, token_, ca_file_, opts);
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  return Finish(c->Post(path, body, content_type), server_url_);
}

StatusOr<nlohmann::json> ApiClient::Put(const std::string& path, const nlohmann::json& body, CallOptions opts) const {
  auto c = MakeClient(server_url_, token_, ca_file_, opts);
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  return Finish(c->Put(path, body.dump(), "application/json"), server_url_);
}

StatusOr<nlohmann::json> ApiClient::Delete(const std::string& path) const {
  auto c = MakeClient(server_url_, token_, ca_file_, {});
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  return Finish(c->Delete(path), server_url_);
}

Status ApiClient::Stream(const std::string& path, const std::function<bool(const char*, size_t)>& on_data,
                         CallOptions opts) const {
  return Download(path, {}, [](const std::function<std::string(const std::string&)>&) {}, on_data, opts);
}

StatusOr<nlohmann::json> ApiClient::Upload(const std::string& path, uint64_t size,
                                          const std::vector<std::pair<std::string, std::string>>& headers,
                                          const std::function<long(uint64_t, char*, size_t)>& read,
                                          CallOptions opts) const {
  auto c = MakeClient(server_url_, token_, ca_file_, opts);
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  httplib::Headers h(headers.begin(), headers.end());
  std::string buf(256 << 10, '\0');
  bool failed = false;
  auto res = c->Put(
      path, h, static_cast<size_t>(size),
      [&](size_t offset, size_t length, httplib::DataSink& sink) {
        long n = read(offset, buf.data(), std::min(length, buf.size()));
        if (n <= 0) {
          failed = true;
          return false;
        }
        return sink.write(buf.data(), static_cast<size_t>(n));
      },
      "application/octet-stream");
  if (failed) return Aborted("reading the local file failed");
  return Finish(res, server_url_);
}

Status ApiClient::Download(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers,
                           const std::function<void(const std::function<std::string(const std::string&)>&)>& on_headers,
                           const std::function<bool(const char*, size_t)>& on_data, CallOptions opts) const {
  auto c = MakeClient(server_url_, token_, ca_file_, opts);
  httplib::Headers h(headers.begin(), headers.end());
  h.emplace("Accept-Encoding", "identity");
  Registration reg(in_flight_.get(), c.get());
  if (!reg.ok()) return Aborted("cancelled");
  int status = 0;
  std::string error_body;
  auto res = c->Get(
      path, h,
      [&](const httplib::Response& r) {
        status = r.status;
        if (status < 300) on_headers([&r](const std::string& name) { return r.get_header_value(name); });
        return true;
      },
      [&](const char* data, size_t len) {
        if (status >= 300) {
          if (error_body.size() < (64 << 10)) error_body.append(data, len);
          return true;
        }
        return on_data(data, len);
      });
  if (status >= 300) return FromHttpError(status, error_body);
  if (!res && res.error() != httplib::Error::Canceled) {
    if (status == 0) return Unreachable(server_url_, res.error());
    return Unavailable(fmt::format("stream from {} broke: {}", server_url_, httplib::to_string(res.error())));
  }
  return Status::Ok();
}

std::string ApiClient::EncodePath(const std::string& path) {
  std::string out;
  for (unsigned char ch : path) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' || ch == '/') {
      out.push_back(static_cast<char>(ch));
    } else {
      out += fmt::format("%{:02X}", ch);
    }
  }
  return out;
}

StatusOr<nlohmann::json> ApiClient::Login(const std::string& server_url, const std::string& ca_file,
                                          const std::string& user, const std::string& password,
                                          const std::string& token_name) {
  auto c = MakeClient(server_url, "", ca_file, {});
  c->set_basic_auth(user, password);
  RM_ASSIGN_OR_RETURN(nlohmann::json r, Finish(c->Post("/api/v1/tokens", nlohmann::json{{"name", token_name}}.dump(),
                                                       "application/json"),
                                               server_url));
  if (!r.is_object() || !r.contains("token") || !r["token"].is_string()) {
    return Internal(fmt::format("{} answered a login without a token", server_url));
  }
  return r;
}

}  // namespace ringmaster::client
