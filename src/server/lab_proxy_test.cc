// The notebook proxy's rules: the platform's cookies and credentials never
// reach a notebook, and a notebook's cookies stay on its own path.
#include "server/lab_proxy.h"

#include <gtest/gtest.h>

namespace ringmaster::server {
namespace {

TEST(LabProxy, TheSessionCookieIsStrippedAndJupytersAreKept) {
  EXPECT_EQ(StripPlatformCookies("rm_session=s3cret; _xsrf=2|abc; username-x=y"), "_xsrf=2|abc; username-x=y");
  EXPECT_EQ(StripPlatformCookies("_xsrf=1;rm_session=s3cret"), "_xsrf=1");
  EXPECT_EQ(StripPlatformCookies("RM_SESSION=s3cret; rm_other=1"), "");
  EXPECT_EQ(StripPlatformCookies(""), "");
}

TEST(LabProxy, SetCookieMustStayUnderTheJobsLabPathAndNotBeThePlatforms) {
  EXPECT_TRUE(MayPassSetCookie("_xsrf=2|abc; expires=Tue, 01 Jan 2030 00:00:00 GMT; Path=/jobs/7/lab/", 7));
  EXPECT_TRUE(MayPassSetCookie("a=b; Path=/jobs/7/lab", 7));
  EXPECT_TRUE(MayPassSetCookie("a=b; HttpOnly; path=/jobs/7/lab/api", 7));
  EXPECT_FALSE(MayPassSetCookie("a=b; Path=/", 7));
  EXPECT_FALSE(MayPassSetCookie("a=b; Path=/jobs/7/labx", 7));
  EXPECT_FALSE(MayPassSetCookie("a=b; Path=/jobs/8/lab/", 7)) << "another job's notebook";
  EXPECT_FALSE(MayPassSetCookie("a=b", 7)) << "no Path: dropped";
  EXPECT_FALSE(MayPassSetCookie("rm_session=forged; Path=/jobs/7/lab/", 7));
}

TEST(LabProxy, HeadersActingOnTheWholeOriginNeverPass) {
  EXPECT_FALSE(MayPassHeader("Service-Worker-Allowed", "/", 7));
  EXPECT_FALSE(MayPassHeader("clear-site-data", "\"cookies\"", 7));
  EXPECT_FALSE(MayPassHeader("Set-Cookie", "a=b; Path=/", 7));
  EXPECT_TRUE(MayPassHeader("Set-Cookie", "a=b; Path=/jobs/7/lab/", 7));
  EXPECT_TRUE(MayPassHeader("Content-Type", "text/html", 7));
  EXPECT_FALSE(MayPassSetCookie("a=b; Path=/jobs/7/lab/; Domain=example.org", 7));
  EXPECT_FALSE(MayPassSetCookie("a=b; Path=/jobs/7/lab/; Path=/", 7)) << "a second Path wins in browsers";
}

http::Request Head(std::vector<std::pair<std::string, std::string>> headers) {
  http::Request r;
  r.method = "POST";
  r.target = "/jobs/7/lab/api/kernels?x=1";
  r.remote = "10.1.2.3";
  r.headers = std::move(headers);
  return r;
}

TEST(LabProxy, TheForwardedHeadDropsCredentialsAndSaysWhoAsked) {
  const std::string head = ForwardedHead(Head({{"host", "rm.example:8080"},
                                               {"authorization", "Bearer rm_secret"},
                                               {"cookie", "rm_session=s3cret; _xsrf=abc"},
                                               {"x-forwarded-for", "6.6.6.6"},
                                               {"x-xsrftoken", "abc"},
                                               {"content-length", "2"},
                                               {"connection", "keep-alive"}}),
                                         /*tls=*/true);
  EXPECT_EQ(head.rfind("POST /jobs/7/lab/api/kernels?x=1 HTTP/1.1\r\n", 0), 0u) << head;
  EXPECT_EQ(head.find("rm_secret"), std::string::npos) << head;
  EXPECT_EQ(head.find("s3cret"), std::string::npos) << head;
  EXPECT_EQ(head.find("6.6.6.6"), std::string::npos) << head;
  EXPECT_NE(head.find("cookie: _xsrf=abc\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("x-xsrftoken: abc\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("content-length: 2\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("connection: close\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("x-forwarded-for: 10.1.2.3\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("x-forwarded-proto: https\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("x-forwarded-host: rm.example:8080\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

TEST(LabProxy, AWebSocketUpgradeStaysAnUpgrade) {
  const std::string head = ForwardedHead(
      Head({{"host", "h"}, {"connection", "keep-alive, Upgrade"}, {"upgrade", "websocket"}, {"cookie", "rm_session=x"}}),
      /*tls=*/false);
  EXPECT_NE(head.find("connection: Upgrade\r\nupgrade: websocket\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("connection: close"), std::string::npos) << head;
  EXPECT_EQ(head.find("cookie"), std::string::npos) << head;
  EXPECT_NE(head.find("x-forwarded-proto: http\r\n"), std::string::npos) << head;
}

TEST(LabProxy, TheNotebookListensOnAPrivateSocketUnderItsJobsPath) {
  auto argv = NotebookCommand(7, 20'000);
  ASSERT_EQ(argv.size(), 3u);
  EXPECT_EQ(argv[0], "/bin/sh");
  EXPECT_NE(argv[2].find("chmod 0700"), std::string::npos);
  EXPECT_NE(argv[2].find("--sock-mode=0600"), std::string::npos);
  EXPECT_NE(argv[2].find("--NotebookApp.base_url=/jobs/7/lab/"), std::string::npos);
  EXPECT_NE(argv[2].find("--NotebookApp.shutdown_no_activity_timeout=20 "), std::string::npos);
  EXPECT_NE(NotebookCommand(7, 0)[2].find("--NotebookApp.shutdown_no_activity_timeout=0 "), std::string::npos);
}

TEST(LabTunnels, KeysDifferByNodeAndPortsAreRemembered) {
  LabTunnels t("secret");
  EXPECT_EQ(t.NodeKey("a").size(), 64u);
  EXPECT_NE(t.NodeKey("a"), t.NodeKey("b"));
  EXPECT_EQ(t.Port(1), 0);
  t.SetPort(1, 7070);
  EXPECT_EQ(t.Port(1), 7070);
}

}  // namespace
}  // namespace ringmaster::server
