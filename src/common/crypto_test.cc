#include "common/crypto.h"

#include <gtest/gtest.h>

namespace ringmaster {

TEST(Crypto, TokensAreRandomAndHashStable) {
  std::string a = NewApiToken(), b = NewApiToken();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 3u + 64u);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Crypto, Base64Decodes) {
  EXPECT_EQ(Base64Decode("YWRhOnNlY3JldA=="), "ada:secret");
  EXPECT_EQ(Base64Decode("YWJj"), "abc");
  EXPECT_EQ(Base64Decode("not base64!"), "");
}

TEST(Crypto, PasswordsVerifyOnlyWithTheRightPassword) {
  auto hash = HashPassword("correct horse");
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(hash->rfind("$argon2id$", 0), 0u);
  EXPECT_TRUE(VerifyPassword(*hash, "correct horse"));
  EXPECT_FALSE(VerifyPassword(*hash, "battery staple"));
}

}  // namespace ringmaster
