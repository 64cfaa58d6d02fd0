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
// point-to-point Send/Recv matched by tag. Any count (0, 1, not divisible by
// size), in or out of place. Every operation has a deadline. When a peer dies or stalls,
// the operation fails with an error naming the collective and the peer
// ("allreduce: rank 3 (host vm, pid 812) died: connection closed by the
// peer"), never hangs; after an error the Context is broken and every later
// call returns the same error.
//
// Inside: connection setup per transport (tcp_device.h, shm_device.h) hands
// over Links; collectives run on the progress engine (progress_engine.h), one
// file per algorithm (algorithms.h); point to point has its own channel per
// peer and its own engine (p2p.h, p2p_engine.h).
//
// Thread-safety: collectives from several threads are serialised; point to
// point may be called from any thread at any time, concurrently with
// collectives; Abort() may be called from any thread at any time and ends
// the operation in progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/links.h"
#include "comm/options.h"
#include "comm/store.h"
#include "comm/types.h"
#include "common/status.h"

namespace ringmaster::comm {

// An operation in flight. Thread-safe.
class Work {
 public:
  // Waits until the operation has finished and returns its status. Every
  // operation has a deadline, so this returns by then.
  Status Wait();
  // Waits at most `timeout`; true once the operation has finished.
  bool WaitFor(std::chrono::milliseconds timeout);
  bool Done();
  // Calls fn(status) once the operation has finished: at once on this
  // thread if it has, otherwise on the Context thread that finishes it,
  // which fn must not block.
  void OnDone(std::function<void(const Status&)> fn);

 private:
  friend class Context;
  void Finish(Status st);

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;   // GUARDED_BY(mu_)
  Status status_;       // GUARDED_BY(mu_)
  std::vector<std::function<void(const Status&)>> callbacks_;  // GUARDED_BY(mu_)
};

class Context {
 public:
  // `store` must outlive the Context: failures are recorded in it.
  static StatusOr<std::unique_ptr<Context>> Create(Store* store, int rank, int size, const Options& options = {});
  // A Context over links made elsewhere: a FakeMesh's (fake_pair.h) in tests
  // and fuzz targets, or another transport's setup. `store` may be null (no
  // shared failure notes); if not, it must outlive the Context.
  static StatusOr<std::unique_ptr<Context>> FromLinks(int rank, int size, const Options& options, Links links,
                                                      Store* store = nullptr);
  // Waits for queued async work and pending point-to-point messages up to
  // the deadline (Options::timeout from now), aborts what is left, then says
  // goodbye to every peer (if healthy), so it is not taken for a crash.
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
  // Point to point, matched by (peer, tag): a receive gets the earliest
  // unmatched message from `peer` with `tag` (MPI's non-overtaking rule), in
  // whatever order the tags are received. The count must match the send's.
  Status Send(const void* buf, size_t count, DataType type, int peer, int tag = 0);
  Status Recv(void* buf, size_t count, DataType type, int peer, int tag = 0);

  // Async collectives: run in order on the Context's worker thread. Buffers
  // must stay valid until the Work has finished.
  std::shared_ptr<Work> AllReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                                       Algorithm algorithm = Algorithm::kAuto);
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  std::shared_ptr<Work> AllGatherAsync(const void* in, void* out, size_t count, DataType type);
  std::shared_ptr<Work> BroadcastAsync(void* buf, size_t count, DataType type, int root);
  std::shared_ptr<Work> ReduceAsync(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);
  std::shared_ptr<Work> BarrierAsync();
  // Async point to point: posted at once and moved by the point-to-point
  // engine's own thread (p2p_engine.h), independently of collectives and of
  // each other, so receives may be posted before the sends they wait for.
  std::shared_ptr<Work> SendAsync(const void* buf, size_t count, DataType type, int peer, int tag = 0);
  std::shared_ptr<Work> RecvAsync(void* buf, size_t count, DataType type, int peer, int tag = 0);

  // From any thread: the running operation and every later one fail with Aborted.
  void Abort(const std::string& reason);

  struct Impl;

 private:
  explicit Context(std::unique_ptr<Impl> impl);
  // Runs `body` as collective `name`: its deadline, sticky failure. REQUIRES: exec_mu_ held.
  Status Exec(const char* name, const std::function<Status()>& body);
  // On the calling thread, after queued async work.
  Status Sync(const char* name, const std::function<Status()>& body);
  // On the worker thread, in submission order.
  std::shared_ptr<Work> Enqueue(const char* name, std::function<Status()> body);
  void WorkerLoop();
  std::shared_ptr<Work> PostPointToPoint(const char* name, bool send, void* buf, size_t count, DataType type, int peer,
                                         int tag);

  Status AllReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, Algorithm algorithm);
  Status ReduceScatterBody(const void* in, void* out, size_t count, DataType type, ReduceOp op);
  Status AllGatherBody(const void* in, void* out, size_t count, DataType type);
  Status BroadcastBody(void* buf, size_t count, DataType type, int root);
  Status ReduceBody(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;

  std::mutex exec_mu_;  // one collective at a time
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  struct Item {
    const char* name;
    std::function<Status()> body;
    std::shared_ptr<Work> work;
  };
  std::deque<Item> queue_;  // GUARDED_BY(queue_mu_)
  bool running_ = false;    // the worker is running an item; GUARDED_BY(queue_mu_)
  bool stopping_ = false;   // GUARDED_BY(queue_mu_)
  std::thread worker_;
};

}  // namespace ringmaster::comm
