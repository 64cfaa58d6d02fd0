#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

namespace ringmaster::scheduler {
namespace {

constexpr int64_t kGi = 1LL << 30;

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
  return j;
}

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
  job.gpu_type = "a100";
  Plan plan = Schedule({MakeNode(1, "v", 2000, 8, "Tesla V100"), MakeNode(2, "a", 2000, 8, "NVIDIA A100-SXM4")},
                       {job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_ids[0], 2);

  plan = Schedule({MakeNode(1, "v", 2000, 8, "Tesla V100")}, {job});
  EXPECT_NE(plan.pending_reasons[10].find("node v has no a100 gpus (it has Tesla V100)"), std::string::npos)
      << plan.pending_reasons[10];
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

TEST(Schedule, NoNodes) {
  Plan plan = Schedule({}, {MakeJob(10, 1, 1000)});
  EXPECT_NE(plan.pending_reasons[10].find("no nodes registered"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster::scheduler
