#include "agent/node_info.h"

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

TEST(NodeInfo, UtilisationIsAFraction) {
  UsageSampler s;
  s.CpuUtil();
  volatile double x = 0;
  for (int i = 0; i < 2'000'000; ++i) x += i;
  double u = s.CpuUtil();
  EXPECT_GE(u, 0.0);
  EXPECT_LE(u, 1.0);
  EXPECT_GT(UsageSampler::MemoryUsedBytes(), 0);
}

}  // namespace
}  // namespace ringmaster::agent
