// The cgroup v1 backend for real, on this host's v1 hierarchies: detection,
// the limits of a task's cgroup in each hierarchy (blkio.throttle for the io
// limits, on the disk holding /), and removal. Skipped without root or
// without a writable v1 memory hierarchy.
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "agent/node/cgroups.h"
#include "agent/node/testing/cgroup_test_util.h"

namespace ringmaster::agent {
namespace {

using testing::Slurp;

class CgroupsV1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) != 0) {
      GTEST_SKIP() << "needs root and cgroup v1 at /sys/fs/cgroup";
    }
    auto cg = Cgroups::Detect({instance_, "/sys/fs/cgroup", "/"});
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    cg_ = std::move(*cg);
  }
  void TearDown() override {
    if (!cg_) return;
    cg_->Remove("1.1");
    for (const char* c : {"memory", "cpu", "pids", "devices", "cpuacct", "blkio"}) {
      rmdir(fmt::format("/sys/fs/cgroup/{}/ringmaster/{}", c, instance_).c_str());
    }
  }
  // Unique: other tests and agents on this host use the same hierarchies.
  const std::string instance_ = fmt::format("test-v1-{}", getpid());
  std::unique_ptr<Cgroups> cg_;
};

TEST_F(CgroupsV1Test, LimitsLandInEachHierarchyAndIoOnTheDisk) {
  EXPECT_EQ(cg_->Version(), 1);
  TaskLimits l;
  l.memory_bytes = 64 << 20;
  l.cpu_milli = 500;
  l.pids = 100;
  l.io = {.read_bps = 10 << 20, .write_bps = 0, .read_iops = 0, .write_iops = 300};
  ASSERT_TRUE(cg_->Create("1.1", l).ok());
  EXPECT_EQ(Slurp(cg_->DirOf("memory", "1.1") + "/memory.limit_in_bytes"), "67108864\n");
  EXPECT_EQ(Slurp(cg_->DirOf("cpu", "1.1") + "/cpu.cfs_quota_us"), "50000\n");
  EXPECT_EQ(Slurp(cg_->DirOf("pids", "1.1") + "/pids.max"), "100\n");
  if (cg_->io_device().empty() || access("/sys/fs/cgroup/blkio/cgroup.procs", W_OK) != 0) {
    GTEST_SKIP() << "no block device under / or no blkio hierarchy";
  }
  const std::string blkio = cg_->DirOf("blkio", "1.1");
  EXPECT_EQ(Slurp(blkio + "/blkio.throttle.read_bps_device"), cg_->io_device() + " 10485760\n");
  EXPECT_EQ(Slurp(blkio + "/blkio.throttle.write_iops_device"), cg_->io_device() + " 300\n");
  EXPECT_EQ(Slurp(blkio + "/blkio.throttle.write_bps_device"), "");
  cg_->Remove("1.1");
  EXPECT_FALSE(std::filesystem::exists(blkio));
  EXPECT_FALSE(cg_->Live("1.1").has_value());
}

}  // namespace
}  // namespace ringmaster::agent
