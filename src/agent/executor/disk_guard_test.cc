// MeasureTree counts what a task holds on disk the way du does (allocated
// blocks), within a budget, without following links; DiskGuard reports a
// task over its limit once, and never one within it.
#include "agent/executor/disk_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

class DiskGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rm-disk-guard-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "box");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A task's file of `bytes` written (not sparse), synced so its blocks are
  // allocated; a task's uid's, not root's, when the test runs as root.
  void Write(const fs::path& path, size_t bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
    int fd = open(path.c_str(), O_RDONLY);
    fsync(fd);
    close(fd);
    if (geteuid() == 0) {
      EXPECT_EQ(chown(path.c_str(), 200007, 200007), 0);
    }
  }

  fs::path dir_;
};

TEST_F(DiskGuardTest, CountsBlocksInEveryDirectoryAndHardLinksOnce) {
  Write(dir_ / "box/a", 1 << 20);
  Write(dir_ / "box/deep/er/still/b", 1 << 20);
  fs::create_hard_link(dir_ / "box/a", dir_ / "box/deep/a-again");
  const DiskUse use = MeasureTree((dir_ / "box").string(), 1000);
  EXPECT_TRUE(use.complete);
  EXPECT_GE(use.bytes, 2 << 20);
  EXPECT_LT(use.bytes, (2 << 20) + (1 << 20));  // the link is not a third MiB
}

// Staged inputs: root's files, hard-linked from the agent's cache.
TEST_F(DiskGuardTest, RootsHardLinksAreTheCachesNotTheTasks) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to own a file as root";
  Write(dir_ / "cache/input", 2 << 20);
  ASSERT_EQ(chown((dir_ / "cache/input").c_str(), 0, 0), 0);
  fs::create_hard_link(dir_ / "cache/input", dir_ / "box/input");
  EXPECT_LT(MeasureTree((dir_ / "box").string(), 1000).bytes, 1 << 20);
}

TEST_F(DiskGuardTest, ASparseFileCountsWhatItHoldsNotItsSize) {
  {
    std::ofstream f(dir_ / "box/sparse", std::ios::binary);
  }
  fs::resize_file(dir_ / "box/sparse", int64_t{1} << 30);
  EXPECT_LT(MeasureTree((dir_ / "box").string(), 1000).bytes, 1 << 20);
}

TEST_F(DiskGuardTest, SymlinksAreNotFollowed) {
  Write(dir_ / "outside/big", 2 << 20);
  fs::create_directory_symlink(dir_ / "outside", dir_ / "box/link");
  EXPECT_LT(MeasureTree((dir_ / "box").string(), 1000).bytes, 1 << 20);
  // Nor is the root itself, when it is a link.
  fs::create_directory_symlink(dir_ / "outside", dir_ / "root-link");
  EXPECT_EQ(MeasureTree((dir_ / "root-link").string(), 1000).bytes, 0);
}

TEST_F(DiskGuardTest, AWalkStopsAtItsBudgetAndSaysSo) {
  for (int i = 0; i < 50; ++i) Write(dir_ / "box" / ("f" + std::to_string(i)), 10);
  EXPECT_FALSE(MeasureTree((dir_ / "box").string(), 10).complete);
  EXPECT_TRUE(MeasureTree((dir_ / "box").string(), 100).complete);
}

TEST_F(DiskGuardTest, ATaskOverItsLimitIsReportedOnceAndOneWithinItNever) {
  Write(dir_ / "box/a", 2 << 20);
  Write(dir_ / "other/b", 64 << 10);
  std::vector<std::string> over;
  DiskGuard guard(std::chrono::milliseconds(0), [&](const std::string& key, int64_t used, int64_t limit) {
    EXPECT_GT(used, limit);
    over.push_back(key);
  });
  guard.Watch("big", 1 << 20, {(dir_ / "box").string()});
  guard.Watch("small", 1 << 20, {(dir_ / "other").string()});
  guard.Watch("gone", 1 << 20, {(dir_ / "box").string()});
  guard.Forget("gone");
  guard.CheckAll();
  guard.CheckAll();
  EXPECT_EQ(over, std::vector<std::string>{"big"});
}

TEST_F(DiskGuardTest, DirsAreSummedAgainstOneLimit) {
  Write(dir_ / "box/a", 700 << 10);
  Write(dir_ / "upper/b", 700 << 10);
  int calls = 0;
  DiskGuard guard(std::chrono::milliseconds(0), [&](const std::string&, int64_t, int64_t) { ++calls; });
  guard.Watch("t", 1 << 20, {(dir_ / "box").string(), (dir_ / "upper").string()});
  guard.CheckAll();
  EXPECT_EQ(calls, 1);
}

// A million empty files in front of the big ones would leave the bytes behind
// them unread: a tree the pass cannot finish is over the limit.
TEST_F(DiskGuardTest, ATreeTooBigToMeasureIsOverTheLimit) {
  for (int i = 0; i < 50; ++i) Write(dir_ / "box" / ("f" + std::to_string(i)), 0);
  std::vector<int64_t> used;
  DiskGuard guard(
      std::chrono::milliseconds(0), [&](const std::string&, int64_t u, int64_t) { used.push_back(u); }, 20);
  guard.Watch("t", 1 << 30, {(dir_ / "box").string()});
  guard.CheckAll();
  EXPECT_EQ(used, std::vector<int64_t>{-1});
  EXPECT_TRUE(MeasureTree((dir_ / "box").string(), 20).too_many);
}

}  // namespace
}  // namespace ringmaster::agent
