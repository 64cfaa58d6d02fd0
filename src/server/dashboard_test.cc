// The dashboard's files as the server answers them (dashboard.cc), through
// http::Server::Dispatch: the embedded index.html at /, assets by name,
// gzip or identity, ETag round trips, security headers, no credentials.
#include "server/dashboard.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace ringmaster::server {
namespace {

std::string Gunzip(const std::string& gz) {
  std::string out(1 << 22, '\0');
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Every credential is refused: what answers, answers without one.
    http_.SetAuthenticator([](const http::Request&, const http::RouteOptions&) -> StatusOr<http::Principal> {
      return Unauthenticated("no credentials here");
    });
    AddDashboardRoutes(http_);
  }
  http::Response Get(const std::string& target, std::vector<std::pair<std::string, std::string>> headers = {},
                     const std::string& method = "GET") {
    http::Request r;
    r.method = method;
    r.target = target;
    r.remote = "127.0.0.1";
    r.headers = std::move(headers);
    http::Response got;
    got.status = 0;
    http_.Dispatch(std::move(r), [&](http::Response res) { got = std::move(res); });
    return got;
  }
  static std::string HeaderOf(const http::Response& r, const std::string& name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }

  http::Server http_{http::ServerOptions{}};
};

TEST_F(DashboardTest, TheRootIsIndexHtmlWithTheSecurityHeaders) {
  http::Response r = Get("/");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(HeaderOf(r, "Content-Encoding"), "");  // not asked for gzip
  EXPECT_NE(r.body.find("<!doctype html>"), std::string::npos) << r.body.substr(0, 200);
  EXPECT_EQ(HeaderOf(r, "Content-Security-Policy"),
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'");
  EXPECT_EQ(HeaderOf(r, "X-Frame-Options"), "DENY");
  EXPECT_EQ(HeaderOf(r, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(HeaderOf(r, "Referrer-Policy"), "same-origin");
  EXPECT_EQ(HeaderOf(r, "Cache-Control"), "no-cache");
  EXPECT_EQ(HeaderOf(r, "Vary"), "Accept-Encoding");
}

TEST_F(DashboardTest, GzipWhenTheClientTakesItAndTheSameBytesUnpacked) {
  const std::string identity = Get("/").body;
  http::Response gz = Get("/", {{"accept-encoding", "gzip, deflate, br"}});
  ASSERT_EQ(gz.status, 200);
  EXPECT_EQ(HeaderOf(gz, "Content-Encoding"), "gzip");
  EXPECT_LT(gz.body.size(), identity.size());
  EXPECT_EQ(Gunzip(gz.body), identity);
  EXPECT_EQ(HeaderOf(Get("/", {{"accept-encoding", "gzip;q=0, identity"}}), "Content-Encoding"), "");
}

TEST_F(DashboardTest, EveryListedAssetIsServedByItsBasename) {
  for (const EmbeddedAsset& a : EmbeddedAssets()) {
    http::Response r = Get("/assets/" + std::string(a.name), {{"accept-encoding", "gzip"}});
    EXPECT_EQ(r.status, 200) << a.name;
    EXPECT_EQ(r.content_type, a.content_type);
    EXPECT_EQ(Gunzip(r.body).size(), a.size) << a.name;
  }
  EXPECT_EQ(Get("/assets/app.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(Get("/assets/uPlot.iife.min.js").status, 200);  // from npm
  EXPECT_EQ(Get("/assets/uPlot.min.css").content_type, "text/css; charset=utf-8");
}

TEST_F(DashboardTest, AnEtagRoundTripGives304) {
  http::Response first = Get("/assets/app.js", {{"accept-encoding", "gzip"}});
  const std::string etag = HeaderOf(first, "ETag");
  ASSERT_FALSE(etag.empty());
  http::Response again = Get("/assets/app.js", {{"accept-encoding", "gzip"}, {"if-none-match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(HeaderOf(again, "ETag"), etag);
  EXPECT_EQ(Get("/assets/app.js", {{"accept-encoding", "gzip"}, {"if-none-match", "\"x\", W/" + etag}}).status, 304);
  // The identity representation has a tag of its own.
  EXPECT_EQ(Get("/assets/app.js", {{"if-none-match", etag}}).status, 200);
  EXPECT_EQ(Get("/assets/app.js", {{"if-none-match", "\"other\""}}).status, 200);
}

TEST_F(DashboardTest, HeadAnswersTheHeadersOnly) {
  http::Response r = Get("/assets/app.js", {}, "HEAD");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.body.empty());
  EXPECT_FALSE(HeaderOf(r, "ETag").empty());
}

TEST_F(DashboardTest, AnUnknownAssetIsAJson404) {
  http::Response r = Get("/assets/nope.js");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("\"NotFound\""), std::string::npos) << r.body;
  EXPECT_NE(Get("/assets/../secrets.key").status, 200);
  EXPECT_EQ(Get("/assets/").status, 404);
}

TEST(AcceptsGzipTest, ReadsTheHeaderAsRfc9110Says) {
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, GZIP;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip; q=0.000, *"));
  EXPECT_FALSE(AcceptsGzip("br, deflate"));
  EXPECT_FALSE(AcceptsGzip("identity"));
}

}  // namespace
}  // namespace ringmaster::server
