// The agent's end of the lab tunnel (protocol/lab_tunnel.h): a TCP listener
// that takes a connection only with a ticket signed by the node's key for a
// running notebook task of this node, then joins it to that task's unix
// socket, bytes both ways, until either side closes or `idle` passes with no
// progress. Greetings are read by one thread under a short deadline, with
// bounded slots; a thread per admitted tunnel, at most kMaxTunnels. Thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/executor/safe_fs.h"
#include "common/clock.h"
#include "common/status.h"

namespace ringmaster::agent {

// The notebook socket, .lab/notebook.sock in the work directory of
// `sandbox_dir`, as an O_PATH descriptor, walked without following any
// symlink: the sandbox, work and .lab directories and the socket itself must
// belong to `uid` (the task's), so a task cannot point the agent (root) at
// another task's notebook or at any other socket. NotFound while it does not exist yet.
StatusOr<UniqueFd> OpenNotebookSocket(const std::string& sandbox_dir, uid_t uid);

struct LabTunnelLimits {
  std::chrono::milliseconds idle{std::chrono::minutes(10)};  // no byte moved either way
  std::chrono::milliseconds greeting{1000};  // from accept to the greeting's newline
  int max_tunnels = 128;         // admitted tunnels at once
  int max_greeting = 32;         // connections awaiting their greeting
  int max_greeting_per_peer = 16;  // of those, from one address (the server opens several at once)
};

class LabTunnel {
 public:
  // The notebook socket (OpenNotebookSocket) of task `task_id`'s attempt
  // `attempt`, if it is this node's, running, and a notebook; else an error.
  using Resolve = std::function<StatusOr<UniqueFd>(int64_t task_id, int64_t attempt)>;
  using Limits = LabTunnelLimits;

  LabTunnel(Resolve resolve, const Clock* clock, Limits limits = {});
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
  struct Greeting;
  void AcceptLoop();
  // A connection whose greeting line is complete (or over-long): verified
  // here, on the accept thread, and handed to a tunnel thread if admitted.
  void Admit(Greeting g);
  void Serve(int fd, int64_t task_id, int64_t attempt, std::string rest, uint64_t id);
  // Registers a live descriptor so that Stop shuts it down; false once stopping.
  bool Track(int fd);
  void Untrack(int fd);
  // A refusal the proxy passes on: an HTTP 502 with a JSON error.
  static void Refuse(int fd, const std::string& message);

  const Resolve resolve_;
  const Clock* const clock_;
  const Limits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> running_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::string key_;                    // GUARDED_BY(mu_)
  std::set<int> open_;                 // GUARDED_BY(mu_): both fds of live tunnels (shut down at Stop)
  std::map<uint64_t, std::thread> threads_;  // GUARDED_BY(mu_)
  std::vector<uint64_t> done_;               // GUARDED_BY(mu_): threads that returned, to join
  uint64_t next_id_ = 0;                     // GUARDED_BY(mu_)
  int live_ = 0;                       // GUARDED_BY(mu_)
};

}  // namespace ringmaster::agent
