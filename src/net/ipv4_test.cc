#include "net/ipv4.h"

#include <gtest/gtest.h>

namespace ringmaster::net {
namespace {

TEST(Ipv4, ParsesAndFormats) {
  EXPECT_EQ(ParseIpv4("10.244.3.7"), (10u << 24) | (244u << 16) | (3u << 8) | 7u);
  EXPECT_EQ(FormatIpv4(*ParseIpv4("255.0.10.1")), "255.0.10.1");
  for (const char* bad : {"", "10.244.3", "10.244.3.7.1", "10.244.3.256", "010.1.1.1", "1..1.1", "1.1.1.1 ", "a.b.c.d",
                          "1.1.1.1/24", "-1.1.1.1", "1111.1.1.1"}) {
    EXPECT_FALSE(ParseIpv4(bad)) << bad;
  }
}

TEST(Ipv4, Cidr) {
  auto n = ParseCidr("10.244.0.0/16");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->prefix, 16);
  EXPECT_EQ(FormatCidr(*n), "10.244.0.0/16");
  EXPECT_TRUE(Contains(*n, *ParseIpv4("10.244.255.1")));
  EXPECT_FALSE(Contains(*n, *ParseIpv4("10.245.0.1")));
  auto host_bits = ParseCidr("10.244.1.0/16");
  ASSERT_FALSE(host_bits.ok());
  EXPECT_NE(host_bits.status().message().find("10.244.0.0/16"), std::string::npos);
  EXPECT_FALSE(ParseCidr("10.244.0.0").ok());
  EXPECT_FALSE(ParseCidr("10.244.0.0/33").ok());
  EXPECT_FALSE(ParseCidr("10.244.0.0/").ok());
  EXPECT_FALSE(ParseCidr("10.244.0.0/1x").ok());
  EXPECT_TRUE(ParseCidr("0.0.0.0/0").ok());
}

TEST(Ipv4, BlocksAndTaskAddresses) {
  Ipv4Net subnet = *ParseCidr("10.244.0.0/16");
  EXPECT_EQ(BlockCount(subnet, 24), 256);
  EXPECT_EQ(BlockCount(subnet, 8), 0);  // a block larger than the subnet
  EXPECT_EQ(FormatCidr(*Block(subnet, 24, 3)), "10.244.3.0/24");
  EXPECT_FALSE(Block(subnet, 24, 256));
  EXPECT_FALSE(Block(subnet, 24, -1));
  Ipv4Net b = *Block(subnet, 24, 3);
  EXPECT_FALSE(TaskAddress(b, 1));  // the gateway's
  EXPECT_EQ(FormatIpv4(*TaskAddress(b, 2)), "10.244.3.2");
  EXPECT_EQ(FormatIpv4(*TaskAddress(b, 254)), "10.244.3.254");
  EXPECT_FALSE(TaskAddress(b, 255));  // broadcast
  EXPECT_FALSE(TaskAddress(*ParseCidr("10.0.0.0/31"), 2));
}

}  // namespace
}  // namespace ringmaster::net
