// The container overlay as JobService keeps it: nodes' blocks, peer lists,
// and the addresses gangs get (job_overlay.cc). Deterministic, as job_service_test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

TEST_F(JobServiceTest, OverlayNodesKeepTheirBlocksAndContainerTasksGetOverlayAddresses) {
  auto add = [&](const std::string& name, const std::string& network, const std::string& address) {
    return AddRuncNode(name, network, address);
  };
  const int64_t a = add("a", "vxlan", "10.0.0.1");
  const int64_t b = add("b", "vxlan", "10.0.0.2");
  const int64_t h = add("h", "host", "10.0.0.3");
  EXPECT_EQ(store_->GetNode(a)->overlay_block, 0);
  EXPECT_EQ(store_->GetNode(b)->overlay_block, 1);
  EXPECT_EQ(store_->GetNode(h)->overlay_block, -1);
  // A block stays with its node's name across re-registrations (agent restarts).
  EXPECT_EQ(add("a", "vxlan", "10.0.0.1"), a);
  EXPECT_EQ(store_->GetNode(a)->overlay_block, 0);
  EXPECT_EQ(store_->GetNode(add("d", "vxlan", "10.0.0.4"))->overlay_block, 2);
  auto overlay = *svc_->Overlay(a);
  EXPECT_EQ(overlay["mode"], "vxlan");
  EXPECT_EQ(overlay["block"], "10.244.0.0/24");
  EXPECT_EQ(overlay["subnet"], "10.244.0.0/16");
  EXPECT_EQ(overlay["peers"].size(), 3u);  // a, b, d: not the host-network node
  EXPECT_TRUE(svc_->Overlay(h)->is_null());
  // A lost node (silent past its fencing window and a lease) is no one's peer
  // until it is back; before, its tasks may still run and need their tunnels.
  clock_.AdvanceMs(svc_->LostAfterMs() - 1'000);
  ASSERT_TRUE(svc_->Heartbeat(a, 0, 0).ok());
  EXPECT_EQ(svc_->Overlay(a)->at("peers").size(), 3u);
  clock_.AdvanceMs(2'000);
  ASSERT_TRUE(svc_->Heartbeat(a, 0, 0).ok());
  EXPECT_EQ(svc_->Overlay(a)->at("peers").size(), 1u);
  ASSERT_TRUE(svc_->Heartbeat(b, 0, 0).ok());
  ASSERT_TRUE(svc_->Heartbeat(add("d", "vxlan", "10.0.0.4"), 0, 0).ok());
  EXPECT_EQ(svc_->Overlay(a)->at("peers").size(), 3u);

  // Two workers in containers: one per node (cpu 8 of 8), each at its node's block.
  const int64_t job = Submit("command: x\nimage: base\nreplicas: 2\nkind: distributed\nresources: {cpu: 8}\n");
  const int64_t plain = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(job);
  ASSERT_NE(tasks[0].node_id, 0);
  ASSERT_NE(tasks[0].node_id, tasks[1].node_id);
  for (const auto& t : tasks) {
    const int block = store_->GetNode(t.node_id)->overlay_block;
    EXPECT_EQ(t.overlay_ip, fmt::format("10.244.{}.2", block)) << t.node_id;
  }
  EXPECT_EQ(Tasks(plain)[0].overlay_ip, "");  // a process stays on its host's network
  auto assigned = *svc_->Assignments(tasks[1].node_id);
  for (const auto& t : assigned["tasks"]) {
    if (t["job_id"] != job) continue;
    EXPECT_EQ(t["network"], "overlay");
    EXPECT_EQ(t["overlay_address"], tasks[1].overlay_ip);
    // What its filter lets in: the gang's other container, by its overlay address.
    EXPECT_EQ(t["peers"], nlohmann::json::array({tasks[0].overlay_ip}));
    EXPECT_EQ(t["env"]["MASTER_ADDR"], tasks[0].overlay_ip);  // rank 0's, on the overlay
    EXPECT_EQ(t["env"]["RINGMASTER_ADDR"], tasks[1].overlay_ip);
    EXPECT_NE(t["env"]["TF_CONFIG"].get<std::string>().find(tasks[0].overlay_ip + ":"), std::string::npos);
  }
  // Asking for the host's network keeps a container off the overlay; an
  // overlay job never lands on a host-network node.
  const int64_t on_host = Submit("command: x\nimage: base\nnetwork: host\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(on_host)[0].overlay_ip, "");
  // Off the overlay: the job's own namespace on its node, unless it asked for the host's.
  for (const auto& [id, network] : {std::pair{plain, "job"}, std::pair{on_host, "host"}}) {
    const auto t = Tasks(id)[0];
    for (const auto& a : (*svc_->Assignments(t.node_id))["tasks"]) {
      if (a["job_id"] != id) continue;
      EXPECT_EQ(a["network"], network) << id;
      EXPECT_EQ(a["peers"], nlohmann::json::array()) << id;  // alone: nothing from other nodes gets in
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t needs = Submit("command: x\nimage: base\nnetwork: overlay\nresources: {cpu: 1}\n");
    ASSERT_TRUE(svc_->RunPass().ok());
    const auto placed = Tasks(needs)[0];
    EXPECT_NE(placed.node_id, 0);
    EXPECT_NE(placed.node_id, h);
    EXPECT_FALSE(placed.overlay_ip.empty());
  }
}

TEST_F(JobServiceTest, AGangSplitBetweenAnOverlayAndAHostNetworkStaysOnTheHostNetwork) {
  AddRuncNode("vxlan", "vxlan", "10.0.0.1");
  AddRuncNode("host", "host", "10.0.0.2");
  const int64_t job = Submit("command: x\nimage: base\nreplicas: 2\nkind: distributed\nresources: {cpu: 8}\n");
  const int64_t pinned = Submit("command: x\nimage: base\nreplicas: 2\nkind: distributed\nnetwork: overlay\n"
                                "resources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(job);
  ASSERT_NE(tasks[0].node_id, tasks[1].node_id);
  EXPECT_EQ(tasks[0].overlay_ip, "");  // one rank could not reach the other
  EXPECT_EQ(tasks[1].overlay_ip, "");
  // `network: overlay` never lands on the host-network node: both ranks on the vxlan one.
  auto both = Tasks(pinned);
  EXPECT_TRUE(Job(pinned).state == State::kPending || both[0].node_id == both[1].node_id) << Job(pinned).reason;
}

}  // namespace
}  // namespace ringmaster::server
