#include "server/secret_box.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "common/files.h"

namespace ringmaster::server {
namespace {

namespace fs = std::filesystem;

TEST(SecretBoxTest, SealsAndOpensOnlyForTheSameOwner) {
  auto box = SecretBox::WithKey(std::string(32, 'k'));
  ASSERT_TRUE(box.ok());
  auto sealed = box->Seal("hunter2", "registry-login|7|reg:5000");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->find("hunter2"), std::string::npos);
  EXPECT_NE(*sealed, *box->Seal("hunter2", "registry-login|7|reg:5000"));  // a fresh nonce each time
  EXPECT_EQ(*box->Unseal(*sealed, "registry-login|7|reg:5000"), "hunter2");
  // Moved to another user's row, or another key: refused.
  EXPECT_EQ(box->Unseal(*sealed, "registry-login|8|reg:5000").status().code(), StatusCode::kPermissionDenied);
  auto other = SecretBox::WithKey(std::string(32, 'j'));
  EXPECT_EQ(other->Unseal(*sealed, "registry-login|7|reg:5000").status().code(), StatusCode::kPermissionDenied);
  // Tampered with, truncated, not base64.
  std::string bad = *sealed;
  bad[10] = bad[10] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(box->Unseal(bad, "registry-login|7|reg:5000").ok());
  EXPECT_FALSE(box->Unseal(sealed->substr(0, 8), "registry-login|7|reg:5000").ok());
  EXPECT_FALSE(box->Unseal("%%%", "registry-login|7|reg:5000").ok());
  EXPECT_FALSE(SecretBox::WithKey("short").ok());
}

TEST(SecretBoxTest, TheKeyFileIsMadeOnceAndMustBePrivate) {
  const fs::path dir = fs::temp_directory_path() / ("secret_box_test." + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "secrets.key").string();
  auto first = SecretBox::Open(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto sealed = first->Seal("pw", "a");
  auto again = SecretBox::Open(path);  // the same key, read back
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again->Unseal(*sealed, "a"), "pw");
  chmod(path.c_str(), 0644);
  EXPECT_EQ(SecretBox::Open(path).status().code(), StatusCode::kFailedPrecondition);
  chmod(path.c_str(), 0600);
  ASSERT_TRUE(WriteFileAtomic(path, "too short", 0600).ok());
  EXPECT_EQ(SecretBox::Open(path).status().code(), StatusCode::kFailedPrecondition);
  // A symlink in its place (to a key someone else controls) is refused, not followed.
  const std::string link = (dir / "link.key").string();
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  EXPECT_EQ(SecretBox::Open(link).status().code(), StatusCode::kFailedPrecondition);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringmaster::server
