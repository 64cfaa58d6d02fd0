// DataParallel: data-parallel training of a libtorch module over a ringcomm
// group (the role torch's DistributedDataParallel plays, on ringcomm).
// Rank 0's parameters are broadcast at the start. Gradients are grouped into
// buckets (in reverse registration order, roughly the order backward
// produces them); a hook on every parameter copies its gradient into its
// bucket, and a full bucket is all-reduced (averaged) with ringcomm's async
// API while backward goes on, overlapping communication with computation.
// FinishGradients() waits for the buckets and writes the averages to .grad().
// Thread-safety: one training loop per instance; hooks run on autograd's threads.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/context.h"
#include "common/status.h"

namespace ringmaster::train {

struct DataParallelOptions {
  size_t bucket_bytes = 25 << 20;
  // The type gradients travel as: float32, or bfloat16/float16 to halve the bytes.
  comm::DataType wire = comm::DataType::kFloat32;
};

class DataParallel {
 public:
  DataParallel(torch::nn::Module& module, comm::Context& context, DataParallelOptions options = {});

  // Every rank gets rank 0's parameters and buffers.
  Status BroadcastParameters();
  // After loss.backward(): every parameter's .grad() holds the average over ranks.
  Status FinishGradients();
  // Gradient accumulation: while true, backward passes only add to the local
  // .grad(); the backward after setting it false all-reduces the sum (scale
  // the loss by 1/micro-batches, as with torch DDP's no_sync()).
  void set_accumulating(bool accumulating) { accumulating_ = accumulating; }

  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<torch::Tensor> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    torch::Tensor flat;            // float32, what the gradients are gathered into
    torch::Tensor wire;            // `flat` in the wire type (aliases flat for float32)
    int pending = 0;               // parameters whose gradient has not arrived this step
    std::shared_ptr<comm::Work> work;
  };

  void OnGradient(size_t bucket, size_t slot, const torch::Tensor& grad);
  void Launch(Bucket& b);

  torch::nn::Module& module_;
  comm::Context& context_;
  const DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::atomic<bool> accumulating_{false};
  std::mutex mu_;  // hooks may run on several autograd threads
};

}  // namespace ringmaster::train
