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

// A checkpoint written file by file (what a rank that gathers other ranks'
// parts writes, one part in memory at a time), under the same protocol:
// Commit adds the RNG state and meta.json and moves `latest`; a writer
// destroyed uncommitted removes what it wrote.
class CheckpointWriter {
 public:
  static StatusOr<std::unique_ptr<CheckpointWriter>> Begin(const std::string& dir, int64_t step);
  ~CheckpointWriter();
  // `path` is relative to the checkpoint ("stage-1/model.pt").
  Status Add(const std::string& path, const std::string& bytes);
  Status Commit(const std::string& extra_json = "{}");

 private:
  CheckpointWriter(std::string dir, int64_t step, std::string name, std::string tmp)
      : dir_(std::move(dir)), step_(step), name_(std::move(name)), tmp_(std::move(tmp)) {}
  const std::string dir_;
  const int64_t step_;
  const std::string name_, tmp_;
  bool committed_ = false;
};
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
