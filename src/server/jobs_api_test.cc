// GET /api/v1/jobs over HTTP: filters, paging, who may list whose jobs, bad
// parameters named, and pending jobs' places in the scheduler's queue.
#include <filesystem>
#include <fstream>

#include "server/server_test_fixture.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

class JobsApiTest : public ServerTest {
 protected:
  json List(const std::string& query, const std::string& token) {
    auto r = Call("GET", "/api/v1/jobs" + query, token);
    EXPECT_EQ(r->status, 200) << query << ": " << r->body;
    return r->status == 200 ? json::parse(r->body) : json::object();
  }
  static std::vector<int64_t> Ids(const json& page) {
    std::vector<int64_t> out;
    for (const auto& j : page["jobs"]) out.push_back(j["id"].get<int64_t>());
    return out;
  }
};

TEST_F(JobsApiTest, FiltersAndPagesCombine) {
  const std::string bob = MakeUser("bob");
  // Nothing can run (no nodes): every job stays PENDING until cancelled.
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(SubmitAs(bob, fmt::format("name: {}-{}\nkind: {}\ncommand: sleep 1\n", i % 2 ? "eval" : "train", i,
                                            i < 3 ? "train" : "dev")));
  }
  ASSERT_EQ(Call("POST", fmt::format("/api/v1/jobs/{}/cancel", ids[0]), bob, "{}")->status, 202);

  json all = List("", bob);
  EXPECT_EQ(Ids(all), (std::vector<int64_t>{ids[4], ids[3], ids[2], ids[1], ids[0]}));
  EXPECT_EQ(all["total"], 5);
  EXPECT_EQ(all["offset"], 0);
  json page = List("?limit=2&offset=1", bob);
  EXPECT_EQ(Ids(page), (std::vector<int64_t>{ids[3], ids[2]}));
  EXPECT_EQ(page["total"], 5);
  EXPECT_EQ(page["offset"], 1);
  EXPECT_EQ(Ids(List("?kind=dev", bob)), (std::vector<int64_t>{ids[4], ids[3]}));
  EXPECT_EQ(Ids(List("?name=EVAL", bob)), (std::vector<int64_t>{ids[3], ids[1]}));
  EXPECT_EQ(Ids(List("?name=train&kind=train", bob)), (std::vector<int64_t>{ids[2], ids[0]}));
  // The cancelled job leaves the pending ones once it has ended (no task ran: at once).
  json pending = List("?state=PENDING,SCHEDULED", bob);
  EXPECT_EQ(Ids(pending), (std::vector<int64_t>{ids[4], ids[3], ids[2], ids[1]}));
  EXPECT_EQ(pending["total"], 4);
  EXPECT_EQ(Ids(List("?state=cancelled", bob)), (std::vector<int64_t>{ids[0]}));
  EXPECT_EQ(List("?name=%25", bob)["total"], 0);  // a literal %, in no name
}

TEST_F(JobsApiTest, OnlyAdminsListOtherUsersJobs) {
  const std::string bob = MakeUser("bob"), carol = MakeUser("carol");
  const int64_t id = SubmitAs(bob, "command: sleep 1\n");
  SubmitAs(carol, "command: sleep 1\n");
  auto r = Call("GET", "/api/v1/jobs?user=bob", carol);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(ErrorMessage(r), "user: only admins may list other users' jobs");
  EXPECT_EQ(Call("GET", "/api/v1/jobs?all=1", carol)->status, 403);
  EXPECT_EQ(List("?user=bob", bob)["total"], 1);  // their own, by name
  EXPECT_EQ(Ids(List("?user=bob", admin_)), (std::vector<int64_t>{id}));
  EXPECT_EQ(List("?all=1", admin_)["total"], 2);
  r = Call("GET", "/api/v1/jobs?user=nobody", admin_);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(ErrorMessage(r), "user: no user named \"nobody\"");
}

TEST_F(JobsApiTest, BadParametersAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"?state=FOO", "state: \"FOO\" is not a job state"},
      {"?state=PENDING,", "state: \"\" is not a job state"},
      {"?kind=batch", "kind: \"batch\" is not a job kind (expected dev, train or distributed)"},
      {"?limit=0", "limit: must be between 1 and 10000, got 0"},
      {"?limit=10001", "limit: must be between 1 and 10000, got 10001"},
      {"?offset=-1", "offset: must be between 0 and 4611686018427387903, got -1"},
      {"?name=" + std::string(300, 'x'), "name: longer than 256 bytes"},
  };
  for (const auto& [query, message] : cases) {
    auto r = Call("GET", "/api/v1/jobs" + query, admin_);
    EXPECT_EQ(r->status, 400) << query;
    EXPECT_EQ(ErrorMessage(r), message) << query;
  }
}

TEST_F(JobsApiTest, PendingJobsShowTheirPlaceInTheSchedulersOrder) {
  const std::string bob = MakeUser("bob"), carol = MakeUser("carol");
  ASSERT_EQ(Call("PATCH", "/api/v1/users/carol", admin_, R"({"max_priority": 5})")->status, 200);
  // No node: all wait. The default policy tries higher priority first, then the older.
  const int64_t first = SubmitAs(bob, "command: sleep 1\n");
  const int64_t urgent = SubmitAs(carol, "command: sleep 1\npriority: 5\n");
  const int64_t last = SubmitAs(bob, "command: sleep 1\n");
  json jobs;
  for (int i = 0; i < 100; ++i) {  // a hang guard: the scheduler's pass follows each submit
    jobs = List("?all=1", admin_)["jobs"];
    if (jobs.size() == 3 && jobs[0].contains("queue_position")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::map<int64_t, int> position;
  for (const auto& j : jobs) {
    if (j.contains("queue_position")) position[j["id"].get<int64_t>()] = j["queue_position"].get<int>();
  }
  EXPECT_EQ(position, (std::map<int64_t, int>{{urgent, 1}, {first, 2}, {last, 3}}));
  // Among every user's jobs, also in a user's own list.
  json own = List("", bob)["jobs"];
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0]["queue_position"], 3);
  EXPECT_EQ(own[1]["queue_position"], 2);
}

TEST_F(JobsApiTest, PriorityAndTheHostNetworkArePrivilegesAnAdminGrants) {
  const std::string bob = MakeUser("bob");
  auto submit = [&](const std::string& spec) { return Call("POST", "/api/v1/jobs", bob, spec, "application/yaml"); };
  auto r = submit("command: sleep 1\npriority: 1\n");
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(ErrorMessage(r).rfind("priority: 1 is above the maximum of user bob, 0;", 0), 0u) << ErrorMessage(r);
  r = submit("command: sleep 1\nnetwork: host\n");
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(ErrorMessage(r).rfind("network: host shares the node's network", 0), 0u) << ErrorMessage(r);
  SubmitAs(bob, "command: sleep 1\npriority: -5\n");  // below the maximum: anyone

  auto user = [&](const std::string& name) -> json {
    const json users = json::parse(Call("GET", "/api/v1/users", admin_)->body)["users"];
    for (const auto& u : users) {
      if (u["name"] == name) return u;
    }
    return json();
  };
  EXPECT_EQ(user("bob")["max_priority"], 0);
  EXPECT_EQ(user("bob")["host_network"], false);
  EXPECT_EQ(user("admin")["max_priority"], 1000);  // admins hold both
  EXPECT_EQ(user("admin")["host_network"], true);

  EXPECT_EQ(Call("PATCH", "/api/v1/users/bob", bob, R"({"max_priority": 1000})")->status, 403);  // admins only
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"max_priority": 1001})", "max_priority: must be an integer from -1000 to 1000"},
      {R"({"max_priority": 18446744073709551615})", "max_priority: must be an integer from -1000 to 1000"},
      {R"({"max_priority": "high"})", "max_priority: must be an integer from -1000 to 1000"},
      {R"({"host_network": "yes"})", "host_network: must be true or false"},
      {R"({"colour": 1})", "colour: not a field of a user's privileges (max_priority, host_network)"},
      {R"({})", "body: set max_priority, host_network or both"},
  };
  for (const auto& [body, message] : bad) {
    r = Call("PATCH", "/api/v1/users/bob", admin_, body);
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_EQ(ErrorMessage(r), message) << body;
  }
  EXPECT_EQ(Call("PATCH", "/api/v1/users/nobody", admin_, R"({"max_priority": 1})")->status, 404);

  r = Call("PATCH", "/api/v1/users/bob", admin_, R"({"max_priority": 10, "host_network": true})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["max_priority"], 10);
  SubmitAs(bob, "command: sleep 1\npriority: 10\n");
  SubmitAs(bob, "command: sleep 1\nnetwork: host\n");
  r = submit("command: sleep 1\npriority: 11\n");
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(ErrorMessage(r).rfind("priority: 11 is above the maximum of user bob, 10;", 0), 0u) << ErrorMessage(r);
  // One field at a time: the other stays.
  ASSERT_EQ(Call("PATCH", "/api/v1/users/bob", admin_, R"({"host_network": false})")->status, 200);
  EXPECT_EQ(user("bob")["max_priority"], 10);
  EXPECT_EQ(submit("command: sleep 1\nnetwork: host\n")->status, 403);
}

// RINGMASTER_JOB_SECRET reaches the tasks through their agent's assignments
// and nowhere else: not the job, its tasks, timeline or listing, nor a file
// the server writes (its log, database, access log).
TEST_F(JobsApiTest, TheJobSecretIsInTheAssignmentsOnly) {
  const std::string bob = MakeUser("bob");
  std::string agent;
  const int64_t node = RegisterAgent("n1", &agent);
  const int64_t id = SubmitAs(bob, "command: sleep 1\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\n");
  PlacedTask(bob, id);
  auto a = Call("GET", fmt::format("/api/v1/agent/nodes/{}/assignments?index=0", node), agent);
  ASSERT_EQ(a->status, 200) << a->body;
  std::string secret;
  const json assigned = json::parse(a->body);
  for (const auto& t : assigned.at("tasks")) {
    if (t.at("job_id").get<int64_t>() == id) secret = t.at("env").value("RINGMASTER_JOB_SECRET", std::string());
  }
  ASSERT_EQ(secret.size(), 64u) << a->body;
  for (const std::string& path : {fmt::format("/api/v1/jobs/{}", id), fmt::format("/api/v1/jobs/{}/timeline", id),
                                  std::string("/api/v1/jobs?user=bob")}) {
    for (const std::string& token : {bob, admin_}) {
      auto r = Call("GET", path, token);
      EXPECT_EQ(r->status, 200) << path;
      EXPECT_EQ(r->body.find(secret), std::string::npos) << path << " shows the job's secret";
    }
  }
  server_.reset();  // its files are complete
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_)) {
    if (!f.is_regular_file()) continue;
    std::ifstream in(f.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find(secret), std::string::npos) << f.path() << " holds the job's secret";
  }
}

}  // namespace
}  // namespace ringmaster::server
