#include <algorithm>
#include <deque>
#include <utility>

#include "comm/algorithms.h"

namespace ringmaster::comm {

Status BroadcastFromRoot(Engine& e, char* buf, size_t bytes, int root) {
  const int size = e.size(), rank = e.rank();
  const int v = (rank - root + size) % size;
  if (bytes < e.options().small_bytes) {
    // Binomial tree: log2(n) rounds.
    int mask = 1;
    while (mask < size) {
      if (v & mask) {
        RM_RETURN_IF_ERROR(e.WaitAll({e.Post((v - mask + root) % size, false, buf, bytes)}));
        break;
      }
      mask <<= 1;
    }
    std::vector<Engine::Msg*> sends;
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < size) sends.push_back(e.Post((v + mask + root) % size, true, buf, bytes));
    }
    for (Engine::Msg* m : sends) RM_RETURN_IF_ERROR(e.WaitAll({m}));
    return Status::Ok();
  }
  // Pipelined chain root -> root+1 -> ...: each chunk is forwarded as it arrives.
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const bool last = v == size - 1;
  const size_t chunk = e.options().chunk_bytes, nchunks = (bytes + chunk - 1) / chunk;
  std::deque<std::pair<Engine::Msg*, size_t>> recvs;
  std::deque<Engine::Msg*> sends;
  size_t posted = 0;
  if (v == 0) {
    for (size_t k = 0; k < nchunks; ++k) sends.push_back(e.Post(next, true, buf + k * chunk, std::min(chunk, bytes - k * chunk)));
  }
  while (true) {
    while (v != 0 && posted < nchunks && recvs.size() < 8) {
      recvs.push_back({e.Post(prev, false, buf + posted * chunk, std::min(chunk, bytes - posted * chunk)), posted});
      ++posted;
    }
    if (recvs.empty() && sends.empty() && (v == 0 || posted == nchunks)) return Status::Ok();
    RM_RETURN_IF_ERROR(e.Drive());
    while (!recvs.empty() && recvs.front().first->Complete()) {
      size_t k = recvs.front().second;
      recvs.pop_front();
      if (!last) sends.push_back(e.Post(next, true, buf + k * chunk, std::min(chunk, bytes - k * chunk)));
    }
    while (!sends.empty() && sends.front()->Complete()) sends.pop_front();
  }
}

}  // namespace ringmaster::comm
