// TCP connection setup: this rank's listener, and the handshake that turns
// dialled and accepted sockets into pairs. Per peer there are `streams`
// collective connections and one point-to-point connection; the higher rank
// dials and says a Hello (wire.h) first.
//
// The listener is reachable by other processes, so it trusts no one: an
// accepted connection must say a valid hello (and, with the job's secret,
// prove it: wire.h) within `hello_timeout`; silent, malformed, unproven,
// stale or duplicate connections are closed while setup carries on.
// Not thread-safe (setup runs on one thread).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/links.h"
#include "common/status.h"

namespace ringmaster::comm {

class TcpListener {
 public:
  static StatusOr<TcpListener> Listen(const std::string& address);
  TcpListener(TcpListener&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  TcpListener& operator=(TcpListener&&) = delete;
  ~TcpListener();
  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  TcpListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

struct TcpMeshOptions {
  int rank = 0, size = 1, streams = 1, generation = 0;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds hello_timeout{5000};
  size_t max_pending_hellos = 64;  // connections still to say hello; the oldest is dropped beyond this
  std::string secret = "";         // the job's (auth.h); "" = hellos without proof
};

// Connects every peer p with use_tcp[p]: dials the lower ranks, accepts the
// higher ones, and puts the pairs into links->collective[p] and links->p2p[p].
// `describe` names a rank in errors.
Status TcpConnectMesh(TcpListener& listener, const TcpMeshOptions& o, const std::vector<PeerInfo>& peers,
                      const std::vector<bool>& use_tcp, const std::function<std::string(int)>& describe, Links* links);

}  // namespace ringmaster::comm
