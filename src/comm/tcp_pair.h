// TCP pairs: non-blocking sockets with TCP_NODELAY and large buffers.
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
  int fd() const override { return fd_; }
  const char* kind() const override { return "tcp"; }

 private:
  int fd_;
};

// Socket options every ringcomm connection gets.
void TuneSocket(int fd);

}  // namespace ringmaster::comm
