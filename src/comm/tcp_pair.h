// TCP pairs: non-blocking sockets with TCP_NODELAY and large buffers.
// Connection setup (listening, dialling, the handshake) is tcp_device.h.
#pragma once

#include "comm/transport.h"

namespace ringmaster::comm {

class TcpPair final : public Pair {
 public:
  // Takes ownership of a connected socket; makes it non-blocking.
  explicit TcpPair(int fd);
  ~TcpPair() override;
  StatusOr<size_t> TryWrite(const iovec* iov, int n) override;
  StatusOr<size_t> TryRead(const iovec* iov, int n) override;
  size_t Peek(void* buf, size_t n) override;
  int fd() const override { return fd_; }
  void Shutdown(bool clean) override;
  const char* kind() const override { return "tcp"; }

 private:
  const int fd_;
};

// Socket options every ringcomm connection gets.
void TuneSocket(int fd);

}  // namespace ringmaster::comm
