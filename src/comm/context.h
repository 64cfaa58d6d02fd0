// ringcomm: collective communication for data-parallel training.
//
// A Context is one rank's membership of a group of `size` ranks, formed
// through a rendezvous Store under a generation (a new membership, e.g. an
// elastic job that grew, forms a new Context with a new generation). It
// connects every pair of ranks over shared memory (same host) or TCP.
//
// Collectives: AllReduce (ring reduce-scatter + all-gather, chunked and
// pipelined; recursive doubling for small messages; a parameter-server
// baseline), ReduceScatter, AllGather, Broadcast, Reduce, Barrier, and
// point-to-point Send/Recv. Any count (0, 1, not divisible by size), in or
// out of place. Every operation has a deadline. When a peer dies or stalls,
// the operation fails with an error naming the collective and the peer
// ("allreduce: rank 3 (host vm, pid 812) died: connection closed by the
// peer"), never hangs; after an error the Context is broken and every later
// call returns the same error.
//
// Thread-safety: calls from several threads are serialised; Abort() may be
// called from any thread at any time and ends the operation in progress.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "comm/types.h"
#include "common/status.h"

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
  size_t chunk_bytes = 256 << 10;     // pipeline granularity of ring algorithms
  int streams = 1;                    // TCP connections per peer; large messages are striped
  size_t small_bytes = 256 << 10;     // auto all-reduce: recursive doubling below this (measured crossover 512K-1M)
  size_t shm_ring_bytes = 4 << 20;    // per ordered pair of ranks
  size_t max_io_bytes = 0;            // tests: cap each pair read/write (0 = none) to split frames
};

class Work {
 public:
  Status Wait();
  bool Done();

 private:
  friend class Context;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  // Point-to-point work is posted to the progress engine, not queued; Wait() drives it.
  std::function<Status()> drive_;
};

class Context {
 public:
  // `store` must outlive the Context: failures are recorded in it.
  static StatusOr<std::unique_ptr<Context>> Create(Store* store, int rank, int size, const Options& options = {});
  ~Context();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "rank 3 (host vm, pid 812)"
  std::string Describe(int rank) const;

  // `in` may equal `out` (in place).
  Status AllReduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                   Algorithm algorithm = Algorithm::kAuto);
  // in: size() * count elements; out: this rank's `count` (block rank()).
  Status ReduceScatter(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  // in: count elements; out: size() * count, block r from rank r.
  Status AllGather(const void* in, void* out, size_t count, DataType type);
  Status Broadcast(void* buf, size_t count, DataType type, int root);
  // out is written on `root` only.
  Status Reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);
  Status Barrier();
  Status Send(const void* buf, size_t count, DataType type, int peer);
  Status Recv(void* buf, size_t count, DataType type, int peer);

  // Async variants: run in order on the Context's worker thread. Buffers
  // must stay valid until Wait() returns.
  std::shared_ptr<Work> AllReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                       Algorithm algorithm = Algorithm::kAuto);
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  std::shared_ptr<Work> AllGatherAsync(const void* in, void* out, size_t count, DataType type);
  std::shared_ptr<Work> BroadcastAsync(void* buf, size_t count, DataType type, int root);
  std::shared_ptr<Work> ReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);
  std::shared_ptr<Work> BarrierAsync();
  // Point-to-point async work is posted at once and moves whenever any
  // operation of this Context makes progress, so an async Send followed by
  // a Recv works for any message size.
  std::shared_ptr<Work> SendAsync(const void* buf, size_t count, DataType type, int peer);
  std::shared_ptr<Work> RecvAsync(void* buf, size_t count, DataType type, int peer);

  // Ends the operation in progress (and every later one) with Aborted.
  void Abort(const std::string& reason);

  struct Impl;

 private:
  explicit Context(std::unique_ptr<Impl> impl);
  // Runs `body` as operation `name`: its deadline, sticky failure. REQUIRES: exec_mu_ held.
  Status Exec(const char* name, const std::function<Status()>& body);
  // On the calling thread, after queued async work.
  Status Sync(const char* name, const std::function<Status()>& body);
  // On the worker thread, in submission order.
  std::shared_ptr<Work> Enqueue(const char* name, std::function<Status()> body);
  void WorkerLoop();

  Status AllReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, Algorithm algorithm);
  Status ReduceScatterBody(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  Status AllGatherBody(const void* in, void* out, size_t count, DataType type);
  Status BroadcastBody(void* buf, size_t count, DataType type, int root);
  Status ReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);
  Status SendBody(const void* buf, size_t count, DataType type, int peer);
  Status RecvBody(void* buf, size_t count, DataType type, int peer);
  std::shared_ptr<Work> PostPointToPoint(const char* name, bool send, void* buf, size_t count, DataType type, int peer);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;

  std::mutex exec_mu_;  // one operation at a time
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  struct Item {
    const char* name;
    std::function<Status()> body;
    std::shared_ptr<Work> work;
  };
  std::deque<Item> queue_;  // GUARDED_BY(queue_mu_)
  bool stopping_ = false;                                                     // GUARDED_BY(queue_mu_)
  std::thread worker_;
};

}  // namespace ringmaster::comm
