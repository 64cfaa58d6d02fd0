// The cgroup v2 backend against the fake cgroupfs (this host's memory, cpu,
// pids and io controllers are bound to cgroup v1, so v2 limits cannot be
// set here for real): detection, the controllers enabled down the path,
// the limits written as the kernel's grammar takes them, usage read from
// real member processes, an OOM kill seen in memory.events and by the
// shim's watch, removal. BlockDeviceOf on a fake sysfs tree and this host's.
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "agent/node/cgroups.h"
#include "agent/node/cgroups_internal.h"
#include "agent/node/testing/cgroup_test_util.h"
#include "agent/node/testing/fake_cgroupfs_fixture.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::Eventually;
using testing::Slurp;

class CgroupsV2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = fake_.Start(FAKE_CGROUPFS);
    if (!why.empty()) GTEST_SKIP() << "fake cgroupfs: " << why;
    root_ = fake_.root();
    auto cg = Cgroups::Detect({"inst", root_, "/"});
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    cg_ = std::move(*cg);
  }
  std::string Dir(const std::string& key) { return root_ + "/ringmaster/inst/" + key; }

  testing::FakeCgroupfs fake_;
  std::string root_;
  std::unique_ptr<Cgroups> cg_;
};

TEST_F(CgroupsV2Test, DetectsV2AndEnablesTheControllersDownToTheAgentsSubtree) {
  EXPECT_EQ(cg_->Version(), 2);
  for (const std::string& dir : {root_, root_ + "/ringmaster", root_ + "/ringmaster/inst"}) {
    EXPECT_EQ(Slurp(dir + "/cgroup.subtree_control"), "cpu io memory pids\n") << dir;
  }
  EXPECT_EQ(cg_->PathOf("7.1"), "/ringmaster/inst/7.1");
  EXPECT_EQ(cg_->DirOf("memory", "7.1"), Dir("7.1"));
  EXPECT_EQ(cg_->DirOf("cpu", "7.1"), Dir("7.1"));
  EXPECT_EQ(cg_->ProcsFiles("7.1"), std::vector<std::string>{Dir("7.1") + "/cgroup.procs"});
}

TEST_F(CgroupsV2Test, RefusesATreeWithoutTheControllersTasksNeed) {
  testing::FakeCgroupfs small;
  const std::string why = small.Start(FAKE_CGROUPFS, "cpu,io");
  ASSERT_EQ(why, "");
  auto cg = Cgroups::Detect({"inst", small.root(), ""});
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(cg.status().message().find("no memory controller"), std::string::npos) << cg.status().message();
}

TEST_F(CgroupsV2Test, CreateWritesTheLimitsAsTheKernelTakesThem) {
  TaskLimits l;
  l.memory_bytes = 64 << 20;
  l.cpu_milli = 500;
  l.pids = 100;
  l.io = {.read_bps = 10 << 20, .write_bps = 5 << 20, .read_iops = 0, .write_iops = 200};
  ASSERT_TRUE(cg_->Create("7.1", l).ok());
  const std::string d = Dir("7.1");
  EXPECT_EQ(Slurp(d + "/memory.max"), "67108864\n");
  EXPECT_EQ(Slurp(d + "/memory.high"), "max\n");
  EXPECT_EQ(Slurp(d + "/memory.swap.max"), "0\n");
  EXPECT_EQ(Slurp(d + "/memory.oom.group"), "1\n");
  EXPECT_EQ(Slurp(d + "/cpu.max"), "50000 100000\n");
  EXPECT_EQ(Slurp(d + "/pids.max"), "100\n");
  if (cg_->io_device().empty()) {
    EXPECT_EQ(Slurp(d + "/io.max"), "");
  } else {
    EXPECT_EQ(Slurp(d + "/io.max"), cg_->io_device() + " rbps=10485760 wbps=5242880 riops=max wiops=200\n");
  }
  // A leftover of an earlier attempt is emptied and reused; no limit stays.
  ASSERT_TRUE(cg_->Create("7.1", TaskLimits{}).ok());
  EXPECT_EQ(Slurp(d + "/memory.max"), "max\n");
  EXPECT_EQ(Slurp(d + "/cpu.max"), "max 100000\n");
}

TEST_F(CgroupsV2Test, ATinyCpuShareStillGetsTheKernelsLeastQuota) {
  TaskLimits l;
  l.cpu_milli = 1;  // 0.1 ms per 100 ms: below the 1 ms the kernel takes
  ASSERT_TRUE(cg_->Create("7.2", l).ok());
  EXPECT_EQ(Slurp(Dir("7.2") + "/cpu.max"), "1000 100000\n");
}

TEST_F(CgroupsV2Test, LiveReadsWhatTheTasksProcessesUse) {
  ASSERT_TRUE(cg_->Create("7.3", TaskLimits{}).ok());
  EXPECT_FALSE(cg_->Live("nosuch").has_value());
  Child c([] {
    std::vector<char> mem(32 << 20, 1);  // touched: resident
    testing::Spin(400);
    pause();
    return mem[0];
  });
  ASSERT_EQ(testing::WriteErrno(cg_->ProcsFiles("7.3")[0], std::to_string(c.pid())), 0);
  c.Go();
  ASSERT_TRUE(Eventually([&] {
    auto u = cg_->Live("7.3");
    return u && u->memory_bytes >= (32 << 20) && u->cpu_ns >= 200'000'000 && u->pids == 1;
  })) << Slurp(Dir("7.3") + "/memory.current") << Slurp(Dir("7.3") + "/cpu.stat");
  EXPECT_EQ(cg_->Live("7.3")->oom_kills, 0);
}

TEST_F(CgroupsV2Test, AnOutOfMemoryKillIsCountedWatchedAndNamed) {
  TaskLimits l;
  l.memory_bytes = 64 << 20;
  ASSERT_TRUE(cg_->Create("7.4", l).ok());
  OomWatch watch(2, cg_->DirOf("memory", "7.4"));
  ASSERT_GE(watch.fd(), 0);
  EXPECT_EQ(watch.events(), POLLPRI);
  Child c([] {
    std::vector<char> mem(200 << 20, 1);
    sleep(10);  // killed long before
    return mem[0] == 1 ? 0 : 1;
  });
  ASSERT_EQ(testing::WriteErrno(cg_->ProcsFiles("7.4")[0], std::to_string(c.pid())), 0);
  c.Go();
  const int st = c.Wait();
  ASSERT_TRUE(WIFSIGNALED(st)) << "not killed: " << st;
  EXPECT_EQ(WTERMSIG(st), SIGKILL);
  pollfd p{watch.fd(), watch.events(), 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1) << "the watch never fired";
  EXPECT_TRUE(watch.Check());
  const CgroupUsage u = cg_->Usage("7.4");
  EXPECT_EQ(u.oom_kills, 1);
  EXPECT_GE(u.memory_failcnt, 1);
  EXPECT_GE(u.memory_max_bytes, 64 << 20) << "memory.peak";
  EXPECT_EQ(OutOfMemoryReason(u, watch.Check(), -1, WTERMSIG(st), l.memory_bytes), "out of memory (limit 64Mi)");
  EXPECT_NE(Slurp(Dir("7.4") + "/memory.events.local").find("oom_kill 1"), std::string::npos);
  // Counted above it too: memory.events is hierarchical.
  EXPECT_NE(Slurp(root_ + "/ringmaster/inst/memory.events").find("oom_kill 1"), std::string::npos);
}

TEST_F(CgroupsV2Test, RemoveKillsWhatIsLeftAndRemovesTheCgroupAndARuntimesChild) {
  ASSERT_TRUE(cg_->Create("7.5", TaskLimits{}).ok());
  // A runtime's child cgroup below the task's (runc's .../7.5/task).
  ASSERT_EQ(mkdir((Dir("7.5") + "/task").c_str(), 0755), 0);
  Child c([] { return pause(); });
  ASSERT_EQ(testing::WriteErrno(Dir("7.5") + "/task/cgroup.procs", std::to_string(c.pid())), 0);
  c.Go();
  cg_->Remove("7.5");
  const int st = c.Wait();
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << st;
  EXPECT_FALSE(fs::exists(Dir("7.5")));
  EXPECT_FALSE(cg_->Live("7.5").has_value());
}

TEST_F(CgroupsV2Test, ANewAgentClearsEmptySubtreesOfGoneAgents) {
  ASSERT_EQ(mkdir((root_ + "/ringmaster/gone").c_str(), 0755), 0);
  ASSERT_TRUE(Cgroups::Detect({"inst2", root_, ""}).ok());
  EXPECT_FALSE(fs::exists(root_ + "/ringmaster/gone"));
  EXPECT_TRUE(fs::exists(root_ + "/ringmaster/inst2"));
}

// ---- BlockDeviceOf

TEST(BlockDeviceOfTest, APartitionMapsToItsWholeDisk) {
  char tmpl[] = "/tmp/rm-sysfs.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string sys = tmpl;
  struct stat st {};
  ASSERT_EQ(stat("/", &st), 0);
  if (major(st.st_dev) == 0) GTEST_SKIP() << "/ is on no block device";
  const std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  // As sysfs lays it out: dev/block/M:m -> .../block/sda/sda1, whose parent holds the disk's dev.
  fs::create_directories(sys + "/devices/pci/block/sda/sda1");
  fs::create_directories(sys + "/dev/block");
  std::ofstream(sys + "/devices/pci/block/sda/dev") << "8:0\n";
  std::ofstream(sys + "/devices/pci/block/sda/sda1/partition") << "1\n";
  fs::create_symlink("../../devices/pci/block/sda/sda1", sys + "/dev/block/" + dev);
  EXPECT_EQ(BlockDeviceOf("/", sys), "8:0");
  fs::remove(sys + "/devices/pci/block/sda/sda1/partition");
  EXPECT_EQ(BlockDeviceOf("/", sys), dev) << "a whole disk is itself";
  fs::remove(sys + "/dev/block/" + dev);
  EXPECT_EQ(BlockDeviceOf("/", sys), "") << "a device sysfs does not list";
  fs::remove_all(sys);
}

TEST(BlockDeviceOfTest, ThisHostsRootAndAFilesystemWithoutADevice) {
  struct stat st {};
  ASSERT_EQ(stat("/", &st), 0);
  if (major(st.st_dev) != 0) {
    EXPECT_NE(BlockDeviceOf("/"), "");
  }
  EXPECT_EQ(BlockDeviceOf("/proc"), "") << "procfs is on no block device";
  EXPECT_EQ(BlockDeviceOf(""), "");
}

}  // namespace
}  // namespace ringmaster::agent
