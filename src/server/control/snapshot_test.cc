// The snapshot builder on plain vectors: no store, no service.
#include "server/control/snapshot.h"

#include <gtest/gtest.h>

namespace ringmaster::server {

using protocol::JobSpec;
namespace {

store::Node Node(int64_t id, const std::string& name) {
  store::Node n;
  n.id = id;
  n.name = name;
  n.cpu_milli = 8000;
  n.memory_bytes = 16LL << 30;
  n.gpu_count = 4;
  n.port_lo = 30000;
  n.port_hi = 30999;
  n.executors = "process,runc";
  n.network = "host";
  return n;
}

store::Task Placed(int64_t node_id, int port, const std::string& gpus, const std::string& ip) {
  store::Task t;
  t.node_id = node_id;
  t.cpu_milli = 1000;
  t.memory_bytes = 1LL << 30;
  t.gpus = gpus.empty() ? 0 : 1;
  t.port = port;
  t.gpu_indices = gpus;
  t.overlay_ip = ip;
  return t;
}

const OverlayPlan kOverlay{{0x0AF40000, 16}, 24};  // 10.244.0.0/16, /24 per node

TEST(SnapshotTest, NodesCarryWhatTheirPlacedTasksHold) {
  store::Node a = Node(1, "a");
  a.labels_json = R"({"zone": "x", "n": 3})";
  store::Node b = Node(2, "b");
  b.network = "vxlan";
  b.overlay_block = 3;
  b.cordoned = true;
  auto nodes = BuildNodeStates({a, b}, {NodeLive{true, "", 0.5, std::nullopt}, NodeLive{true, "cordoned: disk", {}, {}}},
                               {Placed(1, 30000, "0,2", ""), Placed(2, 30001, "", "10.244.3.2"), Placed(1, 0, "", "")},
                               kOverlay);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].allocated.cpu_milli, 2000);
  EXPECT_EQ(nodes[0].ports_used, (std::set<int>{30000}));
  EXPECT_EQ(nodes[0].gpus_used, (std::set<int>{0, 2}));
  EXPECT_TRUE(nodes[0].gpu_indices);
  EXPECT_EQ(nodes[0].port_lo, 30000);
  EXPECT_EQ(nodes[0].port_hi, 30999);
  EXPECT_EQ(nodes[0].cpu_util, 0.5);
  EXPECT_EQ(nodes[0].labels, (std::map<std::string, std::string>{{"zone", "x"}}));
  EXPECT_EQ(nodes[0].executors, (std::vector<std::string>{"process", "runc"}));
  EXPECT_FALSE(nodes[0].overlay);
  EXPECT_EQ(nodes[0].address_count, 0);
  EXPECT_FALSE(nodes[1].ready);
  EXPECT_EQ(nodes[1].cordoned, "cordoned: disk");
  EXPECT_TRUE(nodes[1].overlay);
  EXPECT_EQ(nodes[1].overlay_network, "vxlan");
  EXPECT_EQ(nodes[1].address_first, 0x0AF40302u);  // .1 is the gateway's
  EXPECT_EQ(nodes[1].address_count, 253);
  EXPECT_EQ(nodes[1].addresses_used, (std::set<uint32_t>{0x0AF40302}));
}

TEST(SnapshotTest, ContainerJobsJoinTheOverlayUnlessTheyAskForTheHost) {
  store::Job j;
  j.id = 7;
  j.replicas = 2;
  JobSpec spec;
  spec.image = "alpine";
  EXPECT_TRUE(RequestFor(j, spec, "u").joins_overlay);
  spec.network = "host";
  EXPECT_FALSE(RequestFor(j, spec, "u").joins_overlay);
  spec.network = "overlay";
  EXPECT_TRUE(RequestFor(j, spec, "u").needs_overlay);
  spec.network = "";
  spec.executor = "docker";
  EXPECT_FALSE(RequestFor(j, spec, "u").joins_overlay);
  spec = JobSpec{};
  EXPECT_FALSE(RequestFor(j, spec, "u").joins_overlay);  // a process stays on its host's network
}

TEST(SnapshotTest, ARunningGangInRankOrderWithWhatItHolds) {
  store::Task r1 = Placed(2, 30001, "1", "10.244.0.3");
  r1.id = 11;
  r1.rank = 1;
  r1.state = store::State::kRunning;
  r1.started_ms = 1'000;
  store::Task r0 = Placed(1, 30000, "0", "");
  r0.id = 10;
  r0.rank = 0;
  r0.state = store::State::kRunning;
  r0.started_ms = 2'000;
  RunningSnapshot g = BuildRunningJob({}, {&r1, &r0}, 10'000, 500, {{10, 100}});
  EXPECT_EQ(g.job.node_ids, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(g.job.slots.size(), 2u);
  EXPECT_EQ(g.job.slots[0].port, 30000);
  EXPECT_EQ(g.job.slots[1].gpus, (std::vector<int>{1}));
  EXPECT_EQ(g.job.slots[1].address, 0x0AF40003u);
  EXPECT_TRUE(g.all_running);
  EXPECT_EQ(g.job.started_ms, 2'000);
  EXPECT_EQ(g.ran_ms, 400);  // rank 0 seen starting on the steady clock at 100; rank 1 ran 9s by the wall clock
  // Device-seconds of the current run: 9 s and 8 s on one GPU each.
  EXPECT_DOUBLE_EQ(g.job.request.attained_service_s, 17);
}

}  // namespace
}  // namespace ringmaster::server
