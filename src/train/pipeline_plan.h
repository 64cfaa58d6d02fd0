// The plan of a pipeline-parallel run, as pure functions: which stage and
// replica a rank is, which layers each stage holds (a split balanced by
// parameter count), and the order in which a stage runs its micro-batches'
// forward and backward passes (1F1B). Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::train {

// Rank r of W = stages * replicas holds stage r % stages of pipeline
// (replica) r / stages: each pipeline is a run of consecutive ranks, and
// rank 0 is stage 0 of replica 0.
struct StagePlace {
  int stage = 0, replica = 0;
  int prev = -1, next = -1;  // the ranks of this pipeline's neighbouring stages; -1 at its ends
};
StatusOr<StagePlace> PlaceRank(int rank, int world, int stages);

// Cuts `weights` (each layer's parameter count) into `stages` contiguous,
// non-empty runs so that the heaviest run is as light as possible (ties: the
// earliest cuts). Returns stages + 1 boundaries: stage s holds layers
// [b[s], b[s + 1]). InvalidArgument if there are fewer layers than stages.
StatusOr<std::vector<int>> BalancedSplit(const std::vector<int64_t>& weights, int stages);

struct PipelineOp {
  enum Kind { kForward, kBackward } kind;
  int micro_batch;
  bool operator==(const PipelineOp&) const = default;
};

// 1F1B (PipeDream-Flush, as in Megatron-LM): stage s of S runs
// min(S - s - 1, M) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. At most S - s micro-batches'
// activations are held at once (GPipe holds all M); the result is the same.
std::vector<PipelineOp> OneForwardOneBackward(int stage, int stages, int micro_batches);

// The sizes of a batch of n samples cut into at most m micro-batches, as
// equal as possible, larger first (none empty).
std::vector<int64_t> MicroBatchSizes(int64_t n, int m);

std::string ToString(const std::vector<PipelineOp>& ops);  // "F0 F1 B0 F2 B1 B2"

}  // namespace ringmaster::train
