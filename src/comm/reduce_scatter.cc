#include <cstring>

#include "comm/algorithms.h"

namespace ringmaster::comm {

// The reduce-scatter half of the ring, shifted so rank r ends with block r.
Status ReduceScatterRing(Engine& e, const char* in, char* out, size_t count, DataType type, ReduceOp op) {
  const int n = e.size();
  const size_t bytes = count * ElementSize(type);
  std::vector<char> work(in, in + bytes * n);
  RingPlan p{work.data(), {}, {}, n - 1, n - 1, -1, type, op};
  for (int s = 0; s < n; ++s) {
    p.off.push_back(s * count);
    p.cnt.push_back(count);
  }
  RM_RETURN_IF_ERROR(RunRing(e, p));
  std::memcpy(out, work.data() + e.rank() * bytes, bytes);
  return Status::Ok();
}

// Rank r reduces segment r (the reduce-scatter half), then the root gathers
// the segments: each rank sends 1/n of the buffer once more.
Status ReduceToRoot(Engine& e, const char* in, char* out, size_t count, DataType type, ReduceOp op, int root) {
  const int n = e.size(), rank = e.rank();
  const size_t es = ElementSize(type);
  std::vector<char> work(in, in + count * es);
  RingPlan p{work.data(), {}, {}, n - 1, n - 1, -1, type, op};
  SplitEven(count, n, &p.off, &p.cnt);
  RM_RETURN_IF_ERROR(RunRing(e, p));
  if (rank != root) {
    if (p.cnt[rank] > 0) RM_RETURN_IF_ERROR(e.WaitAll({e.Post(root, true, work.data() + p.off[rank] * es, p.cnt[rank] * es)}));
    return Status::Ok();
  }
  std::vector<Engine::Msg*> recvs;
  for (int r = 0; r < n; ++r) {
    if (p.cnt[r] == 0) continue;
    if (r == rank) std::memcpy(out + p.off[r] * es, work.data() + p.off[r] * es, p.cnt[r] * es);
    else recvs.push_back(e.Post(r, false, out + p.off[r] * es, p.cnt[r] * es));
  }
  for (auto* m : recvs) RM_RETURN_IF_ERROR(e.WaitAll({m}));
  return Status::Ok();
}

}  // namespace ringmaster::comm
