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

#include "comm/auth.h"
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

bool RecvAll(int fd, void* buf, size_t n, SteadyClock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    if (SteadyClock::now() >= deadline) return false;
    pollfd pfd{fd, POLLIN, 0};
    poll(&pfd, 1, std::max(MsUntil(deadline), 1));
  }
  return true;
}

// The dialer's side of a hello: the hello, and with a secret the proofs
// both ways, so neither side takes a stranger for a rank.
Status SayHello(int fd, const Hello& hello, const TcpMeshOptions& o, const std::string& who, const std::string& where) {
  std::string msg(reinterpret_cast<const char*>(&hello), sizeof hello);
  const std::string dialer_nonce = o.secret.empty() ? "" : NewNonce();
  msg += dialer_nonce;
  if (!SendAll(fd, msg.data(), msg.size(), o.deadline)) {
    return Unavailable(fmt::format("connect: {} hung up during the handshake", who));
  }
  if (o.secret.empty()) return Status::Ok();
  std::string answer(kNonceBytes + kProofBytes, '\0');
  if (!RecvAll(fd, answer.data(), answer.size(), o.deadline)) {
    return Unavailable(fmt::format("connect: {} did not answer the hello (does it hold this job's secret?)", who));
  }
  const std::string transcript = HelloTranscript(hello, dialer_nonce, std::string_view(answer).substr(0, kNonceBytes));
  if (!CheckProof(o.secret, ProofRole::kHelloAcceptor, transcript, std::string_view(answer).substr(kNonceBytes))) {
    return Unauthenticated(fmt::format("connect: the process at {} did not prove the job's secret: it is not {}", where, who));
  }
  const std::string proof = MakeProof(o.secret, ProofRole::kHelloDialer, transcript);
  if (!SendAll(fd, proof.data(), proof.size(), o.deadline)) {
    return Unavailable(fmt::format("connect: {} hung up during the handshake", who));
  }
  return Status::Ok();
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
      const std::string where = fmt::format("{}:{}", peers[p].addr, peers[p].port);
      if (Status st = SayHello(*fd, hello, o, describe(p), where); !st.ok()) {
        close(*fd);
        return st;
      }
      place(p, ch, *fd);
    }
  }
  // Accept the higher ranks. Every accepted socket must say its hello (and,
  // with a secret, answer the challenge) in time.
  struct Pending {
    int fd;
    std::string in;          // bytes of the current step
    std::string transcript;  // set once the hello arrived and was answered
    Hello hello;
    SteadyClock::time_point until;
  };
  const size_t hello_bytes = sizeof(Hello) + (o.secret.empty() ? 0 : kNonceBytes);
  std::vector<Pending> pending;
  auto drop = [&](size_t i) {
    close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  // A complete step from pending[i]: false when it is not one of ours.
  auto step = [&](Pending& p) -> bool {
    if (p.transcript.empty()) {
      std::memcpy(&p.hello, p.in.data(), sizeof(Hello));
      // Not one of ours, a stale generation, or a slot already taken.
      if (!CheckHello(p.hello, o.rank, o.size, o.streams, o.generation).ok() || !use_tcp[p.hello.rank]) return false;
      const int ch = p.hello.channel;
      const auto& slot = ch == kP2pChannel ? links->p2p[p.hello.rank] : links->collective[p.hello.rank][ch];
      if (slot) return false;
      if (o.secret.empty()) return true;
      const std::string acceptor_nonce = NewNonce();
      p.transcript = HelloTranscript(p.hello, std::string_view(p.in).substr(sizeof(Hello)), acceptor_nonce);
      const std::string answer = acceptor_nonce + MakeProof(o.secret, ProofRole::kHelloAcceptor, p.transcript);
      p.in.clear();
      // 64 bytes into an empty socket: all or nothing.
      return send(p.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(answer.size());
    }
    return CheckProof(o.secret, ProofRole::kHelloDialer, p.transcript, p.in);
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
      const size_t need = (p.transcript.empty() ? hello_bytes : kProofBytes) - p.in.size();
      char buf[sizeof(Hello) + kNonceBytes];
      ssize_t n = recv(p.fd, buf, std::min(need, sizeof buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        drop(i);
        continue;
      }
      if (n < 0) continue;
      p.in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < need) continue;
      const bool answered = !p.transcript.empty();
      if (!step(p)) {
        drop(i);
        continue;
      }
      if (!answered && !o.secret.empty()) continue;  // the challenge is out: its proof is next
      if (!place(p.hello.rank, p.hello.channel, p.fd)) {
        drop(i);
        continue;
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      --expect;
    }
    now = SteadyClock::now();
    for (size_t i = pending.size(); i-- > 0;) {
      if (now >= pending[i].until) drop(i);  // silent: it never proved who it is
    }
    if (fds[0].revents & POLLIN) {
      int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (pending.size() >= o.max_pending_hellos) drop(0);
        pending.push_back({fd, "", "", Hello{}, now + o.hello_timeout});
      }
    }
  }
  for (auto& p : pending) close(p.fd);
  return result;
}

}  // namespace ringmaster::comm
