// The REST API's agent side over real HTTP: token scopes that keep agents to
// their own node, the version any token may ask for, and version skew.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "protocol/agent.h"
#include "common/build_info.h"
#include "server/server_test_fixture.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

// GET /api/v1/version answers the server's build to any valid token.
TEST_F(ServerTest, VersionAnswersAnyValidTokenAndNoAnonymousCaller) {
  std::string agent, reader = MakeUser("bob", "read");
  RegisterAgent("n1", &agent);
  auto made = Call("POST", "/api/v1/tokens", admin_, R"({"scope":"metrics","name":"prometheus"})");
  ASSERT_EQ(made->status, 201) << made->body;
  const std::string metrics = json::parse(made->body)["token"];
  for (const std::string& token : {admin_, reader, agent, metrics}) {
    auto r = Call("GET", "/api/v1/version", token);
    ASSERT_EQ(r->status, 200) << r->body;
    json v = json::parse(r->body);
    EXPECT_EQ(v["version"], ThisBuild().version);
    EXPECT_EQ(v["git_commit"], ThisBuild().git_commit);
    EXPECT_EQ(v["platform"], ThisBuild().platform);
  }
  EXPECT_EQ(Call("GET", "/api/v1/version", "")->status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/version", "rm_not_a_real_token")->status, 401);
}

// Version skew: a server speaks its agent protocol and the one before; an
// agent of any other is refused with a message naming both versions.
TEST_F(ServerTest, AnAgentOfAProtocolTheServerDoesNotSpeakIsRefusedNamingBoth) {
  const std::string token = MakeToken("admin", "agent", "n1");
  auto body = [](int protocol) {
    return json{{"name", "n1"}, {"cpu_milli", 1000}, {"memory_bytes", 1 << 30}, {"agent_version", "9.9.9"},
                {"protocol_version", protocol}}.dump();
  };
  auto newer = Call("POST", "/api/v1/agent/register", token, body(protocol::kAgentProtocol + 1));
  EXPECT_EQ(newer->status, 409) << newer->body;
  const std::string msg = ErrorMessage(newer);
  EXPECT_NE(msg.find(fmt::format("agent protocol {} (agent 9.9.9)", protocol::kAgentProtocol + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("{} (server ", protocol::kAgentProtocol)), std::string::npos) << msg;
  EXPECT_NE(msg.find("upgrade the server first"), std::string::npos) << msg;
  auto older = Call("POST", "/api/v1/agent/register", token, body(protocol::kMinAgentProtocol - 1));
  EXPECT_EQ(older->status, 409) << older->body;
  EXPECT_NE(ErrorMessage(older).find("upgrade the agent"), std::string::npos) << older->body;
  EXPECT_EQ(json::parse(Call("GET", "/api/v1/nodes", admin_)->body)["nodes"].size(), 0u);  // nothing registered
  // This release's and the one before are served; the answer says how long to run without the server.
  for (int p : {protocol::kMinAgentProtocol, protocol::kAgentProtocol}) {
    auto ok = Call("POST", "/api/v1/agent/register", token, body(p));
    ASSERT_EQ(ok->status, 200) << ok->body;
    EXPECT_GT(json::parse(ok->body).value("fence_after_ms", 0), json::parse(ok->body).value("lease_ms", 0));
  }
  auto nodes = json::parse(Call("GET", "/api/v1/nodes", admin_)->body)["nodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["agent_version"], "9.9.9");
}

// Finding 13: scopes. Agent tokens reach only the agent protocol, only for
// their node; admin tokens cannot act as agents; read tokens change nothing.
TEST_F(ServerTest, TokenScopesSeparateAgentsAdminsReadersAndSubmitters) {
  std::string bob = MakeUser("bob"), a1, a2;
  const int64_t n1 = RegisterAgent("n1", &a1);
  const int64_t n2 = RegisterAgent("n2", &a2);
  // An admin token is not an agent token.
  EXPECT_EQ(Call("POST", "/api/v1/agent/register", admin_, R"({"name":"n1","cpu_milli":1000,"memory_bytes":1})")->status, 403);
  EXPECT_EQ(Call("POST", fmt::format("/api/v1/agent/nodes/{}/heartbeat", n1), admin_, "{}")->status, 403);
  // An agent token submits nothing and reads nothing of users'.
  EXPECT_EQ(Call("POST", "/api/v1/jobs", a1, "command: x\n", "application/yaml")->status, 403);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", a1)->status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/tokens", a1, "{}")->status, 403);
  // ... and acts only for its own node.
  EXPECT_EQ(Call("POST", "/api/v1/agent/register", a1, R"({"name":"n2","cpu_milli":1000,"memory_bytes":1})")->status, 403);
  EXPECT_EQ(Call("POST", fmt::format("/api/v1/agent/nodes/{}/heartbeat", n2), a1, "{}")->status, 403);
  EXPECT_EQ(Call("GET", fmt::format("/api/v1/agent/nodes/{}/assignments", n2), a1)->status, 403);
  EXPECT_EQ(Call("POST", fmt::format("/api/v1/agent/nodes/{}/heartbeat", n1), a1, R"({"samples":[]})")->status, 200);
  // A task placed on n2 is not n1's to report on or ship logs for.
  int64_t id = SubmitAs(bob, "command: x\nresources: {cpu: 1}\n");
  json t = PlacedTask(bob, id);
  const std::string& placed_on = t["node"];
  const std::string& other = placed_on == "n1" ? a2 : a1;
  const std::string& own = placed_on == "n1" ? a1 : a2;
  const std::string status = fmt::format("/api/v1/agent/tasks/{}/status", t["id"].get<int64_t>());
  const std::string report = json{{"attempt", t["attempt"]}, {"state", "running"}}.dump();
  EXPECT_EQ(Call("POST", status, other, report)->status, 409);
  EXPECT_EQ(Call("POST", fmt::format("/api/v1/agent/tasks/{}/logs?attempt=1&offset=0", t["id"].get<int64_t>()), other,
                 "forged", "application/octet-stream")->status, 409);
  EXPECT_EQ(Call("POST", status, own, report)->status, 200);
  // Only admin tokens make agent tokens.
  auto r = Call("POST", "/api/v1/tokens", bob, R"({"scope":"agent","node":"n3"})");
  EXPECT_EQ(r->status, 403);
  // A read token reads and nothing more.
  std::string reader = MakeToken("bob", "read");
  EXPECT_EQ(Call("GET", "/api/v1/jobs/" + std::to_string(id), reader)->status, 200);
  r = Call("POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", reader, "{}");
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(ErrorMessage(r).find("scope is read"), std::string::npos);
  EXPECT_EQ(Call("POST", "/api/v1/jobs", reader, "command: x\n", "application/yaml")->status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/tokens", reader, "{}")->status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", bob, "{}")->status, 202);
  // Nobody but an admin user gets an admin token.
  EXPECT_EQ(Call("POST", "/api/v1/tokens", admin_, R"({"user":"bob","scope":"admin"})")->status, 403);
}

// A tick's reports (POST /api/v1/agent/nodes/{id}/reports): a node reports
// through its own node's route only, and on its own tasks only, each report
// answered on its own: a forged one for another node's task is refused, the
// node's own beside it recorded, and nothing of the other task changes.
TEST_F(ServerTest, BatchedReportsAreTheNodesOwnEachAnsweredAlone) {
  std::string bob = MakeUser("bob"), a1, a2;
  const int64_t n1 = RegisterAgent("n1", &a1, 1000);
  RegisterAgent("n2", &a2, 1000);
  int64_t j1 = SubmitAs(bob, "command: x\nresources: {cpu: 1}\n");
  int64_t j2 = SubmitAs(bob, "command: x\nresources: {cpu: 1}\n");
  json t1 = PlacedTask(bob, j1), t2 = PlacedTask(bob, j2);  // one on each node: one cpu each
  if (t1["node"] != "n1") {
    std::swap(t1, t2);
    std::swap(j1, j2);
  }
  ASSERT_EQ(t1["node"], "n1");
  ASSERT_EQ(t2["node"], "n2");
  const std::string route = fmt::format("/api/v1/agent/nodes/{}/reports", n1);
  auto report = [](const json& t, const char* state) {
    return json{{"task_id", t["id"]}, {"attempt", t["attempt"]}, {"node_id", 0}, {"state", state}};
  };
  json body = {{"reports", {report(t1, "running"), report(t2, "running"), {{"task_id", 999999}, {"attempt", 1}}}}};
  // Not n2's route, and not an admin's.
  EXPECT_EQ(Call("POST", route, a2, body.dump())->status, 403);
  EXPECT_EQ(Call("POST", route, admin_, body.dump())->status, 403);
  auto r = Call("POST", route, a1, body.dump());
  ASSERT_EQ(r->status, 200) << r->body;
  json results = json::parse(r->body)["results"];
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0], json::object());
  EXPECT_EQ(results[1]["code"], "FailedPrecondition");
  EXPECT_NE(results[1]["message"].get<std::string>().find("not assigned to node n1"), std::string::npos) << results[1];
  EXPECT_EQ(results[2]["code"], "NotFound");
  auto state = [&](int64_t job) { return json::parse(Call("GET", fmt::format("/api/v1/jobs/{}", job), bob)->body)["state"]; };
  EXPECT_EQ(state(j1), "RUNNING");
  EXPECT_EQ(state(j2), "SCHEDULED");
  // A task's state, or one of its phases, twice in a body: the repeat is refused on its own.
  json repeat = report(t1, "running");
  repeat["phase"] = "staging";
  r = Call("POST", route, a1, json{{"reports", {repeat, repeat}}}.dump());
  ASSERT_EQ(r->status, 200) << r->body;
  results = json::parse(r->body)["results"];
  EXPECT_EQ(results[0], json::object());
  EXPECT_EQ(results[1]["code"], "InvalidArgument");
  EXPECT_NE(results[1]["message"].get<std::string>().find("reports[1]: task"), std::string::npos) << results[1];
  // A body of junk is refused whole, naming the field.
  r = Call("POST", route, a1, R"({"reports":[{"task_id":"x","attempt":1}]})");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(ErrorMessage(r).find("reports.reports[0].task_id"), std::string::npos) << r->body;
}

// What an agent says of its node is shown on admins' terminals (`nodes`):
// text only, no control characters; so is an admin's cordon reason.
TEST_F(ServerTest, NodeFieldsAndReasonsAreTextWithoutControlCharacters) {
  const std::string token = MakeToken("admin", "agent", "n1");
  auto reg = [&](json extra) {
    json b = {{"name", "n1"}, {"cpu_milli", 1000}, {"memory_bytes", 1 << 30}};
    b.update(extra);
    return Call("POST", "/api/v1/agent/register", token, b.dump());
  };
  auto bad = reg({{"labels", {{"k", "v\u001b[31m"}}}});
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(ErrorMessage(bad).find("labels.k:"), std::string::npos) << bad->body;
  EXPECT_EQ(reg({{"gpus", {{{"model", "A100\u001b]0;pwned\u0007"}}}}})->status, 400);
  EXPECT_EQ(reg({{"agent_version", "0.2.0\u2028"}})->status, 400);
  EXPECT_EQ(reg({{"address", "10.0.0.1\u0085"}})->status, 400);
  ASSERT_EQ(reg({{"labels", {{"zone", "b"}}}, {"gpus", {{{"model", "NVIDIA H200"}}}}})->status, 200);
  auto cordon = Call("POST", "/api/v1/nodes/n1/cordon", admin_, json{{"reason", "fan\u009b2J"}}.dump());
  EXPECT_EQ(cordon->status, 400);
  EXPECT_NE(ErrorMessage(cordon).find("reason:"), std::string::npos) << cordon->body;
  EXPECT_EQ(Call("POST", "/api/v1/nodes/n1/cordon", admin_, json{{"reason", "fan \u00e9"}}.dump())->status, 200);
}

}  // namespace
}  // namespace ringmaster::server
