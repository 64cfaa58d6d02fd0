#include "net/netlink.h"

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "net/ipv4.h"

namespace ringmaster::net {
namespace {

Status FromErrno(int err, const std::string& what) {
  const std::string m = what + ": " + std::strerror(err);
  switch (err) {
    case ENODEV:
    case ENOENT:
    case ESRCH:
      return NotFound(m);
    case EEXIST:
      return AlreadyExists(m);
    case EPERM:
    case EACCES:
      return PermissionDenied(m);
    default:
      return Internal(m);
  }
}

// A request on the link `name` (ifinfomsg, then IFLA_IFNAME), set up when `up`.
NetlinkRequest LinkRequest(uint16_t type, uint16_t flags, const std::string& name, bool up) {
  NetlinkRequest req(type, flags);
  const unsigned up_flags = up ? static_cast<unsigned>(IFF_UP) : 0u;
  const ifinfomsg ifi{AF_UNSPEC, 0, 0, 0, up_flags, up_flags};  // family, pad, type, index, flags, change
  req.Fixed(&ifi, sizeof ifi);
  req.Attr(IFLA_IFNAME, name);
  return req;
}

}  // namespace

NetlinkRequest::NetlinkRequest(uint16_t type, uint16_t flags) : buf_(NLMSG_HDRLEN, 0) {
  nlmsghdr* h = header();
  h->nlmsg_type = type;
  h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  h->nlmsg_len = buf_.size();
}

nlmsghdr* NetlinkRequest::header() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }

void NetlinkRequest::Align() {
  buf_.resize(NLMSG_ALIGN(buf_.size()), 0);
  header()->nlmsg_len = buf_.size();
}

void NetlinkRequest::Fixed(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  buf_.insert(buf_.end(), p, p + len);
  Align();
}

void NetlinkRequest::Attr(uint16_t type, const void* data, size_t len) {
  rtattr a{};
  a.rta_type = type;
  a.rta_len = RTA_LENGTH(len);
  const char* h = reinterpret_cast<const char*>(&a);
  buf_.insert(buf_.end(), h, h + sizeof a);
  const char* p = static_cast<const char*>(data);
  buf_.insert(buf_.end(), p, p + len);
  Align();
}

void NetlinkRequest::Attr(uint16_t type, const std::string& text) { Attr(type, text.c_str(), text.size() + 1); }

void NetlinkRequest::Attr32(uint16_t type, uint32_t value) { Attr(type, &value, sizeof value); }

size_t NetlinkRequest::Begin(uint16_t type) {
  const size_t at = buf_.size();
  Attr(type, nullptr, 0);
  return at;
}

void NetlinkRequest::End(size_t at) {
  auto* a = reinterpret_cast<rtattr*>(buf_.data() + at);
  a->rta_len = buf_.size() - at;
}

StatusOr<RtNetlink> RtNetlink::Open() {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return FromErrno(errno, "opening a NETLINK_ROUTE socket");
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    Status st = FromErrno(errno, "binding a NETLINK_ROUTE socket");
    ::close(fd);
    return st;
  }
  return RtNetlink(fd);
}

RtNetlink::~RtNetlink() {
  if (fd_ >= 0) ::close(fd_);
}

Status RtNetlink::Run(NetlinkRequest& req, const std::string& what) {
  nlmsghdr* h = req.header();
  h->nlmsg_seq = ++seq_;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  const auto& out = req.bytes();
  if (::sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    return FromErrno(errno, what);
  }
  // An ACK is an NLMSG_ERROR with the request's header (error 0: done).
  alignas(nlmsghdr) char in[8192];
  for (;;) {
    const ssize_t n = ::recv(fd_, in, sizeof in, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FromErrno(errno, what);
    }
    int left = static_cast<int>(n);
    for (auto* m = reinterpret_cast<nlmsghdr*>(in); NLMSG_OK(m, left); m = NLMSG_NEXT(m, left)) {
      if (m->nlmsg_seq != seq_ || m->nlmsg_type != NLMSG_ERROR) continue;
      if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) return Internal(what + ": a short netlink reply");
      const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(m))->error;
      return err == 0 ? Status::Ok() : FromErrno(err, what);
    }
  }
}

Status RtNetlink::AddVeth(const std::string& name, int master, const std::string& peer, int peer_netns_fd) {
  NetlinkRequest req = LinkRequest(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, name, true);
  if (master > 0) req.Attr32(IFLA_MASTER, master);
  const size_t info = req.Begin(IFLA_LINKINFO);
  req.Attr(IFLA_INFO_KIND, "veth");
  const size_t data = req.Begin(IFLA_INFO_DATA);
  const size_t peer_info = req.Begin(VETH_INFO_PEER);
  const ifinfomsg peer_ifi{AF_UNSPEC, 0, 0, 0, 0, 0};
  req.Fixed(&peer_ifi, sizeof peer_ifi);
  req.Attr(IFLA_IFNAME, peer);
  req.Attr32(IFLA_NET_NS_FD, peer_netns_fd);
  req.End(peer_info);
  req.End(data);
  req.End(info);
  return Run(req, fmt::format("adding veth {} (peer {})", name, peer));
}

Status RtNetlink::SetUp(const std::string& link) {
  NetlinkRequest req = LinkRequest(RTM_NEWLINK, 0, link, true);
  return Run(req, "setting " + link + " up");
}

Status RtNetlink::DeleteLink(const std::string& link) {
  NetlinkRequest req = LinkRequest(RTM_DELLINK, 0, link, false);
  return Run(req, "deleting link " + link);
}

Status RtNetlink::AddAddress(int ifindex, uint32_t address, int prefix) {
  NetlinkRequest req(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  // family, prefix length, flags, scope, link
  const ifaddrmsg ifa{AF_INET, static_cast<uint8_t>(prefix), 0, 0, static_cast<uint32_t>(ifindex)};
  req.Fixed(&ifa, sizeof ifa);
  const uint32_t be = htonl(address);
  req.Attr(IFA_LOCAL, &be, sizeof be);
  req.Attr(IFA_ADDRESS, &be, sizeof be);
  return Run(req, fmt::format("adding address {}/{} to link {}", FormatIpv4(address), prefix, ifindex));
}

Status RtNetlink::AddDefaultRoute(uint32_t gateway, uint32_t source) {
  NetlinkRequest req(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
  // family, dst/src prefix lengths, tos, table, protocol (as `ip route add`'s), scope, type, flags
  const rtmsg rt{AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0};
  req.Fixed(&rt, sizeof rt);
  const uint32_t gw = htonl(gateway), src = htonl(source);
  req.Attr(RTA_GATEWAY, &gw, sizeof gw);
  req.Attr(RTA_PREFSRC, &src, sizeof src);
  return Run(req, "adding the default route");
}

}  // namespace ringmaster::net
