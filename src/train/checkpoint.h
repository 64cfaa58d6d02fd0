// Checkpoints of a training run: model parameters and buffers, optimizer
// state, the step, the CPU RNG state and the caller's own state (e.g. a
// sampler position) as JSON. A checkpoint is written into a temporary
// directory, renamed into place as ckpt-<step>, and only then does the
// `latest` pointer move to it (written atomically): a crash at any moment
// leaves `latest` naming a complete checkpoint. Write from one rank (rank 0:
// every rank holds the same parameters, or has sent it its part); every rank loads.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ringmaster::train {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;        // the checkpoint's directory
  std::string extra_json;  // what the caller saved alongside
};

Status SaveCheckpoint(const std::string& dir, int64_t step, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, const std::string& extra_json = "{}");

// A checkpoint of the given files (path within it -> bytes), with the RNG
// state and meta.json, under the same protocol: what a rank that gathered
// other ranks' state writes.
Status SaveCheckpointFiles(const std::string& dir, int64_t step,
                           const std::vector<std::pair<std::string, std::string>>& files,
                           const std::string& extra_json = "{}");
// The bytes of a module's or an optimizer's .pt file; loading one back.
std::string SerializeModule(torch::nn::Module& module);
std::string SerializeOptimizer(torch::optim::Optimizer& optimizer);
Status LoadModuleFile(const std::string& path, torch::nn::Module& module);
Status LoadOptimizerFile(const std::string& path, torch::optim::Optimizer& optimizer);

// The directory `dir/latest` names. NotFound if there is no checkpoint.
StatusOr<std::string> LatestCheckpointPath(const std::string& dir);

// dir/latest's step and extra JSON, and restores the RNG state it saved.
StatusOr<CheckpointInfo> LoadLatestCheckpointMeta(const std::string& dir);

// Restores dir/latest into `model` and `optimizer`. NotFound if there is none.
StatusOr<CheckpointInfo> LoadLatestCheckpoint(const std::string& dir, torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer);

}  // namespace ringmaster::train
