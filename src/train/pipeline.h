// Pipeline parallelism for ringmaster-train: the model's layers are cut into
// stages (pipeline_plan.h), one per rank of a pipeline; each batch is cut
// into micro-batches that stream through the stages over ringcomm's point to
// point (activations forward, gradients backward) in 1F1B order. With more
// ranks than stages, the pipelines are replicas: each stage's replicas form a
// group of their own and average that stage's gradients (DataParallel).
// Checkpoints hold every stage: each stage's first replica sends its
// parameters and optimizer state to rank 0, which writes one checkpoint
// (ckpt-<step>/stage-<s>/) and moves `latest` once it is whole.
// Thread-safety: one training loop per instance.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "train/models.h"
#include "train/strategy.h"

namespace ringmaster::train {

// The whole model of a pipeline checkpoint (every stage loaded, run in
// order), for predictions on one machine.
StatusOr<Model> LoadPipelineModel(const std::string& checkpoint_path, const nlohmann::json& extra);

}  // namespace ringmaster::train
