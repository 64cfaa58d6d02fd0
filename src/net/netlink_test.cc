#include "net/netlink.h"

#include <arpa/inet.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

#include <cstring>

#include <gtest/gtest.h>

namespace ringmaster::net {
namespace {

const rtattr* At(const std::vector<char>& b, size_t off) { return reinterpret_cast<const rtattr*>(b.data() + off); }

TEST(NetlinkRequest, AttributesAreAlignedAndNestsCoverTheirContent) {
  NetlinkRequest req(RTM_NEWLINK, NLM_F_CREATE);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  req.Fixed(&ifi, sizeof ifi);
  req.Attr(IFLA_IFNAME, "rjabc");  // 6 bytes with its NUL: padded to 8
  const size_t info = req.Begin(IFLA_LINKINFO);
  req.Attr32(IFLA_MASTER, 7);
  req.End(info);
  const auto& b = req.bytes();
  const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(b.data());
  EXPECT_EQ(h->nlmsg_len, b.size());
  EXPECT_EQ(h->nlmsg_type, RTM_NEWLINK);
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE);
  size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(ifinfomsg));
  const rtattr* name = At(b, off);
  EXPECT_EQ(name->rta_type, IFLA_IFNAME);
  EXPECT_EQ(name->rta_len, RTA_LENGTH(6));
  EXPECT_STREQ(static_cast<const char*>(RTA_DATA(name)), "rjabc");
  off += RTA_ALIGN(name->rta_len);
  EXPECT_EQ(off % 4, 0u);
  const rtattr* nest = At(b, off);
  EXPECT_EQ(nest->rta_type, IFLA_LINKINFO);
  EXPECT_EQ(nest->rta_len, RTA_LENGTH(0) + RTA_LENGTH(4));
  const rtattr* master = At(b, off + RTA_LENGTH(0));
  EXPECT_EQ(master->rta_type, IFLA_MASTER);
  uint32_t v = 0;
  std::memcpy(&v, RTA_DATA(master), 4);
  EXPECT_EQ(v, 7u);
  EXPECT_EQ(off + nest->rta_len, b.size());
}

TEST(RtNetlink, AnErrorNamesTheOperation) {
  auto s = RtNetlink::Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = s->DeleteLink("rjnosuchlink0");
  ASSERT_FALSE(st.ok());
  // Unprivileged: EPERM; as root: no such device.
  EXPECT_NE(st.message().find("deleting link rjnosuchlink0"), std::string::npos) << st.ToString();
  if (geteuid() == 0) {
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  }
}

}  // namespace
}  // namespace ringmaster::net
