// Links, addresses and routes through rtnetlink, in-process (no `ip`): a
// request builder and a socket bound to the network namespace of the thread
// that opened it. A socket is not thread-safe; open one per thread and task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

struct nlmsghdr;

namespace ringmaster::net {

// One request: the netlink header, the family's fixed header (ifinfomsg,
// ifaddrmsg, rtmsg), then attributes, nested ones between Begin and End.
class NetlinkRequest {
 public:
  NetlinkRequest(uint16_t type, uint16_t flags);
  // REQUIRES: called once, before any attribute.
  void Fixed(const void* data, size_t len);
  void Attr(uint16_t type, const void* data, size_t len);
  void Attr(uint16_t type, const std::string& text);  // NUL-terminated, as the kernel wants names
  void Attr32(uint16_t type, uint32_t value);
  // A nested attribute: its offset, for End to write its length.
  size_t Begin(uint16_t type);
  void End(size_t at);
  nlmsghdr* header();
  const std::vector<char>& bytes() const { return buf_; }

 private:
  void Align();
  std::vector<char> buf_;
};

class RtNetlink {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace; it
  // stays there whatever namespace the thread enters later.
  static StatusOr<RtNetlink> Open();
  RtNetlink(RtNetlink&& o) noexcept : fd_(o.fd_), seq_(o.seq_) { o.fd_ = -1; }
  RtNetlink& operator=(RtNetlink&&) = delete;
  ~RtNetlink();

  // Sends `req` asking for an ACK and waits for it; an error names `what`
  // (NotFound for ENODEV/ENOENT/ESRCH, AlreadyExists for EEXIST).
  Status Run(NetlinkRequest& req, const std::string& what);

  // A veth pair: `name` here (up, in bridge `master` when > 0), its peer
  // `peer` in the namespace of `peer_netns_fd` (down).
  Status AddVeth(const std::string& name, int master, const std::string& peer, int peer_netns_fd);
  Status SetUp(const std::string& link);
  Status DeleteLink(const std::string& link);
  // `ifindex` as the socket's namespace knows it (if_nametoindex in a thread there).
  Status AddAddress(int ifindex, uint32_t address, int prefix);
  Status AddDefaultRoute(uint32_t gateway, uint32_t source);

 private:
  explicit RtNetlink(int fd) : fd_(fd) {}
  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace ringmaster::net
