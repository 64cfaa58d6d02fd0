#include "monitor/monitor.h"

#include <gtest/gtest.h>

namespace ringmaster::monitor {
namespace {

MonitorOptions Fast() {
  MonitorOptions o;
  o.straggler_window_ms = 10'000;
  o.straggler_windows = 3;
  o.idle_for_ms = 60'000;
  return o;
}

RunningGang Gang(int ranks, int gpus = 0) {
  RunningGang g;
  g.job_id = 5;
  g.running_since_ms = 1'000'000;
  for (int r = 0; r < ranks; ++r) g.tasks.push_back({100 + r, r, 1, 2'000, 1 << 30, gpus});
  return g;
}

void Step(Monitor& m, int64_t task, int64_t t, double s) { m.IngestTrainer(task, t, {{"step_time_s", s}, {"loss", 1}}); }

TEST(Monitor, FlagsTheSlowRankAfterThreeWindowsAndClearsIt) {
  Monitor m(Fast());
  const RunningGang g = Gang(3);
  int64_t t = 1'000'000;
  auto feed = [&](int64_t until, double slow) {
    for (; t < until; t += 1'000) {
      Step(m, 100, t, 0.1);
      Step(m, 101, t, 0.11);
      Step(m, 102, t, slow);
    }
  };
  feed(1'020'000, 0.3);
  EXPECT_TRUE(m.Evaluate({g}, t).empty());  // two complete windows only
  feed(1'030'000, 0.3);
  auto f = m.Evaluate({g}, t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "straggler");
  EXPECT_EQ(f[0].rank, 2);
  EXPECT_TRUE(f[0].set);
  EXPECT_NE(f[0].message.find("rank 2"), std::string::npos) << f[0].message;
  EXPECT_TRUE(m.Evaluate({g}, t).empty());  // raised once
  EXPECT_EQ(m.Flags(5).size(), 1u);
  feed(1'040'000, 0.1);
  f = m.Evaluate({g}, t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_FALSE(f[0].set);
  EXPECT_TRUE(m.Flags(5).empty());
}

TEST(Monitor, TwoRanksUseTheFasterAsTheMedian) {
  Monitor m(Fast());
  for (int64_t t = 1'000'000; t < 1'031'000; t += 1'000) {
    Step(m, 100, t, 0.1);
    Step(m, 101, t, 0.2);  // 2x: above 1.5x the lower median, though not 1.5x their mean
  }
  auto f = m.Evaluate({Gang(2)}, 1'031'000);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 1);
}

TEST(Monitor, IdleGpusAreFlaggedOnlyAfterTheWholeWindow) {
  Monitor m(Fast());
  RunningGang g = Gang(1, 2);
  auto sample = [&](int64_t t, double util) {
    protocol::NodeSample s;
    s.t_ms = t;
    s.tasks.push_back({100, 1, 0.5, 1, 1, 0, util});
    m.IngestNode(1, {s}, {100});
  };
  for (int64_t t = 1'000'000; t <= 1'040'000; t += 1'000) sample(t, 0.0);
  EXPECT_TRUE(m.Evaluate({g}, 1'040'000).empty());  // not yet 60 s
  for (int64_t t = 1'041'000; t <= 1'061'000; t += 1'000) sample(t, 0.01);
  auto f = m.Evaluate({g}, 1'061'000);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "idle");
  EXPECT_NE(f[0].message.find("its 2 GPUs are 0.3% used over the last 60 s"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].message.find("threshold 5%"), std::string::npos) << f[0].message;
  // Used again: cleared, once.
  for (int64_t t = 1'062'000; t <= 1'130'000; t += 1'000) sample(t, 0.9);
  f = m.Evaluate({g}, 1'130'000);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_FALSE(f[0].set);
  EXPECT_EQ(f[0].message, "idle cleared: its devices are in use again");
  EXPECT_TRUE(m.Evaluate({g}, 1'131'000).empty());
}

TEST(Monitor, NoIdleVerdictWithoutSamplesFromTheWindowsStart) {
  Monitor m(Fast());
  RunningGang g = Gang(1, 1);
  g.running_since_ms = 900'000;  // running long enough, but measured only lately
  for (int64_t t = 1'040'000; t <= 1'061'000; t += 1'000) {
    protocol::NodeSample s;
    s.t_ms = t;
    s.tasks.push_back({100, 1, 0.5, 1, 1, 0, 0.0});
    m.IngestNode(1, {s}, {100});
  }
  EXPECT_TRUE(m.Evaluate({g}, 1'061'000).empty());
}

TEST(Monitor, AnAgentSpeaksOnlyForItsOwnTasks) {
  Monitor m;
  protocol::NodeSample s;
  s.t_ms = 1'000;
  s.tasks.push_back({100, 1, 1.0, 1, 1, 0, -1});
  s.tasks.push_back({999, 1, 1.0, 1, 1, 0, -1});  // another node's task
  m.IngestNode(1, {s}, {100});
  EXPECT_TRUE(m.LatestTask(100, 1'000, 5'000).has_value());
  EXPECT_FALSE(m.LatestTask(999, 1'000, 5'000).has_value());
  EXPECT_TRUE(m.series().Keys("task/999/").empty());
}

TEST(Monitor, ATrainersTimeIsUsedOnlyWhenItIsRecent) {
  Monitor m;
  m.IngestTrainer(7, 1'000'000, {{"step_time_s", 0.1}, {"time_ms", 990'000}});
  m.IngestTrainer(7, 1'001'000, {{"step_time_s", 0.2}, {"time_ms", INT64_MIN}});  // no overflow, no rewind
  m.IngestTrainer(7, 1'002'000, {{"step_time_s", 0.3}, {"time_ms", INT64_MAX}});
  auto pts = m.series().Query("task/7/step_time_s", 0, 0);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].t_ms, 990'000);
  EXPECT_EQ(pts[1].t_ms, 1'001'000);
  EXPECT_EQ(pts[2].t_ms, 1'002'000);
  EXPECT_FALSE(m.series().Add("x", -1, 1));
  EXPECT_FALSE(m.series().Add("x", INT64_MAX, 1));
}

TEST(Monitor, GangUseIsOverWhatItHolds) {
  Monitor m;
  RunningGang g = Gang(2);  // 2 CPUs each
  for (int64_t t = 0; t < 10'000; t += 1'000) {
    protocol::NodeSample s;
    s.t_ms = t;
    s.tasks.push_back({100, 1, 1.8, 1, 1, 0, -1});
    s.tasks.push_back({101, 1, 1.4, 1, 1, 0, -1});
    m.IngestNode(1, {s}, {100, 101});
  }
  EXPECT_NEAR(*m.GangUse(g, "cpu", 0), 80.0, 1e-3);
  EXPECT_FALSE(m.GangUse(g, "gpu", 0).has_value());
  // Throughput: what the ranks that report it say (ringmaster-train: rank 0, for the gang).
  EXPECT_FALSE(m.GangUse(g, "samples_per_s", 0).has_value());
  m.IngestTrainer(100, 5'000, {{"samples_per_s", 1200.0}});
  EXPECT_DOUBLE_EQ(*m.GangUse(g, "samples_per_s", 0), 1200.0);
  // A task not measured at all: no verdict on the gang's CPU.
  RunningGang more = g;
  more.tasks.push_back({102, 2, 1, 2'000, 1 << 30, 0});
  EXPECT_FALSE(m.GangUse(more, "cpu", 0).has_value());
}

}  // namespace
}  // namespace ringmaster::monitor
