// The pipeline's plan: rank placement, the balanced split, and the 1F1B
// schedule, checked by running every stage's schedule against the others'
// (a forward needs the stage before to have sent, a backward the stage after).
#include "train/pipeline_plan.h"

#include <gtest/gtest.h>

#include <map>

#include "train/model_layers.h"

namespace ringmaster::train {
namespace {

TEST(PlaceRank, PipelinesAreRunsOfConsecutiveRanks) {
  // 4 ranks, 2 stages: pipelines {0, 1} and {2, 3}; stage groups {0, 2} and {1, 3}.
  std::vector<std::tuple<int, int, int, int>> want = {{0, 0, -1, 1}, {1, 0, 0, -1}, {0, 1, -1, 3}, {1, 1, 2, -1}};
  for (int r = 0; r < 4; ++r) {
    auto p = PlaceRank(r, 4, 2).value();
    EXPECT_EQ(std::make_tuple(p.stage, p.replica, p.prev, p.next), want[r]) << "rank " << r;
  }
  auto bad = PlaceRank(0, 3, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("3 ranks cannot be cut into pipelines of 2 stages"), std::string::npos)
      << bad.status().message();
}

TEST(BalancedSplit, MinimisesTheHeaviestStage) {
  EXPECT_EQ(BalancedSplit({1, 1, 1, 1}, 2).value(), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(BalancedSplit({10, 1, 1, 1, 1}, 2).value(), (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(BalancedSplit({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3).value(), (std::vector<int>{0, 5, 7, 9}));  // 15, 13, 17
  EXPECT_EQ(BalancedSplit({5, 5, 5}, 3).value(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(BalancedSplit({7}, 1).value(), (std::vector<int>{0, 1}));
  auto bad = BalancedSplit({1, 2}, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the model has 2 layers"), std::string::npos) << bad.status().message();
}

TEST(BalancedSplit, IsOptimalAgainstEveryCut) {
  // Every way to cut 7 layers into 3 runs: none has a lighter heaviest run.
  const std::vector<int64_t> w = {3, 9, 1, 4, 4, 8, 2};
  auto heaviest = [&](int a, int b) {
    int64_t x = 0, y = 0, z = 0;
    for (int i = 0; i < 7; ++i) (i < a ? x : i < b ? y : z) += w[i];
    return std::max({x, y, z});
  };
  auto got = BalancedSplit(w, 3).value();
  int64_t best = INT64_MAX;
  for (int a = 1; a < 7; ++a)
    for (int b = a + 1; b < 7; ++b) best = std::min(best, heaviest(a, b));
  EXPECT_EQ(heaviest(got[1], got[2]), best);
}

TEST(BalancedSplit, BuiltInModels) {
  // LeNet-5's layers: c1 156, c3 2416, f5 48120, f6 10164, out 850 parameters.
  auto lenet = ModelLayers("lenet5").value();
  auto counts = LayerParameterCounts(lenet);
  EXPECT_EQ(counts, (std::vector<int64_t>{156, 2416, 48120, 10164, 850}));
  EXPECT_EQ(BalancedSplit(counts, 2).value(), (std::vector<int>{0, 3, 5}));
  // A deep MLP: 784x256 (200,960) against 3 x 256x256 and 256x10 (199,946).
  auto mlp = LayerParameterCounts(ModelLayers("mlp", {256, 4}).value());
  ASSERT_EQ(mlp.size(), 5u);
  EXPECT_EQ(BalancedSplit(mlp, 2).value(), (std::vector<int>{0, 1, 5}));
}

TEST(Schedule, OneForwardOneBackward) {
  EXPECT_EQ(ToString(OneForwardOneBackward(0, 2, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(ToString(OneForwardOneBackward(1, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(ToString(OneForwardOneBackward(0, 4, 2)), "F0 F1 B0 B1");  // fewer micro-batches than stages
  EXPECT_EQ(ToString(OneForwardOneBackward(0, 1, 3)), "F0 B0 F1 B1 F2 B2");
}

// Runs every stage's schedule in lock step (each takes its next op when its
// inputs are there); fails on a deadlock. Returns the most micro-batches
// each stage held at once (forward done, backward not).
std::vector<int> Simulate(int stages, int micro) {
  std::vector<std::vector<PipelineOp>> ops(stages);
  for (int s = 0; s < stages; ++s) ops[s] = OneForwardOneBackward(s, stages, micro);
  std::vector<size_t> next(stages, 0);
  std::map<std::tuple<int, int, int>, bool> done;  // (stage, kind, micro-batch)
  std::vector<int> held(stages, 0), peak(stages, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      const PipelineOp op = ops[s][next[s]];
      const bool ready = op.kind == PipelineOp::kForward
                             ? (s == 0 || done.count({s - 1, PipelineOp::kForward, op.micro_batch}))
                             : (done.count({s, PipelineOp::kForward, op.micro_batch}) &&
                                (s == stages - 1 || done.count({s + 1, PipelineOp::kBackward, op.micro_batch})));
      if (!ready) continue;
      done[{s, op.kind, op.micro_batch}] = true;
      held[s] += op.kind == PipelineOp::kForward ? 1 : -1;
      peak[s] = std::max(peak[s], held[s]);
      ++next[s];
      moved = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    EXPECT_EQ(next[s], ops[s].size()) << "stage " << s << " of " << stages << " with " << micro
                                      << " micro-batches is stuck at op " << next[s];
  }
  return peak;
}

TEST(Schedule, EveryStageFinishesAndHoldsAtMostStagesMinusItsIndex) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro = 1; micro <= 9; ++micro) {
      auto peak = Simulate(stages, micro);
      for (int s = 0; s < stages; ++s) {
        EXPECT_LE(peak[s], std::min(stages - s, micro)) << stages << " stages, " << micro << " micro-batches, stage " << s;
      }
      // Each micro-batch forward once and backward once, forward first.
      for (int s = 0; s < stages; ++s) {
        auto ops = OneForwardOneBackward(s, stages, micro);
        ASSERT_EQ(ops.size(), 2u * micro);
        std::vector<int> seen(micro, 0);
        for (const auto& op : ops) {
          EXPECT_EQ(seen[op.micro_batch]++, op.kind == PipelineOp::kForward ? 0 : 1);
        }
      }
    }
  }
}

TEST(MicroBatchSizes, EqualAsPossibleLargerFirst) {
  EXPECT_EQ(MicroBatchSizes(64, 4), (std::vector<int64_t>{16, 16, 16, 16}));
  EXPECT_EQ(MicroBatchSizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(MicroBatchSizes(3, 8), (std::vector<int64_t>{1, 1, 1}));  // the epoch's last, short batch
}

}  // namespace
}  // namespace ringmaster::train
