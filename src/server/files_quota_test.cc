// Storage that cannot be gamed, over real HTTP against a real server: the
// site's default quota, what empty files and deep keys cost, the cap on key
// depth, and revocation reaching requests already in flight (an upload's
// commit, a job's ?wait).
#include <atomic>
#include <future>
#include <thread>

#include "server/server_test_fixture.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

class FilesQuotaTest : public ServerTest {
 protected:
  void Restart(int64_t default_quota) {
    ServerOptions o;
    o.limits.default_file_quota = default_quota;
    StartServer(o);
  }
  httplib::Result Put(const std::string& path, const std::string& token, const std::string& body,
                      const std::string& type = "application/octet-stream") {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::seconds(10));
    return c.Put(path, {{"Authorization", "Bearer " + token}}, body, type);
  }
  json Usage(const std::string& token) { return json::parse(Call("GET", "/api/v1/whoami", token)->body)["files"]; }
  // A user and a token, and the token's id (to revoke it).
  std::pair<std::string, int64_t> UserWithTokenId(const std::string& name) {
    MakeUser(name);
    auto r = Call("POST", "/api/v1/tokens", admin_, json{{"user", name}}.dump());
    const json t = json::parse(r->body);
    return {t["token"].get<std::string>(), t["id"].get<int64_t>()};
  }
};

TEST_F(FilesQuotaTest, TheSiteDefaultQuotaAppliesToANewUserUntilAnAdminSetsOne) {
  Restart(64 << 10);
  const std::string bob = MakeUser("bob");
  EXPECT_EQ(Usage(bob)["quota_bytes"], 64 << 10);
  auto over = Put("/api/v1/files/users/bob/big", bob, std::string(70 << 10, 'b'));
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 413) << over->body;
  EXPECT_NE(over->body.find("quota"), std::string::npos) << over->body;
  EXPECT_EQ(Call("GET", "/api/v1/files/users/bob/big", bob)->status, 404);
  // An admin's quota overrides the default; 0 set explicitly is no quota at all.
  ASSERT_EQ(Put("/api/v1/users/bob/quota", admin_, R"({"file_bytes": 0})", "application/json")->status, 200);
  EXPECT_EQ(Usage(bob)["quota_bytes"], 0);
  EXPECT_EQ(Put("/api/v1/files/users/bob/big", bob, std::string(70 << 10, 'b'))->status, 201);
  ASSERT_EQ(Put("/api/v1/users/bob/quota", admin_, R"({"file_bytes": 1000000})", "application/json")->status, 200);
  EXPECT_EQ(Usage(bob)["quota_bytes"], 1000000);
}

TEST_F(FilesQuotaTest, EmptyFilesAndDeepKeysAreChargedAndTooDeepKeysRefused) {
  Restart(8 << 20);
  const std::string alice = MakeUser("alice");
  // 2,000 empty files one directory down: 4 KiB for each object and 4 KiB
  // for its directory level, so 8 MiB holds 1,024 of them.
  std::atomic<int> stored{0}, refused{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&, w] {
      for (int i = w; i < 2000; i += 8) {
        auto r = Put(fmt::format("/api/v1/files/users/alice/e/{}", i), alice, "");
        if (r && r->status == 201) ++stored;
        if (r && r->status == 413) ++refused;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(stored, 1024);
  EXPECT_EQ(refused, 2000 - 1024);
  EXPECT_EQ(Usage(alice)["bytes"], 1024 * 8192);
  // Deleting one gives its whole charge back.
  ASSERT_EQ(Call("DELETE", "/api/v1/files/users/alice/e/0", alice)->status, 200);
  EXPECT_EQ(Usage(alice)["bytes"], 1023 * 8192);
  // A key 500 directories deep (1,009 bytes, within the length limit) is
  // refused, naming it; 32 levels are the most.
  std::string deep = "users/alice/";
  for (int i = 0; i < 498; ++i) deep += "d/";
  deep += "f";
  auto r = Put("/api/v1/files/" + deep, alice, "x");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("levels deep"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("users/alice/d/d/"), std::string::npos) << r->body;
  EXPECT_EQ(Usage(alice)["bytes"], 1023 * 8192);
  ASSERT_EQ(Put("/api/v1/users/alice/quota", admin_, R"({"file_bytes": 0})", "application/json")->status, 200);
  std::string ok = "users/alice";
  for (int i = 0; i < 29; ++i) ok += "/d";
  ok += "/f";  // 32 segments, 29 levels below users/alice/
  EXPECT_EQ(Put("/api/v1/files/" + ok, alice, "x")->status, 201);
  EXPECT_EQ(Usage(alice)["bytes"], 1023 * 8192 + 1 + 30 * 4096);
  EXPECT_EQ(Put("/api/v1/files/" + ok + "/g", alice, "x")->status, 400);
  // Reconcile counts by the same rule.
  auto rec = Call("POST", "/api/v1/files/reconcile", admin_, "{}");
  ASSERT_EQ(rec->status, 200) << rec->body;
  EXPECT_EQ(Usage(alice)["bytes"], 1023 * 8192 + 1 + 30 * 4096);
}

// A quick look at what deep keys cost others: 32 uploads of 32-segment keys in
// parallel while another user's small uploads go on (printed, not asserted:
// no benchmark on shared machines).
TEST_F(FilesQuotaTest, DeepKeyUploadsLeaveOthersUploadsFast) {
  const std::string alice = MakeUser("alice"), bob = MakeUser("bob");
  std::vector<std::thread> deep;
  for (int w = 0; w < 32; ++w) {
    deep.emplace_back([&, w] {
      std::string key = fmt::format("users/alice/{}", w);
      for (int i = 0; i < 28; ++i) key += fmt::format("/{}", i);  // 32 segments
      key += "/f";
      EXPECT_EQ(Put("/api/v1/files/" + key, alice, "x")->status, 201);
    });
  }
  double worst_ms = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(Put(fmt::format("/api/v1/files/users/bob/s{}", i), bob, "y")->status, 201);
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& t : deep) t.join();
  std::printf("slowest of bob's 10 small uploads during 32 deep-key uploads: %.1f ms\n", worst_ms);
}

TEST_F(FilesQuotaTest, AnUploadWhoseTokenIsRevokedMidwayIsNotStored) {
  auto [carol, token_id] = UserWithTokenId("carol");
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(std::chrono::seconds(10));
  bool revoked = false;
  auto r = c.Put("/api/v1/files/users/carol/f", {{"Authorization", "Bearer " + carol}},
                 [&](size_t offset, httplib::DataSink& sink) {
                   if (offset >= (1 << 20)) {
                     sink.done();
                     return true;
                   }
                   if (offset >= (512 << 10) && !revoked) {  // the body is half sent
                     revoked = Call("DELETE", fmt::format("/api/v1/tokens/{}", token_id), admin_)->status == 200;
                   }
                   std::string piece(64 << 10, 'c');
                   return sink.write(piece.data(), piece.size());
                 },
                 "application/octet-stream");
  ASSERT_TRUE(revoked);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_EQ(Call("GET", "/api/v1/files/users/carol/f", admin_)->status, 404);
  // The same for a user disabled while their upload streams.
  auto [dave, unused] = UserWithTokenId("dave");
  bool disabled = false;
  r = c.Put("/api/v1/files/users/dave/f", {{"Authorization", "Bearer " + dave}},
            [&](size_t offset, httplib::DataSink& sink) {
              if (offset >= (1 << 20)) {
                sink.done();
                return true;
              }
              if (offset >= (512 << 10) && !disabled) {
                disabled = Call("POST", "/api/v1/users/dave/disable", admin_)->status == 200;
              }
              std::string piece(64 << 10, 'd');
              return sink.write(piece.data(), piece.size());
            },
            "application/octet-stream");
  ASSERT_TRUE(disabled);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_EQ(Call("GET", "/api/v1/files/users/dave/f", admin_)->status, 404);
}

TEST_F(FilesQuotaTest, AJobWaitOfARevokedTokenEndsWith401) {
  auto [erin, token_id] = UserWithTokenId("erin");
  // No node has 64 cpus: the job stays pending, and the wait runs its course.
  const int64_t id = SubmitAs(erin, R"({"command": "true", "resources": {"cpu": 64}})");
  auto wait = std::async(std::launch::async, [&, id] { return Call("GET", fmt::format("/api/v1/jobs/{}?wait=2", id), erin); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(Call("DELETE", fmt::format("/api/v1/tokens/{}", token_id), admin_)->status, 200);
  auto r = wait.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_EQ(r->body.find("\"state\""), std::string::npos) << r->body;
}

// Once a job ends its logs are archived into the files store and the
// server's copy goes: one copy, charged once, still what `logs` shows.
TEST_F(FilesQuotaTest, AnEndedJobsLogsAreKeptOnceAndChargedOnce) {
  const std::string frank = MakeUser("frank");
  std::string agent;
  RegisterAgent("n1", &agent);
  const int64_t id = SubmitAs(frank, "command: x\nresources: {cpu: 1}\n");
  const json t = PlacedTask(frank, id);
  const std::string task = fmt::format("/api/v1/agent/tasks/{}", t["id"].get<int64_t>());
  ASSERT_EQ(Call("POST", task + "/status", agent, json{{"attempt", 1}, {"state", "running"}}.dump())->status, 200);
  ASSERT_EQ(Call("POST", task + "/logs?attempt=1&offset=0", agent, "hello\nworld\n", "application/octet-stream")->status, 200);
  ASSERT_EQ(Call("POST", task + "/status", agent, json{{"attempt", 1}, {"state", "exited"}, {"exit_code", 0}}.dump())->status, 200);
  const auto server_copy = dir_ / "logs" / std::to_string(id);
  const int64_t charge = 12 + 4096;  // its bytes and the object's cost
  for (int i = 0; i < 100 && (Usage(frank)["bytes"] != charge || std::filesystem::exists(server_copy)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Usage(frank)["bytes"], charge);
  EXPECT_FALSE(std::filesystem::exists(server_copy)) << "the server's copy of job " << id << "'s logs is still there";
  auto logs = Call("GET", fmt::format("/api/v1/jobs/{}/logs", id), frank);
  ASSERT_EQ(logs->status, 200);
  EXPECT_EQ(logs->body, "[0] hello\n[0] world\n");
  ASSERT_EQ(Call("POST", "/api/v1/files/reconcile", admin_, "{}")->status, 200);
  EXPECT_EQ(Usage(frank)["bytes"], charge);
}

// Archived logs count against the quota and stay within it: a log bigger than
// the room left keeps its tail behind a marker, however many jobs there are.
TEST_F(FilesQuotaTest, ArchivedLogsKeepTheirTailWithinTheOwnersQuota) {
  const std::string gina = MakeUser("gina");
  ASSERT_EQ(Put("/api/v1/users/gina/quota", admin_, R"({"file_bytes": 65536})", "application/json")->status, 200);
  std::string agent;
  RegisterAgent("n1", &agent);
  const int64_t id = SubmitAs(gina, "command: x\nresources: {cpu: 1}\n");
  const json t = PlacedTask(gina, id);
  const std::string task = fmt::format("/api/v1/agent/tasks/{}", t["id"].get<int64_t>());
  ASSERT_EQ(Call("POST", task + "/status", agent, json{{"attempt", 1}, {"state", "running"}}.dump())->status, 200);
  std::string lines;
  for (int i = 0; i < 20000; ++i) lines += fmt::format("line {:06}\n", i);  // 240,000 bytes
  ASSERT_EQ(Call("POST", task + "/logs?attempt=1&offset=0", agent, lines, "application/octet-stream")->status, 200);
  ASSERT_EQ(Call("POST", task + "/status", agent, json{{"attempt", 1}, {"state", "exited"}, {"exit_code", 0}}.dump())->status, 200);
  const auto server_copy = dir_ / "logs" / std::to_string(id);
  for (int i = 0; i < 100 && std::filesystem::exists(server_copy); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(std::filesystem::exists(server_copy));
  EXPECT_LE(Usage(gina)["bytes"].get<int64_t>(), 65536);
  auto logs = Call("GET", fmt::format("/api/v1/jobs/{}/logs", id), gina);
  ASSERT_EQ(logs->status, 200);
  EXPECT_NE(logs->body.find("file quota is full"), std::string::npos) << logs->body.substr(0, 300);
  EXPECT_NE(logs->body.find("[0] line 019999\n"), std::string::npos);  // the tail is kept
  EXPECT_EQ(logs->body.find("[0] line 000000\n"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster::server
