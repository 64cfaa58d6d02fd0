// http: the pure parts (targets, routing, parameters) and the server's
// request pipeline in-process (Dispatch) and over a real socket.
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

namespace ringmaster::http {
namespace {

TEST(PercentDecodeTest, DecodesAndRefusesMalformedEscapesAndNul) {
  EXPECT_EQ(PercentDecode("/a%20b%2F", false).value(), "/a b/");
  EXPECT_EQ(PercentDecode("a+b", true).value(), "a b");
  EXPECT_EQ(PercentDecode("a+b", false).value(), "a+b");
  EXPECT_FALSE(PercentDecode("%", false));
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%zz", false));
  EXPECT_FALSE(PercentDecode("a%00b", false));
}

TEST(ParseTargetTest, SplitsPathAndQuery) {
  std::string path;
  std::vector<std::pair<std::string, std::string>> q;
  ASSERT_TRUE(ParseTarget("/api/v1/jobs?limit=5&all&x=a%26b", &path, &q).ok());
  EXPECT_EQ(path, "/api/v1/jobs");
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0], (std::pair<std::string, std::string>{"limit", "5"}));
  EXPECT_EQ(q[1], (std::pair<std::string, std::string>{"all", ""}));
  EXPECT_EQ(q[2].second, "a&b");
  EXPECT_FALSE(ParseTarget("http://evil/x", &path, &q).ok());
  EXPECT_FALSE(ParseTarget("", &path, &q).ok());
  std::string many = "/x?";
  for (int i = 0; i < 100; ++i) many += "a=1&";
  EXPECT_FALSE(ParseTarget(many, &path, &q).ok());
}

TEST(RequestTest, ParamsGivenTwiceAreRefused) {
  Request r;
  r.query = {{"rank", "1"}, {"rank", "2"}, {"x", "y"}};
  EXPECT_FALSE(r.Param("rank").ok());
  EXPECT_EQ(r.Param("x").value(), "y");
  EXPECT_FALSE(r.Param("absent").value().has_value());
}

TEST(RouterTest, MatchesSegmentsCapturesIdsAndNamesAndListsAllowedMethods) {
  Router router;
  auto h = [](Request&, Responder) {};
  router.Add("GET", "/api/v1/jobs", {}, h);
  router.Add("POST", "/api/v1/jobs", {}, h);
  router.Add("GET", "/api/v1/jobs/{id}", {}, h);
  router.Add("POST", "/api/v1/users/{name}/disable", {}, h);
  std::vector<std::string> groups;
  std::string allow;
  auto r = router.Find("GET", "/api/v1/jobs/42", &groups, &allow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(groups, std::vector<std::string>{"42"});
  ASSERT_TRUE(router.Find("POST", "/api/v1/users/alice/disable", &groups, &allow).ok());
  EXPECT_EQ(groups, std::vector<std::string>{"alice"});
  EXPECT_EQ(router.Find("GET", "/api/v1/jobs/4x", &groups, &allow).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(router.Find("GET", "/api/v1/jobs/1234567890123456789", &groups, &allow).status().code(),
            StatusCode::kNotFound);  // more than 18 digits: never an overflow
  EXPECT_EQ(router.Find("GET", "/api/v1/jobs/", &groups, &allow).status().code(), StatusCode::kNotFound);
  auto m = router.Find("DELETE", "/api/v1/jobs", &groups, &allow);
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(allow, "GET, POST");
  // Matching is linear: a 60 KiB path is no problem (regular expressions recurse).
  EXPECT_EQ(router.Find("GET", "/api/v1/jobs/" + std::string(60000, '1'), &groups, &allow).status().code(),
            StatusCode::kNotFound);
}

class DispatchTest : public ::testing::Test {
 protected:
  DispatchTest() : server_(ServerOptions{}) {
    server_.SetAuthenticator([](const Request& head, const RouteOptions& route) -> StatusOr<Principal> {
      if (head.Header("authorization") != "Bearer good") return Unauthenticated("who are you?");
      if (route.access == "admin") return PermissionDenied("admins only");
      return Principal{"tester", {}};
    });
    RouteOptions small;
    small.max_body = 8;
    server_.Route("POST", "/small", small, [this](Request& r, Responder respond) {
      ++handled_;
      Response res;
      res.body = "{\"got\":" + std::to_string(r.body.size()) + "}";
      respond(std::move(res));
    });
    server_.Route("GET", "/throws", {}, [](Request&, Responder) { throw std::runtime_error("secret internals"); });
    RouteOptions admin;
    admin.access = "admin";
    server_.Route("GET", "/admin", admin, [this](Request&, Responder respond) {
      ++handled_;
      respond(Response{});
    });
  }

  Response Run(const std::string& method, const std::string& target, const std::string& auth, std::string body = "") {
    Request r;
    r.method = method;
    r.target = target;
    if (!auth.empty()) r.headers.emplace_back("authorization", auth);
    r.body = std::move(body);
    Response out;
    server_.Dispatch(std::move(r), [&](Response res) { out = std::move(res); });
    return out;
  }

  Server server_;
  int handled_ = 0;
};

TEST_F(DispatchTest, AuthenticationComesFirstAndErrorsAreJson) {
  Response r = Run("POST", "/small", "", "0123456789abcdef");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["message"], "who are you?");
  EXPECT_EQ(Run("GET", "/admin", "Bearer good").status, 403);
  EXPECT_EQ(handled_, 0);
  r = Run("POST", "/small", "Bearer good", "0123456789abcdef");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "InvalidArgument");
  EXPECT_EQ(Run("POST", "/small", "Bearer good", "1234").status, 200);
  EXPECT_EQ(handled_, 1);
  r = Run("GET", "/nowhere", "Bearer good");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "NotFound");
  r = Run("PUT", "/small", "Bearer good");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Run("GET", "/a%zz", "Bearer good").status, 400);
}

TEST_F(DispatchTest, AThrowingHandlerAnswers500WithoutItsText) {
  Response r = Run("GET", "/throws", "Bearer good");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find("secret internals"), std::string::npos);
  EXPECT_NE(r.body.find("the server log has the cause"), std::string::npos);
  for (const auto& [k, v] : r.headers) EXPECT_EQ(v.find("secret"), std::string::npos);
}

// A TCP connection to the server on loopback.
int Dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Over a socket: Expect: 100-continue is answered before the body is sent,
// and only when the request may go on.
TEST(ServerSocketTest, ExpectContinueIsAnsweredOnlyForAcceptedRequests) {
  ServerOptions o;
  Server server(o);
  server.SetAuthenticator([](const Request& head, const RouteOptions&) -> StatusOr<Principal> {
    if (head.Header("authorization") != "Bearer good") return Unauthenticated("no");
    return Principal{"t", {}};
  });
  server.Route("POST", "/up", {}, [](Request& r, Responder respond) {
    Response res;
    res.body = "{\"got\":" + std::to_string(r.body.size()) + "}";
    respond(std::move(res));
  });
  ASSERT_TRUE(server.Start().ok());
  auto exchange = [&](const std::string& head, const std::string& body) {
    int fd = Dial(server.port());
    EXPECT_GT(send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
    std::string out;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
    if (out.rfind("HTTP/1.1 100", 0) == 0) {
      send(fd, body.data(), body.size(), MSG_NOSIGNAL);
      if (poll(&p, 1, 5000) > 0) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) out.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    return out;
  };
  std::string ok = exchange(
      "POST /up HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
      "abc");
  EXPECT_EQ(ok.rfind("HTTP/1.1 100 Continue", 0), 0u) << ok;
  EXPECT_NE(ok.find("{\"got\":3}"), std::string::npos) << ok;
  std::string no = exchange("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", "abc");
  EXPECT_EQ(no.rfind("HTTP/1.1 401", 0), 0u) << no;
  server.Stop();
}

// At the connection limit, silent connections make room: a flood of them
// cannot keep a real client (an agent's heartbeat, say) out.
TEST(ServerSocketTest, SilentConnectionsMakeRoomAtTheLimit) {
  ServerOptions o;
  o.max_connections = 8;
  Server server(o);
  RouteOptions open;
  open.authenticate = false;
  server.Route("GET", "/ping", open, [](Request&, Responder respond) { respond(Response{}); });
  ASSERT_TRUE(server.Start().ok());
  auto dial = [&] { return Dial(server.port()); };
  std::vector<int> silent;
  for (int i = 0; i < 32; ++i) {  // four times the limit, saying nothing
    silent.push_back(dial());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int round = 0; round < 3; ++round) {
    int fd = dial();
    const std::string req = "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
    std::string out;
    char buf[1024];
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 5000) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    EXPECT_EQ(out.rfind("HTTP/1.1 200", 0), 0u) << "round " << round << ": " << out;
  }
  for (int fd : silent) close(fd);
  server.Stop();
}

}  // namespace
}  // namespace ringmaster::http
