// The transport seam (after Gloo's transport/pair.h and NCCL's net plugin):
// a Pair is a non-blocking, ordered byte stream to one peer. Algorithms
// never see a Pair: the progress engines (progress_engine.h for collectives,
// p2p_engine.h for point to point) frame messages over pairs and drive them.
// Backends: TCP (tcp_pair.h: sockets, waited on with poll), shared memory
// (shm_pair.h: SPSC rings in /dev/shm, waited on with a futex doorbell) and
// an in-memory fake for tests and fuzzing (fake_pair.h). A CUDA/NCCL or RDMA
// transport would add a Pair kind; device buffers are rejected before any
// Pair is touched.
//
// Thread-safety: a Pair is driven by one thread at a time. State() and
// Shutdown() may be called from any thread; a Doorbell is thread-safe.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ringmaster::comm {

// What a transport knows of the peer without reading from it.
enum class PeerState {
  kAlive,   // as far as the transport can tell
  kLeft,    // it closed its end cleanly (a goodbye)
  kBroken,  // its context failed and broke its links
  kGone,    // its process is gone
};

// How a thread waits for pairs that have no descriptor to poll (shared
// memory): whoever moves bytes rings the other side's doorbell.
class Doorbell {
 public:
  virtual ~Doorbell() = default;
  virtual uint32_t Read() const = 0;
  // Returns once the bell has moved past `seen`, or after `timeout`.
  virtual void Wait(uint32_t seen, std::chrono::milliseconds timeout) = 0;
  virtual void Ring() = 0;
};

class Pair {
 public:
  virtual ~Pair() = default;
  // Write/read as much of iov as possible without blocking; return bytes
  // moved (0 when it would block). An error means the peer is gone.
  virtual StatusOr<size_t> TryWrite(const iovec* iov, int n) = 0;
  virtual StatusOr<size_t> TryRead(const iovec* iov, int n) = 0;
  // Copies up to n readable bytes without consuming them; 0 if none.
  virtual size_t Peek(void* buf, size_t n) = 0;
  // A descriptor to poll (POLLIN, POLLOUT, POLLRDHUP), or -1: wait on doorbell().
  virtual int fd() const { return -1; }
  // Rings when this pair may move; nullptr when fd() is to be polled. The
  // pairs of one channel of one rank share one doorbell.
  virtual Doorbell* doorbell() const { return nullptr; }
  // TCP answers kAlive: a socket reports its peer's end by itself.
  virtual PeerState State() const { return PeerState::kAlive; }
  // This side sends nothing more. clean: a goodbye, and the peer still reads
  // what was sent; otherwise this side failed and the peer learns at once.
  virtual void Shutdown(bool clean) = 0;
  // This side failed because of `cause` (which names the rank that failed
  // first): a failed shutdown that also tells the peer why, where the
  // transport has room for it out of band (shared memory does).
  virtual void Fail(StatusCode code, const std::string& cause) { Shutdown(/*clean=*/false); }
  // The cause the peer gave when it failed, if the transport carries one.
  virtual bool PeerFailure(StatusCode* code, std::string* cause) const { return false; }
  virtual const char* kind() const = 0;
};

// Fault injection for tests: trims `iov` (n entries) to at most `max_bytes`
// in all (0 = no cap) and returns how many entries are left, so frames are
// moved in pieces.
inline int CapIov(iovec* iov, int n, size_t max_bytes) {
  if (max_bytes == 0) return n;
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len >= max_bytes) {
      iov[i].iov_len = max_bytes;
      return i + 1;
    }
    max_bytes -= iov[i].iov_len;
  }
  return n;
}

}  // namespace ringmaster::comm
