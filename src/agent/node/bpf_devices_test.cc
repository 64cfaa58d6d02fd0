// Device control on cgroup v2, for real: this host's cgroup2 mount
// (/sys/fs/cgroup/unified) takes BPF device programs even though its
// controllers are bound to v1. A child moved into a cgroup whose program
// denies /dev/null (char 1:3) cannot open it; /dev/zero still opens.
// Skipped without root or without a cgroup2 mount.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "agent/node/bpf_devices.h"
#include "agent/node/cgroup_files.h"
#include "agent/node/testing/cgroup_test_util.h"

namespace ringmaster::agent {
namespace {

// A cgroup2 mount this process may write: the unified one of a hybrid host,
// or /sys/fs/cgroup itself on a v2 host; "" when neither.
std::string Cgroup2Mount() {
  for (const char* m : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    struct statfs fs {};
    if (statfs(m, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC && access(m, W_OK) == 0) return m;
  }
  return "";
}

class BpfDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (bpf(2) and a cgroup of its own)";
    const std::string mount = Cgroup2Mount();
    if (mount.empty()) GTEST_SKIP() << "no writable cgroup2 mount (/sys/fs/cgroup/unified or /sys/fs/cgroup)";
    dir_ = fmt::format("{}/rm-bpf-test-{}-{}", mount, getpid(), ++n_);
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_ << ": " << strerror(errno);
  }
  void TearDown() override {
    if (!dir_.empty()) KillAndRemoveCgroup(dir_);
  }
  // Opens each path in a child moved into the cgroup first: the errno of
  // each open (0 = it opened), as the child's exit code in base 256.
  std::pair<int, int> OpenInCgroup(const char* a, const char* b) {
    testing::Child c([a, b] {
      const int fa = open(a, O_RDONLY | O_CLOEXEC);
      const int ea = fa < 0 ? errno : 0;
      const int fb = open(b, O_RDWR | O_CLOEXEC);
      const int eb = fb < 0 ? errno : 0;
      return (ea & 0xf) << 4 | (eb & 0xf);
    });
    EXPECT_EQ(testing::WriteErrno(dir_ + "/cgroup.procs", std::to_string(c.pid())), 0);
    c.Go();
    const int st = c.Wait();
    EXPECT_TRUE(WIFEXITED(st)) << st;
    return {WEXITSTATUS(st) >> 4, WEXITSTATUS(st) & 0xf};
  }

  std::string dir_;
  static inline int n_ = 0;
};

TEST_F(BpfDevicesTest, ADeniedDeviceCannotBeOpenedAndOthersStillCan) {
  EXPECT_EQ(OpenInCgroup("/dev/null", "/dev/zero"), std::make_pair(0, 0)) << "before: both open";
  ASSERT_TRUE(AttachDeviceDenyList(dir_, {{1, 3}}).ok());
  EXPECT_EQ(OpenInCgroup("/dev/null", "/dev/zero"), std::make_pair(EPERM, 0));
}

TEST_F(BpfDevicesTest, SeveralDevicesAndProgramsOnTheSameCgroupAllHold) {
  // Two programs (BPF_F_ALLOW_MULTI): each must allow an access.
  ASSERT_TRUE(AttachDeviceDenyList(dir_, {{1, 3}}).ok());
  ASSERT_TRUE(AttachDeviceDenyList(dir_, {{1, 5}, {1, 8}}).ok());  // /dev/zero, /dev/random
  EXPECT_EQ(OpenInCgroup("/dev/null", "/dev/zero"), std::make_pair(EPERM, EPERM));
  EXPECT_EQ(OpenInCgroup("/dev/random", "/dev/urandom"), std::make_pair(EPERM, 0));  // 1:9 allowed
}

// A CPU task on a node of many GPUs is denied every one of them: the
// program loads however long the list (a verifier log buffer once capped it
// at 13 rules), and each rule holds.
TEST_F(BpfDevicesTest, AProgramOfManyRulesLoadsAndEveryRuleHolds) {
  std::vector<std::pair<int, int>> rules;
  for (int minor = 64; minor < 128; ++minor) rules.push_back({195, minor});  // 64 GPUs' numbers
  rules.push_back({1, 3});                                                     // /dev/null last
  const Status st = AttachDeviceDenyList(dir_, rules);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(OpenInCgroup("/dev/null", "/dev/zero"), std::make_pair(EPERM, 0));
}

TEST_F(BpfDevicesTest, ADeniedCharDeviceDoesNotDenyABlockDeviceWithTheSameNumbers) {
  ASSERT_TRUE(AttachDeviceDenyList(dir_, {{1, 3}}).ok());
  // A block device node 1:3 (ramdisk numbers) in a temp dir: the rule names char 1:3 only.
  char tmpl[] = "/tmp/rm-bpf-dev.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string node = std::string(tmpl) + "/blk";
  ASSERT_EQ(mknod(node.c_str(), S_IFBLK | 0600, makedev(1, 3)), 0) << strerror(errno);
  const auto [blk, zero] = OpenInCgroup(node.c_str(), "/dev/zero");
  EXPECT_NE(blk, EPERM) << "the block device was refused by the char rule";  // ENXIO where no ramdisk driver answers
  EXPECT_EQ(zero, 0);
  unlink(node.c_str());
  rmdir(tmpl);
}

TEST_F(BpfDevicesTest, AttachingToSomethingThatIsNoCgroupFails) {
  const Status st = AttachDeviceDenyList("/tmp", {{1, 3}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("BPF_PROG_ATTACH"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ringmaster::agent
