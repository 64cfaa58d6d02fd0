// What a task's user could plant where the agent (root) looks: symlinks,
// FIFOs, files of other users, directories of other users on the way.
#include "agent/executor/safe_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/files.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

class SafeFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rm_safe_fs_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    chmod(dir_.c_str(), 0755);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  UniqueFd Open(const fs::path& p) { return UniqueFd(open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); }

  fs::path dir_;
};

TEST_F(SafeFsTest, RemoveTreeRemovesPlantedSymlinksWithoutFollowingThem) {
  fs::create_directories(dir_ / "outside");
  Write(dir_ / "outside" / "precious", "keep me");
  fs::create_directories(dir_ / "sandbox" / "a" / "b");
  Write(dir_ / "sandbox" / "a" / "file", "x");
  fs::create_directory_symlink(dir_ / "outside", dir_ / "sandbox" / "evil");
  fs::create_directory_symlink(dir_ / "outside", dir_ / "sandbox" / "a" / "b" / "deeper");
  fs::create_symlink(dir_ / "outside" / "precious", dir_ / "sandbox" / "a" / "link");
  mkfifo((dir_ / "sandbox" / "fifo").c_str(), 0600);
  chmod((dir_ / "sandbox" / "a" / "b").c_str(), 0);  // unreadable to its owner: root removes it anyway

  UniqueFd parent = Open(dir_);
  ASSERT_TRUE(RemoveTree(parent.get(), "sandbox").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "sandbox")));
  EXPECT_EQ(ReadFile((dir_ / "outside" / "precious").string()).value(), "keep me");

  // The tree itself replaced by a symlink: the link goes, not its target.
  fs::create_directory_symlink(dir_ / "outside", dir_ / "sandbox");
  ASSERT_TRUE(RemoveTree(parent.get(), "sandbox").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "sandbox")));
  EXPECT_TRUE(fs::exists(dir_ / "outside" / "precious"));
  EXPECT_TRUE(RemoveTree(parent.get(), "never-there").ok());
}

TEST_F(SafeFsTest, RemoveTreeRemovesATreeOfAnyDepth) {
  // 3,000 levels, as a task made them (beyond any descriptor-per-level walk).
  UniqueFd cur = Open(dir_);
  ASSERT_EQ(mkdirat(cur.get(), "sandbox", 0700), 0);
  cur = UniqueFd(openat(cur.get(), "sandbox", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(mkdirat(cur.get(), "d", 0700), 0);
    cur = UniqueFd(openat(cur.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(cur);
  }
  int leaf = openat(cur.get(), "leaf", O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(leaf, 0);
  close(leaf);
  UniqueFd parent = Open(dir_);
  Status st = RemoveTree(parent.get(), "sandbox");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "sandbox")));
}

TEST_F(SafeFsTest, OpenOwnedRegularFileRefusesSymlinksFifosAndOtherUsersFiles) {
  Write(dir_ / "secret", "{\"token\": \"s3cret\"}\n");
  fs::create_directories(dir_ / "box");
  UniqueFd box = Open(dir_ / "box");
  fs::create_symlink(dir_ / "secret", dir_ / "box" / "metrics.jsonl");
  auto f = OpenOwnedRegularFile(box.get(), "metrics.jsonl", geteuid());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(f.status().message(), "metrics.jsonl is a symlink");

  fs::remove(dir_ / "box" / "metrics.jsonl");
  mkfifo((dir_ / "box" / "metrics.jsonl").c_str(), 0600);
  auto start = std::chrono::steady_clock::now();
  f = OpenOwnedRegularFile(box.get(), "metrics.jsonl", geteuid());  // would block without O_NONBLOCK
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // a hang guard
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "metrics.jsonl is not a regular file");

  fs::remove(dir_ / "box" / "metrics.jsonl");
  EXPECT_EQ(OpenOwnedRegularFile(box.get(), "metrics.jsonl", geteuid()).status().code(), StatusCode::kNotFound);
  Write(dir_ / "box" / "metrics.jsonl", "{\"loss\": 1}\n");
  EXPECT_TRUE(OpenOwnedRegularFile(box.get(), "metrics.jsonl", geteuid()).ok());
  // Owned by somebody else (a hard link to another user's file looks like this).
  f = OpenOwnedRegularFile(box.get(), "metrics.jsonl", geteuid() + 4242);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("belongs to uid"), std::string::npos);
}

TEST_F(SafeFsTest, OpenTrustedDirCreatesWithExplicitModesAndFollowsOnlyTrustedSymlinks) {
  const mode_t old = umask(077);
  auto made = OpenTrustedDir((dir_ / "a" / "b").string(), /*create=*/true, 0711);
  umask(old);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(fs::status(dir_ / "a" / "b").permissions(), static_cast<fs::perms>(0711));
  EXPECT_EQ(fs::status(dir_ / "a").permissions(), static_cast<fs::perms>(0711));
  // A symlink in a directory nobody else may write is root's own: followed.
  fs::create_directory_symlink(dir_ / "a", dir_ / "alias");
  EXPECT_TRUE(OpenTrustedDir((dir_ / "alias" / "b").string()).ok());
  EXPECT_EQ(OpenTrustedDir("relative/path").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SafeFsTest, OpenTrustedDirRefusesADirectoryAnotherUserControls) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  fs::create_directories(dir_ / "users" / "7" / "jobs");
  ASSERT_EQ(chown((dir_ / "users" / "7").c_str(), 200007, 200007), 0);
  auto d = OpenTrustedDir((dir_ / "users" / "7" / "jobs").string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), (dir_ / "users" / "7").string() + " belongs to uid 200007, not to root");
  chown((dir_ / "users" / "7").c_str(), 0, 0);
  chmod((dir_ / "users").c_str(), 0777);
  d = OpenTrustedDir((dir_ / "users" / "7").string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("is writable by other users (mode 0777)"), std::string::npos);
  // A symlink another user made in a sticky, world-writable directory (/tmp-like) is not followed.
  chmod((dir_ / "users").c_str(), 01777);
  fs::create_directory_symlink("/etc", dir_ / "users" / "8");
  ASSERT_EQ(lchown((dir_ / "users" / "8").c_str(), 200008, 200008), 0);
  d = OpenTrustedDir((dir_ / "users" / "8").string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("is a symlink another user made"), std::string::npos);
}

TEST_F(SafeFsTest, MakeOwnedDirHandsANewDirectoryToTheUserAndRefusesOthersAndSymlinks) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  UniqueFd parent = Open(dir_);
  ASSERT_TRUE(MakeOwnedDir(parent.get(), "7", 200007, 200007, 0700).ok());
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "7").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 200007u);
  EXPECT_EQ(st.st_gid, 200007u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(MakeOwnedDir(parent.get(), "7", 200007, 200007, 0700).ok());  // again: nothing to do
  auto other = MakeOwnedDir(parent.get(), "7", 200008, 200008, 0700);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.message(), "7 belongs to uid 200007, not uid 200008");
  fs::create_directory_symlink("/etc", dir_ / "8");
  auto link = MakeOwnedDir(parent.get(), "8", 200008, 200008, 0700);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.message(), "8 is a symlink or not a directory");
  ASSERT_EQ(stat("/etc", &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // not handed over through the link
}

TEST_F(SafeFsTest, PublishOnceKeepsTheFirstFileUnderAName) {
  Write(dir_ / "tmp1", "first");
  ASSERT_TRUE(PublishOnce((dir_ / "tmp1").string(), (dir_ / "entry").string()).ok());
  struct stat first {};
  ASSERT_EQ(stat((dir_ / "entry").c_str(), &first), 0);
  Write(dir_ / "tmp2", "second");
  ASSERT_TRUE(PublishOnce((dir_ / "tmp2").string(), (dir_ / "entry").string()).ok());
  struct stat now {};
  ASSERT_EQ(stat((dir_ / "entry").c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, first.st_ino);
  EXPECT_EQ(ReadFile((dir_ / "entry").string()).value(), "first");
  EXPECT_FALSE(fs::exists(dir_ / "tmp1"));
  EXPECT_FALSE(fs::exists(dir_ / "tmp2"));
  auto missing = PublishOnce((dir_ / "never-written").string(), (dir_ / "other").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("other"), std::string::npos) << missing.message();
}

// Tasks fetching the same file publish it again and again while others
// hard-link it into their work dirs: no link may find the name gone
// (with rename(2) in PublishOnce, about 9,700 links of a run failed).
TEST_F(SafeFsTest, ALinkRacingPublishesOfTheSameNameAlwaysSucceeds) {
  const fs::path entry = dir_ / "entry";
  Write(dir_ / "seed", "content");
  ASSERT_TRUE(PublishOnce((dir_ / "seed").string(), entry.string()).ok());
  std::atomic<bool> done{false};
  std::thread publisher([&] {
    for (int i = 0; i < 20000 && !done; ++i) {
      const fs::path tmp = dir_ / (".tmp-" + std::to_string(i));
      Write(tmp, "content");
      if (!PublishOnce(tmp.string(), entry.string()).ok()) break;
    }
    done = true;
  });
  int links = 0, vanished = 0;
  const fs::path mine = dir_ / "work-link";
  while (!done) {
    if (link(entry.c_str(), mine.c_str()) == 0) {
      ++links;
      unlink(mine.c_str());
    } else if (errno == ENOENT) {
      ++vanished;
    }
  }
  publisher.join();
  EXPECT_GT(links, 0);
  EXPECT_EQ(vanished, 0) << "of " << links + vanished << " links";
}

}  // namespace
}  // namespace ringmaster::agent
