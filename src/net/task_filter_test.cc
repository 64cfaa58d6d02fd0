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

TEST(JobNetwork, OneNamespacePerJobAttemptWithItsPortsForwarded) {
  const std::string dir = ::testing::TempDir() + "/jobnet-golden-" + std::to_string(getpid());
  Recorder rec;
  JobNetworkOptions o;
  o.subnet = *ParseCidr("10.213.0.0/16");
  o.node_address = "192.168.0.1";
  o.state_dir = dir;
  o.registry_dir = dir + "-registry";
  o.host_pid = 77;
  JobNetwork jn(o, rec.runner());
  ASSERT_TRUE(jn.Setup().ok());
  EXPECT_TRUE(rec.Has("ip link add rmtask0 type bridge"));
  EXPECT_TRUE(rec.Has("ip addr replace 10.213.0.1/16 dev rmtask0"));
  EXPECT_TRUE(rec.Has("nft -f " + dir + "/host.nft"));
  rec.lines.clear();
  auto a = jn.Join(5, 1, "10.1", 31000, {"192.168.0.2"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, dir + "/rmj-5-1");
  const std::string in_ns = "nsenter --net=" + *a + " -- ";
  EXPECT_TRUE(rec.Has("unshare --net=" + *a + " true"));
  EXPECT_TRUE(rec.Has(in_ns + "ip link add eth0 type veth peer name " + JobNetwork::VethName(*a) + " netns 77"));
  EXPECT_TRUE(rec.Has(in_ns + "ip addr add 192.168.0.1/32 dev lo"));
  EXPECT_TRUE(rec.Has(in_ns + "ip addr add 10.213.0.2/16 dev eth0"));
  EXPECT_TRUE(rec.Has(in_ns + "sysctl -q -w net.ipv4.ip_local_port_range=40000 40255"));
  EXPECT_TRUE(rec.Has(in_ns + "nft -f " + *a + ".nft"));
  EXPECT_TRUE(rec.Has("nft add element ip ringmaster_tasks ports { tcp . 40000-40255 : 10.213.0.2, udp . 40000-40255 : 10.213.0.2 }"));
  EXPECT_TRUE(rec.Has("nft add element ip ringmaster_tasks ports { tcp . 31000 : 10.213.0.2, udp . 31000 : 10.213.0.2 }"));
  // The job's second task on the node shares it; another job gets its own.
  rec.lines.clear();
  ASSERT_EQ(*jn.Join(5, 1, "11.1", 31001, {"192.168.0.2"}), *a);
  EXPECT_FALSE(rec.Has("unshare"));
  auto b = jn.Join(6, 1, "12.1", 31002, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, dir + "/rmj-6-1");
  EXPECT_TRUE(rec.Has("ip addr add 10.213.0.3/16 dev eth0"));
  EXPECT_TRUE(rec.Has("ip_local_port_range=40256 40511"));
  // A new attempt is a new namespace.
  EXPECT_EQ(*jn.Join(5, 2, "10.2", 31003, {}), dir + "/rmj-5-2");
  // The last task to leave removes it.
  rec.lines.clear();
  jn.Leave("10.1");
  EXPECT_TRUE(rec.Has("nft delete element ip ringmaster_tasks ports { tcp . 31000 : 10.213.0.2"));
  EXPECT_FALSE(rec.Has("umount"));
  jn.Leave("11.1");
  EXPECT_TRUE(rec.Has("umount " + *a));
  EXPECT_TRUE(rec.Has("nft delete element ip ringmaster_tasks ports { tcp . 40000-40255"));
  jn.Leave("11.1");  // idempotent
  // Its address and block are free again.
  EXPECT_EQ(*jn.Join(7, 1, "13.1", 0, {}), dir + "/rmj-7-1");
  EXPECT_TRUE(rec.Has("ip addr add 10.213.0.2/16 dev eth0"));
}

}  // namespace
}  // namespace ringmaster::net
