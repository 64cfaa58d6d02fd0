// The built-in models (models.h) as sequences of layers, for pipeline
// parallelism: each layer is built on its own, in the same order and so from
// the same random draws as the whole model, and a stage holds a contiguous
// run of them. Not thread-safe (torch's generator is process-wide).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "train/models.h"

namespace ringmaster::train {

struct LayerDef {
  std::string name;                          // the whole model's module name: "c1", "fc2", "layer3"
  std::function<torch::nn::Sequential()> make;
};

// The layers of a built-in model, input to output. InvalidArgument for an unknown name.
StatusOr<std::vector<LayerDef>> ModelLayers(const std::string& model, ModelShape shape = {});

// Parameters of each layer (each built and dropped in turn: one layer in memory at a time).
std::vector<int64_t> LayerParameterCounts(const std::vector<LayerDef>& layers);

// Layers [begin, end) of a model as one module, the layers registered under
// their names, so its parameters are named as in the whole model.
class StageModuleImpl : public torch::nn::Module {
 public:
  // Builds every layer from the first, in order (so each draws the same
  // initial values as in the whole model), keeping [begin, end).
  StageModuleImpl(const std::vector<LayerDef>& layers, int begin, int end);
  torch::Tensor forward(torch::Tensor x);

 private:
  std::vector<torch::nn::Sequential> layers_;
};
TORCH_MODULE(StageModule);

}  // namespace ringmaster::train
