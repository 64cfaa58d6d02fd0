// http: taken-over connections (RouteOptions::takeover) spliced with a
// loopback upstream: the preface and buffered bytes go first, the upstream's
// head is rewritten, upgrade bytes flow both ways, limits, idle and refusal.
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

#include "http/server.h"
#include "http/testing/loopback.h"

namespace ringmaster::http {
namespace {

using testing::Dial;

void Send(int fd, const std::string& s) { ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }

// Reads until `want` appears, the peer closes, or 5 s pass.
std::string ReadUntil(int fd, const std::string& want, int timeout_ms = 5000) {
  std::string out;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while ((want.empty() || out.find(want) == std::string::npos) && std::chrono::steady_clock::now() < deadline) {
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True once the peer has closed (EOF or reset) within `timeout_ms`.
bool ClosedWithin(int fd, int timeout_ms) {
  ReadUntil(fd, "\x01never", timeout_ms);
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// A loopback upstream: records what arrives before its answer's trigger,
// answers `answer`, then (if echo) echoes every byte back until closed.
class Upstream {
 public:
  Upstream(std::string answer, bool echo) : answer_(std::move(answer)), echo_(echo) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 16);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~Upstream() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::string received() {
    std::lock_guard<std::mutex> l(mu_);
    return received_;
  }

 private:
  void Serve() {
    int c = accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string got = ReadUntil(c, "\r\n\r\n");
    {
      std::lock_guard<std::mutex> l(mu_);
      received_ = got;
    }
    send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
    const size_t end = got.find("\r\n\r\n");
    if (echo_ && end != std::string::npos && end + 4 < got.size()) {
      send(c, got.data() + end + 4, got.size() - end - 4, MSG_NOSIGNAL);  // what came with the head
    }
    char buf[4096];
    pollfd p{c, POLLIN, 0};
    while (echo_ && poll(&p, 1, 10000) > 0) {
      ssize_t n = recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      {
        std::lock_guard<std::mutex> l(mu_);
        received_.append(buf, static_cast<size_t>(n));
      }
      send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
    }
    close(c);
  }

  std::string answer_;
  bool echo_;
  int fd_ = -1, port_ = 0;
  std::mutex mu_;
  std::string received_;
  std::thread thread_;
};

class TakeoverTest : public ::testing::Test {
 protected:
  void Start(ServerOptions o = {}) {
    server_ = std::make_unique<Server>(o);
    server_->SetAuthenticator([](const Request& head, const RouteOptions&) -> StatusOr<Principal> {
      if (head.Header("authorization") != "Bearer good") return Unauthenticated("no credentials");
      return Principal{"alice", {}};
    });
    RouteOptions take;
    take.takeover = true;
    server_->Route("GET", "/t/{name}", take, [this](Request& r, Responder respond) {
      if (r.matches[0] == "refuse") return respond(ErrorResponse(404, "NotFound", "no such thing"));
      Connection::Upstream up;
      up.host = "127.0.0.1";
      up.port = upstream_port_;
      up.preface = "TICKET\n" + r.method + " " + r.target + " HTTP/1.1\r\nHost: up\r\n\r\n";
      up.rewrite_head = [](UpstreamHead& h) {
        std::erase_if(h.headers, [](const auto& f) { return f.first == "Set-Cookie" && f.second.rfind("rm_", 0) == 0; });
        h.headers.emplace_back("X-Rewritten", "1");
      };
      r.connection->Splice(std::move(up));
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<Server> server_;
  int upstream_port_ = 0;
};

TEST_F(TakeoverTest, UpgradeBytesFlowBothWaysAfterTheRewrittenHead) {
  Upstream up("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "Set-Cookie: rm_session=evil\r\nSet-Cookie: _xsrf=ok\r\n\r\n",
              /*echo=*/true);
  upstream_port_ = up.port();
  Start();
  int fd = Dial(server_->port());
  // "EARLY" arrives with the head: the server has it buffered and must forward it first.
  Send(fd, "GET /t/ws?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\n\r\nEARLY");
  std::string head = ReadUntil(fd, "EARLY");
  EXPECT_EQ(head.rfind("HTTP/1.1 101 Switching Protocols\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("X-Rewritten: 1"), std::string::npos) << head;
  EXPECT_EQ(head.find("rm_session"), std::string::npos) << head;
  EXPECT_NE(head.find("_xsrf=ok"), std::string::npos) << head;
  EXPECT_EQ(head.find("Connection: close"), std::string::npos) << head;
  Send(fd, "ping-from-client");
  EXPECT_NE(ReadUntil(fd, "ping-from-client").find("ping-from-client"), std::string::npos);
  std::string got = up.received();
  EXPECT_EQ(got.rfind("TICKET\nGET /t/ws?x=1 HTTP/1.1\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("EARLY"), std::string::npos) << got;
  close(fd);
}

TEST_F(TakeoverTest, APlainAnswerIsForwardedAndClosesTheConnection) {
  Upstream up("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello", /*echo=*/false);
  upstream_port_ = up.port();
  Start();
  int fd = Dial(server_->port());
  Send(fd, "GET /t/page HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n");
  std::string out = ReadUntil(fd, "");
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
  EXPECT_EQ(out.find("keep-alive"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\n\r\nhello"), std::string::npos) << out;
  EXPECT_TRUE(ClosedWithin(fd, 2000));
  close(fd);
}

TEST_F(TakeoverTest, AfterARefusedUpgradeNothingMoreReachesTheUpstream) {
  Upstream up("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno", /*echo=*/true);
  upstream_port_ = up.port();
  Start();
  int fd = Dial(server_->port());
  // A second request pipelined behind the upgrade, in the same segment and after it:
  // only the route's handler may send a request upstream.
  Send(fd, "GET /t/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\n\r\nGET /t/secret HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string out = ReadUntil(fd, "\r\n\r\nno");
  Send(fd, "GET /t/later HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
  EXPECT_TRUE(ClosedWithin(fd, 2000));  // the upstream keeps its end open: the server closes
  close(fd);
  const std::string got = up.received();
  EXPECT_NE(got.find("GET /t/ws HTTP/1.1"), std::string::npos) << got;
  EXPECT_EQ(got.find("/t/secret"), std::string::npos) << got;
  EXPECT_EQ(got.find("/t/later"), std::string::npos) << got;
}

TEST_F(TakeoverTest, AnUpgradeRequestsOwnBodyGoesBeforeTheAnswer) {
  Upstream up("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", /*echo=*/true);
  upstream_port_ = up.port();
  Start();
  int fd = Dial(server_->port());
  Send(fd, "GET /t/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nContent-Length: 4\r\n\r\nBODYGET /t/secret HTTP/1.1\r\n\r\n");
  std::string out = ReadUntil(fd, "\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
  EXPECT_TRUE(ClosedWithin(fd, 2000));
  close(fd);
  const std::string got = up.received();
  EXPECT_NE(got.find("\r\n\r\nBODY"), std::string::npos) << got;
  EXPECT_EQ(got.find("/t/secret"), std::string::npos) << got;
}

TEST_F(TakeoverTest, AuthenticationAndTheHandlersOwnAnswerComeFirst) {
  upstream_port_ = 1;
  Start();
  int fd = Dial(server_->port());
  Send(fd, "GET /t/ws HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string out = ReadUntil(fd, "}");
  EXPECT_EQ(out.rfind("HTTP/1.1 401", 0), 0u) << out;
  close(fd);
  fd = Dial(server_->port());
  Send(fd, "GET /t/refuse HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n");
  out = ReadUntil(fd, "}");
  EXPECT_EQ(out.rfind("HTTP/1.1 404", 0), 0u) << out;
  EXPECT_TRUE(ClosedWithin(fd, 2000));
  close(fd);
}

TEST_F(TakeoverTest, ARefusedUpstreamIs502Json) {
  // A port that was just free: nothing listens there.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len);
  upstream_port_ = ntohs(a.sin_port);
  close(probe);
  Start();
  int fd = Dial(server_->port());
  Send(fd, "GET /t/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n");
  std::string out = ReadUntil(fd, "}}");
  EXPECT_EQ(out.rfind("HTTP/1.1 502", 0), 0u) << out;
  EXPECT_NE(out.find("application/json"), std::string::npos) << out;
  EXPECT_NE(out.find("\"code\":\"Unavailable\""), std::string::npos) << out;
  close(fd);
}

TEST_F(TakeoverTest, TakeoversAreLimitedPerPrincipalAndIdlePairsClose) {
  Upstream up("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", /*echo=*/true);
  upstream_port_ = up.port();
  ServerOptions o;
  o.max_takeovers_per_principal = 1;
  o.takeover_idle_timeout = std::chrono::milliseconds(500);
  Start(o);
  const std::string req = "GET /t/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nUpgrade: websocket\r\n\r\n";
  int first = Dial(server_->port());
  Send(first, req);
  std::string head = ReadUntil(first, "\r\n\r\n");
  ASSERT_EQ(head.rfind("HTTP/1.1 101", 0), 0u) << head;
  int second = Dial(server_->port());
  Send(second, req);
  std::string out = ReadUntil(second, "}}");
  EXPECT_EQ(out.rfind("HTTP/1.1 429", 0), 0u) << out;
  close(second);
  // Nothing flows either way: the pair closes after the idle timeout.
  EXPECT_TRUE(ClosedWithin(first, 3000));
  close(first);
}

TEST(TakeoverDispatchTest, WithoutASocketSpliceAnswers502) {
  Server server{ServerOptions{}};
  RouteOptions take;
  take.takeover = true;
  take.authenticate = false;
  server.Route("GET", "/t", take, [](Request& r, Responder) { r.connection->Splice({"127.0.0.1", 1, "", nullptr}); });
  Request req;
  req.method = "GET";
  req.target = "/t";
  int status = 0;
  server.Dispatch(req, [&](Response r) { status = r.status; });
  EXPECT_EQ(status, 502);
}

}  // namespace
}  // namespace ringmaster::http
