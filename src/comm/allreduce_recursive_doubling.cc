#include "comm/algorithms.h"

namespace ringmaster::comm {

// Latency-optimal for small messages: log2(n) exchanges of the whole
// buffer. Ranks beyond the largest power of two fold in first and get the
// result at the end. Every rank ends with bitwise the same result, because
// every exchange reduces the same two operands on both sides.
Status AllReduceRecursiveDoubling(Engine& e, char* buf, size_t count, DataType type, ReduceOp op) {
  const int size = e.size(), rank = e.rank();
  const size_t bytes = count * ElementSize(type);
  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  const int extra = size - p2;
  std::vector<char>& scratch = e.scratch_b();
  scratch.resize(bytes);
  char* tmp = scratch.data();
  if (rank >= p2) {
    RM_RETURN_IF_ERROR(e.WaitAll({e.Post(rank - p2, true, buf, bytes)}));
    return e.WaitAll({e.Post(rank - p2, false, buf, bytes)});
  }
  if (rank < extra) {
    RM_RETURN_IF_ERROR(e.WaitAll({e.Post(rank + p2, false, tmp, bytes)}));
    ReduceInto(buf, tmp, count, type, op);
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    int peer = rank ^ mask;
    Engine::Msg* s = e.Post(peer, true, buf, bytes);
    Engine::Msg* r = e.Post(peer, false, tmp, bytes);
    RM_RETURN_IF_ERROR(e.WaitAll({s, r}));
    ReduceInto(buf, tmp, count, type, op);
  }
  if (rank < extra) RM_RETURN_IF_ERROR(e.WaitAll({e.Post(rank + p2, true, buf, bytes)}));
  return Status::Ok();
}

}  // namespace ringmaster::comm
