// Servers sharing one store (server/leader.h) over real HTTP: the leader,
// the standby's redirects and 503s, a takeover once the lease runs out, a
// leader stepping down when its renewals fail or its writes are fenced, and
// idempotent submits. The store is testing::SharedMetaStore: one memory
// store whose lease the test controls.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "files/fake_store.h"
#include "server/server.h"
#include "server/testing/shared_meta_store.h"

namespace ringmaster::server {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr char kSpec[] = "command: sleep 600\nresources: {cpu: 64}\n";

class StandbyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_standby_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    for (auto& s : servers_) s.reset();
    std::filesystem::remove_all(dir_);
  }

  // Server `name` on the shared store; lease 600 ms unless `renew` says otherwise.
  Server* StartServer(const std::string& name, std::chrono::milliseconds renew = 100ms) {
    ServerOptions o;
    o.data_dir = (dir_ / name).string();
    o.meta = shared_.View(name);
    o.files = files_;
    o.election.id = name;
    o.election.lease = 600ms;
    o.election.renew = renew;
    o.election.retry = 50ms;
    o.on_stepped_down = [this, name](const std::string&) { stepped_down_ = name; };
    servers_.push_back(std::make_unique<Server>(o));
    Status st = servers_.back()->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return servers_.back().get();
  }

  static httplib::Result Call(Server* s, const std::string& method, const std::string& path, const std::string& token,
                              const std::string& body = "", httplib::Headers h = {}) {
    httplib::Client c("127.0.0.1", s->port());
    c.set_read_timeout(10s);
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return c.Get(path, h);
    return c.Post(path, h, body, "application/yaml");
  }
  static json Health(Server* s) { return json::parse(Call(s, "GET", "/healthz", "")->body); }

  // Polls (a hang guard of 10 s) until `s`'s /healthz says `role`.
  static bool WaitRole(Server* s, const std::string& role) {
    for (int i = 0; i < 200; ++i) {
      if (Health(s)["role"] == role) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  std::string AdminToken(const std::string& name) {
    std::string t = ReadFile((dir_ / name / "admin.token").string()).value();
    t.pop_back();
    return t;
  }

  testing::SharedMetaStore shared_{RealClock::Get()};
  std::shared_ptr<files::BlobStore> files_ = files::NewFakeBlobStore();
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::string stepped_down_;  // set on a server's thread, read after WaitRole
};

TEST_F(StandbyTest, AStandbyRedirectsToTheLeaderAndAnswersHealth) {
  Server* a = StartServer("a");
  ASSERT_TRUE(WaitRole(a, "leader"));
  Server* b = StartServer("b");
  ASSERT_TRUE(WaitRole(b, "standby"));
  for (int i = 0; i < 100 && Health(b)["leader"] != a->url(); ++i) std::this_thread::sleep_for(20ms);
  json h = Health(b);
  EXPECT_EQ(h["leader"], a->url());
  EXPECT_EQ(h["epoch"], 1);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(Health(a)["role"], "leader");

  auto r = Call(b, "GET", "/api/v1/jobs?limit=3", "any");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 307);
  EXPECT_EQ(r->get_header_value("Location"), a->url() + "/api/v1/jobs?limit=3");
  json body = json::parse(r->body);
  EXPECT_EQ(body["leader"], a->url());
  EXPECT_EQ(body["error"]["code"], "unavailable");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("standby"), std::string::npos);

  // The leader itself serves.
  EXPECT_EQ(Call(a, "GET", "/api/v1/jobs", AdminToken("a"))->status, 200);
}

TEST_F(StandbyTest, AStandbyWithNoLeaderAnswers503) {
  shared_.Steal("gone", "", 60s);  // a lease held, by nobody reachable
  Server* b = StartServer("b");
  ASSERT_TRUE(WaitRole(b, "standby"));
  auto r = Call(b, "POST", "/api/v1/jobs", "any", kSpec);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(r->body)["leader"], "");
  EXPECT_EQ(shared_.data().CountUsers().value(), 0) << "a standby wrote";
}

TEST_F(StandbyTest, TheStandbyTakesOverOnceTheLeasesRunsOutAndTheOldLeaderStepsDown) {
  Server* a = StartServer("a");
  ASSERT_TRUE(WaitRole(a, "leader"));
  const std::string token = AdminToken("a");
  Server* b = StartServer("b");
  ASSERT_TRUE(WaitRole(b, "standby"));
  shared_.Cut("a", true);  // a's renewals fail from now on
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitRole(b, "leader"));
  const auto took = std::chrono::steady_clock::now() - cut;
  EXPECT_LT(took, 3s) << "lease 600 ms";
  EXPECT_EQ(Health(b)["epoch"], 2);
  ASSERT_TRUE(WaitRole(a, "stepped-down"));
  EXPECT_EQ(stepped_down_, "a");
  // The old leader answers 503 to everything but /healthz; the new one serves
  // with the same users and tokens (one store).
  EXPECT_EQ(Call(a, "GET", "/api/v1/jobs", token)->status, 503);
  auto r = Call(b, "POST", "/api/v1/jobs", token, kSpec);
  EXPECT_EQ(r->status, 201) << r->body;
}

TEST_F(StandbyTest, AFencedWriteAnswers503AndTheLeaderStepsDown) {
  // Renewals every 30 s: the leader learns of the takeover only from its write.
  Server* a = StartServer("a", 30s);
  ASSERT_TRUE(WaitRole(a, "leader"));
  const std::string token = AdminToken("a");
  shared_.Steal("b", "http://127.0.0.1:1", 60s);  // another server took over while a was paused
  auto r = Call(a, "POST", "/api/v1/jobs", token, kSpec);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(shared_.data().ListActiveJobs().value().size(), 0u) << "a fenced write became visible";
  ASSERT_TRUE(WaitRole(a, "stepped-down"));
  EXPECT_EQ(stepped_down_, "a");
}

// Users' files on one machine's disk: that server may lead a shared store
// alone, but no server stands by beside it, and it stands by beside none.
TEST_F(StandbyTest, ALocalFilesServerLeadsAloneAndNoStandbyJoinsIt) {
  auto local = [this](const std::string& name) {
    ServerOptions o;
    o.data_dir = (dir_ / name).string();
    o.meta = shared_.View(name);
    o.election.id = name;
    o.election.lease = 600ms;
    o.election.renew = 100ms;
    o.election.retry = 50ms;
    return std::make_unique<Server>(o);
  };
  auto c = local("c");
  ASSERT_TRUE(c->Start().ok());
  ASSERT_TRUE(WaitRole(c.get(), "leader"));
  // A server with shared files, and another with local files of its own: refused, naming why.
  ServerOptions o;
  o.data_dir = (dir_ / "d").string();
  o.meta = shared_.View("d");
  o.files = files_;
  Server d(o);
  Status st = d.Start();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("own disk (--files local)"), std::string::npos) << st.message();
  auto e = local("e");
  st = e->Start();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cannot have a standby"), std::string::npos) << st.message();
}

TEST_F(StandbyTest, ALocalFilesServerCannotStandByASharedFilesLeader) {
  Server* a = StartServer("a");
  ASSERT_TRUE(WaitRole(a, "leader"));
  ServerOptions o;
  o.data_dir = (dir_ / "c").string();
  o.meta = shared_.View("c");
  Server s(o);
  Status st = s.Start();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("--files s3://"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("takes over"), std::string::npos) << st.message();
}

TEST_F(StandbyTest, ASubmitWithAnIdempotencyKeyMakesOneJob) {
  Server* a = StartServer("a");
  ASSERT_TRUE(WaitRole(a, "leader"));
  const std::string token = AdminToken("a");
  auto first = Call(a, "POST", "/api/v1/jobs", token, kSpec, {{"Idempotency-Key", "k-1_A"}});
  ASSERT_EQ(first->status, 201) << first->body;
  auto again = Call(a, "POST", "/api/v1/jobs", token, kSpec, {{"Idempotency-Key", "k-1_A"}});
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(json::parse(again->body), json::parse(first->body));
  auto other = Call(a, "POST", "/api/v1/jobs", token, kSpec, {{"Idempotency-Key", "k-2"}});
  ASSERT_EQ(other->status, 201) << other->body;
  EXPECT_NE(json::parse(other->body)["id"], json::parse(first->body)["id"]);
  for (const std::string& bad : std::vector<std::string>{"has space", std::string(129, 'x'), "a/b"}) {
    auto r = Call(a, "POST", "/api/v1/jobs", token, kSpec, {{"Idempotency-Key", bad}});
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(r->body.find("Idempotency-Key"), std::string::npos) << r->body;
  }
  EXPECT_EQ(shared_.data().ListActiveJobs().value().size(), 2u);
}

TEST_F(StandbyTest, AStoppedLeaderReleasesTheLease) {
  Server* a = StartServer("a");
  ASSERT_TRUE(WaitRole(a, "leader"));
  Server* b = StartServer("b");
  ASSERT_TRUE(WaitRole(b, "standby"));
  servers_.front()->Stop();
  // Released: b takes over within its retry interval, not the lease.
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitRole(b, "leader"));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 500ms);
}

}  // namespace
}  // namespace ringmaster::server
