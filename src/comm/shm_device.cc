#include "comm/shm_device.h"

#include <unistd.h>

#include <random>

#include <fmt/format.h>

namespace ringmaster::comm {

StatusOr<std::unique_ptr<ShmSegment>> ShmCreateSegment(int rank, int size, size_t collective_ring_bytes,
                                                      size_t p2p_ring_bytes) {
  std::random_device rd;
  std::string name = fmt::format("/ringcomm.{}.{:x}.{}", getpid(), rd(), rank);
  return ShmSegment::Create(name, size, {collective_ring_bytes, p2p_ring_bytes});
}

Status ShmConnect(ShmSegment* mine, int rank, const std::vector<PeerInfo>& peers, const std::vector<bool>& use_shm,
                  const std::function<std::string(int)>& describe, Links* links) {
  const int size = static_cast<int>(peers.size());
  for (int p = 0; p < size; ++p) {
    if (!use_shm[p]) continue;
    auto seg = ShmSegment::Open(peers[p].shm, size);
    if (!seg.ok()) return seg.status().Annotate("connect to " + describe(p));
    std::shared_ptr<ShmSegment> theirs = std::move(*seg);
    links->collective[p].clear();
    links->collective[p].push_back(std::make_unique<ShmPair>(mine, theirs, rank, p, 0));
    links->p2p[p] = std::make_unique<ShmPair>(mine, theirs, rank, p, 1);
  }
  return Status::Ok();
}

}  // namespace ringmaster::comm
