#include "train/data_parallel.h"

#include <fmt/format.h>

namespace ringmaster::train {

DataParallel::DataParallel(torch::nn::Module& module, comm::Context& context, DataParallelOptions options)
    : module_(module), context_(context), options_(options) {
  auto params = module_.parameters();
  std::vector<torch::Tensor> trainable;
  for (auto& p : params) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  // Reverse registration order: the last layers' gradients come first in backward.
  std::reverse(trainable.begin(), trainable.end());
  Bucket current;
  int64_t elems = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    current.flat = torch::zeros({elems}, torch::kFloat32);
    current.wire = options_.wire == comm::DataType::kFloat32 ? current.flat
                 : torch::zeros({elems}, options_.wire == comm::DataType::kBFloat16 ? torch::kBFloat16 : torch::kFloat16);
    buckets_.push_back(std::move(current));
    current = Bucket();
    elems = 0;
  };
  for (auto& p : trainable) {
    current.params.push_back(p);
    current.offsets.push_back(elems);
    elems += p.numel();
    if (static_cast<size_t>(elems) * sizeof(float) >= options_.bucket_bytes) close();
  }
  close();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = static_cast<int>(buckets_[b].params.size());
    for (size_t i = 0; i < buckets_[b].params.size(); ++i) {
      buckets_[b].params[i].register_hook([this, b, i](torch::Tensor grad) {
        OnGradient(b, i, grad);
        return grad;
      });
    }
  }
}

Status DataParallel::BroadcastParameters() {
  torch::NoGradGuard no_grad;
  for (auto& t : module_.parameters()) {
    torch::Tensor c = t.contiguous();
    RM_RETURN_IF_ERROR(context_.Broadcast(c.data_ptr<float>(), static_cast<size_t>(c.numel()), comm::DataType::kFloat32, 0));
    if (!c.is_same(t)) t.copy_(c);
  }
  for (auto& t : module_.buffers()) {
    if (t.scalar_type() != torch::kFloat32) continue;
    torch::Tensor c = t.contiguous();
    RM_RETURN_IF_ERROR(context_.Broadcast(c.data_ptr<float>(), static_cast<size_t>(c.numel()), comm::DataType::kFloat32, 0));
    if (!c.is_same(t)) t.copy_(c);
  }
  return Status::Ok();
}

void DataParallel::OnGradient(size_t bucket, size_t slot, const torch::Tensor& grad) {
  if (accumulating_) return;  // it only adds to the local .grad() this time
  std::lock_guard<std::mutex> l(mu_);
  Bucket& b = buckets_[bucket];
  const torch::Tensor& p = b.params[slot];
  torch::NoGradGuard no_grad;
  auto dst = b.flat.narrow(0, b.offsets[slot], p.numel());
  // What .grad() will hold once autograd adds this gradient to it.
  if (p.grad().defined()) torch::add_out(dst, p.grad().reshape({-1}), grad.reshape({-1}));
  else dst.copy_(grad.reshape({-1}));
  if (--b.pending == 0) Launch(b);
}

void DataParallel::Launch(Bucket& b) {
  if (!b.wire.is_same(b.flat)) b.wire.copy_(b.flat);
  b.work = context_.AllReduceAsync(b.wire.data_ptr(), b.wire.data_ptr(), static_cast<size_t>(b.wire.numel()), options_.wire,
                                   comm::ReduceOp::kAvg);
}

Status DataParallel::FinishGradients() {
  if (accumulating_) return FailedPrecondition("FinishGradients: still accumulating (call set_accumulating(false) first)");
  torch::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    {
      std::lock_guard<std::mutex> l(mu_);
      // A parameter that got no gradient this step (unused branch) still
      // has to take part: every rank launches every bucket.
      if (b.pending > 0 && !b.work) {
        for (size_t i = 0; i < b.params.size(); ++i) {
          if (!b.params[i].grad().defined()) b.flat.narrow(0, b.offsets[i], b.params[i].numel()).zero_();
        }
        b.pending = 0;
        Launch(b);
      }
    }
    Status st = b.work->Wait();
    b.work.reset();
    b.pending = static_cast<int>(b.params.size());
    if (!st.ok()) return st;
    if (!b.wire.is_same(b.flat)) b.flat.copy_(b.wire);
    for (size_t i = 0; i < b.params.size(); ++i) {
      torch::Tensor& p = b.params[i];
      torch::Tensor avg = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(avg);
      else p.mutable_grad() = avg.clone();
    }
  }
  return Status::Ok();
}

}  // namespace ringmaster::train
