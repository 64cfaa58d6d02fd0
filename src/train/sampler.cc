#include "train/sampler.h"

#include <numeric>
#include <random>

namespace ringmaster::train {

DistributedSampler::DistributedSampler(size_t dataset_size, int rank, int world, uint64_t seed, bool shuffle,
                                       bool drop_last)
    : size_(dataset_size), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  const size_t w = static_cast<size_t>(world_);
  per_rank_ = drop_last_ ? size_ / w : (size_ + w - 1) / w;
}

std::vector<size_t> DistributedSampler::Indices() const {
  std::vector<size_t> order(size_);
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle_) {
    // Fisher-Yates with a generator every rank seeds alike.
    std::mt19937_64 rng(seed_ + static_cast<uint64_t>(epoch_));
    for (size_t i = size_; i > 1; --i) {
      std::uniform_int_distribution<size_t> pick(0, i - 1);
      std::swap(order[i - 1], order[pick(rng)]);
    }
  }
  const size_t total = per_rank_ * static_cast<size_t>(world_);
  if (total > order.size()) {
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i % size_]);  // pad
  } else {
    order.resize(total);  // drop the tail
  }
  std::vector<size_t> mine;
  mine.reserve(per_rank_);
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(world_)) mine.push_back(order[i]);
  return mine;
}

}  // namespace ringmaster::train
