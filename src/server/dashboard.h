// Dashboard: the web UI's static files (web/src and its npm dependencies, as
// web/assets.txt lists them), gzip'ed into the binary at build time
// (scripts/embed_assets.py) and served at / and /assets/{name} with no
// authentication: they hold no data. Every answer carries the CSP and the
// other security headers; each file has an ETag. Thread-safe: read-only once built.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "http/server.h"

namespace ringmaster::server {

struct EmbeddedAsset {
  std::string_view name;  // the basename: /assets/<name>
  std::string_view content_type;
  std::string_view gzip;  // the file, gzip'ed
  size_t size;            // the file's own size
  std::string_view etag;  // hex, of the file's SHA-256
};

// The generated table (dashboard_assets.cc in the build tree).
std::span<const EmbeddedAsset> EmbeddedAssets();

// Routes GET and HEAD of / (index.html) and /assets/{name} to `assets`.
void AddDashboardRoutes(http::Server& http, std::span<const EmbeddedAsset> assets = EmbeddedAssets());

// Whether an Accept-Encoding header accepts gzip (a q of 0 refuses it).
bool AcceptsGzip(std::string_view accept_encoding);

}  // namespace ringmaster::server
