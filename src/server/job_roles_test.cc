// Roles in a distributed job (job_roles.h): the spec's syntax and its
// errors, each task's TF_CONFIG and DMLC_* as the frameworks read them, and
// the job's end when its chief (or its workers) succeed.
#include "protocol/job_roles.h"

#include <gtest/gtest.h>

#include <map>

#include "server/job_service_test_fixture.h"
#include "protocol/job_spec.h"

namespace ringmaster::server {
namespace {

using store::State;

std::string Error(const std::string& yaml) {
  auto spec = protocol::ParseJobSpec(yaml);
  return spec.ok() ? "(accepted)" : spec.status().message();
}

TEST(JobRolesSpec, RolesTakeRanksInAFixedOrderAndSurviveTheStore) {
  auto spec = protocol::ParseJobSpec("command: x\nkind: distributed\nreplicas: {worker: 2, ps: 1, chief: 1}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->replicas, 4);
  ASSERT_EQ(spec->roles.size(), 3u);
  EXPECT_EQ(spec->roles[0], (protocol::JobRole{"chief", 1}));
  EXPECT_EQ(spec->roles[1], (protocol::JobRole{"ps", 1}));
  EXPECT_EQ(spec->roles[2], (protocol::JobRole{"worker", 2}));
  std::vector<std::pair<std::string, int>> ranks;
  for (int r = 0; r < 4; ++r) ranks.emplace_back(protocol::RoleOfRank(spec->roles, r).name, protocol::RoleOfRank(spec->roles, r).index);
  EXPECT_EQ(ranks, (std::vector<std::pair<std::string, int>>{{"chief", 0}, {"ps", 0}, {"worker", 0}, {"worker", 1}}));
  auto back = protocol::JobSpecFromJson(protocol::JobSpecToJson(*spec).dump());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *spec);

  auto mx = protocol::ParseJobSpec("command: x\nkind: distributed\nreplicas: {worker: 2, server: 2, scheduler: 1}\n");
  ASSERT_TRUE(mx.ok()) << mx.status().message();
  EXPECT_EQ(protocol::RoleOfRank(mx->roles, 0).name, "scheduler");
  EXPECT_EQ(protocol::RoleOfRank(mx->roles, 2).name, "server");
  EXPECT_EQ(protocol::RoleOfRank(mx->roles, 2).index, 1);
  EXPECT_EQ(protocol::RoleOfRank(mx->roles, 4).name, "worker");
  EXPECT_EQ(protocol::RolesFramework(mx->roles), "mxnet");

  // {worker: N} alone is replicas: N.
  auto plain = protocol::ParseJobSpec("command: x\nkind: distributed\nreplicas: {worker: 3}\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->replicas, 3);
  EXPECT_TRUE(plain->roles.empty());
  EXPECT_EQ(protocol::RoleOfRank(plain->roles, 2).name, "worker");
  EXPECT_EQ(protocol::RoleOfRank(plain->roles, 2).index, 2);
  EXPECT_TRUE(protocol::ParseJobSpec("command: x\nreplicas: {worker: 1}\n").ok());  // any kind, as replicas: 1
  EXPECT_EQ(Error("command: x\nkind: dev\nreplicas: {worker: 2}\n"), "replicas: a dev job has exactly 1 replica, got 2");
}

TEST(JobRolesSpec, BadRoleSpecsAreRefusedNamingTheField) {
  const std::string d = "command: x\nkind: distributed\n";
  EXPECT_EQ(Error(d + "replicas: {worker: 2, master: 1}\n").rfind("replicas.master: not a role", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {worker: 0}\n"), "replicas.worker: must be between 1 and 1024, got 0");
  EXPECT_EQ(Error(d + "replicas: {worker: two}\n").rfind("replicas.worker: \"two\" is not an integer", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {chief: 2, worker: 1}\n"), "replicas.chief: a job has at most 1 chief, got 2");
  EXPECT_EQ(Error(d + "replicas: {evaluator: 2, worker: 1}\n"), "replicas.evaluator: a job has at most 1 evaluator, got 2");
  EXPECT_EQ(Error(d + "replicas: {ps: 1, server: 1, worker: 1}\n").rfind("replicas.server: an MXNet role does not mix "
                                                                        "with TensorFlow's ps", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {server: 1, worker: 2}\n").rfind("replicas.scheduler: required for MXNet", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {scheduler: 1, worker: 2}\n").rfind("replicas.server: ", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {scheduler: 1, server: 1}\n").rfind("replicas.worker: ", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {scheduler: 2, server: 1, worker: 1}\n"),
            "replicas.scheduler: a job has at most 1 scheduler, got 2");
  EXPECT_EQ(Error(d + "replicas: {chief: 1, ps: 1}\n").rfind("replicas.worker: TensorFlow's parameter servers", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {ps: 1}\n").rfind("replicas.worker: required", 0), 0u);
  EXPECT_EQ(Error(d + "replicas: {ps: 1000, worker: 1000}\n"), "replicas: 2000 tasks in all, more than 1024");
  EXPECT_EQ(Error(d + "replicas: {min: 1, worker: 2}\n").rfind("replicas.worker: ", 0), 0u);  // elastic keys only
  EXPECT_EQ(Error(d + "replicas: {}\n").rfind("replicas: an empty mapping", 0), 0u);
  EXPECT_EQ(Error("command: x\nreplicas: {chief: 1, worker: 1}\n"), "replicas: roles need kind: distributed, not train");
  EXPECT_EQ(Error(d + "replicas: {worker: 1, worker: 2}\n").rfind("replicas", 0), 0u);  // a duplicate key
}

class JobRolesTest : public JobServiceTest {
 protected:
  // Every task's environment by rank, with the gang placed.
  std::map<int, nlohmann::json> Envs(int64_t node) {
    std::map<int, nlohmann::json> by_rank;
    const nlohmann::json assigned = svc_->Assignments(node).value();
    for (const auto& x : assigned["tasks"]) by_rank[x["rank"].get<int>()] = x["env"];
    return by_rank;
  }
};

TEST_F(JobRolesTest, TensorFlowRolesGetAClusterByRoleAndTheirOwnTask) {
  int64_t node = AddNode("vm", 8000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {chief: 1, ps: 1, worker: 2, evaluator: 1}\n"
                      "resources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 5u);
  auto env = Envs(node);
  ASSERT_EQ(env.size(), 5u);
  auto at = [&](int rank) { return "127.0.0.1:" + std::to_string(tasks[rank].port); };
  const nlohmann::json cluster = {{"chief", {at(0)}}, {"ps", {at(1)}}, {"worker", {at(2), at(3)}}};
  const std::vector<std::pair<std::string, int>> want = {{"chief", 0}, {"ps", 0}, {"worker", 0}, {"worker", 1},
                                                         {"evaluator", 0}};
  for (int r = 0; r < 5; ++r) {
    auto tf = nlohmann::json::parse(env[r]["TF_CONFIG"].get<std::string>());
    EXPECT_EQ(tf["cluster"], cluster) << "rank " << r;  // no evaluator in it
    EXPECT_EQ(tf["task"]["type"], want[r].first);
    EXPECT_EQ(tf["task"]["index"], want[r].second);
    EXPECT_EQ(env[r]["RINGMASTER_ROLE"], want[r].first);
    EXPECT_EQ(env[r]["RINGMASTER_ROLE_INDEX"], std::to_string(want[r].second));
    EXPECT_FALSE(env[r].contains("DMLC_ROLE")) << "a TensorFlow job gets no ps-lite settings";
    EXPECT_EQ(env[r]["WORLD_SIZE"], "5");
  }
}

TEST_F(JobRolesTest, MxnetRolesPointEveryTaskAtTheScheduler) {
  int64_t node = AddNode("vm", 8000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {scheduler: 1, server: 2, worker: 3}\n"
                      "resources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  auto env = Envs(node);
  ASSERT_EQ(env.size(), 6u);
  for (int r = 0; r < 6; ++r) {
    const std::string role = r == 0 ? "scheduler" : r < 3 ? "server" : "worker";
    EXPECT_EQ(env[r]["DMLC_ROLE"], role) << "rank " << r;
    EXPECT_EQ(env[r]["DMLC_PS_ROOT_URI"], "127.0.0.1");
    EXPECT_EQ(env[r]["DMLC_PS_ROOT_PORT"], std::to_string(tasks[0].port));
    EXPECT_EQ(env[r]["DMLC_NUM_SERVER"], "2");
    EXPECT_EQ(env[r]["DMLC_NUM_WORKER"], "3");
    EXPECT_EQ(env[r]["DMLC_NODE_HOST"], "127.0.0.1");
    EXPECT_EQ(env[r]["RINGMASTER_ROLE"], role);
    EXPECT_FALSE(env[r].contains("TF_CONFIG")) << "an MXNet job gets no TF_CONFIG";
  }
  EXPECT_EQ(env[4]["RINGMASTER_ROLE_INDEX"], "1");
}

TEST_F(JobRolesTest, TheChiefsSuccessEndsTheJobAndStopsTheServingRoles) {
  int64_t node = AddNode("vm", 8000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {chief: 1, ps: 1, worker: 2}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  for (const auto& t : tasks) ASSERT_TRUE(Report(t, "running").ok());
  ASSERT_TRUE(Report(tasks[0], "exited", 0).ok());
  // The ps and the workers serve until stopped: they are told to stop.
  auto after = Tasks(id);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(after[r].desired, store::Desired::kStop) << "rank " << r;
  EXPECT_EQ(Job(id).state, State::kRunning);
  // A cancel now changes nothing: the chief has succeeded.
  ASSERT_TRUE(svc_->Cancel(id, "ada").ok());
  for (int r = 1; r < 4; ++r) ASSERT_TRUE(Report(tasks[r], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kSucceeded);
  EXPECT_EQ(Job(id).reason, "the chief succeeded; the other roles were stopped");
  EXPECT_EQ(Tasks(id)[1].state, State::kCancelled);
  (void)node;
}

TEST_F(JobRolesTest, WithoutAChiefTheWorkersDecideAndAFailedServerRestartsTheGang) {
  AddNode("vm", 8000);
  int64_t id = Submit("command: x\nkind: distributed\nmax_restarts: 1\n"
                      "replicas: {scheduler: 1, server: 1, worker: 2}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  for (const auto& t : tasks) ASSERT_TRUE(Report(t, "running").ok());
  // A server dies: the whole gang restarts (from its checkpoints).
  ASSERT_TRUE(Report(tasks[1], "exited", -1, 9).ok());
  for (int r : {0, 2, 3}) ASSERT_TRUE(Report(tasks[r], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kPending);
  EXPECT_NE(Job(id).reason.find("rank 1 failed"), std::string::npos) << Job(id).reason;
  clock_.AdvanceMs(1'000);  // the restart's backoff
  ASSERT_TRUE(svc_->RunPass().ok());
  tasks = Tasks(id);
  ASSERT_EQ(tasks[0].attempt, 2);
  for (const auto& t : tasks) ASSERT_TRUE(Report(t, "running").ok());
  // One worker done is not the job done.
  ASSERT_TRUE(Report(tasks[2], "exited", 0).ok());
  EXPECT_EQ(Tasks(id)[0].desired, store::Desired::kRun);
  ASSERT_TRUE(Report(tasks[3], "exited", 0).ok());
  // Both are: the scheduler and the server exit by themselves, or are stopped.
  ASSERT_TRUE(Report(tasks[1], "exited", 0).ok());
  EXPECT_EQ(Tasks(id)[0].desired, store::Desired::kStop);
  ASSERT_TRUE(Report(tasks[0], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kSucceeded);
  EXPECT_EQ(Job(id).reason, "all 2 workers succeeded; the other roles were stopped");
}

}  // namespace
}  // namespace ringmaster::server
