// Shared-memory connection setup: this rank's segment (created before the
// rendezvous, its name published through the store) and pairs into every
// same-host peer's segment, one per channel. Not thread-safe (setup).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/links.h"
#include "comm/shm_pair.h"

namespace ringmaster::comm {

// A fresh segment named after this process and rank.
StatusOr<std::unique_ptr<ShmSegment>> ShmCreateSegment(int rank, int size, size_t collective_ring_bytes,
                                                      size_t p2p_ring_bytes);

// Maps every peer p with use_shm[p] and adds its collective and point-to-
// point pairs to *links. `mine` must outlive the pairs (put it in keep_alive).
Status ShmConnect(ShmSegment* mine, int rank, const std::vector<PeerInfo>& peers, const std::vector<bool>& use_shm,
                  const std::function<std::string(int)>& describe, Links* links);

}  // namespace ringmaster::comm
