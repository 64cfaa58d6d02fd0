// For tests that play a stranger on ringcomm's ports: raw connections and
// what comes back on them. Not thread-safe per fd.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>

namespace ringmaster::comm {

// A blocking connection to 127.0.0.1:port, or -1.
inline int Dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What the peer sends within `timeout`, and whether it closed the connection.
inline std::pair<std::string, bool> ReadFor(int fd, std::chrono::milliseconds timeout) {
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return {got, true};
    if (n < 0) {
      if (errno == EAGAIN) continue;
      return {got, true};
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return {got, false};
}

}  // namespace ringmaster::comm
