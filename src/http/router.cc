// The pure parts of the HTTP layer: status codes, requests' headers and
// parameters, percent-decoding, request targets, JSON errors and the route
// table. No sockets (server.cc has those); tested in http_test.cc.
#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "http/server.h"

namespace ringmaster::http {
namespace {

constexpr size_t kMaxQueryParams = 64;

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 1;  // past the leading '/'
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}


}  // namespace

int HttpStatusFor(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kInternal: return 500;
    case StatusCode::kInsufficientStorage: return 507;
    case StatusCode::kDataLoss: return 500;
  }
  return 500;
}


std::string Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return "";
}

bool Request::AsksUpgrade() const {
  if (Header("upgrade").empty()) return false;
  for (const auto& [name, value] : headers) {
    if (name != "connection") continue;
    std::string lower(value);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("upgrade") != std::string::npos) return true;
  }
  return false;
}

StatusOr<std::optional<std::string>> Request::Param(std::string_view name) const {
  std::optional<std::string> out;
  for (const auto& [k, v] : query) {
    if (k != name) continue;
    if (out) return InvalidArgument(fmt::format("{}: given more than once", name));
    out = v;
  }
  return out;
}

Response ErrorResponse(int status, std::string_view code, std::string_view message) {
  Response r;
  r.status = status;
  r.body = nlohmann::json{{"error", {{"code", code}, {"message", message}}}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

std::optional<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;  // "%" or "%4" at the end
      const int hi = Hex(in[i + 1]), lo = Hex(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    if (c == '\0') return std::nullopt;
    out.push_back(c);
  }
  return out;
}

Status ParseTarget(std::string_view target, std::string* path,
                   std::vector<std::pair<std::string, std::string>>* query) {
  if (target.empty() || target[0] != '/') {
    return InvalidArgument("request target: must be a path starting with '/'");
  }
  const size_t q = target.find('?');
  auto p = PercentDecode(target.substr(0, q), false);
  if (!p) return InvalidArgument("request target: malformed percent-encoding in the path");
  *path = std::move(*p);
  query->clear();
  if (q == std::string_view::npos) return Status::Ok();
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (item.empty()) continue;
    if (query->size() >= kMaxQueryParams) {
      return InvalidArgument(fmt::format("query: more than {} parameters", kMaxQueryParams));
    }
    size_t eq = item.find('=');
    auto k = PercentDecode(item.substr(0, eq), true);
    auto v = PercentDecode(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1), true);
    if (!k || !v) return InvalidArgument("query: malformed percent-encoding");
    query->emplace_back(std::move(*k), std::move(*v));
  }
  return Status::Ok();
}

void Router::Add(std::string method, const std::string& pattern, RouteOptions options, Handler handler) {
  Route r;
  r.method = std::move(method);
  r.pattern = pattern;
  for (std::string_view s : SplitPath(pattern)) r.segments.emplace_back(s);
  r.options = std::move(options);
  r.handler = std::move(handler);
  routes_.push_back(std::move(r));
}

std::vector<std::pair<std::string, std::string>> Router::Routes() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(routes_.size());
  for (const Route& r : routes_) out.emplace_back(r.method, r.pattern);
  return out;
}

StatusOr<const Router::Route*> Router::Find(const std::string& method, const std::string& path,
                                            std::vector<std::string>* groups, std::string* allow) const {
  if (path.empty() || path[0] != '/') return NotFound("no such path");
  const std::vector<std::string_view> segs = SplitPath(path);
  allow->clear();
  for (const Route& r : routes_) {
    const bool rest = !r.segments.empty() && r.segments.back() == "{path...}";
    if (rest ? segs.size() < r.segments.size() : r.segments.size() != segs.size()) continue;
    std::vector<std::string> caps;
    bool ok = true;
    for (size_t i = 0; i < r.segments.size() && ok; ++i) {
      const std::string& want = r.segments[i];
      if (rest && i + 1 == r.segments.size()) {  // the rest of the path, '/'-joined, as one capture
        std::string joined;
        for (size_t j = i; j < segs.size(); ++j) joined += (j > i ? "/" : "") + std::string(segs[j]);
        caps.push_back(std::move(joined));
      } else if (want == "{id}") {
        ok = !segs[i].empty() && segs[i].size() <= 18 &&
             std::all_of(segs[i].begin(), segs[i].end(), [](char c) { return c >= '0' && c <= '9'; });
        if (ok) caps.emplace_back(segs[i]);
      } else if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
        ok = !segs[i].empty();
        if (ok) caps.emplace_back(segs[i]);
      } else {
        ok = want == segs[i];
      }
    }
    if (!ok) continue;
    if (r.method == method) {
      *groups = std::move(caps);
      return &r;
    }
    if (allow->find(r.method) == std::string::npos) *allow += (allow->empty() ? "" : ", ") + r.method;
  }
  if (!allow->empty()) return FailedPrecondition("method not allowed");
  return NotFound("no such path");
}

}  // namespace ringmaster::http
