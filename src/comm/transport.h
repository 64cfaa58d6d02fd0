// The transport seam (after Gloo's transport/pair.h and NCCL's net plugin):
// a Pair is a non-blocking, ordered byte stream to one peer. Algorithms
// never see a Pair; the Context frames messages over pairs and drives them
// from its progress loop. Backends: TCP (sockets, waited on with poll) and
// shared memory (SPSC rings in /dev/shm, waited on with a futex doorbell).
// A CUDA/NCCL or RDMA transport would add a Pair kind, and device buffers
// are rejected before any Pair is touched. Pairs are used by one thread at a time.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace ringmaster::comm {

class Pair {
 public:
  virtual ~Pair() = default;
  // Write/read as much of iov as possible without blocking; return bytes
  // moved (0 when it would block). An error means the peer is gone.
  virtual StatusOr<size_t> TryWrite(const iovec* iov, int n) = 0;
  virtual StatusOr<size_t> TryRead(const iovec* iov, int n) = 0;
  // For TCP pairs: the socket to poll; -1 for shared memory.
  virtual int fd() const { return -1; }
  // Shared memory: false once the peer process is gone (TCP learns it from the socket).
  virtual bool PeerAlive() const { return true; }
  virtual const char* kind() const = 0;
};

}  // namespace ringmaster::comm
