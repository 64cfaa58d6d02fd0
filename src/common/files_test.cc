// WriteFileAtomic and CreateTempBeside in a directory others may write to.
#include "common/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ringmaster {
namespace {

namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rm_files_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FilesTest, WriteFileAtomicDoesNotWriteThroughAPlantedTempName) {
  const std::string victim = (dir_ / "victim").string(), target = (dir_ / "out").string();
  ASSERT_TRUE(WriteFileAtomic(victim, "not yours").ok());
  // The old temp name was predictable: <path>.tmp.<pid>.
  fs::create_symlink(victim, target + ".tmp." + std::to_string(getpid()));
  ASSERT_TRUE(WriteFileAtomic(target, "mine", 0600).ok());
  EXPECT_EQ(ReadFile(victim).value(), "not yours");
  EXPECT_EQ(ReadFile(target).value(), "mine");
  EXPECT_FALSE(fs::is_symlink(target));
  struct stat st{};
  ASSERT_EQ(lstat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(FilesTest, CreateTempBesideMakesANewFileEachTime) {
  const std::string target = (dir_ / "get.bin").string();
  StatusOr<NewTempFile> a = CreateTempBeside(target, ".part.");
  StatusOr<NewTempFile> b = CreateTempBeside(target, ".part.");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->path, b->path);
  EXPECT_EQ(a->path.rfind(target + ".part.", 0), 0u) << a->path;
  struct stat st{};
  ASSERT_EQ(lstat(a->path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  close(a->fd);
  close(b->fd);
}

}  // namespace
}  // namespace ringmaster
