#include "server/dashboard.h"

#include <zlib.h>

#include <map>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ringmaster::server {
namespace {

constexpr const char* kCsp =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

struct Served {
  const EmbeddedAsset* asset;
  std::string identity;  // for the rare client that takes no gzip
};

std::string Gunzip(std::string_view gz, size_t size) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return "";
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  inflateEnd(&z);
  if (rc != Z_STREAM_END || z.total_out != size) return "";
  return out;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

// If-None-Match: "*" or a list of (possibly weak) entity tags.
bool Matches(std::string_view if_none_match, std::string_view etag) {
  while (!if_none_match.empty()) {
    const size_t comma = if_none_match.find(',');
    std::string_view tag = Trim(if_none_match.substr(0, comma));
    if_none_match = comma == std::string_view::npos ? std::string_view() : if_none_match.substr(comma + 1);
    if (tag.rfind("W/", 0) == 0) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

void Serve(const Served& s, const http::Request& req, const http::Responder& respond) {
  const bool gzip = AcceptsGzip(req.Header("accept-encoding"));
  // The two encodings are two representations: each has its own tag.
  const std::string etag = "\"" + std::string(s.asset->etag) + (gzip ? "-gz\"" : "\"");
  http::Response r;
  r.content_type = std::string(s.asset->content_type);
  r.headers = {{"Content-Security-Policy", kCsp},
               {"X-Frame-Options", "DENY"},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "same-origin"},
               {"Cache-Control", "no-cache"},
               {"Vary", "Accept-Encoding"},
               {"ETag", etag}};
  if (Matches(req.Header("if-none-match"), etag)) {
    r.status = 304;
    return respond(std::move(r));
  }
  if (gzip) r.headers.emplace_back("Content-Encoding", "gzip");
  if (req.method != "HEAD") r.body = gzip ? std::string(s.asset->gzip) : s.identity;
  respond(std::move(r));
}

}  // namespace

bool AcceptsGzip(std::string_view accept_encoding) {
  bool any = false, gzip = false, gzip_named = false;
  while (!accept_encoding.empty()) {
    const size_t comma = accept_encoding.find(',');
    std::string_view item = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? std::string_view() : accept_encoding.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string_view coding = Trim(item.substr(0, semi));
    bool refused = false;
    if (semi != std::string_view::npos) {
      std::string_view q = Trim(item.substr(semi + 1));
      if (q.size() >= 2 && (q[0] == 'q' || q[0] == 'Q') && q[1] == '=') {
        q = Trim(q.substr(2));
        refused = !q.empty() && q.find_first_not_of("0.") == std::string_view::npos;
      }
    }
    if (IEquals(coding, "gzip") || IEquals(coding, "x-gzip")) {
      gzip_named = true;
      gzip = !refused;
    } else if (coding == "*") {
      any = !refused;
    }
  }
  return gzip_named ? gzip : any;
}

void AddDashboardRoutes(http::Server& http, std::span<const EmbeddedAsset> assets) {
  auto served = std::make_shared<std::map<std::string, Served, std::less<>>>();
  for (const EmbeddedAsset& a : assets) {
    Served s{&a, Gunzip(a.gzip, a.size)};
    if (s.identity.size() != a.size) spdlog::error("dashboard: the embedded {} does not unpack", a.name);
    (*served)[std::string(a.name)] = std::move(s);
  }
  // Static and in memory: answered on the I/O thread, before any database.
  http::RouteOptions open;
  open.authenticate = false;
  open.max_body = 0;
  open.inline_handler = true;
  for (const char* method : {"GET", "HEAD"}) {
    http.Route(method, "/", open, [served](http::Request& req, http::Responder respond) {
      auto it = served->find("index.html");
      if (it == served->end()) return respond(http::ErrorResponse(404, "NotFound", "this server has no dashboard"));
      Serve(it->second, req, respond);
    });
    http.Route(method, "/assets/{name}", open, [served](http::Request& req, http::Responder respond) {
      auto it = served->find(req.matches[0]);
      if (it == served->end()) {
        return respond(http::ErrorResponse(404, "NotFound", "no such asset: " + req.matches[0].substr(0, 64)));
      }
      Serve(it->second, req, respond);
    });
  }
}

}  // namespace ringmaster::server
