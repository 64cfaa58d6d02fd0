#include <algorithm>

#include "comm/algorithms.h"

namespace ringmaster::comm {

// The master/worker baseline: every worker sends its buffer to rank 0,
// which reduces and sends the result back to all. Rank 0's link carries
// 2(n-1) buffers, so time grows with n.
Status AllReduceParameterServer(Engine& e, char* buf, size_t count, DataType type, ReduceOp op) {
  const int size = e.size();
  const size_t es = ElementSize(type), chunk = std::max<size_t>(1, e.options().chunk_bytes / es);
  const size_t nchunks = (count + chunk - 1) / chunk;
  if (e.rank() != 0) {
    std::vector<Engine::Msg*> sends, recvs;
    for (size_t k = 0; k < nchunks; ++k) {
      size_t c = std::min(chunk, count - k * chunk);
      sends.push_back(e.Post(0, true, buf + k * chunk * es, c * es));
    }
    for (size_t k = 0; k < nchunks; ++k) {
      size_t c = std::min(chunk, count - k * chunk);
      recvs.push_back(e.Post(0, false, buf + k * chunk * es, c * es));
    }
    for (Engine::Msg* m : sends) RM_RETURN_IF_ERROR(e.WaitAll({m}));
    for (Engine::Msg* m : recvs) RM_RETURN_IF_ERROR(e.WaitAll({m}));
    return Status::Ok();
  }
  std::vector<char>& scratch = e.scratch_b();
  scratch.resize(static_cast<size_t>(size) * chunk * es);
  std::vector<Engine::Msg*> sends;
  for (size_t k = 0; k < nchunks; ++k) {
    size_t c = std::min(chunk, count - k * chunk);
    char* dst = buf + k * chunk * es;
    std::vector<Engine::Msg*> in;
    for (int w = 1; w < size; ++w) in.push_back(e.Post(w, false, scratch.data() + w * chunk * es, c * es));
    for (int w = 1; w < size; ++w) {
      RM_RETURN_IF_ERROR(e.WaitAll({in[w - 1]}));
      ReduceInto(dst, scratch.data() + w * chunk * es, c, type, op);
    }
    for (int w = 1; w < size; ++w) sends.push_back(e.Post(w, true, dst, c * es));
  }
  for (Engine::Msg* m : sends) RM_RETURN_IF_ERROR(e.WaitAll({m}));
  return Status::Ok();
}

}  // namespace ringmaster::comm
