// The trainer's built-in models for 28x28 single-channel images (Fashion-MNIST).
#pragma once

#include <torch/torch.h>

namespace ringmaster::train {

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in = 784, int64_t hidden = 128, int64_t classes = 10)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, classes))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

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

}  // namespace ringmaster::train
