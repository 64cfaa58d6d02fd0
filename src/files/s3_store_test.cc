// SigV4 against AWS's published example, and the URI encoding it relies on.
// The S3 client itself is tested against a real Ceph RGW by the contract suite.
#include <gtest/gtest.h>

#include "common/crypto.h"
#include "common/strings.h"
#include "files/s3_store.h"

namespace ringmaster::files {
namespace {

TEST(SigV4, MatchesAwsGetObjectExample) {
  // "Example: GET Object" in the S3 API reference (Signature Version 4).
  std::map<std::string, std::string> headers = {
      {"host", "examplebucket.s3.amazonaws.com"},
      {"range", "bytes=0-9"},
      {"x-amz-content-sha256", Sha256Hex("")},
      {"x-amz-date", "20130524T000000Z"}};
  EXPECT_EQ(SigV4Authorization("GET", "/test.txt", {}, headers, Sha256Hex(""), "AKIAIOSFODNN7EXAMPLE",
                               "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, UriEncodingKeepsUnreservedBytesOnly) {
  EXPECT_EQ(PercentEncode("a/b c+d~e_f.g-h", true), "a/b%20c%2Bd~e_f.g-h");
  EXPECT_EQ(PercentEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(PercentEncode("\xce\xb1=&?", true), "%CE%B1%3D%26%3F");
}

TEST(Hashing, StreamingEqualsOneShotAndHexIsChecked) {
  Sha256 h;
  h.Update("hello, ");
  h.Update("world");
  EXPECT_EQ(h.FinishHex(), Sha256Hex("hello, world"));
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex("ABC"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'g')));
}

}  // namespace
}  // namespace ringmaster::files
