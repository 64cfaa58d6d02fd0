// Checkpoints of a training run: model parameters and buffers, optimizer
// state, the step, the CPU RNG state and the caller's own state (e.g. a
// sampler position) as JSON. A checkpoint is written into a temporary
// directory, renamed into place as ckpt-<step>, and only then does the
// `latest` pointer move to it (written atomically): a crash at any moment
// leaves `latest` naming a complete checkpoint. Write from one rank (rank 0:
// every rank holds the same parameters); every rank loads.
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"

namespace ringmaster::train {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;        // the checkpoint's directory
  std::string extra_json;  // what the caller saved alongside
};

Status SaveCheckpoint(const std::string& dir, int64_t step, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, const std::string& extra_json = "{}");

// The directory `dir/latest` names. NotFound if there is no checkpoint.
StatusOr<std::string> LatestCheckpointPath(const std::string& dir);

// Restores dir/latest into `model` and `optimizer`. NotFound if there is none.
StatusOr<CheckpointInfo> LoadLatestCheckpoint(const std::string& dir, torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer);

}  // namespace ringmaster::train
