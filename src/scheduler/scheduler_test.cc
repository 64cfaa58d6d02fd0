// Deterministic scheduler tests: a fixed snapshot and clock reading in, a plan
// out. No sleeps, no threads.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include "scheduler/plugins.h"
#include "scheduler/policy.h"

namespace ringmaster::scheduler {
namespace {

constexpr int64_t kGi = 1LL << 30;
constexpr int64_t kMin = 60'000;

NodeState MakeNode(int64_t id, const std::string& name, int64_t cpu_milli, int gpus = 0,
                   const std::string& model = "") {
  NodeState n;
  n.id = id;
  n.name = name;
  n.capacity = {cpu_milli, 16 * kGi, gpus};
  n.gpu_model = model;
  return n;
}

JobRequest MakeJob(int64_t id, int replicas, int64_t cpu_milli, int gpus = 0) {
  JobRequest j;
  j.job_id = id;
  j.replicas = replicas;
  j.per_task = {cpu_milli, kGi, gpus};
  j.submit_ms = id;
  return j;
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  auto s = Scheduler::Create(config);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

Plan Schedule(const std::vector<NodeState>& nodes, const std::vector<JobRequest>& queue,
              const SchedulerConfig& config = {}) {
  return Make(config)->Schedule({0, nodes, {}}, queue);
}

// A running job on the given nodes, with its allocation added to them.
RunningJob Running(std::vector<NodeState>& nodes, JobRequest job, std::vector<int64_t> on, int64_t started_ms,
               int64_t checkpoint_ms = 0) {
  for (int64_t id : on) {
    for (auto& n : nodes) {
      if (n.id != id) continue;
      n.allocated.cpu_milli += job.per_task.cpu_milli;
      n.allocated.memory_bytes += job.per_task.memory_bytes;
      n.allocated.gpus += job.per_task.gpus;
    }
  }
  return {std::move(job), std::move(on), started_ms, checkpoint_ms, false};
}

std::vector<int64_t> Victims(const Plan& plan) {
  std::vector<int64_t> ids;
  for (const auto& p : plan.preemptions) ids.push_back(p.job_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// --- placement, gangs and reasons ---

TEST(Schedule, PlacesAGangWhenEveryReplicaFits) {
  Plan plan = Schedule({MakeNode(1, "a", 2000), MakeNode(2, "b", 2000)}, {MakeJob(10, 3, 1000)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids.size(), 3u);
  EXPECT_TRUE(plan.pending_reasons.empty());
}

TEST(Schedule, GangIsAllOrNothing) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 2000), MakeNode(2, "b", 2000)};
  nodes[1].allocated.cpu_milli = 1500;  // only 2 of the 3 replicas fit now
  Plan plan = Schedule(nodes, {MakeJob(10, 3, 1000)});
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.pending_reasons.count(10), 1u);
  EXPECT_NE(plan.pending_reasons[10].find("only 2 of 3 replicas fit"), std::string::npos)
      << plan.pending_reasons[10];
  EXPECT_NE(plan.pending_reasons[10].find("free cpus"), std::string::npos);
}

TEST(Schedule, PacksAGangOntoFewNodes) {
  Plan plan = Schedule({MakeNode(1, "a", 4000), MakeNode(2, "b", 8000)}, {MakeJob(10, 2, 2000)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{1, 1}));
}

TEST(Schedule, LocalityKeepsAGangOnOneHostEvenWhenSpreading) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 8), MakeNode(2, "b", 64000, 8), MakeNode(3, "c", 64000, 8)};
  SchedulerConfig spread_only;
  spread_only.scores = {{"spread", 1}};
  Plan plan = Schedule(nodes, {MakeJob(10, 4, 1000, 1)}, spread_only);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{1, 2, 3, 1}));  // spread alone scatters the ring
  SchedulerConfig with_locality;
  with_locality.scores = {{"spread", 1}, {"locality", 2}};
  plan = Schedule(nodes, {MakeJob(10, 4, 1000, 1)}, with_locality);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(Schedule, LoadAwarePrefersTheLessBusyHost) {
  std::vector<NodeState> nodes = {MakeNode(1, "busy", 8000), MakeNode(2, "quiet", 8000)};
  nodes[0].cpu_util = 0.9;  // busy with work the platform does not own
  nodes[1].cpu_util = 0.1;
  SchedulerConfig config;
  config.scores = {{"load-aware", 1}};
  Plan plan = Schedule(nodes, {MakeJob(10, 1, 1000)}, config);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);
}

TEST(Schedule, ReasonNamesTheMissingGpus) {
  Plan plan = Schedule({MakeNode(1, "vm", 2000)}, {MakeJob(10, 2, 1000, 1)});
  ASSERT_EQ(plan.pending_reasons.count(10), 1u);
  EXPECT_EQ(plan.pending_reasons[10],
            "needs 2 x {cpu 1, memory 1Gi, gpu 1}; it cannot fit this cluster even when idle: "
            "node vm has 0 gpus in total, needs 1");
}

TEST(Schedule, BusyNodeReasonSaysFree) {
  std::vector<NodeState> nodes = {MakeNode(1, "vm", 2000, 1, "NVIDIA H200")};
  nodes[0].allocated.gpus = 1;
  Plan plan = Schedule(nodes, {MakeJob(10, 1, 1000, 1)});
  EXPECT_EQ(plan.pending_reasons[10],
            "needs 1 x {cpu 1, memory 1Gi, gpu 1}; 0 of 1 nodes fit: node vm has 0 free gpus, needs 1");
}

TEST(Schedule, GpuTypeMustMatch) {
  JobRequest job = MakeJob(10, 1, 1000, 1);
  job.gpu_types = {"a100"};
  Plan plan = Schedule({MakeNode(1, "v", 2000, 8, "Tesla V100"), MakeNode(2, "a", 2000, 8, "NVIDIA A100-SXM4")},
                       {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);

  plan = Schedule({MakeNode(1, "v", 2000, 8, "Tesla V100")}, {job});
  EXPECT_NE(plan.pending_reasons[10].find("node v has no a100 gpus (it has Tesla V100)"), std::string::npos)
      << plan.pending_reasons[10];
}

TEST(Schedule, NodeSelectorMatchesLabels) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 4000), MakeNode(2, "b", 4000)};
  nodes[0].labels = {{"rack", "r1"}};
  nodes[1].labels = {{"rack", "r2"}, {"ib", "yes"}};
  JobRequest job = MakeJob(10, 1, 1000);
  job.node_selector = {{"ib", "yes"}};
  Plan plan = Schedule(nodes, {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);
  job.node_selector = {{"rack", "r3"}};
  plan = Schedule(nodes, {job});
  EXPECT_NE(plan.pending_reasons[10].find("node a has label rack=r1, not r3"), std::string::npos)
      << plan.pending_reasons[10];
}

TEST(Schedule, ExecutorFilterPlacesImagesWhereAContainerRuntimeIs) {
  std::vector<NodeState> nodes = {MakeNode(1, "plain", 4000), MakeNode(2, "docker", 4000)};
  nodes[1].executors = {"process", "docker"};
  JobRequest job = MakeJob(10, 1, 1000);
  job.executors = {"runc", "docker"};  // a job with an image
  Plan plan = Schedule(nodes, {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);
  job.executors = {"runc"};  // pinned to one no node has
  plan = Schedule(nodes, {job});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.pending_reasons[10].find("node plain runs tasks with process, the job needs runc"), std::string::npos)
      << plan.pending_reasons[10];
  EXPECT_NE(plan.pending_reasons[10].find("node docker runs tasks with process, docker, the job needs runc"),
            std::string::npos)
      << plan.pending_reasons[10];
  job.executors = {"process"};  // no image: a node without executors listed runs processes
  plan = Schedule(nodes, {job});
  ASSERT_EQ(plan.placements.size(), 1u);
}

TEST(Schedule, FifoHeadBlocksLaterJobsButImpossibleJobsDoNot) {
  std::vector<NodeState> nodes = {MakeNode(1, "vm", 2000)};
  nodes[0].allocated.cpu_milli = 1000;
  // 10 can never fit; 11 fits later; 12 would fit now but must wait behind 11.
  Plan plan = Schedule(nodes, {MakeJob(10, 1, 64000), MakeJob(11, 1, 2000), MakeJob(12, 1, 500)});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.pending_reasons[10].find("cannot fit this cluster even when idle"), std::string::npos);
  EXPECT_NE(plan.pending_reasons[10].find("2 cpus in total, needs 64"), std::string::npos);
  EXPECT_NE(plan.pending_reasons[11].find("1 free cpus, needs 2"), std::string::npos);
  EXPECT_NE(plan.pending_reasons[12].find("waiting behind job 11"), std::string::npos);
}

TEST(Schedule, EarlierPlacementsInOnePassConsumeCapacity) {
  Plan plan = Schedule({MakeNode(1, "vm", 2000)}, {MakeJob(10, 1, 1500), MakeJob(11, 1, 1000)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, 10);
  EXPECT_NE(plan.pending_reasons[11].find("0.5 free cpus, needs 1"), std::string::npos);
}

TEST(Schedule, NodesWithoutHeartbeatGetNothing) {
  std::vector<NodeState> nodes = {MakeNode(1, "vm", 2000)};
  nodes[0].ready = false;
  Plan plan = Schedule(nodes, {MakeJob(10, 1, 1000)});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.pending_reasons[10].find("node vm is not ready"), std::string::npos);
}

TEST(Schedule, CordonedNodesGetNothingAndTheReasonSaysWhy) {
  std::vector<NodeState> nodes = {MakeNode(1, "vm", 2000), MakeNode(2, "gpu-1", 2000)};
  nodes[0].ready = false;
  nodes[0].cordoned = "cordoned: disk replacement";
  nodes[1].ready = false;
  nodes[1].cordoned = "draining";
  Plan plan = Schedule(nodes, {MakeJob(10, 1, 1000)});
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.pending_reasons[10].find("node vm is cordoned: disk replacement"), std::string::npos)
      << plan.pending_reasons[10];
  EXPECT_NE(plan.pending_reasons[10].find("node gpu-1 is draining"), std::string::npos) << plan.pending_reasons[10];
  // It would fit were they back: it waits for them, it is not too big for the cluster.
  EXPECT_NE(plan.pending_reasons[10].find("no node that could hold it takes work now"), std::string::npos)
      << plan.pending_reasons[10];
  plan = Schedule(nodes, {MakeJob(11, 1, 4000)});
  EXPECT_NE(plan.pending_reasons[11].find("cannot fit this cluster even when idle"), std::string::npos)
      << plan.pending_reasons[11];
}

TEST(Schedule, NoNodes) {
  Plan plan = Schedule({}, {MakeJob(10, 1, 1000)});
  EXPECT_NE(plan.pending_reasons[10].find("no nodes registered"), std::string::npos);
}

TEST(Schedule, LimitedScoringStillPlacesOnLargeClusters) {
  std::vector<NodeState> nodes;
  for (int i = 0; i < 2000; ++i) nodes.push_back(MakeNode(i + 1, "n" + std::to_string(i), 8000, 8, "H100"));
  std::vector<JobRequest> queue;
  for (int i = 0; i < 2000 * 8; ++i) queue.push_back(MakeJob(i + 1, 1, 1000, 1));
  Plan plan = Schedule(nodes, queue);
  EXPECT_EQ(plan.placements.size(), queue.size());  // every GPU used: limited scoring loses no capacity
}

// --- the plugin registry ---

TEST(Registry, UnknownNamesAreRefusedByField) {
  SchedulerConfig c;
  c.filters = {"resources", "colour"};
  auto s = Scheduler::Create(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("filters: no filter plugin named 'colour'"), std::string::npos)
      << s.status().message();
  c = {};
  c.scores = {{"fastest", 1}};
  EXPECT_NE(Scheduler::Create(c).status().message().find("scores: no score plugin named 'fastest'"),
            std::string::npos);
  c = {};
  c.policy = "lottery";
  EXPECT_NE(Scheduler::Create(c).status().message().find("policy: 'lottery' is not one of"), std::string::npos);
  c = {};
  c.filters = {"health"};
  EXPECT_NE(Scheduler::Create(c).status().message().find("'resources' is required"), std::string::npos);
}

class PreferNamed final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "prefer-b"; }
  double Score(const NodeState& n, const JobRequest&, const GangState&) const override { return n.name == "b"; }
};

TEST(Registry, APluginRegisteredByNameIsUsed) {
  RegisterScore("prefer-b", [] { return std::make_unique<PreferNamed>(); });
  SchedulerConfig c;
  c.scores = {{"prefer-b", 1}};
  Plan plan = Schedule({MakeNode(1, "a", 4000), MakeNode(2, "b", 4000)}, {MakeJob(10, 1, 1000)}, c);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);
}

// --- priority preemption ---

TEST(Preemption, PicksTheVictimWithTheLeastLostWork) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 8000, 3, "H100")};
  const int64_t now = 100 * kMin;
  std::vector<RunningJob> running;
  running.push_back(Running(nodes, MakeJob(1, 1, 1000, 1), {1}, 0, 90 * kMin));   // 10 min since its checkpoint
  running.push_back(Running(nodes, MakeJob(2, 1, 1000, 1), {1}, 0, 98 * kMin));   // 2 min
  running.push_back(Running(nodes, MakeJob(3, 1, 1000, 1), {1}, 95 * kMin));      // no checkpoint: 5 min since start
  JobRequest urgent = MakeJob(10, 1, 1000, 1);
  urgent.priority = 10;
  Plan plan = Make({})->Schedule({now, nodes, running}, {urgent});
  EXPECT_TRUE(plan.placements.empty());  // it starts once the victim has checkpointed and stopped
  ASSERT_EQ(Victims(plan), (std::vector<int64_t>{2}));
  EXPECT_EQ(plan.preemptions[0].for_job, 10);
  EXPECT_DOUBLE_EQ(plan.preemptions[0].lost_work_s, 120);
  EXPECT_NE(plan.pending_reasons[10].find("preempting job 2"), std::string::npos) << plan.pending_reasons[10];

  urgent.per_task.gpus = 2;  // two victims: the two with least lost work
  plan = Make({})->Schedule({now, nodes, running}, {urgent});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{2, 3}));
}

TEST(Preemption, TakesNoVictimItDoesNotNeed) {
  // Job 1 has the least lost work, but freeing its node is not enough (job 5,
  // priority 10, stays); job 2's node is. Job 1 is reprieved.
  std::vector<NodeState> nodes = {MakeNode(1, "a", 8000, 2, "H100"), MakeNode(2, "b", 8000, 2, "H100")};
  const int64_t now = 100 * kMin;
  std::vector<RunningJob> running;
  running.push_back(Running(nodes, MakeJob(1, 1, 1000, 1), {1}, 99 * kMin));
  JobRequest vip = MakeJob(5, 1, 1000, 1);
  vip.priority = 10;
  running.push_back(Running(nodes, vip, {1}, 0));
  running.push_back(Running(nodes, MakeJob(2, 1, 1000, 2), {2}, 50 * kMin));
  JobRequest urgent = MakeJob(10, 1, 1000, 2);
  urgent.priority = 5;
  Plan plan = Make({})->Schedule({now, nodes, running}, {urgent});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{2}));
}

TEST(Preemption, WaitsForVictimsToStopWithoutTakingMore) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 8000, 2, "H100")};
  std::vector<RunningJob> running;
  running.push_back(Running(nodes, MakeJob(1, 1, 1000, 1), {1}, 0));
  running.push_back(Running(nodes, MakeJob(2, 1, 1000, 1), {1}, 0));
  running[0].stopping = true;  // preempted in the last pass, still checkpointing
  JobRequest urgent = MakeJob(10, 1, 1000, 1);
  urgent.priority = 10;
  Plan plan = Make({})->Schedule({kMin, nodes, running}, {urgent, MakeJob(11, 1, 500)});
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_NE(plan.pending_reasons[10].find("starts when job 1 stopped"), std::string::npos) << plan.pending_reasons[10];
  EXPECT_NE(plan.pending_reasons[11].find("waiting behind job 10"), std::string::npos);
}

TEST(Preemption, NeverForEqualOrLowerPriorityNorUnderFifo) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 8000, 1, "H100")};
  std::vector<RunningJob> running = {Running(nodes, MakeJob(1, 1, 1000, 1), {1}, 0)};
  Plan plan = Make({})->Schedule({kMin, nodes, running}, {MakeJob(10, 1, 1000, 1)});
  EXPECT_TRUE(plan.preemptions.empty());
  JobRequest urgent = MakeJob(10, 1, 1000, 1);
  urgent.priority = 10;
  SchedulerConfig fifo;
  fifo.policy = "fifo";
  plan = Make(fifo)->Schedule({kMin, nodes, running}, {urgent});
  EXPECT_TRUE(plan.preemptions.empty());
  SchedulerConfig off;
  off.preemption = false;
  plan = Make(off)->Schedule({kMin, nodes, running}, {urgent});
  EXPECT_TRUE(plan.preemptions.empty());
}

// --- quotas and borrowing ---

JobRequest UserJob(int64_t id, const std::string& user, int gpus) {
  JobRequest j = MakeJob(id, 1, 1000, gpus);
  j.user = user;
  return j;
}

TEST(Quota, BorrowsIdleQuotaAndGivesItBackByPreemption) {
  SchedulerConfig c;
  c.quotas = {{"alice", {-1, 2, true}}, {"bob", {-1, 2, true}}};
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 4, "H100")};
  // Bob is idle: alice's four 1-GPU jobs all start, the last two borrowing bob's share.
  Plan plan = Make(c)->Schedule({0, nodes, {}}, {UserJob(1, "alice", 1), UserJob(2, "alice", 1),
                                                 UserJob(3, "alice", 1), UserJob(4, "alice", 1)});
  ASSERT_EQ(plan.placements.size(), 4u);
  EXPECT_FALSE(plan.placements[0].borrowing);
  EXPECT_FALSE(plan.placements[1].borrowing);
  EXPECT_TRUE(plan.placements[2].borrowing);
  EXPECT_TRUE(plan.placements[3].borrowing);

  // Bob arrives wanting his 2 GPUs: alice's borrowers go (least lost work first
  // among them), never her guaranteed jobs, whatever the priorities.
  std::vector<RunningJob> running;
  for (int id = 1; id <= 4; ++id) running.push_back(Running(nodes, UserJob(id, "alice", 1), {1}, id * kMin));
  running[0].request.priority = running[1].request.priority = 0;
  running[2].request.priority = running[3].request.priority = 0;
  plan = Make(c)->Schedule({10 * kMin, nodes, running}, {UserJob(10, "bob", 2)});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{3, 4}));
  EXPECT_NE(plan.preemptions[0].reason.find("reclaiming quota: user alice borrows beyond its quota"),
            std::string::npos)
      << plan.preemptions[0].reason;

  // Only 1 GPU wanted: the borrower with least lost work (the later one, 4) goes.
  plan = Make(c)->Schedule({10 * kMin, nodes, running}, {UserJob(10, "bob", 1)});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{4}));
}

TEST(Quota, GuaranteedJobsOfOtherUsersAreSafeFromPriority) {
  SchedulerConfig c;
  c.quotas = {{"alice", {-1, 2, true}}, {"bob", {-1, 2, true}}};
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 2, "H100")};
  std::vector<RunningJob> running = {Running(nodes, UserJob(1, "alice", 2), {1}, 0)};
  JobRequest urgent = UserJob(10, "bob", 2);
  urgent.priority = 100;
  Plan plan = Make(c)->Schedule({kMin, nodes, running}, {urgent});
  EXPECT_TRUE(plan.preemptions.empty());
  // Its own lower-priority job is fair game.
  urgent.user = "alice";
  urgent.job_id = 11;
  c.quotas["alice"].gpus = 4;
  plan = Make(c)->Schedule({kMin, nodes, running}, {urgent});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{1}));
}

TEST(Quota, OverQuotaWithoutBorrowingWaitsAndBlocksNoOne) {
  SchedulerConfig c;
  c.quotas = {{"alice", {4000, 1, false}}};
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 4, "H100")};
  std::vector<RunningJob> running = {Running(nodes, UserJob(1, "alice", 1), {1}, 0)};
  Plan plan = Make(c)->Schedule({kMin, nodes, running}, {UserJob(10, "alice", 1), UserJob(11, "bob", 1)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, 11);
  EXPECT_NE(plan.pending_reasons[10].find("over quota: user alice holds 1 of 1 gpus and 1 of 4 cpus"),
            std::string::npos)
      << plan.pending_reasons[10];
}

TEST(FairShare, APriorityPreemptsOnlyItsOwnUsersJobsWhileOthersAreWithinTheirShare) {
  // Bob may ask for priority 1000; alice holds her half of the cluster.
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 4, "H100")};
  // Alice's job would lose the least work, and priority 1000 outranks it.
  std::vector<RunningJob> running = {Running(nodes, UserJob(1, "alice", 2), {1}, 9 * kMin),
                                     Running(nodes, UserJob(2, "bob", 2), {1}, 0)};
  JobRequest urgent = UserJob(10, "bob", 2);
  urgent.priority = 1000;
  Plan plan = Make({})->Schedule({10 * kMin, nodes, running}, {urgent});
  ASSERT_EQ(Victims(plan), (std::vector<int64_t>{2}));  // his own lower-priority one
  EXPECT_NE(plan.preemptions[0].reason.find("(priority 1000 > 0)"), std::string::npos) << plan.preemptions[0].reason;
  // Without a job of his own to take, alice's stays: she is within her share.
  running.pop_back();
  nodes[0].allocated.gpus = 2;
  urgent.per_task.gpus = 4;
  plan = Make({})->Schedule({10 * kMin, nodes, running}, {urgent});
  EXPECT_TRUE(plan.preemptions.empty());
  urgent.per_task.gpus = 3;
  plan = Make({})->Schedule({10 * kMin, nodes, running}, {urgent});
  EXPECT_TRUE(plan.preemptions.empty());
}

TEST(FairShare, AUserBeyondAnEvenShareGivesItBackToAnotherWhoseJobWaits) {
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 4, "H100")};
  std::vector<RunningJob> running;
  for (int id = 1; id <= 4; ++id) running.push_back(Running(nodes, UserJob(id, "alice", 1), {1}, id * kMin));
  Plan plan = Make({})->Schedule({10 * kMin, nodes, running}, {UserJob(10, "bob", 2)});
  ASSERT_EQ(Victims(plan), (std::vector<int64_t>{3, 4}));  // the two past her share of 2, whatever their priority
  EXPECT_NE(plan.preemptions[0].reason.find("reclaiming fair share: user alice holds 4 gpus, more than an even share "
                                            "of the cluster (2)"),
            std::string::npos)
      << plan.preemptions[0].reason;
  // Past his own share, bob takes nothing from her.
  plan = Make({})->Schedule({10 * kMin, nodes, running}, {UserJob(10, "bob", 3)});
  EXPECT_TRUE(plan.preemptions.empty());
}

// --- heterogeneous GPUs ---

TEST(Heterogeneity, AwarePlacementPicksTheFastestType) {
  std::vector<NodeState> nodes = {MakeNode(1, "k", 64000, 8, "Tesla K80"), MakeNode(2, "v", 64000, 8, "Tesla V100")};
  nodes[0].allocated.gpus = 6;  // binpack alone prefers the fuller K80 node
  JobRequest job = MakeJob(10, 2, 1000, 1);
  job.gpu_types = {"k80", "v100"};
  job.throughput = {{"k80", 1.0}, {"v100", 3.3}};
  Plan plan = Schedule(nodes, {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{1, 1}));  // blind
  SchedulerConfig aware;
  aware.heterogeneity_aware = true;
  plan = Schedule(nodes, {job}, aware);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{2, 2}));
  // The V100s are taken: the next fastest type, never a gang split across types.
  nodes[1].allocated.gpus = 7;
  plan = Schedule(nodes, {job}, aware);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids, (std::vector<int64_t>{1, 1}));
  nodes[0].allocated.gpus = 7;  // one free GPU of each type: a 2-GPU gang waits rather than mixing
  plan = Schedule(nodes, {job}, aware);
  EXPECT_TRUE(plan.placements.empty());
}

TEST(Heterogeneity, AcceptsOnlyTheTypesItNames) {
  std::vector<NodeState> nodes = {MakeNode(1, "k", 64000, 8, "Tesla K80"), MakeNode(2, "p", 64000, 8, "Tesla P100")};
  JobRequest job = MakeJob(10, 1, 1000, 1);
  job.gpu_types = {"v100", "p100"};
  Plan plan = Schedule(nodes, {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);
}

// --- backfill ---

TEST(Backfill, StartsShortJobsWithoutDelayingTheHeadsReservation) {
  SchedulerConfig c;
  c.policy = "backfill";
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 4, "H100")};
  JobRequest long_running = MakeJob(1, 1, 1000, 2);
  long_running.expected_runtime_ms = 60 * kMin;
  std::vector<RunningJob> running = {Running(nodes, long_running, {1}, 0)};  // ends at 60 min
  JobRequest head = MakeJob(10, 1, 1000, 4);  // needs all 4: reserved for 60 min
  head.expected_runtime_ms = 10 * kMin;
  JobRequest short_job = MakeJob(11, 1, 1000, 2);
  short_job.expected_runtime_ms = 30 * kMin;  // ends at 40 min, before the reservation
  JobRequest long_job = MakeJob(12, 1, 1000, 2);
  long_job.expected_runtime_ms = 120 * kMin;  // would hold GPUs the head needs at 60 min
  Plan plan = Make(c)->Schedule({10 * kMin, nodes, running}, {head, long_job, short_job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, 11);
  EXPECT_NE(plan.pending_reasons[12].find("would not end before the head's reservation in 50m"), std::string::npos)
      << plan.pending_reasons[12];
  EXPECT_NE(plan.pending_reasons[12].find("nor fit in what the head leaves (0 gpus)"), std::string::npos)
      << plan.pending_reasons[12];
  // Under plain priority the short job waits too.
  SchedulerConfig strict;
  strict.policy = "priority";
  plan = Make(strict)->Schedule({10 * kMin, nodes, running}, {head, long_job, short_job});
  EXPECT_TRUE(plan.placements.empty());
}

TEST(Backfill, IsTheDefaultAndABlockedHeadHoldsBackNoJobThatEndsBeforeItsReservation) {
  // One job that does not fit must not hold back the smaller ones of equal priority.
  EXPECT_EQ(SchedulerConfig{}.policy, "backfill");
  std::vector<NodeState> nodes = {MakeNode(1, "a", 8000, 4, "H100"), MakeNode(2, "b", 8000, 4, "H100")};
  JobRequest long_running = MakeJob(1, 1, 1000, 4);
  long_running.expected_runtime_ms = 60 * kMin;
  std::vector<RunningJob> running = {Running(nodes, long_running, {1}, 0)};
  JobRequest head = MakeJob(10, 2, 1000, 4);  // both nodes whole: at 60 min
  std::vector<JobRequest> queue = {head};
  for (int id = 11; id <= 14; ++id) {
    JobRequest small = MakeJob(id, 1, 1000, 1);
    small.expected_runtime_ms = 20 * kMin;  // ends at 30 min
    queue.push_back(small);
  }
  Plan plan = Make({})->Schedule({10 * kMin, nodes, running}, queue);
  ASSERT_EQ(plan.placements.size(), 4u);
  for (const Placement& p : plan.placements) EXPECT_EQ(p.node_ids, (std::vector<int64_t>{2})) << p.job_id;
  EXPECT_NE(plan.pending_reasons[10].find("only 1 of 2 replicas fit now"), std::string::npos) << plan.pending_reasons[10];
  // A fifth no longer fits now: the reason names the nodes, not just the head.
  queue.push_back(MakeJob(15, 1, 1000, 1));
  queue.back().expected_runtime_ms = 20 * kMin;
  plan = Make({})->Schedule({10 * kMin, nodes, running}, queue);
  EXPECT_EQ(plan.placements.size(), 4u);
  EXPECT_NE(plan.pending_reasons[15].find("waiting behind job 10 (backfill: it does not fit now: 0 of 2 nodes fit: "
                                          "node a has 0 free gpus, needs 1, node b has 0 free gpus"),
            std::string::npos)
      << plan.pending_reasons[15];
}

TEST(Backfill, JobsWithoutATimeLimitRunForeverAndUseOnlyWhatTheHeadNeverNeeds) {
  // 8 GPUs; a job without a limit holds 3, the head wants 6: its start is
  // unknown, but it never needs 2 of the 8.
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 8, "H100")};
  std::vector<RunningJob> running = {Running(nodes, MakeJob(1, 1, 1000, 3), {1}, 0)};
  JobRequest head = MakeJob(10, 1, 1000, 6);
  JobRequest limited = MakeJob(11, 1, 1000, 1);
  limited.expected_runtime_ms = kMin;  // short, but the head's start is unknown: it counts like the rest
  Plan plan = Make({})->Schedule({kMin, nodes, running},
                                 {head, limited, MakeJob(12, 1, 1000, 1), MakeJob(13, 1, 1000, 1)});
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].job_id, 11);
  EXPECT_EQ(plan.placements[1].job_id, 12);
  EXPECT_NE(plan.pending_reasons[13].find("waiting behind job 10 (backfill: the head waits for jobs without a time "
                                          "limit, so only what it will never need may be used (0 gpus left)"),
            std::string::npos)
      << plan.pending_reasons[13];
  // Once the running job has a limit, the head has a reservation, and short jobs end before it.
  running[0].request.expected_runtime_ms = 60 * kMin;
  JobRequest short_job = MakeJob(13, 1, 1000, 1);
  short_job.expected_runtime_ms = 30 * kMin;
  plan = Make({})->Schedule({kMin, nodes, running}, {head, limited, MakeJob(12, 1, 1000, 1), short_job});
  EXPECT_EQ(plan.placements.size(), 3u);
}

TEST(Backfill, JobsPlacedEarlierInThePassCountForTheReservation) {
  SchedulerConfig c;
  c.policy = "backfill";
  JobRequest first = MakeJob(1, 1, 1000, 2);
  first.expected_runtime_ms = 60 * kMin;  // placed now, ends at 60 min
  JobRequest head = MakeJob(2, 1, 1000, 4);
  head.expected_runtime_ms = 10 * kMin;
  JobRequest short_job = MakeJob(3, 1, 1000, 2);
  short_job.expected_runtime_ms = 30 * kMin;  // ends before the head's reservation at 60 min
  Plan plan = Make(c)->Schedule({0, {MakeNode(1, "a", 64000, 4, "H100")}, {}}, {first, head, short_job});
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[1].job_id, 3);
}

// --- LAS ---

TEST(Las, LeastAttainedFirstAndPreemptsOnlyAfterTheLease) {
  SchedulerConfig c;
  c.policy = "las";
  c.las_thresholds_s = {3600};
  c.las_min_run_ms = 5 * kMin;
  std::vector<NodeState> nodes = {MakeNode(1, "a", 64000, 1, "H100")};
  JobRequest old = MakeJob(1, 1, 1000, 1);
  old.attained_service_s = 7200;  // level 1
  std::vector<RunningJob> running = {Running(nodes, old, {1}, 0)};
  JobRequest fresh = MakeJob(10, 1, 1000, 1);  // level 0
  Plan plan = Make(c)->Schedule({4 * kMin, nodes, running}, {fresh});
  EXPECT_TRUE(plan.preemptions.empty());  // the lease holds for 5 min
  plan = Make(c)->Schedule({6 * kMin, nodes, running}, {fresh});
  EXPECT_EQ(Victims(plan), (std::vector<int64_t>{1}));
  // Order: less attained service first, whatever the submission order.
  JobRequest a = MakeJob(20, 1, 1000, 1), b = MakeJob(21, 1, 1000, 1);
  a.attained_service_s = 4000;
  plan = Make(c)->Schedule({0, {MakeNode(1, "a", 64000, 1, "H100")}, {}}, {a, b});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, 21);
}

}  // namespace
}  // namespace ringmaster::scheduler
