#include "agent/node/node_info.h"

#include <gtest/gtest.h>

namespace ringmaster::agent {
namespace {

TEST(NodeInfo, DetectsThisMachine) {
  NodeInventory inv = DetectNode();
  EXPECT_FALSE(inv.name.empty());
  EXPECT_GE(inv.cpu_milli, 1000);
  EXPECT_GT(inv.memory_bytes, 0);
}

TEST(NodeInfo, ReadsGpusThroughNvml) {
  auto gpus = DetectGpus(FAKE_NVML);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].model, "NVIDIA H200");
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].uuid, "GPU-bbbb");
  EXPECT_EQ(gpus[0].memory_bytes, 141LL << 30);
}

TEST(NodeInfo, NoNvmlMeansNoGpus) { EXPECT_TRUE(DetectGpus("libno-such-nvml.so.1").empty()); }

TEST(NodeInfo, SamplesTheNode) {
  NodeSampler s("/");
  protocol::NodeSample first = s.Sample(1'000);
  EXPECT_EQ(first.cpu, 0.0);  // no interval yet
  volatile double x = 0;
  for (int i = 0; i < 2'000'000; ++i) x += i;
  protocol::NodeSample u = s.Sample(2'000);
  EXPECT_GE(u.cpu, 0.0);
  EXPECT_LE(u.cpu, 1.0);
  EXPECT_GT(u.memory_used_bytes, 0);
  EXPECT_GT(u.disk_used_bytes, 0);
  EXPECT_GE(u.net_rx_bps, 0.0);
  EXPECT_TRUE(u.gpus.empty());  // no NVIDIA driver here
}

TEST(NodeInfo, SamplesGpusThroughNvml) {
  setenv("FAKE_NVML_UTIL", "37", 1);
  NodeSampler s("/", FAKE_NVML);
  protocol::NodeSample u = s.Sample(1'000);
  unsetenv("FAKE_NVML_UTIL");
  ASSERT_EQ(u.gpus.size(), 2u);
  EXPECT_DOUBLE_EQ(u.gpus[1].util, 0.37);
  EXPECT_EQ(u.gpus[0].memory_used_bytes, 1LL << 30);
  EXPECT_DOUBLE_EQ(u.gpus[0].power_w, 70.0);
  EXPECT_DOUBLE_EQ(u.gpus[0].temperature_c, 35.0);
}

}  // namespace
}  // namespace ringmaster::agent
