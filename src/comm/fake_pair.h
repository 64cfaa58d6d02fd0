// In-memory pairs: the progress engines and every algorithm run over them in
// tests and fuzz targets without sockets or shared memory. A FakeMesh is the
// links of `size` ranks in one process (ranks as threads); MakeFakePairs
// connects two ends directly. Like a socket, a pair holds a bounded number
// of bytes in flight, so senders block and progress engines must interleave;
// `max_io` caps every read and write to split frames at awkward places.
// Thread-safe: each end may be driven by its own thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/links.h"
#include "comm/transport.h"

namespace ringmaster::comm {

class FakeDoorbell final : public Doorbell {
 public:
  uint32_t Read() const override;
  void Wait(uint32_t seen, std::chrono::milliseconds timeout) override;
  void Ring() override;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint32_t value_ = 0;  // GUARDED_BY(mu_)
};

struct FakeOptions {
  size_t capacity = 256 << 10;  // bytes in flight per direction
  size_t max_io = 0;            // cap of each read and write; 0 = none
};

// Two connected ends. `a_bell` rings when bytes arrive for end a (or space
// frees up for it), `b_bell` likewise; either may be null.
std::pair<std::unique_ptr<Pair>, std::unique_ptr<Pair>> MakeFakePairs(Doorbell* a_bell, Doorbell* b_bell,
                                                                       FakeOptions options = {});

// The full mesh of `size` ranks: `streams` collective pairs and one point-to-
// point pair per ordered couple, each channel of each rank with its own
// doorbell. Take() hands rank r its Links (once per rank); the mesh must
// outlive them.
class FakeMesh {
 public:
  FakeMesh(int size, int streams = 1, FakeOptions options = {});
  Links Take(int rank);

 private:
  int size_;
  std::vector<std::unique_ptr<FakeDoorbell>> bells_;  // [rank * 2 + channel]
  std::vector<Links> links_;
};

}  // namespace ringmaster::comm
