#include "net/task_filter.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "net/job_network.h"

namespace ringmaster::net {
namespace {

TEST(TaskFilter, ParsesTheAllowList) {
  auto l = ParseAllowList("10.0.0.0/8,192.168.1.5:443");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ(FormatCidr((*l)[0].net), "10.0.0.0/8");
  EXPECT_EQ((*l)[0].port, 0);
  EXPECT_EQ(FormatCidr((*l)[1].net), "192.168.1.5/32");
  EXPECT_EQ((*l)[1].port, 443);
  EXPECT_TRUE(ParseAllowList("")->empty());
  for (const char* bad : {"10.0.0.0/33", "host:1", "1.2.3.4:0", "1.2.3.4:70000", "1.2.3.4:8x"}) {
    EXPECT_FALSE(ParseAllowList(bad).ok()) << bad;
  }
}

TEST(TaskFilter, InboundOnlyFromPeersOutboundNotToTheNode) {
  FilterRules r;
  r.peers = {"192.168.0.2", "192.168.0.3"};
  r.deny = {"192.168.0.1", "10.213.0.1"};
  r.allow = *ParseAllowList("192.168.0.1:53");
  r.own = "10.213.0.2";
  r.node = "192.168.0.1";
  auto s = FilterRuleset(r);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("type filter hook input priority 0; policy drop;"), std::string::npos) << *s;
  EXPECT_NE(s->find("ip saddr { 192.168.0.2, 192.168.0.3 } accept"), std::string::npos) << *s;
  EXPECT_NE(s->find("ip daddr 192.168.0.1/32 meta l4proto { tcp, udp } th dport 53 accept"), std::string::npos) << *s;
  EXPECT_NE(s->find("ip daddr { 192.168.0.1, 10.213.0.1 } drop"), std::string::npos) << *s;
  // The site's exception comes before the refusal.
  EXPECT_LT(s->find("dport 53 accept"), s->find("10.213.0.1 } drop"));
  EXPECT_NE(s->find("ip daddr 10.213.0.2 dnat ip to 192.168.0.1"), std::string::npos) << *s;
  // No peers (a job on one node): nothing from outside gets in.
  r.peers.clear();
  EXPECT_EQ(FilterRuleset(r)->find("saddr"), std::string::npos);
  r.peers = {"not-an-address"};
  EXPECT_FALSE(FilterRuleset(r).ok());
}

// The commands a job's namespace costs, recorded.
struct Recorder {
  std::vector<std::string> lines;
  ToolRunner runner() {
    return [this](const std::vector<std::string>& argv) -> StatusOr<std::string> {
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      lines.push_back(line);
      if (argv[0] == "ip" && argv.size() > 2 && argv[1] == "link" && argv[2] == "show") return NotFound("no such device");
      return std::string();
    };
  }
  bool Has(const std::string& s) const {
    for (const auto& l : lines) {
      if (l.find(s) != std::string::npos) return true;
    }
    return false;
  }
};

// Setup (once per agent start) still runs tools: the commands, recorded.
// What a job's namespace is made of is checked in the kernel (job_network_test).
TEST(JobNetwork, SetupMakesTheBridgeAndTheNodesTable) {
  const std::string dir = ::testing::TempDir() + "/jobnet-golden-" + std::to_string(getpid());
  Recorder rec;
  JobNetworkOptions o;
  o.subnet = *ParseCidr("10.213.0.0/16");
  o.node_address = "192.168.0.1";
  o.state_dir = dir;
  o.registry_dir = dir + "-registry";
  JobNetwork jn(o, rec.runner());
  ASSERT_TRUE(jn.Setup().ok());
  EXPECT_TRUE(rec.Has("ip link add rmtask0 type bridge"));
  EXPECT_TRUE(rec.Has("ip addr replace 10.213.0.1/16 dev rmtask0"));
  EXPECT_TRUE(rec.Has("sysctl -q -w net.ipv4.ip_forward=1"));
  EXPECT_TRUE(rec.Has("nft -f " + dir + "/host.nft"));
  EXPECT_TRUE(rec.Has("mount --make-private " + dir));
  EXPECT_EQ(JobNetwork::Name(5, 1), "rmj-5-1");
  EXPECT_EQ(JobNetwork::VethName(dir + "/rmj-5-1").size(), 15u);
}

}  // namespace
}  // namespace ringmaster::net
