// The REST API over real HTTP against a real server (SQLite in a temp dir):
// authentication, per-user isolation, validation that stores nothing.
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_server_test_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    StartServer();
    admin_ = ReadFile((dir_ / "admin.token").string()).value();
    admin_.pop_back();  // newline
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void StartServer() {
    ServerOptions o;
    o.data_dir = dir_.string();
    server_ = std::make_unique<Server>(o);
    ASSERT_TRUE(server_->Start().ok());
  }

  httplib::Result Call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "", const std::string& type = "application/json") {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::seconds(10));
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return c.Get(path, h);
    if (method == "DELETE") return c.Delete(path, h);
    return c.Post(path, h, body, type);
  }

  std::string MakeUser(const std::string& name) {
    auto r = Call("POST", "/api/v1/users", admin_, json{{"name", name}}.dump());
    EXPECT_EQ(r->status, 201) << r->body;
    r = Call("POST", "/api/v1/tokens", admin_, json{{"user", name}}.dump());
    EXPECT_EQ(r->status, 201) << r->body;
    return json::parse(r->body)["token"];
  }

  int64_t SubmitAs(const std::string& token, const std::string& spec) {
    auto r = Call("POST", "/api/v1/jobs", token, spec, "application/yaml");
    EXPECT_EQ(r->status, 201) << r->body;
    return json::parse(r->body)["id"];
  }

  static std::string ErrorMessage(const httplib::Result& r) { return json::parse(r->body)["error"]["message"]; }

  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
  std::string admin_;
};

TEST_F(ServerTest, AdminTokenFileIsPrivate) {
  struct stat st;
  ASSERT_EQ(stat((dir_ / "admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(admin_.rfind("rm_", 0), 0u);
}

TEST_F(ServerTest, HealthNeedsNoTokenButEverythingElseDoes) {
  EXPECT_EQ(Call("GET", "/healthz", "")->status, 200);
  auto r = Call("GET", "/api/v1/jobs", "");
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(ErrorMessage(r).find("Authorization: Bearer"), std::string::npos);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", "rm_not_a_real_token")->status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/nodes", "")->status, 401);
  EXPECT_EQ(Call("POST", "/api/v1/jobs", "", "command: x")->status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", admin_)->status, 200);
}

TEST_F(ServerTest, UsersSeeOnlyTheirOwnJobsAndLogs) {
  std::string bob = MakeUser("bob"), carol = MakeUser("carol");
  int64_t id = SubmitAs(bob, "command: echo secret\nresources: {cpu: 64}\n");
  std::string path = "/api/v1/jobs/" + std::to_string(id);

  EXPECT_EQ(Call("GET", path, bob)->status, 200);
  EXPECT_EQ(Call("GET", path, admin_)->status, 200);
  auto r = Call("GET", path, carol);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorMessage(r), "job " + std::to_string(id) + " not found");
  EXPECT_EQ(Call("GET", path + "/logs", carol)->status, 404);
  EXPECT_EQ(Call("GET", path + "/logs?follow=1", carol)->status, 404);
  EXPECT_EQ(Call("POST", path + "/cancel", carol, "{}")->status, 404);
  EXPECT_EQ(Call("DELETE", path, carol)->status, 404);
  EXPECT_TRUE(json::parse(Call("GET", "/api/v1/jobs", carol)->body)["jobs"].empty());
  EXPECT_EQ(json::parse(Call("GET", "/api/v1/jobs", bob)->body)["jobs"].size(), 1u);
  EXPECT_EQ(Call("GET", "/api/v1/jobs?all=1", carol)->status, 403);
  EXPECT_EQ(json::parse(Call("GET", "/api/v1/jobs?all=1", admin_)->body)["jobs"].size(), 1u);
  // The job is still bob's to cancel.
  EXPECT_EQ(Call("POST", path + "/cancel", bob, "{}")->status, 202);
}

TEST_F(ServerTest, MetricsArriveByOffsetAndOnlyTheOwnerSeesThem) {
  std::string bob = MakeUser("bob"), carol = MakeUser("carol");
  int64_t id = SubmitAs(bob, "command: train\nresources: {cpu: 64}\n");
  const std::string path = "/api/v1/jobs/" + std::to_string(id);
  json task = json::parse(Call("GET", path, bob)->body)["tasks"][0];
  const std::string ship = fmt::format("/api/v1/agent/tasks/{}/metrics?attempt={}&offset=", task["id"].get<int64_t>(),
                                       task["attempt"].get<int>());
  // Two records and half of a third; a resend of the first chunk is a no-op.
  std::string chunk = R"({"step":1,"loss":2.5})" "\n" R"({"step":2,"loss":1.5,"accuracy":0.5})" "\n" R"({"step":3,)";
  auto r = Call("POST", ship + "0", admin_, chunk, "application/octet-stream");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["size"], chunk.size());
  EXPECT_EQ(json::parse(Call("POST", ship + "0", admin_, chunk, "application/octet-stream")->body)["size"], chunk.size());
  EXPECT_EQ(Call("POST", ship + "0", bob, chunk, "application/octet-stream")->status, 403);
  EXPECT_EQ(Call("POST", fmt::format("/api/v1/agent/tasks/{}/metrics?attempt=99&offset=0", task["id"].get<int64_t>()),
                 admin_, chunk, "application/octet-stream")->status, 409);

  json m = json::parse(Call("GET", path + "/metrics", bob)->body);
  ASSERT_EQ(m["series"].size(), 2u) << m.dump();  // the partial line is not a record yet
  EXPECT_EQ(m["latest"]["step"], 2);
  EXPECT_EQ(m["latest"]["loss"], 1.5);
  EXPECT_EQ(m["latest"]["accuracy"], 0.5);
  // The rest of the line arrives, then a line that is not JSON (skipped).
  Call("POST", ship + std::to_string(chunk.size()), admin_, "\"loss\":0.9}\nnot json\n", "application/octet-stream");
  m = json::parse(Call("GET", path + "/metrics", bob)->body);
  EXPECT_EQ(m["series"].size(), 3u);
  EXPECT_EQ(m["latest"]["loss"], 0.9);
  EXPECT_EQ(m["latest"]["accuracy"], 0.5);  // the newest value of every metric
  EXPECT_EQ(json::parse(Call("GET", path + "/metrics?limit=1", bob)->body)["series"].size(), 1u);
  EXPECT_EQ(Call("GET", path + "/metrics?limit=-1", bob)->status, 400);

  EXPECT_EQ(Call("GET", path + "/metrics", carol)->status, 404);
  EXPECT_EQ(Call("GET", path + "/metrics", "")->status, 401);
}

TEST_F(ServerTest, OnlyAdminsManageUsersAndSpeakTheAgentProtocol) {
  std::string bob = MakeUser("bob");
  EXPECT_EQ(Call("POST", "/api/v1/users", bob, R"({"name":"eve"})")->status, 403);
  EXPECT_EQ(Call("GET", "/api/v1/users", bob)->status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/agent/register", bob, R"({"name":"n","cpu_milli":1000,"memory_bytes":1})")->status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/tokens", bob, R"({"user":"admin"})")->status, 403);
  auto dup = Call("POST", "/api/v1/users", admin_, R"({"name":"bob"})");
  EXPECT_EQ(dup->status, 409);
  auto bad = Call("POST", "/api/v1/users", admin_, R"({"name":"bob2","role":"root"})");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(ErrorMessage(bad), "role: \"root\" is not a role (expected admin or user)");
}

TEST_F(ServerTest, AgentsRegisterLabelsThatNodesShow) {
  auto r = Call("POST", "/api/v1/agent/register", admin_,
                R"({"name":"n1","cpu_milli":1000,"memory_bytes":1,"labels":{"rack":"r1"}})");
  ASSERT_EQ(r->status, 200) << r->body;
  auto nodes = json::parse(Call("GET", "/api/v1/nodes", admin_)->body)["nodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["labels"]["rack"], "r1");
  auto bad = Call("POST", "/api/v1/agent/register", admin_,
                  R"({"name":"n2","cpu_milli":1000,"memory_bytes":1,"labels":{"rack":7}})");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(ErrorMessage(bad), "labels.rack: must be a non-empty name with a string value");
}

TEST_F(ServerTest, MalformedSpecsAreRefusedNamingTheProblemAndCreateNoJob) {
  struct Case {
    std::string spec, message_prefix;
  };
  std::vector<Case> cases = {
      {"command: [unclosed\n", "spec: not valid YAML or JSON"},
      {"command: x\ncolour: red\n", "colour: unknown field"},
      {"command: x\nresources: {cpu: -1}\n", "resources.cpu: must be > 0"},
      {"command: x\nresources: {memory: lots}\n", "resources.memory: \"lots\" is not a size"},
      {"name: nothing-to-run\n", "command: required"},
  };
  for (const auto& c : cases) {
    auto r = Call("POST", "/api/v1/jobs", admin_, c.spec, "application/yaml");
    EXPECT_EQ(r->status, 400) << c.spec;
    auto err = json::parse(r->body)["error"];
    EXPECT_EQ(err["code"], "InvalidArgument");
    EXPECT_EQ(err["message"].get<std::string>().rfind(c.message_prefix, 0), 0u) << err["message"];
  }
  EXPECT_TRUE(json::parse(Call("GET", "/api/v1/jobs", admin_)->body)["jobs"].empty());
}

TEST_F(ServerTest, BadQueryParametersAreNamed) {
  auto r = Call("GET", "/api/v1/jobs?limit=lots", admin_);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(ErrorMessage(r), "limit: \"lots\" is not an integer");
  EXPECT_EQ(Call("GET", "/api/v1/jobs/99999999999999999999", admin_)->status, 404);
  EXPECT_EQ(Call("GET", "/api/v1/jobs/99999999999999999999/logs", admin_)->status, 404);
  EXPECT_EQ(Call("GET", "/api/v1/jobs/12345", admin_)->status, 404);
}

TEST_F(ServerTest, PasswordLoginIssuesAWorkingToken) {
  auto r = Call("POST", "/api/v1/users", admin_, R"({"name":"dan","password":"correct horse"})");
  ASSERT_EQ(r->status, 201) << r->body;
  httplib::Client c("127.0.0.1", server_->port());
  c.set_basic_auth("dan", "wrong password");
  EXPECT_EQ(c.Post("/api/v1/tokens", "{}", "application/json")->status, 401);
  c.set_basic_auth("dan", "correct horse");
  auto ok = c.Post("/api/v1/tokens", "{}", "application/json");
  ASSERT_EQ(ok->status, 201) << ok->body;
  std::string token = json::parse(ok->body)["token"];
  auto who = Call("GET", "/api/v1/whoami", token);
  EXPECT_EQ(json::parse(who->body)["name"], "dan");
  // Revoked tokens stop working.
  int64_t token_id = json::parse(ok->body)["id"];
  EXPECT_EQ(Call("DELETE", "/api/v1/tokens/" + std::to_string(token_id), token)->status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", token)->status, 401);
}

TEST_F(ServerTest, JobsAndTheAdminTokenSurviveARestart) {
  int64_t id = SubmitAs(admin_, "command: x\nresources: {cpu: 64}\n");
  server_.reset();
  StartServer();
  std::string token_after = ReadFile((dir_ / "admin.token").string()).value();
  EXPECT_EQ(token_after, admin_ + "\n");
  auto r = Call("GET", "/api/v1/jobs/" + std::to_string(id), admin_);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["state"], "PENDING");
}

}  // namespace
}  // namespace ringmaster::server
