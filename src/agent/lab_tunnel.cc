#include "agent/lab_tunnel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "protocol/lab_tunnel.h"

namespace ringmaster::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Blocking sends bounded by the socket's SO_SNDTIMEO: a peer that stops
// reading ends the tunnel instead of pinning its thread.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void SetSendTimeout(int fd, std::chrono::milliseconds after) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(after.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((after.count() % 1000) * 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;  // 0 would mean "never"
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Copies bytes both ways until either side closes or `idle` passes with no
// byte read (poll) or written (SO_SNDTIMEO on both descriptors).
void Splice(int a, int b, std::chrono::milliseconds idle) {
  char buf[16384];
  pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  while (true) {
    int r = poll(p, 2, static_cast<int>(idle.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;  // silent for too long, or an error
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
      if (n <= 0 || !WriteAll(p[1 - i].fd, buf, static_cast<size_t>(n))) return;
    }
  }
}

// Appends what `fd` (non-blocking) has, up to the greeting line's limit;
// false once the peer closed or failed.
bool ReadGreeting(int fd, std::string* got) {
  char buf[protocol::kMaxTunnelLine];
  while (got->size() < protocol::kMaxTunnelLine && got->find('\n') == std::string::npos) {
    ssize_t n = recv(fd, buf, protocol::kMaxTunnelLine - got->size(), MSG_DONTWAIT);
    if (n > 0) {
      got->append(buf, static_cast<size_t>(n));
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

bool GreetingComplete(const std::string& got) {
  return got.find('\n') != std::string::npos || got.size() >= protocol::kMaxTunnelLine;
}

std::string PeerAddress(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

StatusOr<UniqueFd> OpenNotebookSocket(const std::string& sandbox_dir, uid_t uid) {
  std::vector<std::string> parts = PathParts(sandbox_dir);
  if (sandbox_dir.empty() || sandbox_dir[0] != '/' || parts.empty()) {
    return InvalidArgument(fmt::format("{}: not an absolute sandbox path", sandbox_dir));
  }
  std::string parent;
  for (size_t i = 0; i + 1 < parts.size(); ++i) parent += "/" + parts[i];
  RM_ASSIGN_OR_RETURN(UniqueFd top, OpenTrustedDir(parent.empty() ? "/" : parent));
  // The sandbox and everything in it are the task's to change: each step is
  // opened by descriptor, never through a symlink, and must be the task's own.
  StatusOr<UniqueFd> at = OpenOwnedDir(top.get(), parts.back(), uid);
  for (const char* dir : {"work", ".lab"}) {
    if (at.ok()) at = OpenOwnedDir(at->get(), dir, uid);
  }
  if (at.ok()) at = OpenOwnedSocket(at->get(), "notebook.sock", uid);
  if (at.status().code() == StatusCode::kNotFound) {
    return NotFound("the notebook is not listening (yet): try again in a few seconds");
  }
  return at;
}

struct LabTunnel::Greeting {
  UniqueFd fd;
  std::string peer;
  std::string got;
  SteadyClock::time_point deadline;
};

LabTunnel::LabTunnel(Resolve resolve, const Clock* clock, Limits limits)
    : resolve_(std::move(resolve)), clock_(clock), limits_(limits) {}

LabTunnel::~LabTunnel() { Stop(); }

Status LabTunnel::Start(int port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Internal(fmt::format("lab tunnel: socket: {}", std::strerror(errno)));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 64) != 0) {
    Status st = Unavailable(fmt::format("lab tunnel: port {}: {}", port, std::strerror(errno)));
    close(listen_fd_);
    listen_fd_ = -1;
    return st;
  }
  socklen_t len = sizeof a;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  running_ = true;
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void LabTunnel::Stop() {
  if (!running_.exchange(false)) return;
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int fd : open_) shutdown(fd, SHUT_RDWR);  // wakes a poll, a recv and a blocked send alike
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
}

void LabTunnel::SetKey(std::string key) {
  std::lock_guard<std::mutex> l(mu_);
  key_ = std::move(key);
}

// One thread reads every greeting, so a connection that says nothing costs a
// slot among few, for a short while, and never a tunnel or a thread.
void LabTunnel::AcceptLoop() {
  std::vector<Greeting> waiting;
  std::map<std::string, int> per_peer;
  std::vector<pollfd> p;
  while (running_) {
    p.assign(1, pollfd{listen_fd_, POLLIN, 0});
    auto now = SteadyClock::now();
    int timeout_ms = 250;  // also how soon Stop is noticed
    for (const Greeting& g : waiting) {
      p.push_back(pollfd{g.fd.get(), POLLIN, 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(g.deadline - now).count() + 1;
      timeout_ms = std::clamp<int>(static_cast<int>(left), 0, timeout_ms);
    }
    if (poll(p.data(), p.size(), timeout_ms) < 0 && errno != EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (!running_) return;
    now = SteadyClock::now();
    // From the back, so that erasing keeps the earlier indexes (p[i + 1] is waiting[i]).
    for (size_t i = waiting.size(); i-- > 0;) {
      const bool alive = p[i + 1].revents == 0 || ReadGreeting(waiting[i].fd.get(), &waiting[i].got);
      const bool complete = alive && GreetingComplete(waiting[i].got);
      if (alive && !complete && now < waiting[i].deadline) continue;
      Greeting g = std::move(waiting[i]);
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
      if (--per_peer[g.peer] <= 0) per_peer.erase(g.peer);
      if (complete) Admit(std::move(g));  // else silent too long, or gone: closed
    }
    if (!(p[0].revents & POLLIN)) continue;
    while (running_) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // out of descriptors: back off
        }
        break;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Greeting g{UniqueFd(fd), PeerAddress(peer), "", now + limits_.greeting};
      // The server sends its greeting with the connection: usually it is
      // here already and never needs a slot.
      if (!ReadGreeting(fd, &g.got)) continue;
      if (GreetingComplete(g.got)) {
        Admit(std::move(g));
        continue;
      }
      // Full: the newcomer takes the slot of the oldest silent connection of
      // its own address if that one has its share, else of the address that
      // holds the most. A greeting that is a moment late (a loaded machine)
      // then still gets its second; flooding silent connections evicts the
      // flooder's own first, and the others only after a full turn.
      std::string evict;
      if (per_peer[g.peer] >= limits_.max_greeting_per_peer) {
        evict = g.peer;
      } else if (static_cast<int>(waiting.size()) >= limits_.max_greeting) {
        int most = 0;
        for (const auto& [peer, n] : per_peer) {
          if (n > most) most = n, evict = peer;
        }
      }
      if (!evict.empty()) {
        auto oldest = std::find_if(waiting.begin(), waiting.end(), [&](const Greeting& w) { return w.peer == evict; });
        if (oldest != waiting.end()) {
          waiting.erase(oldest);  // closed
          if (--per_peer[evict] <= 0) per_peer.erase(evict);
        }
      }
      ++per_peer[g.peer];
      waiting.push_back(std::move(g));
    }
  }
}

void LabTunnel::Admit(Greeting g) {
  const int fd = g.fd.get();
  const size_t eol = g.got.find('\n');
  if (eol == std::string::npos || g.got.rfind(protocol::kTunnelGreeting, 0) != 0) {
    return Refuse(fd, "not a lab tunnel greeting");
  }
  std::string key;
  {
    std::lock_guard<std::mutex> l(mu_);
    key = key_;
  }
  const std::string text = g.got.substr(protocol::kTunnelGreeting.size(), eol - protocol::kTunnelGreeting.size());
  auto ticket = key.empty() ? StatusOr<protocol::TunnelTicket>(Unavailable("no key yet"))
                            : protocol::VerifyTunnelTicket(text, key, clock_->NowMs());
  if (!ticket.ok()) {
    spdlog::warn("agent: lab tunnel from {} refused: {}", g.peer, ticket.status().ToString());
    return Refuse(fd, "the node refused the tunnel ticket");
  }
  std::lock_guard<std::mutex> l(mu_);
  for (uint64_t id : done_) {  // they have returned, or are about to
    threads_[id].join();
    threads_.erase(id);
  }
  done_.clear();
  if (live_ >= limits_.max_tunnels) return Refuse(fd, "too many notebook connections on this node");
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  SetSendTimeout(fd, limits_.idle);
  ++live_;
  open_.insert(fd);
  const uint64_t id = next_id_++;
  threads_.emplace(id, std::thread([this, fd = g.fd.release(), task = ticket->task_id, attempt = ticket->attempt,
                                    rest = g.got.substr(eol + 1), id]() mutable {
    Serve(fd, task, attempt, std::move(rest), id);
  }));
}

void LabTunnel::Refuse(int fd, const std::string& message) {
  const std::string body = nlohmann::json{{"error", {{"code", "Unavailable"}, {"message", message}}}}.dump();
  const std::string res = fmt::format(
      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  WriteAll(fd, res.data(), res.size());
}

bool LabTunnel::Track(int fd) {
  std::lock_guard<std::mutex> l(mu_);
  if (!running_) return false;
  open_.insert(fd);
  return true;
}

void LabTunnel::Untrack(int fd) {
  std::lock_guard<std::mutex> l(mu_);
  open_.erase(fd);
}

void LabTunnel::Serve(int fd, int64_t task_id, int64_t attempt, std::string rest, uint64_t id) {
  int up = -1;
  [&] {
    auto sock = resolve_(task_id, attempt);
    if (!sock.ok()) {
      if (sock.status().code() != StatusCode::kNotFound) {
        spdlog::warn("agent: lab tunnel to task {} attempt {}: {}", task_id, attempt, sock.status().ToString());
      }
      return Refuse(fd, sock.status().message());
    }
    up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up < 0) return Refuse(fd, fmt::format("socket: {}", std::strerror(errno)));
    SetSendTimeout(up, limits_.idle);  // bounds the connect too (a full backlog)
    if (!Track(up)) return;
    // Through the descriptor checked, not the path: the task cannot swap it meanwhile.
    const std::string path = fmt::format("/proc/self/fd/{}", sock->get());
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (connect(up, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return Refuse(fd, "the notebook is not listening (yet): try again in a few seconds");
    }
    if (!WriteAll(up, rest.data(), rest.size())) return;
    Splice(fd, up, limits_.idle);
  }();
  if (up >= 0) {
    Untrack(up);
    close(up);
  }
  std::lock_guard<std::mutex> l(mu_);
  open_.erase(fd);
  close(fd);
  --live_;
  done_.push_back(id);
}

}  // namespace ringmaster::agent
