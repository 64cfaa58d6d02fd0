// The trainer's built-in models for 28x28 single-channel images (Fashion-MNIST).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ringmaster::train {

// The size of the models that have one: the MLP's hidden width and number
// of hidden layers (784-128-10 by default).
struct ModelShape {
  int64_t hidden = 128;
  int layers = 1;
};

// fc1 (784 -> hidden), fc2..fc<layers> (hidden -> hidden), then fc<layers+1>
// (hidden -> 10), ReLU between them.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(ModelShape shape = {}) {
    for (int i = 0; i <= shape.layers; ++i) {
      const int64_t in = i == 0 ? 784 : shape.hidden, out = i == shape.layers ? 10 : shape.hidden;
      fc.push_back(register_module("fc" + std::to_string(i + 1), torch::nn::Linear(in, out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.flatten(1);
    for (size_t i = 0; i < fc.size(); ++i) x = i + 1 < fc.size() ? torch::relu(fc[i](x)) : fc[i](x);
    return x;
  }
  std::vector<torch::nn::Linear> fc;
};
TORCH_MODULE(Mlp);

// mlp-wide: the MLP at 784-1536-1536-10, 3.58M parameters, 14.3 MB of
// float32 gradients per step, enough that moving them costs more than
// computing them on a 1 Gbit/s link (bench/frameworks trains it in every framework).
inline constexpr ModelShape kWideMlp{1536, 2};

// LeNet-5 (LeCun et al. 1998) with ReLU and max pooling, padded for 28x28 input.
struct LeNet5Impl : torch::nn::Module {
  LeNet5Impl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 6, 5).padding(2)))),
        c3(register_module("c3", torch::nn::Conv2d(6, 16, 5))),
        f5(register_module("f5", torch::nn::Linear(16 * 5 * 5, 120))),
        f6(register_module("f6", torch::nn::Linear(120, 84))),
        out(register_module("out", torch::nn::Linear(84, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c3(x)), 2);
    x = torch::relu(f5(x.flatten(1)));
    x = torch::relu(f6(x));
    return out(x);
  }
  torch::nn::Conv2d c1, c3;
  torch::nn::Linear f5, f6, out;
};
TORCH_MODULE(LeNet5);

// A small ResNet (He et al. 2016) for 28x28 input: a 3x3 stem and three
// stages of one basic block each (16, 32, 64 channels; stride 2 from the
// second), global average pooling, a linear classifier. ~78k parameters.
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module("shortcut", torch::nn::Sequential(
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)), torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = bn2(conv2(torch::relu(bn1(conv1(x)))));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  // In initialisation (and registration) order.
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNetImpl : torch::nn::Module {
  ResNetImpl()
      : stem(register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(16))),
        layer1(register_module("layer1", BasicBlock(16, 16, 1))),
        layer2(register_module("layer2", BasicBlock(16, 32, 2))),
        layer3(register_module("layer3", BasicBlock(32, 64, 2))),
        fc(register_module("fc", torch::nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn(stem(x)));
    x = layer3(layer2(layer1(x)));
    return fc(torch::adaptive_avg_pool2d(x, 1).flatten(1));
  }
  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d bn;
  BasicBlock layer1, layer2, layer3;
  torch::nn::Linear fc;
};
TORCH_MODULE(ResNet);

// A built-in model by name: its module (for parameters, DataParallel and
// checkpoints) and its forward function.
struct Model {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(torch::Tensor)> forward;
};

inline const char* kModelNames = "mlp, mlp-wide, lenet5, resnet";

// nullopt if `name` is not one of kModelNames.
inline std::optional<Model> MakeModel(const std::string& name, ModelShape shape = {}) {
  auto wrap = [](auto holder) {
    auto ptr = holder.ptr();
    return Model{ptr, [ptr](torch::Tensor x) { return ptr->forward(std::move(x)); }};
  };
  if (name == "mlp") return wrap(Mlp(shape));
  if (name == "mlp-wide") return wrap(Mlp(kWideMlp));
  if (name == "lenet5") return wrap(LeNet5());
  if (name == "resnet") return wrap(ResNet());
  return std::nullopt;
}

}  // namespace ringmaster::train
