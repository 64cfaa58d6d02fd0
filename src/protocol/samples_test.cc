#include "protocol/samples.h"

#include <gtest/gtest.h>

namespace ringmaster::protocol {
namespace {

TEST(Samples, RoundTrip) {
  NodeSample s;
  s.t_ms = 1234;
  s.cpu = 0.5;
  s.memory_used_bytes = 1 << 20;
  s.net_rx_bps = 10;
  s.gpus.push_back({1, 0.25, 100, 70, 35});
  s.tasks.push_back({7, 2, 1.5, 4096, 3, 0, -1});
  s.tasks.push_back({8, 1, 0.1, 1, 1, 1, 0.5});
  auto back = ParseSamples(ToJson(std::vector<NodeSample>{s}));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  const NodeSample& b = (*back)[0];
  EXPECT_EQ(b.t_ms, 1234);
  EXPECT_EQ(b.gpus.at(0).index, 1);
  EXPECT_DOUBLE_EQ(b.gpus.at(0).util, 0.25);
  EXPECT_EQ(b.tasks.at(0).task_id, 7);
  EXPECT_EQ(b.tasks.at(0).gpu_util, -1);
  EXPECT_DOUBLE_EQ(b.tasks.at(1).gpu_util, 0.5);
}

TEST(Samples, BadInputNamesTheField) {
  using nlohmann::json;
  auto err = [](const json& j) { return ParseSamples(j).status().message(); };
  EXPECT_EQ(err(json::object()), "samples: must be an array");
  EXPECT_EQ(err(json::array({{{"t", 1}, {"cpu", 2.0}, {"memory_used_bytes", 0}}})), "samples[0].cpu: must be within [0, 1]");
  EXPECT_EQ(err(json::array({{{"t", 1}, {"cpu", 0.5}}})), "samples[0].memory_used_bytes: missing");
  json task = {{"t", 1}, {"cpu", 0.5}, {"memory_used_bytes", 0}, {"tasks", {{{"task", 1}, {"attempt", 1}, {"cpu_cores", "x"}}}}};
  EXPECT_EQ(err(json::array({task})), "samples[0].tasks[0].cpu_cores: must be a number");
  json many = json::array();
  for (size_t i = 0; i <= kMaxSamplesPerBody; ++i) many.push_back({{"t", 1}, {"cpu", 0.5}, {"memory_used_bytes", 0}});
  EXPECT_NE(err(many).find("at most"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster::protocol
