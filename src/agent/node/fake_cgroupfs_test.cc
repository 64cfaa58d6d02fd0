// The fake cgroup v2 filesystem against the kernel. One contract suite runs
// on two trees: this host's real cgroup2 mount (/sys/fs/cgroup/unified here,
// which offers only the hugetlb controller) and the fake, so what the fake
// claims for the core files (cgroup.procs, cgroup.events, cgroup.kill,
// cpu.stat, subtree_control's rules, rmdir) is checked against the real
// thing. The kernel's grammar for the limit files, which cannot be written
// here for real, is checked on the model directly.
#include <poll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "agent/node/cgroup_files.h"
#include "agent/node/cgroups_internal.h"
#include "agent/node/testing/cgroup_test_util.h"
#include "agent/node/testing/fake_cgroupfs_fixture.h"
#include "agent/node/testing/fake_cgroupfs_model.h"

namespace ringmaster::agent {
namespace {

using testing::Child;
using testing::Eventually;
using testing::Slurp;
using testing::WriteErrno;

constexpr const char* kRealMount = "/sys/fs/cgroup/unified";

// A tree to test on: its root and a controller its root offers.
struct Tree {
  std::string root;
  std::string controller;
};

class CgroupContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "real") {
      struct statfs fs {};
      if (geteuid() != 0 || statfs(kRealMount, &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC) {
        GTEST_SKIP() << "no writable cgroup2 mount at " << kRealMount << " (needs root)";
      }
      tree_ = {kRealMount, "hugetlb"};
      if (Slurp(tree_.root + "/cgroup.controllers").find("hugetlb") == std::string::npos) tree_.controller = "";
    } else {
      const std::string why = fake_.Start(FAKE_CGROUPFS);
      if (!why.empty()) GTEST_SKIP() << "fake cgroupfs: " << why;
      tree_ = {fake_.root(), "memory"};
    }
    // A unique name: other tests on this host use the same real mount.
    dir_ = fmt::format("{}/rm-contract-{}-{}", tree_.root, getpid(), ::testing::UnitTest::GetInstance()->random_seed());
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_ << ": " << strerror(errno);
  }
  void TearDown() override {
    if (!dir_.empty()) KillAndRemoveCgroupForTest(dir_);
  }
  static void KillAndRemoveCgroupForTest(const std::string& dir);
  // The controller enabled at the root (so `dir_` can enable it for its children).
  bool RootOffers() {
    if (tree_.controller.empty()) return false;
    if (Slurp(tree_.root + "/cgroup.subtree_control").find(tree_.controller) == std::string::npos) {
      if (WriteErrno(tree_.root + "/cgroup.subtree_control", "+" + tree_.controller) != 0) return false;
    }
    return true;
  }

  testing::FakeCgroupfs fake_;
  Tree tree_;
  std::string dir_;
};

void CgroupContractTest::KillAndRemoveCgroupForTest(const std::string& dir) {
  for (int i = 0; i < 50 && access(dir.c_str(), F_OK) == 0; ++i) {
    // Children first (a leaf made by EnableControllers, a nested test cgroup).
    for (const char* sub : {"/ringmaster-agent", "/child"}) {
      WriteErrno(dir + sub + "/cgroup.kill", "1");
      rmdir((dir + sub).c_str());
    }
    WriteErrno(dir + "/cgroup.kill", "1");
    if (rmdir(dir.c_str()) == 0) return;
    usleep(20'000);
  }
}

TEST_P(CgroupContractTest, AMadeCgroupHasTheCoreFiles) {
  for (const char* f : {"cgroup.procs", "cgroup.events", "cgroup.kill", "cgroup.type", "cgroup.controllers",
                        "cgroup.subtree_control", "cpu.stat"}) {
    EXPECT_EQ(access((dir_ + "/" + f).c_str(), F_OK), 0) << f;
  }
  EXPECT_EQ(Slurp(dir_ + "/cgroup.events"), "populated 0\nfrozen 0\n");
  EXPECT_EQ(Slurp(dir_ + "/cgroup.type"), "domain\n");
  EXPECT_EQ(mkdir(dir_.c_str(), 0755), -1);
  EXPECT_EQ(errno, EEXIST);
}

TEST_P(CgroupContractTest, AMemberIsListedCountsItsCpuAndLeavesWhenItEnds) {
  Child c([] {
    testing::Spin(300);
    return 7;
  });
  ASSERT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(c.pid())), 0);
  EXPECT_EQ(Slurp(dir_ + "/cgroup.procs"), std::to_string(c.pid()) + "\n");
  EXPECT_TRUE(Eventually([&] { return Slurp(dir_ + "/cgroup.events").find("populated 1") != std::string::npos; }));
  c.Go();
  const int st = c.Wait();
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 7);
  EXPECT_TRUE(Eventually([&] { return Slurp(dir_ + "/cgroup.events").find("populated 0") != std::string::npos; }));
  EXPECT_EQ(Slurp(dir_ + "/cgroup.procs"), "");
  // The kernel counts all 300 ms; the fake samples /proc every 10 ms and
  // loses what a process used between its last sample and its exit.
  const int64_t least = GetParam() == "real" ? 290'000 : 150'000;
  EXPECT_TRUE(Eventually([&] { return ReadCgroupStat(dir_ + "/cpu.stat", "usage_usec") >= least; }))
      << Slurp(dir_ + "/cpu.stat");
}

TEST_P(CgroupContractTest, CgroupEventsPollsPriorityWhenPopulatedChanges) {
  Child c([] { return 0; });
  ASSERT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(c.pid())), 0);
  const int fd = open((dir_ + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char buf[128];
  ASSERT_TRUE(Eventually([&] { return pread(fd, buf, sizeof buf, 0) > 0 && strstr(buf, "populated 1"); }));
  pollfd p{fd, POLLPRI, 0};
  EXPECT_EQ(poll(&p, 1, 50), 0) << "nothing changed since the read";
  c.Go();
  c.Wait();
  EXPECT_EQ(poll(&p, 1, 5000), 1);
  EXPECT_TRUE(p.revents & POLLPRI);
  close(fd);
}

TEST_P(CgroupContractTest, RmdirIsRefusedWhilePopulatedOrWithChildren) {
  Child c([] { return 0; });
  ASSERT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(c.pid())), 0);
  EXPECT_EQ(rmdir(dir_.c_str()), -1);
  EXPECT_EQ(errno, EBUSY);
  c.Go();
  c.Wait();
  ASSERT_EQ(mkdir((dir_ + "/child").c_str(), 0755), 0);
  EXPECT_EQ(rmdir(dir_.c_str()), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(rmdir((dir_ + "/child").c_str()), 0);
  EXPECT_TRUE(Eventually([&] { return rmdir(dir_.c_str()) == 0; }));
  dir_.clear();
}

TEST_P(CgroupContractTest, CgroupKillKillsTheSubtreeAndTakesOnlyOne) {
  ASSERT_EQ(mkdir((dir_ + "/child").c_str(), 0755), 0);
  Child a([] { return pause(); }), b([] { return pause(); });
  ASSERT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(a.pid())), 0);
  ASSERT_EQ(WriteErrno(dir_ + "/child/cgroup.procs", std::to_string(b.pid())), 0);
  a.Go();
  b.Go();
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.kill", "2"), ERANGE);
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.kill", "yes"), EINVAL);
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.kill", "1"), 0);
  for (Child* c : {&a, &b}) {
    const int st = c->Wait();
    ASSERT_TRUE(WIFSIGNALED(st)) << st;
    EXPECT_EQ(WTERMSIG(st), SIGKILL);
  }
}

TEST_P(CgroupContractTest, CgroupProcsRefusesGarbageAndGonePids) {
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.procs", "abc"), EINVAL);
  Child c([] { return 0; });
  const pid_t gone = c.pid();
  c.Go();
  c.Wait();
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(gone)), ESRCH);
}

TEST_P(CgroupContractTest, SubtreeControlKeepsTheNoInternalProcessesRule) {
  if (!RootOffers()) GTEST_SKIP() << "the root offers no controller to enable";
  const std::string c = tree_.controller;
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.subtree_control", "+nosuch"), EINVAL);
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.subtree_control", "+cpuset"), ENOENT) << "not offered to it";
  Child member([] { return pause(); });
  ASSERT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(member.pid())), 0);
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.subtree_control", "+" + c), EBUSY) << "it holds a process";
  // EnableControllers moves its processes into a leaf first, as an agent in a delegated subtree does.
  ASSERT_TRUE(EnableControllers(dir_, {c}).ok());
  EXPECT_EQ(Slurp(dir_ + "/cgroup.subtree_control"), c + "\n");
  EXPECT_EQ(Slurp(dir_ + "/cgroup.procs"), "");
  EXPECT_EQ(Slurp(dir_ + "/" + kAgentLeaf + "/cgroup.procs"), std::to_string(member.pid()) + "\n");
  EXPECT_EQ(Slurp(dir_ + "/" + kAgentLeaf + "/cgroup.controllers"), c + "\n");
  // ... and a process can no longer join the cgroup itself.
  Child late([] { return 0; });
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.procs", std::to_string(late.pid())), EBUSY);
  late.Go();
  // A controller a child enabled for its own children cannot be taken away.
  ASSERT_EQ(mkdir((dir_ + "/child").c_str(), 0755), 0);
  ASSERT_EQ(WriteErrno(dir_ + "/child/cgroup.subtree_control", "+" + c), 0);
  EXPECT_EQ(WriteErrno(dir_ + "/cgroup.subtree_control", "-" + c), EBUSY);
  ASSERT_EQ(WriteErrno(dir_ + "/child/cgroup.subtree_control", "-" + c), 0);
}

INSTANTIATE_TEST_SUITE_P(RealAndFake, CgroupContractTest, ::testing::Values("real", "fake"),
                         [](const auto& info) { return info.param; });

// ---- The kernel's grammar for what cannot be written here for real.

class FakeModelTest : public ::testing::Test {
 protected:
  testing::FakeCgroupTree tree_{{"cpu", "io", "memory", "pids"}};
  void SetUp() override {
    ASSERT_EQ(tree_.Write("/cgroup.subtree_control", "+cpu +io +memory +pids"), 0);
    ASSERT_EQ(tree_.Mkdir("/t"), 0);
  }
  std::string Read(const std::string& path) {
    std::string s;
    EXPECT_EQ(tree_.Read(path, &s), 0) << path;
    return s;
  }
};

TEST_F(FakeModelTest, MemoryLimitsTakeMaxOrBytesWithSuffixesInWholePages) {
  EXPECT_EQ(Read("/t/memory.max"), "max\n");
  EXPECT_EQ(tree_.Write("/t/memory.max", "64M\n"), 0);
  EXPECT_EQ(Read("/t/memory.max"), "67108864\n");
  EXPECT_EQ(tree_.Write("/t/memory.max", "1g"), 0);
  EXPECT_EQ(Read("/t/memory.max"), "1073741824\n");
  EXPECT_EQ(tree_.Write("/t/memory.high", "5000"), 0);
  EXPECT_EQ(Read("/t/memory.high"), "4096\n");  // page-aligned down
  EXPECT_EQ(tree_.Write("/t/memory.swap.max", "0"), 0);
  EXPECT_EQ(Read("/t/memory.swap.max"), "0\n");
  for (const char* bad : {"64Mi", "-1", "lots", "64 M", "", "1.5G"}) {
    EXPECT_EQ(tree_.Write("/t/memory.max", bad), -EINVAL) << bad;
  }
  EXPECT_EQ(tree_.Write("/t/memory.oom.group", "2"), -EINVAL);
  EXPECT_EQ(tree_.Write("/t/memory.current", "1"), -EACCES);
}

TEST_F(FakeModelTest, CpuMaxTakesMaxOrAQuotaOfAtLeastAMillisecondAndAPeriodUpToASecond) {
  EXPECT_EQ(Read("/t/cpu.max"), "max 100000\n");
  EXPECT_EQ(tree_.Write("/t/cpu.max", "50000 100000"), 0);
  EXPECT_EQ(Read("/t/cpu.max"), "50000 100000\n");
  EXPECT_EQ(tree_.Write("/t/cpu.max", "25000"), 0);
  EXPECT_EQ(Read("/t/cpu.max"), "25000 100000\n");
  EXPECT_EQ(tree_.Write("/t/cpu.max", "max"), 0);
  EXPECT_EQ(Read("/t/cpu.max"), "max 100000\n");
  for (const char* bad : {"999 100000", "50000 999", "50000 1000001", "half", "", "1 2 3"}) {
    EXPECT_EQ(tree_.Write("/t/cpu.max", bad), -EINVAL) << bad;
  }
  EXPECT_EQ(tree_.Write("/t/cpu.weight", "0"), -ERANGE);
}

TEST_F(FakeModelTest, PidsMaxTakesMaxOrACount) {
  EXPECT_EQ(Read("/t/pids.max"), "max\n");
  EXPECT_EQ(tree_.Write("/t/pids.max", "4096"), 0);
  EXPECT_EQ(Read("/t/pids.max"), "4096\n");
  for (const char* bad : {"-1", "many", "4194305"}) EXPECT_EQ(tree_.Write("/t/pids.max", bad), -EINVAL) << bad;
}

TEST_F(FakeModelTest, IoMaxTakesAWholeDiskAndKeyedLimits) {
  const std::string disk = BlockDeviceOf("/");
  if (disk.empty()) GTEST_SKIP() << "/ is on no block device";
  EXPECT_EQ(Read("/t/io.max"), "");
  EXPECT_EQ(tree_.Write("/t/io.max", disk + " rbps=1048576 wiops=100"), 0);
  EXPECT_EQ(Read("/t/io.max"), disk + " rbps=1048576 wbps=max riops=max wiops=100\n");
  EXPECT_EQ(tree_.Write("/t/io.max", disk + " rbps=max wiops=max"), 0);
  EXPECT_EQ(Read("/t/io.max"), "") << "a device without limits is not listed";
  EXPECT_EQ(tree_.Write("/t/io.max", disk + " rbps=0"), -ERANGE);
  EXPECT_EQ(tree_.Write("/t/io.max", disk + " rbps=1"), -EINVAL);
  EXPECT_EQ(tree_.Write("/t/io.max", disk + " speed=9"), -EINVAL);
  EXPECT_EQ(tree_.Write("/t/io.max", "sda rbps=9"), -EINVAL);
  EXPECT_EQ(tree_.Write("/t/io.max", "4095:4095 rbps=9"), -ENODEV);
}

TEST_F(FakeModelTest, AChildHasTheFilesOfWhatItsParentEnables) {
  std::vector<std::string> names;
  ASSERT_EQ(tree_.List("/t", &names), 0);
  for (const char* f : {"memory.max", "memory.events", "cpu.max", "pids.max", "io.max"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), f), names.end()) << f;
  }
  ASSERT_EQ(tree_.Mkdir("/t/u"), 0);
  names.clear();
  ASSERT_EQ(tree_.List("/t/u", &names), 0);
  EXPECT_EQ(std::find(names.begin(), names.end(), "memory.max"), names.end()) << "/t enables nothing";
  EXPECT_EQ(tree_.Write("/t/cgroup.subtree_control", "+memory"), 0);
  EXPECT_EQ(tree_.Mode("/t/u/memory.max"), S_IFREG | 0644);
  EXPECT_EQ(tree_.Write("/t/cgroup.subtree_control", "+hugetlb"), -ENOENT);
  EXPECT_EQ(tree_.Write("/t/cgroup.subtree_control", "memory"), -EINVAL);
  EXPECT_EQ(tree_.Rmdir("/t"), -EBUSY);
}

}  // namespace
}  // namespace ringmaster::agent
