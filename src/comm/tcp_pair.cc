#include "comm/tcp_pair.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ringmaster::comm {

void TuneSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // 4 MiB buffers: a ring step of a large all-reduce keeps the link busy
  // while the receiver reduces. SO_*BUFFORCE passes the sysctl cap as root.
  int size = 4 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
}

TcpPair::TcpPair(int fd) : fd_(fd) { fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK); }

TcpPair::~TcpPair() { close(fd_); }

void TcpPair::Shutdown(bool clean) { shutdown(fd_, clean ? SHUT_WR : SHUT_RDWR); }

size_t TcpPair::Peek(void* buf, size_t n) {
  ssize_t r = recv(fd_, buf, n, MSG_PEEK | MSG_DONTWAIT);
  return r > 0 ? static_cast<size_t>(r) : 0;
}

StatusOr<size_t> TcpPair::TryWrite(const iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  while (true) {
    ssize_t r = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Unavailable(std::string("connection lost: ") + std::strerror(errno));
  }
}

StatusOr<size_t> TcpPair::TryRead(const iovec* iov, int n) {
  while (true) {
    ssize_t r = readv(fd_, iov, n);
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) return Unavailable("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Unavailable(std::string("connection lost: ") + std::strerror(errno));
  }
}

}  // namespace ringmaster::comm
