// How the ranks of a training run share the work: each step, evaluation and
// checkpoint. Data parallelism (every rank a whole model, gradients
// averaged) and pipeline parallelism (each rank a stage of the layers,
// replicas of a stage averaging theirs) are the two; the trainer's loop
// (trainer.cc) drives either. One training loop per instance.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/environment.h"
#include "common/status.h"
#include "train/checkpoint.h"
#include "train/fashion_mnist.h"
#include "train/models.h"
#include "train/trainer.h"

namespace ringmaster::train {

struct StepStats {
  double loss_sum = 0;  // sum of per-sample losses this rank computed (0 where it computes none)
  double samples = 0;   // the samples they were over
  double compute_s = 0, wait_s = 0;  // this rank's own work, and its wait for the others
};

struct Evaluation {
  double loss = 0, accuracy = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The shard of every epoch's samples this rank trains on, of data_world().
  virtual int data_rank() const = 0;
  virtual int data_world() const = 0;
  // "2 workers"; "2 stages x 1 replica"
  virtual std::string Describe() const = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
  // The whole model, where this rank holds it (data parallel); else null.
  virtual Model* model() { return nullptr; }

  // Restores this rank's part of dir/latest; `extra` is what Save was given.
  // FailedPrecondition if the checkpoint is of another layout.
  virtual StatusOr<CheckpointInfo> Load(const std::string& dir) = 0;
  // After any Load, before the first step: every rank holds the same starting point.
  virtual Status Start() = 0;
  // One optimizer step on the samples `idx` of the training set (zero_grad,
  // forward, backward, gradients combined, step).
  virtual StatusOr<StepStats> Step(const torch::Tensor& idx) = 0;
  // Test loss and accuracy over the whole split, the same on every rank.
  virtual StatusOr<Evaluation> Evaluate(const Dataset& test) = 0;
  // Writes a checkpoint of the step (from the rank or ranks whose job it is); `extra` goes into its meta.
  virtual Status Save(const std::string& dir, int64_t step, nlohmann::json extra) = 0;
};

// A group of ranks, or none (training alone).
std::unique_ptr<Strategy> MakeDataParallel(const TrainerOptions& o, Model model, comm::Context* ctx,
                                           comm::DataType wire, const Dataset* train);
// InvalidArgument for a layout that does not fit (stages vs world, layers).
StatusOr<std::unique_ptr<Strategy>> MakePipeline(const TrainerOptions& o, comm::Group* group, comm::DataType wire,
                                                 const Dataset* train);

}  // namespace ringmaster::train
