#include "comm/algorithms.h"

namespace ringmaster::comm {

// The all-gather half of the ring: n-1 steps, each block passed on as it arrives.
Status AllGatherRing(Engine& e, char* out, size_t count, DataType type) {
  const int n = e.size();
  RingPlan p{out, {}, {}, n - 1, 0, 0, type, ReduceOp::kSum};
  for (int s = 0; s < n; ++s) {
    p.off.push_back(s * count);
    p.cnt.push_back(count);
  }
  return RunRing(e, p);
}

}  // namespace ringmaster::comm
