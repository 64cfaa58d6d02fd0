// Fashion-MNIST (Xiao et al. 2017): 60,000 training and 10,000 test images,
// 28x28 grey, 10 classes, in the IDX format of the original MNIST. Debian's
// dataset-fashion-mnist package installs the gzipped files under
// /usr/share/datasets/fashion-mnist/; PrepareFashionMnist unpacks them into a
// data directory once (each file written atomically, so workers that race
// to unpack the same files both succeed and none reads a partial file).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"

namespace ringmaster::train {

inline constexpr const char* kFashionMnistSource = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistClasses[10] = {"t-shirt", "trouser", "pullover", "dress", "coat",
                                                        "sandal",  "shirt",   "sneaker",  "bag",   "ankle-boot"};

struct Dataset {
  torch::Tensor images;  // float32 [N, 1, 28, 28], normalised with the training set's mean and std
  torch::Tensor labels;  // int64 [N]
  int64_t size() const { return labels.size(0); }
};

// Gunzips <source>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz into
// data_dir unless the unpacked file is there already.
Status PrepareFashionMnist(const std::string& source, const std::string& data_dir);

// split: "train" or "test". InvalidArgument names the file that is malformed.
StatusOr<Dataset> LoadFashionMnist(const std::string& data_dir, const std::string& split);

}  // namespace ringmaster::train
