// ApiClient with several servers on loopback: it moves past a server that
// refuses connections or answers 503, follows a standby's 307 with the same
// request, remembers who answered, and gives up within its failover budget.
#include "client/api_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "http/server.h"

namespace ringmaster::client {
namespace {

using namespace std::chrono_literals;

// A port nothing listens on (bound, then closed).
int DeadPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string Url(int port) { return fmt::format("http://127.0.0.1:{}", port); }

// A server answering every path with what `answer` makes of the request.
std::unique_ptr<http::Server> Serve(std::function<http::Response(const http::Request&)> answer) {
  auto s = std::make_unique<http::Server>(http::ServerOptions{});
  http::RouteOptions open;
  open.authenticate = false;
  for (const char* method : {"GET", "POST"}) {
    s->Route(method, "/api/{path...}", open, [answer](http::Request& r, http::Responder respond) {
      respond(answer(r));
    });
  }
  EXPECT_TRUE(s->Start().ok());
  return s;
}

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leader_ = Serve([this](const http::Request& r) {
      ++leader_calls_;
      http::Response a;
      a.body = nlohmann::json{{"path", r.path}, {"body", r.body}}.dump();
      return a;
    });
    unavailable_ = Serve([](const http::Request&) {
      http::Response a = http::ErrorResponse(503, "unavailable", "this server is a standby and no leader is known");
      a.headers.emplace_back("Retry-After", "1");
      return a;
    });
    standby_ = Serve([this](const http::Request& r) {
      http::Response a = http::ErrorResponse(307, "unavailable", "this server is a standby");
      a.headers.emplace_back("Location", Url(leader_->port()) + r.target);
      return a;
    });
  }
  std::unique_ptr<http::Server> leader_, unavailable_, standby_;
  std::atomic<int> leader_calls_{0};
};

TEST_F(FailoverTest, ADeadServerIsPassedAndTheOneThatAnsweredIsRemembered) {
  const std::string leader = Url(leader_->port());
  ApiClient c(Url(DeadPort()) + "," + leader, "t");
  auto r = c.Get("/api/v1/jobs");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["path"], "/api/v1/jobs");
  EXPECT_EQ(c.current_url(), leader);
  // Copies share what they learnt; the next call goes straight there.
  ApiClient copy = c;
  EXPECT_EQ(copy.current_url(), leader);
}

TEST_F(FailoverTest, A503IsPassed) {
  ApiClient c(Url(unavailable_->port()) + "," + Url(leader_->port()), "t");
  auto r = c.Post("/api/v1/jobs", {{"x", 1}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(leader_calls_, 1);
}

TEST_F(FailoverTest, AStandbysRedirectIsFollowedWithTheSameRequest) {
  ApiClient c(Url(standby_->port()), "t");  // one URL: the leader is learnt from the standby
  auto r = c.Post("/api/v1/jobs?x=1", {{"name", "same"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["path"], "/api/v1/jobs");
  EXPECT_EQ(nlohmann::json::parse((*r)["body"].get<std::string>())["name"], "same");
  EXPECT_EQ(leader_calls_, 1);
}

TEST_F(FailoverTest, WithNoServerAnsweringItGivesUpWithinItsBudget) {
  ApiClient c(Url(DeadPort()) + "," + Url(unavailable_->port()), "t");
  CallOptions o;
  o.failover = 1500ms;
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Get("/api/v1/jobs", o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 5s);
}

TEST_F(FailoverTest, OneDeadServerFailsAtOnceAsBefore) {
  ApiClient c(Url(DeadPort()), "t");
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Get("/api/v1/jobs");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST_F(FailoverTest, AnEmptyListIsRefused) {
  ApiClient c(" , ", "t");
  EXPECT_EQ(c.Get("/api/v1/jobs").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::client
