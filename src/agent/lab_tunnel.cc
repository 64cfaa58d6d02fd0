#include "agent/lab_tunnel.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "protocol/lab_tunnel.h"

namespace ringmaster::agent {
namespace {

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

// Copies bytes both ways until either side closes or `idle` passes in silence.
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

}  // namespace

LabTunnel::LabTunnel(Resolve resolve, const Clock* clock, std::chrono::milliseconds idle)
    : resolve_(std::move(resolve)), clock_(clock), idle_(idle) {}

LabTunnel::~LabTunnel() { Stop(); }

Status LabTunnel::Start(int port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
}

void LabTunnel::SetKey(std::string key) {
  std::lock_guard<std::mutex> l(mu_);
  key_ = std::move(key);
}

void LabTunnel::AcceptLoop() {
  while (running_) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!running_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // out of descriptors: back off
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t id : done_) {  // they have returned, or are about to
      threads_[id].join();
      threads_.erase(id);
    }
    done_.clear();
    if (live_ >= kMaxTunnels) {
      Refuse(fd, "too many notebook connections on this node");
      close(fd);
      continue;
    }
    ++live_;
    open_.insert(fd);
    const uint64_t id = next_id_++;
    threads_.emplace(id, std::thread([this, fd, id] { Serve(fd, id); }));
  }
}

void LabTunnel::Refuse(int fd, const std::string& message) {
  const std::string body = nlohmann::json{{"error", {{"code", "Unavailable"}, {"message", message}}}}.dump();
  const std::string res = fmt::format(
      "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  WriteAll(fd, res.data(), res.size());
}

void LabTunnel::Serve(int fd, uint64_t id) {
  int up = -1;
  [&] {
    // The greeting line, within 5 s and kMaxTunnelLine bytes; what follows it is the request.
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    size_t eol = std::string::npos;
    char buf[4096];
    while ((eol = got.find('\n')) == std::string::npos && got.size() < protocol::kMaxTunnelLine) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
    if (eol == std::string::npos || got.rfind(protocol::kTunnelGreeting, 0) != 0) {
      return Refuse(fd, "not a lab tunnel greeting");
    }
    std::string key;
    {
      std::lock_guard<std::mutex> l(mu_);
      key = key_;
    }
    const std::string text = got.substr(protocol::kTunnelGreeting.size(), eol - protocol::kTunnelGreeting.size());
    auto ticket = key.empty() ? StatusOr<protocol::TunnelTicket>(Unavailable("no key yet"))
                              : protocol::VerifyTunnelTicket(text, key, clock_->NowMs());
    if (!ticket.ok()) {
      spdlog::warn("agent: lab tunnel refused: {}", ticket.status().ToString());
      return Refuse(fd, "the node refused the tunnel ticket");
    }
    auto path = resolve_(ticket->task_id, ticket->attempt);
    if (!path.ok()) return Refuse(fd, path.status().message());
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path->size() >= sizeof sa.sun_path) return Refuse(fd, "the notebook's socket path is too long");
    std::memcpy(sa.sun_path, path->c_str(), path->size() + 1);
    up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up < 0 || connect(up, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return Refuse(fd, "the notebook is not listening (yet): try again in a few seconds");
    }
    const std::string rest = got.substr(eol + 1);
    if (!WriteAll(up, rest.data(), rest.size())) return;
    Splice(fd, up, idle_);
  }();
  if (up >= 0) close(up);
  std::lock_guard<std::mutex> l(mu_);
  open_.erase(fd);
  close(fd);
  --live_;
  done_.push_back(id);
}

}  // namespace ringmaster::agent
