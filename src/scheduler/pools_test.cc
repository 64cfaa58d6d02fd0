// Ports, GPU indices and overlay addresses are taken inside the plan: a gang
// gets all of them or is not placed, and one refused for them leaves the rest
// of the pass's plan as if it had never been looked at.
#include "scheduler/pools.h"

#include <gtest/gtest.h>

#include "scheduler/scheduler.h"

namespace ringmaster::scheduler {
namespace {

constexpr int64_t kGi = 1LL << 30;

NodeState PoolNode(int64_t id, const std::string& name, int port_lo, int port_hi, int gpus = 0) {
  NodeState n;
  n.id = id;
  n.name = name;
  n.capacity = {16'000, 64 * kGi, gpus};
  n.port_lo = port_lo;
  n.port_hi = port_hi;
  n.gpu_indices = gpus > 0;
  n.executors = {"process", "runc"};
  return n;
}

JobRequest Job(int64_t id, int replicas, int gpus = 0) {
  JobRequest j;
  j.job_id = id;
  j.replicas = replicas;
  j.per_task = {1000, kGi, gpus};
  j.submit_ms = id;
  j.executors = {"process"};
  return j;
}

Plan Schedule(const std::vector<NodeState>& nodes, const std::vector<JobRequest>& queue,
              std::vector<RunningJob> running = {}) {
  auto s = Scheduler::Create({});
  EXPECT_TRUE(s.ok());
  return (*s)->Schedule({0, nodes, std::move(running)}, queue);
}

const Placement* Find(const Plan& plan, int64_t job_id) {
  for (const auto& p : plan.placements) {
    if (p.job_id == job_id) return &p;
  }
  return nullptr;
}

TEST(PoolsTest, EachReplicaGetsTheLowestFreePortOfItsNode) {
  NodeState n = PoolNode(1, "a", 30000, 30009);
  n.ports_used = {30000, 30002};
  Plan plan = Schedule({n}, {Job(7, 3)});
  const Placement* p = Find(plan, 7);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->slots.size(), 3u);
  EXPECT_EQ(p->slots[0].port, 30001);
  EXPECT_EQ(p->slots[1].port, 30003);
  EXPECT_EQ(p->slots[2].port, 30004);
}

TEST(PoolsTest, ANodeWithoutAPortRangeGivesPortZero) {
  NodeState n = PoolNode(1, "a", 0, -1);
  Plan plan = Schedule({n}, {Job(7, 2)});
  ASSERT_NE(Find(plan, 7), nullptr);
  for (const auto& s : Find(plan, 7)->slots) EXPECT_EQ(s, ReplicaSlot{});
}

// The must-show: a gang refused for ports leaves the others' plan, ports,
// GPUs and addresses included, exactly as if it had never been considered.
TEST(PoolsTest, AGangRefusedForPortsLeavesTheRestOfThePlanUntouched) {
  std::vector<NodeState> nodes = {PoolNode(1, "small", 41000, 41002, 4), PoolNode(2, "big", 42000, 42099, 4)};
  nodes[1].capacity.cpu_milli = 2000;  // room for two replicas only
  JobRequest first = Job(1, 2, 1);
  JobRequest refused = Job(2, 4, 1);  // fits by resources (2 + 2), not by the small node's ports
  JobRequest after = Job(3, 2, 1);
  after.priority = -1;  // placed after the refused gang
  refused.per_task.cpu_milli = 1000;
  Plan with = Schedule(nodes, {first, refused, after});
  Plan without = Schedule(nodes, {first, after});
  EXPECT_EQ(Find(with, 2), nullptr);
  ASSERT_NE(Find(with, 3), nullptr);
  EXPECT_EQ(with.pending_reasons.at(2), "waiting for ports: node small has no free port in 41000-41002");
  ASSERT_EQ(with.placements.size(), without.placements.size());
  for (size_t i = 0; i < with.placements.size(); ++i) {
    EXPECT_EQ(with.placements[i].job_id, without.placements[i].job_id);
    EXPECT_EQ(with.placements[i].node_ids, without.placements[i].node_ids);
    EXPECT_EQ(with.placements[i].slots, without.placements[i].slots);
  }
  EXPECT_TRUE(with.preemptions.empty());
  // And it is refused for the ports, not the resources: without the first gang it fits.
  Plan alone = Schedule(nodes, {refused});
  EXPECT_NE(Find(alone, 2), nullptr);
}

TEST(PoolsTest, TwoTasksNeverShareAGpuIndex) {
  NodeState n = PoolNode(1, "g", 0, -1, 4);
  n.gpus_used = {0, 2};
  n.allocated.gpus = 2;
  Plan plan = Schedule({n}, {Job(5, 1, 2)});
  ASSERT_NE(Find(plan, 5), nullptr);
  EXPECT_EQ(Find(plan, 5)->slots[0].gpus, (std::vector<int>{1, 3}));
  // A node whose indices are held (though its count says otherwise) refuses.
  n.gpus_used = {0, 1, 2};
  Plan refused = Schedule({n}, {Job(6, 1, 2)});
  EXPECT_EQ(Find(refused, 6), nullptr);
  EXPECT_EQ(refused.pending_reasons.at(6), "waiting for GPUs: node g has no 2 free GPUs");
}

NodeState OverlayNode(int64_t id, const std::string& name, const std::string& mode, uint32_t first, int count) {
  NodeState n = PoolNode(id, name, 0, -1);
  n.overlay = true;
  n.overlay_network = mode;
  n.address_first = first;
  n.address_count = count;
  return n;
}

JobRequest OverlayJob(int64_t id, int replicas, bool needs) {
  JobRequest j = Job(id, replicas);
  j.executors = needs ? std::vector<std::string>{"runc"} : std::vector<std::string>{"runc", "docker"};
  j.joins_overlay = true;
  j.needs_overlay = needs;
  return j;
}

TEST(PoolsTest, AGangOnOneOverlayTakesAnAddressPerReplica) {
  NodeState n = OverlayNode(1, "o", "vxlan", 0x0AF40302, 3);
  n.addresses_used = {0x0AF40302};
  Plan plan = Schedule({n}, {OverlayJob(4, 2, false)});
  ASSERT_NE(Find(plan, 4), nullptr);
  EXPECT_EQ(Find(plan, 4)->slots[0].address, 0x0AF40303u);
  EXPECT_EQ(Find(plan, 4)->slots[1].address, 0x0AF40304u);
  // The block is full now: the next gang waits for an address.
  n.addresses_used = {0x0AF40302, 0x0AF40303, 0x0AF40304};
  Plan full = Schedule({n}, {OverlayJob(5, 1, false)});
  EXPECT_EQ(Find(full, 5), nullptr);
  EXPECT_EQ(full.pending_reasons.at(5), "waiting for the overlay: node o has no free overlay address");
}

TEST(PoolsTest, AGangSplitOverTwoOverlaysJoinsNoneOrWaits) {
  NodeState a = OverlayNode(1, "a", "vxlan", 0x0AF40002, 10);
  NodeState b = OverlayNode(2, "b", "ovs-gre", 0x0AF40102, 10);
  a.capacity.cpu_milli = b.capacity.cpu_milli = 1000;  // one replica each
  Plan optional = Schedule({a, b}, {OverlayJob(1, 2, false)});
  ASSERT_NE(Find(optional, 1), nullptr);
  for (const auto& s : Find(optional, 1)->slots) EXPECT_EQ(s.address, 0u);  // on the host network
  Plan needed = Schedule({a, b}, {OverlayJob(2, 2, true)});
  EXPECT_EQ(Find(needed, 2), nullptr);
  EXPECT_EQ(needed.pending_reasons.at(2), std::string("waiting for the overlay: ") + kSplitOverlay);
}

TEST(PoolsTest, APortARunningJobHoldsIsNotTakenAgain) {
  NodeState n = PoolNode(1, "a", 30000, 30000);
  n.ports_used = {30000};
  n.allocated = {1000, kGi, 0};
  RunningJob rj{Job(1, 1), {1}, 0, 0, /*stopping=*/true, {ReplicaSlot{30000, {}, 0}}};
  Plan plan = Schedule({n}, {Job(2, 1)}, {rj});
  EXPECT_EQ(Find(plan, 2), nullptr);
  EXPECT_EQ(plan.pending_reasons.at(2), "waiting for ports: node a has no free port in 30000-30000");
}

}  // namespace
}  // namespace ringmaster::scheduler
