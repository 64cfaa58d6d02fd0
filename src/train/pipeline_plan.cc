#include "train/pipeline_plan.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace ringmaster::train {

StatusOr<StagePlace> PlaceRank(int rank, int world, int stages) {
  if (stages < 1) return InvalidArgument(fmt::format("stages: must be at least 1, got {}", stages));
  if (world % stages != 0) {
    return InvalidArgument(fmt::format("stages: {} ranks cannot be cut into pipelines of {} stages (world size must be a multiple)",
                                       world, stages));
  }
  StagePlace p;
  p.stage = rank % stages;
  p.replica = rank / stages;
  if (p.stage > 0) p.prev = rank - 1;
  if (p.stage + 1 < stages) p.next = rank + 1;
  return p;
}

StatusOr<std::vector<int>> BalancedSplit(const std::vector<int64_t>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  if (stages < 1 || stages > n) {
    return InvalidArgument(fmt::format("stages: the model has {} layers, so it splits into 1 to {} stages, not {}", n, n, stages));
  }
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[k][i]: the lightest heaviest run cutting the first i layers into k runs; cut[k][i]: where the last run starts.
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {  // the last run is [j, i)
        if (best[k - 1][j] == kInf) continue;
        const int64_t v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) best[k][i] = v, cut[k][i] = j;
      }
    }
  }
  std::vector<int> bounds(stages + 1);
  bounds[stages] = n;
  for (int k = stages, i = n; k > 0; --k) i = bounds[k - 1] = cut[k][i];
  return bounds;
}

std::vector<PipelineOp> OneForwardOneBackward(int stage, int stages, int micro_batches) {
  std::vector<PipelineOp> ops;
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({PipelineOp::kForward, f});
  for (; f < micro_batches; ++f, ++b) {
    ops.push_back({PipelineOp::kForward, f});
    ops.push_back({PipelineOp::kBackward, b});
  }
  for (; b < micro_batches; ++b) ops.push_back({PipelineOp::kBackward, b});
  return ops;
}

std::vector<int64_t> MicroBatchSizes(int64_t n, int m) {
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(m, n));
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < k; ++i) sizes.push_back(n / k + (i < n % k ? 1 : 0));
  return sizes;
}

std::string ToString(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const auto& op : ops) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{}{}", op.kind == PipelineOp::kForward ? 'F' : 'B', op.micro_batch);
  }
  return s;
}

}  // namespace ringmaster::train
