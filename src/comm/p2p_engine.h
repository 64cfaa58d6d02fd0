// The point-to-point engine: a Context's sends and receives, posted at once
// and moved by the engine's own thread over each peer's point-to-point
// channel (a Pair of its own: a TCP connection or a shared-memory ring with
// its own doorbell), matched by tag (p2p.h). So sends and receives progress
// independently of each other and of collectives: a pending receive never
// holds a send back, and nothing waits behind a collective's data.
//
// The thread starts with the first request and sleeps (on a condition
// variable) whenever nothing is pending, so groups that never use point to
// point pay nothing. Each request has the Context's timeout from when it was
// posted; a peer that dies, leaves or stalls fails it with an error naming
// the peer, and like every failure it breaks the Context (failure.h).
//
// Thread-safety: thread-safe. Completion callbacks run without locks, on
// the engine's thread (or on the posting thread when a request is decided
// at once); they must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/failure.h"
#include "comm/options.h"
#include "comm/p2p.h"

namespace ringmaster::comm {

class P2pEngine {
 public:
  using Done = std::function<void(const Status&)>;

  // pairs[peer]: the point-to-point pair to each peer (null for this rank).
  // `failure` and `describe` must outlive the engine.
  P2pEngine(int rank, int size, const Options& options, std::vector<std::unique_ptr<Pair>> pairs, Failure* failure,
            std::function<std::string(int)> describe);
  ~P2pEngine();
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  // REQUIRES: peer is another rank; data stays valid until `done` runs.
  // `done` runs exactly once.
  void Post(bool send, int peer, int64_t tag, char* data, size_t len, Done done);

  // Waits until nothing is pending or `deadline` passes; then what is still
  // pending fails (the Context is aborted with `reason`).
  void Drain(std::chrono::steady_clock::time_point deadline, const std::string& reason);
  // Stops the thread; what is still pending fails. With `goodbye` (a healthy
  // Context): a goodbye frame on every channel, then a clean shutdown.
  void Close(bool goodbye);

  // Any thread: the engine's thread looks at the failure state.
  void Wake();
  // Any thread: every pair fails with `cause`.
  void BreakLinks(StatusCode code, const std::string& cause);

 private:
  struct Entry {
    P2pRequest req;
    Done done;
  };
  using Callbacks = std::vector<std::pair<Done, Status>>;

  void Loop();
  // REQUIRES: mu_ held. Moves the entries of `reqs` to *out with status `st`.
  void TakeLocked(const std::vector<P2pRequest*>& reqs, const Status& st, Callbacks* out);
  // REQUIRES: mu_ held. Every pending request, with status `st`.
  void FailAllLocked(const Status& st, Callbacks* out);
  static void Run(Callbacks& cbs);

  const int rank_, size_;
  const Options opt_;
  Failure* const failure_;
  const std::function<std::string(int)> describe_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // [peer]; immutable after construction
  Doorbell* bell_ = nullptr;                  // shared by the pairs without a descriptor
  int wake_fd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;        // a post for the idle thread; Drain: nothing pending
  std::vector<std::unique_ptr<P2pChannel>> channels_;  // [peer]; GUARDED_BY(mu_)
  std::list<Entry> entries_;                           // GUARDED_BY(mu_)
  std::unordered_map<const P2pRequest*, std::list<Entry>::iterator> index_;  // GUARDED_BY(mu_)
  bool stop_ = false;                                  // GUARDED_BY(mu_)
  std::thread thread_;                                 // started by the first Post; GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point last_liveness_check_;  // the thread's
};

}  // namespace ringmaster::comm
