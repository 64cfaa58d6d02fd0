// The credentials file of `ringmaster login`: where it is, its modes, entries
// keyed by server, atomic and locked updates, and the files it refuses.
#include "cli/credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ringmaster::cli {
namespace {

namespace fs = std::filesystem;

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rm-credentials-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::setenv("XDG_CONFIG_HOME", dir_.c_str(), 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static int Mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  std::string dir_;
};

StoredLogin Login(const std::string& server, const std::string& user, int64_t id) {
  return StoredLogin{server, user, "secret-" + user + "-" + std::to_string(id), id, ""};
}

TEST(NormalizeServerUrl, LowersSchemeAndHostAndDropsTrailingSlashes) {
  EXPECT_EQ(NormalizeServerUrl("HTTPS://Gpu-Head.Example:8080//"), "https://gpu-head.example:8080");
  EXPECT_EQ(NormalizeServerUrl("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  // A leader and its standby: each one normalized, the order kept.
  EXPECT_EQ(NormalizeServerUrl("HTTPS://A:1/, https://B:2"), "https://a:1,https://b:2");
  EXPECT_EQ(NormalizeServerUrl("https://Host/Base/Path/"), "https://host/Base/Path");
}

TEST_F(CredentialsTest, LivesUnderXdgConfigHome) {
  EXPECT_EQ(CredentialsPath(), dir_ + "/ringmaster/credentials.json");
}

TEST_F(CredentialsTest, NoFileMeansNoLogins) {
  auto all = ListLogins();
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_TRUE(all->empty());
  auto one = FindLogin("http://127.0.0.1:1");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->has_value());
}

TEST_F(CredentialsTest, SavedPrivateAndKeyedByServer) {
  ASSERT_TRUE(SaveLogin(Login("http://127.0.0.1:8080/", "alice", 7)).ok());
  StoredLogin b = Login("https://head:8443", "bob", 9);
  b.ca = "/etc/ringmaster/ca.crt";
  ASSERT_TRUE(SaveLogin(b).ok());

  EXPECT_EQ(Mode(CredentialsPath()), 0600);
  EXPECT_EQ(Mode(dir_ + "/ringmaster"), 0700);
  auto a = FindLogin("HTTP://127.0.0.1:8080");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->user, "alice");
  EXPECT_EQ((*a)->token, "secret-alice-7");
  EXPECT_EQ((*a)->token_id, 7);
  auto got_b = FindLogin("https://head:8443");
  ASSERT_TRUE(got_b.ok() && got_b->has_value());
  EXPECT_EQ((*got_b)->ca, "/etc/ringmaster/ca.crt");
  EXPECT_EQ(ListLogins()->size(), 2u);
}

TEST_F(CredentialsTest, ASecondLoginToAServerReplacesTheFirstAndReturnsIt) {
  ASSERT_TRUE(SaveLogin(Login("http://h:1", "alice", 1)).ok());
  auto old = SaveLogin(Login("http://h:1", "alice", 2));
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(old->has_value());
  EXPECT_EQ((*old)->token_id, 1);
  EXPECT_EQ((*FindLogin("http://h:1"))->token_id, 2);
  EXPECT_EQ(ListLogins()->size(), 1u);
}

TEST_F(CredentialsTest, RemovingTheLastLoginRemovesTheFile) {
  ASSERT_TRUE(SaveLogin(Login("http://h:1", "alice", 1)).ok());
  ASSERT_TRUE(SaveLogin(Login("http://h:2", "alice", 2)).ok());
  auto gone = RemoveLogin("http://h:1/");
  ASSERT_TRUE(gone.ok() && gone->has_value());
  EXPECT_EQ((*gone)->token_id, 1);
  EXPECT_TRUE(fs::exists(CredentialsPath()));
  auto none = RemoveLogin("http://h:1");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(RemoveLogin("http://h:2").ok());
  EXPECT_FALSE(fs::exists(CredentialsPath()));
  // Nothing else is left behind: no temp or lock file.
  EXPECT_TRUE(fs::is_empty(dir_ + "/ringmaster"));
}

TEST_F(CredentialsTest, AFileOthersMayReadIsRefused) {
  ASSERT_TRUE(SaveLogin(Login("http://h:1", "alice", 1)).ok());
  ASSERT_EQ(::chmod(CredentialsPath().c_str(), 0644), 0);
  auto r = FindLogin("http://h:1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find(CredentialsPath()), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("chmod 600"), std::string::npos) << r.status().message();
  // Nor is it overwritten: the user decides.
  EXPECT_FALSE(SaveLogin(Login("http://h:1", "alice", 2)).ok());
}

TEST_F(CredentialsTest, ASymlinkIsRefused) {
  fs::create_directories(dir_ + "/ringmaster");
  std::ofstream(dir_ + "/elsewhere.json") << R"({"servers": {}})";
  ::chmod((dir_ + "/elsewhere.json").c_str(), 0600);
  fs::create_symlink(dir_ + "/elsewhere.json", CredentialsPath());
  auto r = ListLogins();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

// Another user who can write to the directory could plant names in it: the
// directory is refused, and left as it is (not chmodded through a link).
TEST_F(CredentialsTest, ADirectoryOthersMayWriteOrALinkedOneIsRefusedAndLeftAlone) {
  fs::create_directories(dir_ + "/ringmaster");
  ASSERT_EQ(::chmod((dir_ + "/ringmaster").c_str(), 0777), 0);
  Status st = SaveLogin(Login("http://h:1", "alice", 1)).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("chmod 700 " + dir_ + "/ringmaster"), std::string::npos) << st.message();
  EXPECT_EQ(Mode(dir_ + "/ringmaster"), 0777);
  fs::remove_all(dir_ + "/ringmaster");
  fs::create_directories(dir_ + "/shared");
  ASSERT_EQ(::chmod((dir_ + "/shared").c_str(), 01777), 0);
  fs::create_directory_symlink(dir_ + "/shared", dir_ + "/ringmaster");
  st = SaveLogin(Login("http://h:1", "alice", 1)).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.message();
  EXPECT_EQ(Mode(dir_ + "/shared"), 01777);
  EXPECT_TRUE(fs::is_empty(dir_ + "/shared"));
}

// The new file is made under a name no one could have planted: a link at the
// name an older CLI used for its temp file is not written through.
TEST_F(CredentialsTest, ThePlantedTempNameOfAnOlderCliIsNotWrittenThrough) {
  fs::create_directories(dir_ + "/ringmaster");
  std::ofstream(dir_ + "/trap") << "";
  fs::create_symlink(dir_ + "/trap", CredentialsPath() + ".tmp." + std::to_string(::getpid()));
  ASSERT_TRUE(SaveLogin(Login("http://h:1", "alice", 1)).ok());
  EXPECT_EQ(fs::file_size(dir_ + "/trap"), 0u);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(CredentialsPath())));
  EXPECT_EQ(Mode(CredentialsPath()), 0600);
}

TEST_F(CredentialsTest, AFileThatIsNotCredentialsNamesItselfAndTheFix) {
  fs::create_directories(dir_ + "/ringmaster");
  for (const char* text : {"not json", R"({"servers": []})", R"({"servers": {"http://h:1": {"user": "a"}}})"}) {
    std::ofstream(CredentialsPath(), std::ios::trunc) << text;
    ::chmod(CredentialsPath().c_str(), 0600);
    auto r = ListLogins();
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(CredentialsPath()), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("log in again"), std::string::npos) << r.status().message();
  }
}

// Logins from many CLIs at once each keep their entry: updates are
// read-modify-write under the directory's lock.
TEST_F(CredentialsTest, ConcurrentLoginsKeepEveryEntry) {
  constexpr int kThreads = 8, kEach = 5;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kEach; ++i) {
        EXPECT_TRUE(SaveLogin(Login("http://h:" + std::to_string(t * 100 + i), "u" + std::to_string(t), i + 1)).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto all = ListLogins();
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(Mode(CredentialsPath()), 0600);
}

}  // namespace
}  // namespace ringmaster::cli
