// The agent's end of the lab tunnel (protocol/lab_tunnel.h): a TCP listener
// that takes a connection only with a ticket signed by the node's key for a
// running notebook task of this node, then joins it to that task's unix
// socket, bytes both ways, until either side closes or 10 min of silence.
// A thread per tunnel, at most kMaxTunnels at once. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace ringmaster::agent {

class LabTunnel {
 public:
  // The notebook socket of task `task_id`'s attempt `attempt`, if it is this
  // node's, running, and a notebook; else an error (NotFound).
  using Resolve = std::function<StatusOr<std::string>(int64_t task_id, int64_t attempt)>;
  static constexpr int kMaxTunnels = 128;

  LabTunnel(Resolve resolve, const Clock* clock, std::chrono::milliseconds idle = std::chrono::minutes(10));
  ~LabTunnel();
  LabTunnel(const LabTunnel&) = delete;
  LabTunnel& operator=(const LabTunnel&) = delete;

  // Listens on `port` of every address (0: any free port) and serves.
  Status Start(int port);
  void Stop();
  int port() const { return port_; }
  // The node's key (as the register answer gives it); none yet: every ticket is refused.
  void SetKey(std::string key);

 private:
  void AcceptLoop();
  void Serve(int fd, uint64_t id);
  // A refusal the proxy passes on: an HTTP 502 with a JSON error.
  static void Refuse(int fd, const std::string& message);

  const Resolve resolve_;
  const Clock* const clock_;
  const std::chrono::milliseconds idle_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> running_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::string key_;                    // GUARDED_BY(mu_)
  std::set<int> open_;                 // GUARDED_BY(mu_): client fds of live tunnels (shut down at Stop)
  std::map<uint64_t, std::thread> threads_;  // GUARDED_BY(mu_)
  std::vector<uint64_t> done_;               // GUARDED_BY(mu_): threads that returned, to join
  uint64_t next_id_ = 0;                     // GUARDED_BY(mu_)
  int live_ = 0;                       // GUARDED_BY(mu_)
};

}  // namespace ringmaster::agent
