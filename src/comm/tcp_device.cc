#include "comm/tcp_device.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "comm/tcp_pair.h"
#include "comm/wire.h"

namespace ringmaster::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;

int MsUntil(SteadyClock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Dials addr:port until it answers or `deadline` (the peer may not listen yet).
StatusOr<int> Dial(const std::string& host, int port, SteadyClock::time_point deadline) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return InvalidArgument("\"" + host + "\" is not an IPv4 address");
  std::string last = "timed out";
  while (true) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    TuneSocket(fd);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int err = ETIMEDOUT;
      if (poll(&pfd, 1, std::max(MsUntil(deadline), 1)) > 0) {
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) return fd;
    last = std::strerror(errno);
    close(fd);
    if (SteadyClock::now() >= deadline) return DeadlineExceeded(last);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, MsUntil(deadline))));
  }
}

bool SendAll(int fd, const void* buf, size_t n, SteadyClock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (SteadyClock::now() >= deadline) return false;
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, std::max(MsUntil(deadline), 1));
  }
  return true;
}

}  // namespace

StatusOr<TcpListener> TcpListener::Listen(const std::string& address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("address: \"" + address + "\" is not an IPv4 address");
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TuneSocket(fd);  // accepted sockets inherit the buffer sizes
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    return Unavailable(fmt::format("connect: cannot listen on {}: {}", address, std::strerror(e)));
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return TcpListener(fd, ntohs(addr.sin_port));
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

Status TcpConnectMesh(TcpListener& listener, const TcpMeshOptions& o, const std::vector<PeerInfo>& peers,
                      const std::vector<bool>& use_tcp, const std::function<std::string(int)>& describe, Links* links) {
  auto place = [&](int peer, int channel, int fd) -> bool {
    auto& slot = channel == kP2pChannel ? links->p2p[peer] : links->collective[peer][channel];
    if (slot) return false;
    slot = std::make_unique<TcpPair>(fd);
    return true;
  };
  int expect = 0;
  for (int p = 0; p < o.size; ++p) {
    if (p == o.rank || !use_tcp[p]) continue;
    links->collective[p].resize(o.streams);
    if (p > o.rank) expect += o.streams + 1;
  }
  // Dial the lower ranks: each collective stream, then the point-to-point channel.
  for (int p = 0; p < o.rank; ++p) {
    if (!use_tcp[p]) continue;
    for (int channel = 0; channel <= o.streams; ++channel) {
      const int32_t ch = channel == o.streams ? kP2pChannel : channel;
      auto fd = Dial(peers[p].addr, peers[p].port, o.deadline);
      if (!fd.ok()) {
        return DeadlineExceeded(fmt::format("connect: cannot reach {} at {}:{}: {}", describe(p), peers[p].addr,
                                            peers[p].port, fd.status().message()));
      }
      Hello hello{kHelloMagic, o.rank, ch, o.generation};
      if (!SendAll(*fd, &hello, sizeof hello, o.deadline)) {
        close(*fd);
        return Unavailable(fmt::format("connect: {} hung up during the handshake", describe(p)));
      }
      place(p, ch, *fd);
    }
  }
  // Accept the higher ranks. Every accepted socket must say its hello in time.
  struct Pending {
    int fd;
    Hello hello;
    size_t got;
    SteadyClock::time_point until;
  };
  std::vector<Pending> pending;
  auto drop = [&](size_t i) {
    close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  Status result = Status::Ok();
  while (expect > 0) {
    auto now = SteadyClock::now();
    if (now >= o.deadline) {
      result = DeadlineExceeded("connect: timed out waiting for higher ranks to connect");
      break;
    }
    auto wake = o.deadline;
    for (const auto& p : pending) wake = std::min(wake, p.until);
    std::vector<pollfd> fds = {{listener.fd(), POLLIN, 0}};
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), std::max(MsUntil(wake), 1)) < 0 && errno != EINTR) {
      result = Internal(std::string("connect: poll: ") + std::strerror(errno));
      break;
    }
    // Hellos first (their indices match fds), newest last, so erasing from the back is safe.
    for (size_t i = pending.size(); i-- > 0;) {
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Pending& p = pending[i];
      ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(i);
        continue;
      }
      if (n < 0) continue;
      p.got += static_cast<size_t>(n);
      if (p.got < sizeof(Hello)) continue;
      // Not one of ours, a stale generation, or a second connection for one slot: close it and carry on.
      if (!CheckHello(p.hello, o.rank, o.size, o.streams, o.generation).ok() || !use_tcp[p.hello.rank] ||
          !place(p.hello.rank, p.hello.channel, p.fd)) {
        drop(i);
        continue;
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      --expect;
    }
    now = SteadyClock::now();
    for (size_t i = pending.size(); i-- > 0;) {
      if (now >= pending[i].until) drop(i);  // silent: it never said who it is
    }
    if (fds[0].revents & POLLIN) {
      int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (pending.size() >= o.max_pending_hellos) drop(0);
        pending.push_back({fd, Hello{}, 0, now + o.hello_timeout});
      }
    }
  }
  for (auto& p : pending) close(p.fd);
  return result;
}

}  // namespace ringmaster::comm
