// http: the pure parts (targets, routing, parameters) and the server's
// request pipeline in-process (Dispatch) and over a real socket.
#include "http/server.h"
#include "http/testing/loopback.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
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

// Issue 14: a full disk is its own answer, 507, not a 500 or a 429 (a limit).
TEST(HttpStatusForTest, AFullDiskIs507) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kInsufficientStorage), 507);
  EXPECT_STREQ(StatusCodeName(StatusCode::kInsufficientStorage), "InsufficientStorage");
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 429);
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
  using MethodPattern = std::pair<std::string, std::string>;
  EXPECT_EQ(router.Routes(), (std::vector<MethodPattern>{{"GET", "/api/v1/jobs"},
                                                         {"POST", "/api/v1/jobs"},
                                                         {"GET", "/api/v1/jobs/{id}"},
                                                         {"POST", "/api/v1/users/{name}/disable"}}));
}

TEST(RouterTest, ARestPlaceholderCapturesTheRestOfThePath) {
  Router router;
  auto h = [](Request&, Responder) {};
  router.Add("GET", "/api/v1/files", {}, h);
  router.Add("PUT", "/api/v1/files/{path...}", {}, h);
  std::vector<std::string> groups;
  std::string allow;
  ASSERT_TRUE(router.Find("PUT", "/api/v1/files/users/alice/a b/c.txt", &groups, &allow).ok());
  EXPECT_EQ(groups, std::vector<std::string>{"users/alice/a b/c.txt"});
  ASSERT_TRUE(router.Find("PUT", "/api/v1/files/x", &groups, &allow).ok());
  EXPECT_EQ(groups, std::vector<std::string>{"x"});
  ASSERT_TRUE(router.Find("PUT", "/api/v1/files/a//b/", &groups, &allow).ok());
  EXPECT_EQ(groups, std::vector<std::string>{"a//b/"});  // kept for the handler to refuse
  ASSERT_TRUE(router.Find("GET", "/api/v1/files", &groups, &allow).ok());
  EXPECT_EQ(router.Find("DELETE", "/api/v1/files/x", &groups, &allow).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(allow, "PUT");
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

using testing::Dial;

// Sends `head` (with Expect: 100-continue); sends `body` only if the server
// answers 100 Continue; returns everything the server said.
std::string ExpectContinueExchange(int port, const std::string& head, const std::string& body) {
  int fd = Dial(port);
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
    while (out.find('}') == std::string::npos && poll(&p, 1, 5000) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
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
    return ExpectContinueExchange(server.port(), head, body);
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

// A folded header line (obs-fold, RFC 9112 5.2) is refused with 400: Beast
// would join it into the value, which a proxy in front may read otherwise.
TEST(ServerSocketTest, ObsFoldIsRefused) {
  ServerOptions o;
  Server server(o);
  RouteOptions open;
  open.authenticate = false;
  server.Route("GET", "/x", open, [](Request&, Responder respond) { respond(Response{}); });
  ASSERT_TRUE(server.Start().ok());
  auto status_of = [&](const std::string& head) {
    const std::string out = ExpectContinueExchange(server.port(), head, "");
    return out.substr(0, 12);
  };
  EXPECT_EQ(status_of("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 200");
  EXPECT_EQ(status_of("GET /x HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n"), "HTTP/1.1 400");
  EXPECT_EQ(status_of("GET /x HTTP/1.1\r\nHost: x\r\nX-A: one\r\n\ttwo\r\n\r\n"), "HTTP/1.1 400");
  EXPECT_EQ(status_of("GET /x HTTP/1.1\r\n Host: x\r\n\r\n"), "HTTP/1.1 400");
  server.Stop();
}

// Sends `req` on a new connection and returns all that comes back until the
// server closes it (or says nothing for 5 s).
std::string AskAndReadToClose(int port, const std::string& req) {
  int fd = Dial(port);
  EXPECT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  std::string out;
  char buf[1024];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 5000) > 0) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// A streamed answer (a followed log) lasts as long as its source has more: the
// write deadline bounds each write, never the stream. The hang-up watch's
// read once kept the deadline armed when the headers went out, so every
// follow broke after the write timeout (60 s) however lively it was.
class TickSource final : public BodySource, public std::enable_shared_from_this<TickSource> {
 public:
  TickSource(Server& s, int ticks) : s_(s), left_(ticks) {}
  void Pull(std::function<void(std::string, bool)> next) override {
    s_.After(std::chrono::milliseconds(400), [self = shared_from_this(), next = std::move(next)] {
      const int n = --self->left_;
      next("tick " + std::to_string(n) + "\n", n == 0);
    });
  }

 private:
  Server& s_;
  std::atomic<int> left_;
};

TEST(ServerSocketTest, AStreamedAnswerOutlivesTheWriteTimeout) {
  ServerOptions o;
  o.write_timeout = std::chrono::seconds(1);
  Server server(o);
  RouteOptions open;
  open.authenticate = false;
  server.Route("GET", "/follow", open, [&server](Request&, Responder respond) {
    Response r;
    r.content_type = "text/plain";
    r.stream = std::make_shared<TickSource>(server, 6);  // 2.4 s in all
    respond(std::move(r));
  });
  ASSERT_TRUE(server.Start().ok());
  const std::string out = AskAndReadToClose(server.port(), "GET /follow HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(out.find("tick 5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tick 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\n0\r\n\r\n"), std::string::npos) << "no last chunk: " << out;
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
    const std::string out =
        AskAndReadToClose(server.port(), "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(out.rfind("HTTP/1.1 200", 0), 0u) << "round " << round << ": " << out;
  }
  for (int fd : silent) close(fd);
  server.Stop();
}

// A streamed upload: the handler reads the body in pieces as it arrives (of
// any size, Content-Length or chunked), holding one piece of memory; past the
// route's limit it gets ResourceExhausted; a client that goes away mid-body
// gives Aborted; and an answer before the body ended closes the connection.
class StreamedBodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.max_body_bytes_per_principal = 1 << 20;  // far below the uploads: streams hold one piece
    o.body_timeout = std::chrono::seconds(2);
    server_ = std::make_unique<Server>(o);
    server_->SetAuthenticator([](const Request&, const RouteOptions&) -> StatusOr<Principal> {
      return Principal{"u", {}};
    });
    RouteOptions stream;
    stream.stream_body = true;
    stream.max_body = 64 << 20;
    server_->Route("PUT", "/up", stream, [this](Request& r, Responder respond) {
      auto total = std::make_shared<uint64_t>(0);
      auto sum = std::make_shared<uint64_t>(0);
      auto reader = r.body_reader;
      auto step = std::make_shared<BodyReader::Next>();
      *step = [this, total, sum, reader, respond, step](Status st, std::string_view data, bool last) {
        if (!st.ok()) {
          std::lock_guard<std::mutex> l(mu_);
          errors_.push_back(st);
          int status = st.code() == StatusCode::kResourceExhausted ? 413 : HttpStatusFor(st.code());
          respond(ErrorResponse(status, StatusCodeName(st.code()), st.message()));
          *step = nullptr;  // break the cycle
          return;
        }
        max_piece_ = std::max<uint64_t>(max_piece_, data.size());
        *total += data.size();
        for (unsigned char c : data) *sum += c;
        if (!last) return reader->Read(*step);
        Response res;
        res.body = "{\"bytes\":" + std::to_string(*total) + ",\"sum\":" + std::to_string(*sum) + "}";
        respond(std::move(res));
        *step = nullptr;
      };
      reader->Read(*step);
    });
    RouteOptions early = stream;
    server_->Route("PUT", "/refuse", early, [](Request&, Responder respond) {
      respond(ErrorResponse(403, "PermissionDenied", "not here"));  // without reading the body
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(); }

  // Sends `head` then `body` in 1 MiB writes; returns what came back.
  std::string Exchange(const std::string& head, const std::string& body, bool hang_up_after_body = false) {
    int fd = Dial(server_->port());
    send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    for (size_t off = 0; off < body.size(); off += 1 << 20) {
      if (send(fd, body.data() + off, std::min<size_t>(1 << 20, body.size() - off), MSG_NOSIGNAL) < 0) break;
    }
    if (hang_up_after_body) {
      close(fd);
      return "";
    }
    std::string out;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 5000) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.find("\r\n\r\n") != std::string::npos && out.back() == '}') break;
    }
    close(fd);
    return out;
  }

  // The handler learns of a failure on a pool thread, a moment after the client sees it.
  void WaitForAnError() {
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!errors_.empty()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::unique_ptr<Server> server_;
  std::mutex mu_;
  std::vector<Status> errors_;
  std::atomic<uint64_t> max_piece_{0};
};

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

uint64_t SumOf(const std::string& s) {
  uint64_t sum = 0;
  for (unsigned char c : s) sum += c;
  return sum;
}

TEST_F(StreamedBodyTest, ContentLengthAndChunkedBodiesArriveWholeInPieces) {
  std::string body = Bytes(20 << 20);  // 20x the principal's body budget
  std::string out = Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n", body);
  EXPECT_NE(out.find("{\"bytes\":20971520,\"sum\":" + std::to_string(SumOf(body)) + "}"), std::string::npos) << out.substr(0, 300);
  EXPECT_LE(max_piece_.load(), 256u << 10);
  std::string chunked;
  std::string part = Bytes(3 << 20);
  for (int i = 0; i < 3; ++i) {
    char size[32];
    snprintf(size, sizeof size, "%zx\r\n", part.size());
    chunked += size + part + "\r\n";
  }
  chunked += "0\r\n\r\n";
  out = Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunked);
  EXPECT_NE(out.find("{\"bytes\":9437184,\"sum\":" + std::to_string(3 * SumOf(part)) + "}"), std::string::npos) << out.substr(0, 300);
  out = Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "");
  EXPECT_NE(out.find("{\"bytes\":0,\"sum\":0}"), std::string::npos) << out;
}

TEST_F(StreamedBodyTest, PastTheLimitTheHandlerGetsResourceExhausted) {
  std::string out = Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 70000000\r\n\r\n", "");
  EXPECT_EQ(out.rfind("HTTP/1.1 413", 0), 0u) << out;  // announced: refused before the handler
  std::string chunked;
  std::string part = Bytes(8 << 20);
  for (int i = 0; i < 9; ++i) chunked += "800000\r\n" + part + "\r\n";  // 72 MiB, never announced
  chunked += "0\r\n\r\n";
  out = Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunked);
  EXPECT_EQ(out.rfind("HTTP/1.1 413", 0), 0u) << out.substr(0, 300);
  std::lock_guard<std::mutex> l(mu_);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code(), StatusCode::kResourceExhausted) << errors_[0].ToString();
}

TEST_F(StreamedBodyTest, AClientThatGoesAwayMidBodyGivesAborted) {
  Exchange("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", Bytes(3 << 20), /*hang_up=*/true);
  WaitForAnError();
  std::lock_guard<std::mutex> l(mu_);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code(), StatusCode::kAborted) << errors_[0].ToString();
}

TEST_F(StreamedBodyTest, AStalledBodyTimesOut) {
  // The deadline closes the connection (nothing can be answered on it) and
  // the handler learns why, so it can drop what it had received.
  int fd = Dial(server_->port());
  std::string head = "PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc";
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  ASSERT_GT(poll(&p, 1, 10000), 0);
  EXPECT_LE(recv(fd, buf, sizeof buf, 0), 0);  // closed
  close(fd);
  WaitForAnError();
  std::lock_guard<std::mutex> l(mu_);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code(), StatusCode::kDeadlineExceeded) << errors_[0].ToString();
}

TEST_F(StreamedBodyTest, ExpectContinueIsAnsweredOnlyWhenTheHandlerReads) {
  auto exchange = [&](const std::string& path, const std::string& body) {
    return ExpectContinueExchange(server_->port(),
                                  "PUT " + path + " HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                                      std::to_string(body.size()) + "\r\n\r\n",
                                  body);
  };
  std::string refused = exchange("/refuse", Bytes(1000));
  EXPECT_EQ(refused.rfind("HTTP/1.1 403", 0), 0u) << refused;  // no 100 first: the body was never wanted
  std::string taken = exchange("/up", Bytes(1000));
  EXPECT_EQ(taken.rfind("HTTP/1.1 100 Continue", 0), 0u) << taken;
  EXPECT_NE(taken.find("{\"bytes\":1000"), std::string::npos) << taken;
}

TEST_F(StreamedBodyTest, AnAnswerBeforeTheBodyEndedClosesTheConnection) {
  std::string out = Exchange("PUT /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n", Bytes(5000000));
  EXPECT_EQ(out.rfind("HTTP/1.1 403", 0), 0u) << out.substr(0, 200);
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out.substr(0, 300);
}

}  // namespace
}  // namespace ringmaster::http
