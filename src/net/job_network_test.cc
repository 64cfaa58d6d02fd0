// Jobs' namespaces on one node, for real (root): the test process takes a
// network and mount namespace of its own (the "node"), with a dummy link
// holding the node's address, and connects between the jobs' namespaces.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include <gtest/gtest.h>

#include "common/subprocess.h"
#include "net/job_network.h"

namespace ringmaster::net {
namespace {

constexpr const char* kNode = "192.168.77.1";

// Runs fn in a child that entered the namespace at `path`; its exit code.
int InNamespace(const std::string& path, const std::function<int()>& fn) {
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
  EXPECT_EQ(InNamespace(*alice, [] { return Connect(kNode, 31000); }), 0);
  // Bob, at the same address and port, reaches his own namespace; at
  // alice's namespace address, her filter drops him.
  EXPECT_EQ(InNamespace(*bob, [] { return Connect(kNode, 31000); }), 1);
  EXPECT_EQ(InNamespace(*bob, [] { return Connect("10.213.0.2", 31000); }), 1);
  EXPECT_EQ(InNamespace(*bob, [] { return Connect("10.213.0.2", 40000); }), 1);
  // Nor does the node's own process reach her through the node's address
  // (forwarded only from outside) or the bridge.
  EXPECT_EQ(Connect(kNode, 31000), 1);
  EXPECT_EQ(Connect("10.213.0.2", 31000), 1);
  // Bob reaches nothing of the node's either.
  int host = Listen(kNode, 5555);
  ASSERT_GE(host, 0);
  EXPECT_EQ(InNamespace(*bob, [] { return Connect("10.213.0.1", 5555); }), 1);
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
  EXPECT_EQ(InNamespace(*alice, [] {
              int fd = Listen(kNode, 31005);
              if (fd < 0) return 2;
              return Connect(kNode, 31005);
            }),
            0);
  Kill(squatter);
  net_->Leave("1.1");
  net_->Leave("2.1");
}

}  // namespace
}  // namespace ringmaster::net
