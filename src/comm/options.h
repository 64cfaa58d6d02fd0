// What a ringcomm Context is configured with: deadlines, transports,
// algorithm thresholds and buffer sizes. Plain data.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace ringmaster::comm {

enum class TransportKind { kAuto, kTcp, kShm };
enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kParameterServer };

const char* AlgorithmName(Algorithm a);

struct Options {
  std::chrono::milliseconds timeout{30'000};  // deadline of every operation and of setup
  TransportKind transport = TransportKind::kAuto;  // auto: shm to ranks on this host, else tcp
  std::string address = "127.0.0.1";  // where other ranks reach this one over TCP
  std::string hostname;               // "" = gethostname(); equal names may share memory
  int generation = 0;                 // keys live under "gen/<g>/" in the store
  std::string secret;                 // the job's (auth.h): ranks prove it in their hellos; "" = open
  size_t chunk_bytes = 256 << 10;     // pipeline granularity of ring algorithms
  int streams = 1;                    // TCP connections per peer; large messages are striped
  size_t small_bytes = 256 << 10;     // auto all-reduce: recursive doubling below this (measured crossover 512K-1M)
  size_t shm_ring_bytes = 4 << 20;    // per ordered pair of ranks, collectives
  size_t shm_p2p_ring_bytes = 1 << 20;  // per ordered pair of ranks, point to point
  size_t p2p_eager_bytes = 64 << 10;  // point to point: up to this a message goes at once; above, when its receive is posted
  size_t p2p_unexpected_bytes = 64 << 20;  // per peer: eager messages that arrived before their receive
  size_t max_io_bytes = 0;            // tests: cap each pair read/write (0 = none) to split frames
};

}  // namespace ringmaster::comm
