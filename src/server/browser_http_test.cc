// What a browser meets over the wire (real HTTP and HTTPS on loopback): the
// session cookie's Secure flag under TLS, the dashboard's gzip'ed files, and
// the security headers on JSON answers.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/server_test_fixture.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

TEST_F(ServerTest, UnderTlsTheSessionCookieIsSecureAndItWorksBack) {
  ServerOptions o;
  o.tls = true;
  StartServer(o);
  httplib::SSLClient tls("127.0.0.1", server_->port());
  tls.set_ca_cert_path(server_->ca_path().c_str());
  tls.enable_server_certificate_verification(true);
  auto r = tls.Post("/api/v1/session", json{{"token", admin_}}.dump(), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string cookie = r->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("; Secure"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; HttpOnly"), std::string::npos) << cookie;
  const std::string pair = cookie.substr(0, cookie.find(';'));
  auto who = tls.Get("/api/v1/session", {{"Cookie", "theme=dark; " + pair}});
  ASSERT_TRUE(who);
  EXPECT_EQ(who->status, 200) << who->body;
  EXPECT_EQ(json::parse(who->body)["user"]["name"], "admin");
}

TEST_F(ServerTest, PlainHttpCookiesAreNotSecureAndJsonAnswersCarryNosniff) {
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Post("/api/v1/session", json{{"token", admin_}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  EXPECT_EQ(r->get_header_value("Set-Cookie").find("Secure"), std::string::npos);
  EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r->get_header_value("X-Frame-Options"), "DENY");
  auto missing = c.Get("/api/v1/no-such-route");  // the server's own errors too
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->get_header_value("X-Content-Type-Options"), "nosniff");
}

TEST_F(ServerTest, TheDashboardIsServedGzippedWithoutCredentials) {
  httplib::Client c("127.0.0.1", server_->port());
  c.set_decompress(false);
  auto r = c.Get("/", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("frame-ancestors 'none'"), std::string::npos);
  auto again = c.Get("/", {{"Accept-Encoding", "gzip"}, {"If-None-Match", r->get_header_value("ETag")}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  auto js = c.Get("/assets/uPlot.iife.min.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_GT(js->body.size(), 10'000u);
}

}  // namespace
}  // namespace ringmaster::server
