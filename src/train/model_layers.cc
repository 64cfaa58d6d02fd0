#include "train/model_layers.h"

#include <fmt/format.h>

namespace ringmaster::train {
namespace nn = torch::nn;

StatusOr<std::vector<LayerDef>> ModelLayers(const std::string& model, ModelShape shape) {
  std::vector<LayerDef> l;
  if (model == "mlp-wide") shape = kWideMlp;
  if (model == "mlp" || model == "mlp-wide") {
    if (shape.hidden < 1 || shape.layers < 1) return InvalidArgument("mlp: hidden and layers must be at least 1");
    for (int i = 0; i <= shape.layers; ++i) {
      const int64_t in = i == 0 ? 784 : shape.hidden, out = i == shape.layers ? 10 : shape.hidden;
      const bool first = i == 0, last = i == shape.layers;
      l.push_back({"fc" + std::to_string(i + 1), [=] {
                     nn::Sequential s;
                     if (first) s->push_back(nn::Flatten());
                     s->push_back(nn::Linear(in, out));
                     if (!last) s->push_back(nn::ReLU());
                     return s;
                   }});
    }
  } else if (model == "lenet5") {
    l.push_back({"c1", [] { return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2)); }});
    l.push_back({"c3", [] { return nn::Sequential(nn::Conv2d(6, 16, 5), nn::ReLU(), nn::MaxPool2d(2)); }});
    l.push_back({"f5", [] { return nn::Sequential(nn::Flatten(), nn::Linear(16 * 5 * 5, 120), nn::ReLU()); }});
    l.push_back({"f6", [] { return nn::Sequential(nn::Linear(120, 84), nn::ReLU()); }});
    l.push_back({"out", [] { return nn::Sequential(nn::Linear(84, 10)); }});
  } else if (model == "resnet") {
    l.push_back({"stem", [] {
                   return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)), nn::BatchNorm2d(16), nn::ReLU());
                 }});
    l.push_back({"layer1", [] { return nn::Sequential(BasicBlock(16, 16, 1)); }});
    l.push_back({"layer2", [] { return nn::Sequential(BasicBlock(16, 32, 2)); }});
    l.push_back({"layer3", [] { return nn::Sequential(BasicBlock(32, 64, 2)); }});
    l.push_back({"fc", [] { return nn::Sequential(nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(64, 10)); }});
  } else {
    return InvalidArgument(fmt::format("model: '{}' is not one of {}", model, kModelNames));
  }
  return l;
}

std::vector<int64_t> LayerParameterCounts(const std::vector<LayerDef>& layers) {
  std::vector<int64_t> counts;
  for (const LayerDef& d : layers) {
    int64_t n = 0;
    for (const auto& p : d.make()->parameters()) n += p.numel();
    counts.push_back(n);
  }
  return counts;
}

StageModuleImpl::StageModuleImpl(const std::vector<LayerDef>& layers, int begin, int end) {
  for (int i = 0; i < end; ++i) {
    auto layer = layers[i].make();
    if (i >= begin) layers_.push_back(register_module(layers[i].name, layer));
  }
}

torch::Tensor StageModuleImpl::forward(torch::Tensor x) {
  for (auto& l : layers_) x = l->forward(x);
  return x;
}

}  // namespace ringmaster::train
