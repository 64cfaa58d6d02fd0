#include "common/crypto.h"

#include <gtest/gtest.h>

namespace ringmaster {

TEST(Crypto, TokensAreRandomAndHashStable) {
  std::string a = NewApiToken(), b = NewApiToken();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 3u + 64u);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Crypto, StreamingSha256MatchesOneShot) {
  Sha256 h;
  h.Update("a");
  h.Update("");
  h.Update("bc");
  EXPECT_EQ(h.FinishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
  EXPECT_FALSE(IsSha256Hex("abc"));
}

// RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
TEST(Crypto, HmacSha256Rfc4231) {
  EXPECT_EQ(HexEncode(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(HexEncode(HmacSha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Crypto, HexEncode) { EXPECT_EQ(HexEncode(std::string("\x00\x7f\xff", 3)), "007fff"); }

TEST(Crypto, Base64Decodes) {
  EXPECT_EQ(Base64Decode("YWRhOnNlY3JldA=="), "ada:secret");
  EXPECT_EQ(Base64Decode("YWJj"), "abc");
  EXPECT_EQ(Base64Decode("not base64!"), "");
  EXPECT_EQ(Base64Encode("ada:secret"), "YWRhOnNlY3JldA==");
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Decode(Base64Encode("ab")), "ab");
}

TEST(Crypto, PasswordsVerifyOnlyWithTheRightPassword) {
  auto hash = HashPassword("correct horse");
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(hash->rfind("$argon2id$", 0), 0u);
  EXPECT_TRUE(VerifyPassword(*hash, "correct horse"));
  EXPECT_FALSE(VerifyPassword(*hash, "battery staple"));
}

}  // namespace ringmaster
