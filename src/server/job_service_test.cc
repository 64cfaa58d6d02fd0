// The job state machine, deterministic: a FakeClock, real SQLite, agents
// played by direct calls. No threads, no sleeps.
#include "server/job_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "files/fake_store.h"
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;


TEST_F(JobServiceTest, PriorityAboveTheUsersMaximumAndTheHostNetworkNeedAGrant) {
  store::User bob;
  bob.name = "bob";
  bob.id = *store_->CreateUser(bob);
  auto submit = [&](const store::User& u, const std::string& yaml) {
    return svc_->Submit(u, *protocol::ParseJobSpec(yaml)).status();
  };
  Status st = submit(bob, "command: x\npriority: 1000\n");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message().rfind("priority: 1000 is above the maximum of user bob, 0", 0), 0u) << st.ToString();
  st = submit(bob, "command: x\nnetwork: host\n");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message().rfind("network: ", 0), 0u) << st.ToString();
  EXPECT_TRUE(submit(bob, "command: x\n").ok());
  ASSERT_TRUE(store_->SetUserPrivileges(bob.id, 1000, false).ok());
  bob = *store_->GetUser(bob.id);
  EXPECT_TRUE(submit(bob, "command: x\npriority: 1000\n").ok());
  EXPECT_EQ(submit(bob, "command: x\nnetwork: host\n").code(), StatusCode::kPermissionDenied);
  store::User admin;
  admin.name = "root";
  admin.role = store::Role::kAdmin;
  admin.id = *store_->CreateUser(admin);
  EXPECT_TRUE(submit(admin, "command: x\npriority: 1000\nnetwork: host\n").ok());
}

TEST_F(JobServiceTest, AGangRunsToSuccessWithAnEventPerTransition) {
  int64_t node = AddNode("vm", 2000);
  int64_t id = Submit("command: echo hi\nreplicas: 2\nresources: {cpu: 1}\n");
  EXPECT_EQ(Job(id).state, State::kPending);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kScheduled);
  auto tasks = Tasks(id);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.state, State::kScheduled);
    EXPECT_EQ(t.node_id, node);
    EXPECT_EQ(t.attempt, 1);
  }
  // The agent's view: both tasks assigned to run.
  auto a = svc_->Assignments(node);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ((*a)["tasks"].size(), 2u);
  EXPECT_EQ((*a)["tasks"][1]["env"]["RINGMASTER_RANK"], "1");
  EXPECT_EQ((*a)["tasks"][1]["env"]["WORLD_SIZE"], "2");
  EXPECT_EQ((*a)["tasks"][0]["desired"], "run");

  clock_.AdvanceMs(100);
  ASSERT_TRUE(Report(tasks[0], "running").ok());
  EXPECT_EQ(Job(id).state, State::kRunning);
  ASSERT_TRUE(Report(tasks[1], "running").ok());
  ASSERT_TRUE(Report(tasks[0], "exited", 0).ok());
  EXPECT_EQ(Job(id).state, State::kRunning);  // rank 1 still runs
  ASSERT_TRUE(Report(tasks[1], "exited", 0).ok());
  EXPECT_EQ(Job(id).state, State::kSucceeded);
  EXPECT_EQ(Job(id).reason, "all 2 tasks succeeded");

  auto events = *store_->ListEvents(id);
  // submit, 2 x scheduled + job scheduled, 2 x running + job running, 2 x succeeded + job succeeded
  EXPECT_EQ(events.size(), 10u);
  EXPECT_EQ(events.back().to_state, "SUCCEEDED");
  EXPECT_EQ(Job(id).started_ms, Job(id).created_ms + 100);
}

TEST_F(JobServiceTest, DistributedTasksGetPortsAndEveryFrameworksConventions) {
  auto add = [&](const std::string& name, const std::string& addr, int lo, int hi) {
    store::Node n;
    n.name = name;
    n.cpu_milli = 2000;
    n.memory_bytes = 8LL << 30;
    n.address = addr;
    n.port_lo = lo;
    n.port_hi = hi;
    return *svc_->RegisterNode(n);
  };
  int64_t a = add("a", "10.0.0.1", 41000, 41009), b = add("b", "10.0.0.2", 42000, 42009);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: 4\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  std::map<int64_t, std::set<int>> ports;
  for (const auto& t : tasks) {
    ASSERT_GT(t.port, 0);
    EXPECT_TRUE(ports[t.node_id].insert(t.port).second) << "port reused on a node";
  }
  EXPECT_EQ(ports[a].size() + ports[b].size(), 4u);
  auto envs = [&](int64_t node) {
    std::map<int, nlohmann::json> by_rank;
    nlohmann::json assigned = svc_->Assignments(node).value();
    for (const auto& x : assigned["tasks"]) by_rank[x["rank"].get<int>()] = x["env"];
    return by_rank;
  };
  std::map<int, nlohmann::json> env;
  for (auto& [r, e] : envs(a)) env[r] = e;
  for (auto& [r, e] : envs(b)) env[r] = e;
  ASSERT_EQ(env.size(), 4u);
  const store::Task& r0 = tasks[0];
  std::string master_addr = r0.node_id == a ? "10.0.0.1" : "10.0.0.2";
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& t : tasks) workers.push_back((t.node_id == a ? "10.0.0.1:" : "10.0.0.2:") + std::to_string(t.port));
  for (int r = 0; r < 4; ++r) {
    const auto& e = env[r];
    const store::Task& t = tasks[r];
    EXPECT_EQ(e["RANK"], std::to_string(r));
    EXPECT_EQ(e["WORLD_SIZE"], "4");
    EXPECT_EQ(e["MASTER_ADDR"], master_addr);
    EXPECT_EQ(e["MASTER_PORT"], std::to_string(r0.port));
    EXPECT_EQ(e["RINGMASTER_PORT"], std::to_string(t.port));
    EXPECT_EQ(e["RINGMASTER_STORE"], master_addr + ":" + std::to_string(r0.port));
    // Each task sees only its own GPUs: it is its own node-local group
    // (torchrun's LOCAL_*, GROUP_*; Kubeflow's one pod per node), whatever
    // else of the gang shares its node.
    EXPECT_EQ(e["LOCAL_RANK"], "0");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "1");
    EXPECT_EQ(e["GROUP_RANK"], std::to_string(r));
    EXPECT_EQ(e["NODE_RANK"], std::to_string(r));
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "4");
    // The node it shares: two of the gang per node (2 cpus each, 1 per task),
    // its place among them, and its node's place by the lowest rank on each.
    EXPECT_EQ(e["RINGMASTER_LOCAL_TASKS"], "2");
    int local = 0;
    for (int q = 0; q < r; ++q) local += tasks[q].node_id == t.node_id;
    EXPECT_EQ(e["RINGMASTER_LOCAL_TASK_RANK"], std::to_string(local));
    EXPECT_EQ(e["RINGMASTER_NODES"], "2");
    EXPECT_EQ(e["RINGMASTER_NODE_RANK"], t.node_id == r0.node_id ? "0" : "1");
    auto tf = nlohmann::json::parse(e["TF_CONFIG"].get<std::string>());
    EXPECT_EQ(tf["cluster"]["worker"], workers);
    EXPECT_EQ(tf["task"]["index"], r);
    EXPECT_EQ(e["DMLC_PS_ROOT_URI"], master_addr);
    EXPECT_EQ(e["DMLC_NUM_WORKER"], "4");
  }
  // Ports come back when the tasks end, and the next job gets them again.
  for (const auto& t : tasks) ASSERT_TRUE(Report(t, "exited", 0).ok());
  int64_t next = Submit("command: x\nreplicas: 4\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(next)) EXPECT_TRUE(ports[t.node_id].count(t.port)) << t.port;
}

TEST_F(JobServiceTest, AGangWithoutFreePortsStaysPendingWhole) {
  store::Node n;
  n.name = "small";
  n.cpu_milli = 8000;
  n.memory_bytes = 8LL << 30;
  n.port_lo = 41000;
  n.port_hi = 41002;  // three ports
  ASSERT_TRUE(svc_->RegisterNode(n).ok());
  int64_t first = Submit("command: x\nreplicas: 2\nresources: {cpu: 1}\n");
  int64_t second = Submit("command: x\nreplicas: 2\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(first).state, State::kScheduled);
  EXPECT_EQ(Job(second).state, State::kPending);
  EXPECT_EQ(Job(second).reason, "waiting for ports: node small has no free port in 41000-41002");
  for (const auto& t : Tasks(second)) EXPECT_EQ(t.port, 0);
  // When the first gang ends its ports come back and the second one runs.
  for (const auto& t : Tasks(first)) ASSERT_TRUE(Report(t, "exited", 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(second).state, State::kScheduled);
}

TEST_F(JobServiceTest, AFailedTaskStopsTheGangAndTheJobFailsWithTheExitCode) {
  int64_t node = AddNode("vm", 2000);
  int64_t id = Submit("command: x\nreplicas: 2\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  ASSERT_TRUE(Report(tasks[0], "running").ok());
  ASSERT_TRUE(Report(tasks[1], "running").ok());
  ASSERT_TRUE(Report(tasks[1], "exited", 3).ok());
  // Not final yet: rank 0 is being stopped.
  EXPECT_EQ(Job(id).state, State::kRunning);
  EXPECT_EQ(Job(id).stop_reason, "rank 1 failed: exit code 3");
  auto a = *svc_->Assignments(node);
  ASSERT_EQ(a["tasks"].size(), 1u);
  EXPECT_EQ(a["tasks"][0]["desired"], "stop");
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kFailed);
  EXPECT_EQ(Job(id).reason, "rank 1 failed: exit code 3");
  EXPECT_EQ(Tasks(id)[0].state, State::kCancelled);
  EXPECT_EQ(Tasks(id)[1].exit_code, 3);
}

TEST_F(JobServiceTest, RestartsTheWholeGangWithinMaxRestarts) {
  AddNode("vm", 2000);
  int64_t id = Submit("command: x\nreplicas: 2\nresources: {cpu: 1}\nmax_restarts: 1\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(id);
  ASSERT_TRUE(Report(tasks[0], "exited", 1).ok());
  ASSERT_TRUE(Report(Tasks(id)[1], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kPending);
  EXPECT_EQ(Job(id).restarts, 1);
  EXPECT_EQ(Job(id).reason, "restart 1 of 1 after rank 0 failed: exit code 1; next attempt in 1s");
  // The restart waits out its backoff.
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 1);
  EXPECT_EQ(Job(id).state, State::kPending);
  clock_.AdvanceMs(1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  tasks = Tasks(id);
  EXPECT_EQ(tasks[0].attempt, 2);
  // A report for the old attempt is fenced off.
  store::Task old = tasks[0];
  old.attempt = 1;
  EXPECT_EQ(Report(old, "running").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Report(tasks[0], "exited", 1).ok());
  ASSERT_TRUE(Report(Tasks(id)[1], "exited", -1, 9).ok());
  EXPECT_EQ(Job(id).state, State::kFailed);  // no restarts left
}

TEST_F(JobServiceTest, ANodeSelectorPicksLabelledNodesAndSaysWhyNot) {
  store::Node n;
  n.name = "plain";
  n.cpu_milli = 8000;
  n.memory_bytes = 8LL << 30;
  ASSERT_TRUE(svc_->RegisterNode(n).ok());
  n.name = "fast";
  n.labels_json = R"({"net": "ib", "rack": "r2"})";
  const int64_t fast = *svc_->RegisterNode(n);
  int64_t id = Submit("command: x\nreplicas: 2\nresources: {cpu: 1}\nnode_selector: {net: ib}\n");
  int64_t nowhere = Submit("command: x\nresources: {cpu: 1}\nnode_selector: {rack: r9}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) EXPECT_EQ(t.node_id, fast);
  EXPECT_EQ(Job(nowhere).state, State::kPending);
  EXPECT_NE(Job(nowhere).reason.find("node plain has no label rack"), std::string::npos) << Job(nowhere).reason;
  EXPECT_NE(Job(nowhere).reason.find("node fast has label rack=r2, not r9"), std::string::npos) << Job(nowhere).reason;
}

TEST_F(JobServiceTest, GpuTasksGetTheirOwnIndicesAndImagesGoWhereContainersAre) {
  const int64_t gpu = AddNode("gpu", 8000, 2);
  store::Node n;
  n.name = "containers";
  n.cpu_milli = 8000;
  n.memory_bytes = 8LL << 30;
  n.executors = "process,runc";
  const int64_t containers = *svc_->RegisterNode(n);
  // (The image job first: a job waiting for a GPU holds back the queue behind it.)
  const int64_t img = Submit("command: x\nimage: base\nresources: {cpu: 1}\n");
  const int64_t pinned = Submit("command: x\nimage: base\nexecutor: docker\nresources: {cpu: 1}\n");
  const int64_t a = Submit("command: x\nresources: {cpu: 1, gpu: 1}\n");
  const int64_t b = Submit("command: x\nresources: {cpu: 1, gpu: 1}\n");
  const int64_t c = Submit("command: x\nresources: {cpu: 1, gpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(a)[0].gpu_indices, "0");
  EXPECT_EQ(Tasks(b)[0].gpu_indices, "1");
  EXPECT_EQ(Job(c).state, State::kPending);  // both GPUs are held
  auto assigned = *svc_->Assignments(gpu);
  std::set<std::vector<int>> given;
  for (const auto& t : assigned["tasks"]) given.insert(t["gpus"].get<std::vector<int>>());
  EXPECT_EQ(given, (std::set<std::vector<int>>{{0}, {1}}));
  EXPECT_EQ(Tasks(img)[0].node_id, containers);
  EXPECT_EQ(svc_->Assignments(containers).value()["tasks"][0]["image"], "base");
  EXPECT_EQ(Job(pinned).state, State::kPending);
  EXPECT_NE(Job(pinned).reason.find("node containers runs tasks with process, runc, the job needs docker"),
            std::string::npos)
      << Job(pinned).reason;
  // A GPU comes back when its task ends, and the waiting job gets it.
  ASSERT_TRUE(Report(Tasks(a)[0], "running").ok());
  ASSERT_TRUE(Report(Tasks(a)[0], "exited", 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(c)[0].gpu_indices, "0");
}

// Two ranks of a gang on one node with a GPU each: CUDA shows each only its
// own GPU as device 0, so both are LOCAL_RANK 0 of 1 (set_device(LOCAL_RANK)
// is right for both), and the node they share is told apart by RINGMASTER_*.
TEST_F(JobServiceTest, GpuRanksSharingANodeAreEachTheirOwnLocalGroup) {
  const int64_t node = AddNode("gpu", 8000, 2);
  const int64_t id = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1, gpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto assigned = *svc_->Assignments(node);
  ASSERT_EQ(assigned["tasks"].size(), 2u);
  std::set<std::vector<int>> gpus;
  for (const auto& t : assigned["tasks"]) {
    const int rank = t["rank"].get<int>();
    const auto& e = t["env"];
    gpus.insert(t["gpus"].get<std::vector<int>>());
    EXPECT_EQ(t["job_id"], id);
    EXPECT_EQ(e["LOCAL_RANK"], "0") << rank;
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "1") << rank;
    EXPECT_EQ(e["GROUP_RANK"], std::to_string(rank));
    EXPECT_EQ(e["RINGMASTER_LOCAL_TASKS"], "2");
    EXPECT_EQ(e["RINGMASTER_LOCAL_TASK_RANK"], std::to_string(rank));
    EXPECT_EQ(e["RINGMASTER_NODE_RANK"], "0");
    EXPECT_EQ(e["RINGMASTER_NODES"], "1");
  }
  EXPECT_EQ(gpus, (std::set<std::vector<int>>{{0}, {1}}));
}

TEST_F(JobServiceTest, LasCountsServiceAcrossRunsAndServerRestarts) {
  JobServiceOptions o;
  o.scheduler.policy = "las";
  o.scheduler.las_thresholds_s = {50};
  o.scheduler.las_min_run_ms = 0;
  Restart(o);
  int64_t node = AddNode("vm", 1000);
  int64_t old_job = Submit("command: train\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(old_job)[0], "running").ok());
  for (int i = 0; i < 10; ++i) {
    clock_.AdvanceMs(10'000);
    ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  }
  // 100 cpu-seconds attained: level 1. A newcomer (level 0) preempts it.
  int64_t fresh = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_NE(Job(old_job).stop_reason.find("LAS level 0 (attained 0 device-s) before level 1 (100 device-s)"),
            std::string::npos)
      << Job(old_job).stop_reason;
  ASSERT_TRUE(Report(Tasks(old_job)[0], "exited", -1, 15).ok());
  EXPECT_DOUBLE_EQ(Job(old_job).service_s, 100);  // banked when the run ended
  // A restarted server still knows: the fresh job runs first, the old one waits.
  Restart(o);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(fresh).state, State::kScheduled);
  EXPECT_EQ(Job(old_job).state, State::kPending);
}

TEST_F(JobServiceTest, ARunPastItsTimeLimitFails) {
  int64_t node = AddNode("vm", 2000);
  int64_t id = Submit("command: x\nresources: {cpu: 1}\ntime_limit: 1m\nmax_restarts: 3\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  for (int i = 0; i < 59; ++i) {
    clock_.AdvanceMs(1'000);
    ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  }
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(Job(id).stop_state.has_value());
  clock_.AdvanceMs(2'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kFailed);  // not restarted: another run would hit the limit too
  EXPECT_EQ(Job(id).reason, "time limit 1m0s reached");
}

TEST_F(JobServiceTest, CancelStopsRunningTasksAndEndsWhenTheyAreGone) {
  int64_t node = AddNode("vm", 2000);
  int64_t id = Submit("command: sleep 600\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  ASSERT_TRUE(svc_->Cancel(id, "ada").ok());
  EXPECT_EQ(Job(id).state, State::kRunning);
  auto a = *svc_->Assignments(node);
  EXPECT_EQ(a["tasks"][0]["desired"], "stop");
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).state, State::kCancelled);
  EXPECT_EQ(Job(id).reason, "cancelled by ada");
  EXPECT_EQ(svc_->Cancel(id, "ada").code(), StatusCode::kFailedPrecondition);
}

TEST_F(JobServiceTest, CancellingAPendingJobEndsItAtOnce) {
  AddNode("vm", 1000);
  int64_t id = Submit("command: x\nresources: {cpu: 8}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(svc_->Cancel(id, "ada").ok());
  EXPECT_EQ(Job(id).state, State::kCancelled);
  EXPECT_EQ(Tasks(id)[0].state, State::kCancelled);
}

TEST_F(JobServiceTest, AJobTooBigForAnyNodeStaysPendingWithAReasonNamingTheResource) {
  AddNode("vm", 2000);
  int64_t id = Submit("command: x\nreplicas: 2\nresources: {cpu: 1, gpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kPending);
  EXPECT_EQ(Job(id).reason,
            "needs 2 x {cpu 1, memory 512Mi, gpu 1}; it cannot fit this cluster even when idle: "
            "node vm has 0 gpus in total, needs 1");
}

TEST_F(JobServiceTest, NodesWithoutHeartbeatGetNoWorkUntilTheyReturn) {
  int64_t node = AddNode("vm", 2000);
  clock_.AdvanceMs(60'000);
  int64_t id = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kPending);
  EXPECT_NE(Job(id).reason.find("node vm is not ready"), std::string::npos) << Job(id).reason;
  ASSERT_TRUE(svc_->Heartbeat(node, 0.1, 1 << 30).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kScheduled);
}

TEST_F(JobServiceTest, ACommandThatCannotStartFailsWithItsMessage) {
  AddNode("vm", 2000);
  int64_t id = Submit("command: [/no/such]\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  store::Task t = Tasks(id)[0];
  TaskReport r{t.node_id, t.attempt, "exited", -1, 0, "cannot run \"/no/such\": No such file or directory", ""};
  ASSERT_TRUE(svc_->ReportTask(t.id, r).ok());
  EXPECT_EQ(Job(id).state, State::kFailed);
  EXPECT_EQ(Job(id).reason, "rank 0 failed: could not start: cannot run \"/no/such\": No such file or directory");
}

TEST_F(JobServiceTest, WatchersFireOnceWhenTheNodesIndexMovesAndNotBefore) {
  int64_t node = AddNode("vm", 2000);
  int64_t other = AddNode("vm2", 2000);
  auto first = *svc_->Assignments(node);
  uint64_t index = first["index"];
  EXPECT_EQ(index, svc_->NodeIndex(node));
  EXPECT_EQ(svc_->WatchNode(node, index + 1, [] {}), 0u);  // a stale index: answer at once
  int fired = 0, other_fired = 0;
  ASSERT_NE(svc_->WatchNode(node, index, [&] { ++fired; }), 0u);
  ASSERT_NE(svc_->WatchNode(other, svc_->NodeIndex(other), [&] { ++other_fired; }), 0u);
  uint64_t dropped = svc_->WatchNode(node, index, [&] { ADD_FAILURE() << "an unwatched watcher fired"; });
  svc_->Unwatch(dropped);
  EXPECT_EQ(fired, 0);
  Submit("command: x\nresources: {cpu: 2}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto placed = *svc_->Assignments(node);
  const bool on_node = placed["tasks"].size() == 1u;
  EXPECT_EQ(fired + other_fired, 1);  // only the node the task went to
  EXPECT_EQ(fired, on_node ? 1 : 0);
  if (on_node) EXPECT_NE(placed["index"], index);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(fired + other_fired, 1);  // once
}

TEST_F(JobServiceTest, StopEndsEveryWatch) {
  int64_t node = AddNode("vm", 2000);
  int fired = 0;
  ASSERT_NE(svc_->WatchNode(node, svc_->NodeIndex(node), [&] { ++fired; }), 0u);
  svc_->Stop();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(svc_->WatchNode(node, svc_->NodeIndex(node), [] {}), 0u);  // closed: answer at once
}

TEST_F(JobServiceTest, PendingSpecsAreParsedOnceAndABadStoredSpecFailsOnlyItsJob) {
  AddNode("vm", 2000);
  int64_t big = Submit("command: x\nresources: {cpu: 64}\n");  // waits: too big
  ASSERT_TRUE(svc_->RunPass().ok());
  // The stored text changes under the scheduler: it keeps the spec it parsed.
  store::Job j = Job(big);
  j.spec_json = "{not json";
  ASSERT_TRUE(store_->UpdateJob(j).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(big).state, State::kPending);
  // A job whose spec is unreadable from the start (a damaged database) fails alone.
  int64_t bad = Submit("command: y\nresources: {cpu: 64}\n");
  store::Job b = Job(bad);
  b.spec_json = "[[[[[[";
  ASSERT_TRUE(store_->UpdateJob(b).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(bad).state, State::kFailed);
  EXPECT_NE(Job(bad).reason.find("stored spec"), std::string::npos) << Job(bad).reason;
  EXPECT_EQ(Job(big).state, State::kPending);
  int64_t ok = Submit("command: z\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(ok).state, State::kScheduled);
}

TEST_F(JobServiceTest, PendingJobsPerUserAreCapped) {
  JobServiceOptions o;
  o.max_pending_jobs_per_user = 2;
  Restart(o);
  Submit("command: x\nresources: {cpu: 64}\n");
  Submit("command: x\nresources: {cpu: 64}\n");
  auto spec = protocol::ParseJobSpec("command: x\n");
  auto third = svc_->Submit(user_, *spec);
  ASSERT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("2 pending jobs, the limit"), std::string::npos) << third.status().message();
}

TEST_F(JobServiceTest, HeartbeatsAreHeldInMemoryAndStoredOnlyOnReturnOrEveryHalfMinute) {
  int64_t node = AddNode("vm", 2000);
  const int64_t registered = store_->GetNode(node)->last_heartbeat_ms;
  clock_.AdvanceMs(2'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0.5, 1 << 20).ok());
  EXPECT_EQ(store_->GetNode(node)->last_heartbeat_ms, registered);  // not written
  store::Node live = *store_->GetNode(node);
  svc_->ApplyLive(&live);
  EXPECT_EQ(live.last_heartbeat_ms, registered + 2'000);  // but shown
  EXPECT_EQ(live.cpu_util, 0.5);
  for (int i = 0; i < 30; ++i) {
    clock_.AdvanceMs(1'000);
    ASSERT_TRUE(svc_->Heartbeat(node, 0.25, 1 << 20).ok());
  }
  EXPECT_EQ(store_->GetNode(node)->last_heartbeat_ms, registered + 30'000);  // stored after 30 s
  // A node back from a silence is stored at once.
  clock_.AdvanceMs(20'000);
  EXPECT_FALSE(svc_->NodeReady(*store_->GetNode(node)));
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  EXPECT_EQ(store_->GetNode(node)->last_heartbeat_ms, clock_.NowMs());
  EXPECT_TRUE(svc_->NodeReady(*store_->GetNode(node)));
  EXPECT_EQ(svc_->Heartbeat(9999, 0, 0).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::server

namespace ringmaster::server {
namespace {

// An agent sends a report again when its answer was lost or its server
// failed over: (task, attempt, state) makes the replay a no-op.
TEST_F(JobServiceTest, AReplayedReportHasNoSecondEffect) {
  AddNode("vm", 2000);
  int64_t id = Submit("command: x\nresources: {cpu: 1}\nmax_restarts: 3\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  const store::Task placed = Tasks(id)[0];
  auto count = [&](const std::string& reason_part) {
    int n = 0;
    for (const auto& e : store_->ListEvents(id).value()) n += e.reason.find(reason_part) != std::string::npos;
    return n;
  };
  TaskReport staging{placed.node_id, placed.attempt, "", -1, 0, "", "staging"};
  ASSERT_TRUE(svc_->ReportTask(placed.id, staging).ok());
  ASSERT_TRUE(svc_->ReportTask(placed.id, staging).ok());
  EXPECT_EQ(count("staging"), 1);
  ASSERT_TRUE(Report(placed, "running").ok());
  ASSERT_TRUE(Report(placed, "running").ok());
  EXPECT_EQ(count("rank 0 started"), 1);  // the job's RUNNING, once
  ASSERT_TRUE(Report(placed, "exited", 1).ok());
  EXPECT_EQ(Job(id).restarts, 1);
  // The same exit again: the attempt it names has ended, nothing restarts twice.
  const Status again = Report(placed, "exited", 1);
  EXPECT_TRUE(again.ok() || again.code() == StatusCode::kFailedPrecondition) << again.ToString();
  EXPECT_EQ(Job(id).restarts, 1);
  EXPECT_EQ(Job(id).state, State::kPending);
  // After the restart placed it again, the old attempt's exit is still refused.
  clock_.AdvanceMs(1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Tasks(id)[0].attempt, placed.attempt + 1);
  EXPECT_EQ(Report(placed, "exited", 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Job(id).restarts, 1);
  EXPECT_EQ(Tasks(id)[0].state, State::kScheduled);
}

}  // namespace
}  // namespace ringmaster::server
