// DistributedSampler: which dataset indices each rank trains on in an
// epoch (torch's DistributedSampler semantics). The epoch's permutation
// comes from (seed, epoch), so every rank computes the same one without
// talking; rank r takes every world-th index starting at r. Without
// drop_last the permutation is padded with its own first indices so every
// rank gets the same count (a gang must run the same number of steps).
// Pure function of its inputs; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringmaster::train {

class DistributedSampler {
 public:
  DistributedSampler(size_t dataset_size, int rank, int world, uint64_t seed, bool shuffle = true,
                     bool drop_last = false);
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  // This rank's indices for the current epoch, in order.
  std::vector<size_t> Indices() const;
  size_t samples_per_rank() const { return per_rank_; }

 private:
  size_t size_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  size_t per_rank_;
  int64_t epoch_ = 0;
};

}  // namespace ringmaster::train
