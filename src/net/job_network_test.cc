// Jobs' namespaces on one node, for real (root): the test process takes a
// network and mount namespace of its own (the "node"), with a dummy link
// holding the node's address, and connects between the jobs' namespaces.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "common/subprocess.h"
#include "net/job_network.h"
#include "net/netns.h"

namespace ringmaster::net {
namespace {

constexpr const char* kNode = "192.168.77.1";

// Runs fn in a child that entered the namespace at `path`; its exit code.
int RunIn(const std::string& path, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(100);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 101;
}

int Listen(const char* addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, addr, &sa.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// 0: connected; 1: refused or timed out.
int Connect(const char* addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, addr, &sa.sin_addr);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 1000) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
    } else {
      rc = -1;
    }
  }
  close(fd);
  return rc == 0 ? 0 : 1;
}

// Starts a child in the namespace at `path` that runs `setup` (true: ready)
// and then waits to be killed; -1 when setup failed.
pid_t HoldIn(const std::string& path, const std::function<bool()>& setup) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(path.c_str(), O_RDONLY);
    char c = fd >= 0 && setns(fd, CLONE_NEWNET) == 0 && setup() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  if (read(ready[0], &c, 1) != 1 || c != 'y') {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  close(ready[0]);
  close(ready[1]);
  return pid;
}

void Kill(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

class JobNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    if (!RunTool({"nft", "--version"}).ok()) GTEST_SKIP() << "needs nft (scripts/install-deps.sh)";
    ASSERT_EQ(unshare(CLONE_NEWNET | CLONE_NEWNS), 0);
    ASSERT_TRUE(RunTool({"mount", "--make-rprivate", "/"}).ok());
    ASSERT_TRUE(RunTool({"ip", "link", "set", "lo", "up"}).ok());
    ASSERT_TRUE(RunTool({"ip", "link", "add", "node0", "type", "veth", "peer", "name", "node1"}).ok());
    ASSERT_TRUE(RunTool({"ip", "addr", "add", std::string(kNode) + "/24", "dev", "node0"}).ok());
    ASSERT_TRUE(RunTool({"ip", "link", "set", "node0", "up"}).ok());
    dir_ = ::testing::TempDir() + "/jobnet-" + std::to_string(getpid());
    JobNetworkOptions o;
    o.subnet = *ParseCidr("10.213.0.0/16");
    o.node_address = kNode;
    o.state_dir = dir_;
    o.registry_dir = dir_ + "-registry";
    o.deny = {kNode};
    net_ = std::make_unique<JobNetwork>(o);
    Status st = net_->Setup();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // A tool's output inside the namespace at `path` ("" = the node's).
  static std::string In(const std::string& path, std::vector<std::string> argv) {
    if (!path.empty()) argv.insert(argv.begin(), {"nsenter", "--net=" + path, "--"});
    auto out = RunTool(argv);
    return out.ok() ? *out : "(failed: " + out.status().message() + ")";
  }
  std::string Map() const { return In("", {"nft", "list", "map", "ip", kTaskTable, "ports"}); }
  // What a removed namespace could leave behind, "" when nothing.
  std::string Leftovers() const {
    std::string out;
    std::ifstream mounts("/proc/self/mountinfo");
    for (std::string line; std::getline(mounts, line);) {
      if (line.find(dir_ + "/rmj-") != std::string::npos) out += "mount: " + line + "\n";
    }
    const std::string links = In("", {"ip", "-o", "link", "show"});
    if (links.find(": rj") != std::string::npos) out += "links: " + links;
    const std::string map = Map();
    if (map.find(" : 10.213.") != std::string::npos) out += "map: " + map;
    if (auto claims = RunTool({"ls", dir_ + "-registry"}); claims.ok() && !claims->empty()) out += "claims: " + *claims;
    return out;
  }
  std::string dir_;
  std::unique_ptr<JobNetwork> net_;
};

TEST_F(JobNetworkTest, TwoJobsCannotConnectSameJobTasksCan) {
  auto alice = net_->Join(1, 1, "1.1", 31000, {});
  auto bob = net_->Join(2, 1, "2.1", 31001, {});
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  // Alice's listener on the node's address at her port, and a port of her
  // ephemeral block (a ringcomm pair's).
  pid_t server = HoldIn(*alice, [] { return Listen(kNode, 31000) >= 0 && Listen("0.0.0.0", 40000) >= 0; });
  ASSERT_GT(server, 0);
  // Alice's second task reaches her at the node's address.
  ASSERT_TRUE(net_->Join(1, 1, "3.1", 31002, {}).ok());
  EXPECT_EQ(RunIn(*alice, [] { return Connect(kNode, 31000); }), 0);
  // Bob, at the same address and port, reaches his own namespace; at
  // alice's namespace address, her filter drops him.
  EXPECT_EQ(RunIn(*bob, [] { return Connect(kNode, 31000); }), 1);
  EXPECT_EQ(RunIn(*bob, [] { return Connect("10.213.0.2", 31000); }), 1);
  EXPECT_EQ(RunIn(*bob, [] { return Connect("10.213.0.2", 40000); }), 1);
  // Nor does the node's own process reach her through the node's address
  // (forwarded only from outside) or the bridge.
  EXPECT_EQ(Connect(kNode, 31000), 1);
  EXPECT_EQ(Connect("10.213.0.2", 31000), 1);
  // Bob reaches nothing of the node's either.
  int host = Listen(kNode, 5555);
  ASSERT_GE(host, 0);
  EXPECT_EQ(RunIn(*bob, [] { return Connect("10.213.0.1", 5555); }), 1);
  close(host);
  Kill(server);
  net_->Leave("1.1");
  net_->Leave("3.1");
  net_->Leave("2.1");
  EXPECT_NE(access(alice->c_str(), F_OK), 0) << "the namespace's mount outlived its last task";
}

TEST_F(JobNetworkTest, BindingEveryPortOfTheRangeStopsNoOtherJob) {
  auto bob = net_->Join(2, 1, "2.1", 31000, {});
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  // Bob squats the whole (small) range.
  pid_t squatter = HoldIn(*bob, [] {
    int n = 0;
    for (int p = 31000; p < 31010; ++p) n += Listen("0.0.0.0", p) >= 0;
    return n == 10;
  });
  ASSERT_GT(squatter, 0);
  auto alice = net_->Join(1, 1, "1.1", 31005, {});
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(RunIn(*alice, [] {
              int fd = Listen(kNode, 31005);
              if (fd < 0) return 2;
              return Connect(kNode, 31005);
            }),
            0);
  Kill(squatter);
  net_->Leave("1.1");
  net_->Leave("2.1");
}

TEST_F(JobNetworkTest, OneNamespacePerJobAttemptWithItsPortsForwarded) {
  const std::string host_range = In("", {"sysctl", "-n", "net.ipv4.ip_local_port_range"});
  auto a = net_->Join(5, 1, "10.1", 31000, {"192.168.0.2"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, dir_ + "/rmj-5-1");
  const std::string addrs = In(*a, {"ip", "-o", "-4", "addr", "show"});
  EXPECT_NE(addrs.find("lo    inet 192.168.77.1/32"), std::string::npos) << addrs;
  EXPECT_NE(addrs.find("eth0    inet 10.213.0.2/16"), std::string::npos) << addrs;
  const std::string routes = In(*a, {"ip", "-4", "route", "show", "default"});
  EXPECT_NE(routes.find("default via 10.213.0.1 dev eth0 src 10.213.0.2"), std::string::npos) << routes;
  EXPECT_NE(In(*a, {"ip", "-o", "link", "show", "lo"}).find("<LOOPBACK,UP,LOWER_UP>"), std::string::npos);
  // The ephemeral range and the filter are the namespace's; the node's stay.
  EXPECT_EQ(In(*a, {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), "40000\t40255\n");
  EXPECT_EQ(In("", {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), host_range);
  const std::string filter = In(*a, {"nft", "list", "table", "inet", "ringmaster"});
  EXPECT_NE(filter.find("policy drop"), std::string::npos) << filter;
  EXPECT_NE(filter.find("ip saddr 192.168.0.2 accept"), std::string::npos) << filter;
  EXPECT_NE(filter.find("ip daddr 10.213.0.2 dnat ip to 192.168.77.1"), std::string::npos) << filter;
  EXPECT_EQ(In("", {"nft", "list", "tables"}).find("inet ringmaster"), std::string::npos);
  // Its host side is on the bridge; its block and the task's port forwarded.
  const std::string veth = In("", {"ip", "-o", "link", "show", JobNetwork::VethName(*a)});
  EXPECT_NE(veth.find("master rmtask0"), std::string::npos) << veth;
  EXPECT_NE(veth.find(",UP"), std::string::npos) << veth;
  std::string map = Map();
  EXPECT_NE(map.find("tcp . 40000-40255 : 10.213.0.2"), std::string::npos) << map;
  EXPECT_NE(map.find("udp . 40000-40255 : 10.213.0.2"), std::string::npos) << map;
  EXPECT_NE(map.find("tcp . 31000 : 10.213.0.2"), std::string::npos) << map;
  // The job's second task shares it, and brings a peer; another job gets its own.
  ASSERT_EQ(*net_->Join(5, 1, "11.1", 31001, {"192.168.0.3"}), *a);
  const std::string refiltered = In(*a, {"nft", "list", "table", "inet", "ringmaster"});
  EXPECT_NE(refiltered.find("ip saddr { 192.168.0.2, 192.168.0.3 } accept"), std::string::npos) << refiltered;
  auto b = net_->Join(6, 1, "12.1", 31002, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, dir_ + "/rmj-6-1");
  EXPECT_NE(In(*b, {"ip", "-o", "-4", "addr", "show"}).find("10.213.0.3/16"), std::string::npos);
  // A job on this node alone has no block forwarded (nothing from another node dials its listeners),
  // and the whole ephemeral range, kept off the node's task ports, for its own.
  EXPECT_EQ(In(*b, {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), "40000\t47999\n");  // its own: never a task port
  EXPECT_EQ(Map().find("40256-40511"), std::string::npos);
  // Until a task of it brings a peer on another node: then it gets one.
  ASSERT_EQ(*net_->Join(6, 1, "14.1", 31004, {"192.168.0.9"}), *b);
  EXPECT_EQ(In(*b, {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), "40256\t40511\n");
  EXPECT_NE(Map().find("tcp . 40256-40511 : 10.213.0.3"), std::string::npos) << Map();
  // A new attempt is a new namespace.
  EXPECT_EQ(*net_->Join(5, 2, "10.2", 31003, {}), dir_ + "/rmj-5-2");
  // The last task to leave removes it.
  net_->Leave("10.1");
  map = Map();
  EXPECT_EQ(map.find("31000 :"), std::string::npos) << map;
  EXPECT_EQ(access(a->c_str(), F_OK), 0);
  net_->Leave("11.1");
  EXPECT_NE(access(a->c_str(), F_OK), 0);
  map = Map();
  EXPECT_EQ(map.find("40000-40255"), std::string::npos) << map;
  EXPECT_EQ(In("", {"ip", "-o", "link", "show"}).find(JobNetwork::VethName(*a)), std::string::npos);
  net_->Leave("11.1");  // idempotent
  // Its address and block are free again.
  auto c = net_->Join(7, 1, "13.1", 0, {});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(In(*c, {"ip", "-o", "-4", "addr", "show"}).find("10.213.0.2/16"), std::string::npos);
  for (const char* key : {"12.1", "14.1", "10.2", "13.1"}) net_->Leave(key);
  EXPECT_EQ(Leftovers(), "");
}

TEST_F(JobNetworkTest, ALateLeaveKeepsAPortTheServerHasHandedToANewerTask) {
  auto a = net_->Join(1, 1, "1.1", 31000, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // The port's next holder starts before the first one's Leave has run.
  auto b = net_->Join(2, 1, "2.1", 31000, {});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::string map = Map();
  EXPECT_NE(map.find("tcp . 31000 : 10.213.0.3"), std::string::npos) << map;
  net_->Leave("1.1");
  map = Map();
  EXPECT_NE(map.find("tcp . 31000 : 10.213.0.3"), std::string::npos) << map;
  EXPECT_NE(map.find("udp . 31000 : 10.213.0.3"), std::string::npos) << map;
  net_->Leave("2.1");
  EXPECT_EQ(Leftovers(), "");
}

TEST_F(JobNetworkTest, ASysctlAndAFilterWrittenFromTheNamespacesThreadAreItsOwn) {
  const std::string path = dir_ + "/probe";
  ASSERT_TRUE(WriteFileAtomic(path, "", 0600).ok());
  const std::string host_range = In("", {"sysctl", "-n", "net.ipv4.ip_local_port_range"});
  FilterRules rules;
  rules.deny = {kNode};
  Status st = InNewNamespace(path, [&]() -> Status {
    RM_RETURN_IF_ERROR(WriteSysctl("net/ipv4/ip_local_port_range", "41000 41999"));
    return InstallFilter(rules);
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(In(path, {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), "41000\t41999\n");
  EXPECT_EQ(In("", {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), host_range);
  EXPECT_NE(In(path, {"nft", "list", "tables"}).find("inet ringmaster"), std::string::npos);
  EXPECT_EQ(In("", {"nft", "list", "tables"}).find("inet ringmaster"), std::string::npos);
  // Entered again later (a job's new peer): still that namespace's.
  st = InNamespace(path, [] { return WriteSysctl("net/ipv4/ip_local_port_range", "42000 42999"); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(In(path, {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), "42000\t42999\n");
  EXPECT_EQ(In("", {"sysctl", "-n", "net.ipv4.ip_local_port_range"}), host_range);
  umount2(path.c_str(), MNT_DETACH);
}

TEST_F(JobNetworkTest, SixteenJobsMadeAndRemovedAtOnceEachReachesOnlyItsOwn) {
  // Another node, in a namespace of its own, reaches the jobs' forwarded ports.
  const std::string remote = dir_ + "/remote";
  ASSERT_TRUE(WriteFileAtomic(remote, "", 0600).ok());
  ASSERT_TRUE(InNewNamespace(remote, [] { return Status::Ok(); }).ok());
  ASSERT_TRUE(RunTool({"ip", "link", "set", "node1", "netns", remote}).ok());
  ASSERT_TRUE(RunTool({"nsenter", "--net=" + remote, "--", "ip", "addr", "add", "192.168.77.2/24", "dev", "node1"}).ok());
  ASSERT_TRUE(RunTool({"nsenter", "--net=" + remote, "--", "ip", "link", "set", "node1", "up"}).ok());
  constexpr int kJobs = 16;
  std::vector<StatusOr<std::string>> paths(kJobs, Internal("not joined"));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kJobs; ++i) {
      threads.emplace_back([&, i] { paths[i] = net_->Join(100 + i, 1, fmt::format("{}.1", i), 31000 + i, {"192.168.77.2"}); });
    }
    for (auto& t : threads) t.join();
  }
  std::set<std::string> distinct;
  std::vector<pid_t> servers;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(paths[i].ok()) << i << ": " << paths[i].status().ToString();
    distinct.insert(*paths[i]);
    const int port = 31000 + i;
    servers.push_back(HoldIn(*paths[i], [port] { return Listen(kNode, port) >= 0; }));
    ASSERT_GT(servers.back(), 0);
  }
  EXPECT_EQ(distinct.size(), size_t{kJobs});
  for (int i = 0; i < kJobs; ++i) {
    const int own = 31000 + i, other = 31000 + (i + 1) % kJobs;
    EXPECT_EQ(RunIn(*paths[i], [own] { return Connect(kNode, own); }), 0) << i;
    EXPECT_EQ(RunIn(*paths[i], [other] { return Connect(kNode, other); }), 1) << i;
    // From the other node, through the node's address and the forwarded port.
    EXPECT_EQ(RunIn(remote, [own] { return Connect(kNode, own); }), 0) << i;
  }
  for (pid_t p : servers) Kill(p);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kJobs; ++i) threads.emplace_back([&, i] { net_->Leave(fmt::format("{}.1", i)); });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(Leftovers(), "");
  umount2(remote.c_str(), MNT_DETACH);
}

TEST_F(JobNetworkTest, ATaskJoiningWhileTheLastLeavesGetsALiveNamespace) {
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(net_->Join(9, 1, "a", 0, {}).ok());
    StatusOr<std::string> b = Internal("not joined");
    std::thread leave([&] { net_->Leave("a"); });
    std::thread join([&] { b = net_->Join(9, 1, "b", 0, {}); });
    leave.join();
    join.join();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    // Kept or made afresh, it is there and configured.
    ASSERT_NE(In(*b, {"ip", "-o", "-4", "addr", "show", "dev", "eth0"}).find("inet 10.213.0."), std::string::npos)
        << round;
    net_->Leave("b");
  }
  EXPECT_EQ(Leftovers(), "");
}

// Not a benchmark (nothing asserted on time): what a namespace costs, printed.
TEST_F(JobNetworkTest, PrintsWhatANamespaceCosts) {
  auto cpu = [] {
    rusage self{}, children{};
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
    return ms(self.ru_utime) + ms(self.ru_stime) + ms(children.ru_utime) + ms(children.ru_stime);
  };
  // `threads` threads make `each` namespaces apiece, then remove them, four
  // times over (the node has 31 port blocks: no more at once).
  auto run = [&](int threads, int each) {
    std::atomic<int> failed{0};
    double wall_ms[2] = {0, 0}, cpu_ms[2] = {0, 0};
    auto phase = [&](int which, const std::function<void(int, int, const std::string&)>& op) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          for (int i = 0; i < each; ++i) op(t, i, fmt::format("{}.{}", t, i));
        });
      }
      for (auto& t : ts) t.join();
      wall_ms[which] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      cpu_ms[which] += cpu() - c0;
    };
    constexpr int kRounds = 4;
    for (int round = 0; round < kRounds; ++round) {
      phase(0, [&](int t, int i, const std::string& key) {
        if (auto p = net_->Join(1000 * (t + 1) + i, round + 1, key, 31000 + 100 * t + i, {}); !p.ok()) {
          ADD_FAILURE() << key << ": " << p.status().ToString();
          ++failed;
        }
      });
      phase(1, [&](int, int, const std::string& key) { net_->Leave(key); });
    }
    const int n = threads * each * kRounds;
    fmt::print("{} thread(s), {} namespaces, per namespace: made in {:.2f} ms wall, {:.2f} ms CPU; removed in "
               "{:.2f} ms wall, {:.2f} ms CPU\n",
               threads, n, wall_ms[0] / n, cpu_ms[0] / n, wall_ms[1] / n, cpu_ms[1] / n);
    return failed.load();
  };
  EXPECT_EQ(run(1, 25), 0);
  EXPECT_EQ(run(8, 3), 0);
  EXPECT_EQ(Leftovers(), "");
}

}  // namespace
}  // namespace ringmaster::net
