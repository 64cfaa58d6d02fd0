// Image references as Docker reads them (image_ref.h): registry hosts with
// ports, tags, digests, and the errors that name the part that is wrong.
#include "protocol/image_ref.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringmaster::protocol {
namespace {

const std::string kHex(64, 'c');

ImageRef Parse(const std::string& text) {
  StatusOr<ImageRef> ref = ParseImageRef(text);
  EXPECT_TRUE(ref.ok()) << text << ": " << ref.status().ToString();
  return ref.ok() ? *ref : ImageRef{};
}

std::string ErrorOf(const std::string& text) {
  StatusOr<ImageRef> ref = ParseImageRef(text);
  EXPECT_FALSE(ref.ok()) << text << " was accepted as " << (ref.ok() ? ref->ToString() : "");
  if (ref.ok()) return "";
  EXPECT_EQ(ref.status().code(), StatusCode::kInvalidArgument);
  return ref.status().message();
}

TEST(ImageRef, APlainNameHasTheDefaultTag) {
  const ImageRef ref = Parse("torch");
  EXPECT_EQ(ref, (ImageRef{"", "torch", "", ""}));
  EXPECT_EQ(ref.Tag(), "latest");
  EXPECT_EQ(ref.Name(), "torch");
  EXPECT_EQ(ref.ToString(), "torch");
}

TEST(ImageRef, TagsAndDigests) {
  EXPECT_EQ(Parse("ringmaster/torch:1.13"), (ImageRef{"", "ringmaster/torch", "1.13", ""}));
  EXPECT_EQ(Parse("ringmaster/torch:1.13").Tag(), "1.13");
  EXPECT_EQ(Parse("torch@sha256:" + kHex), (ImageRef{"", "torch", "", kHex}));
  EXPECT_EQ(Parse("torch:v2@sha256:" + kHex), (ImageRef{"", "torch", "v2", kHex}));
  EXPECT_EQ(Parse("ringmaster/base:" + kHex).tag, kHex);  // the agent tags imports with their digest
  EXPECT_EQ(Parse("x:Upper_Case-1.0").tag, "Upper_Case-1.0");  // tags, unlike names, may be upper-case
}

TEST(ImageRef, TheFirstComponentIsAHostWhenItLooksLikeOne) {
  EXPECT_EQ(Parse("registry.example.com/team/torch:1"), (ImageRef{"registry.example.com", "team/torch", "1", ""}));
  EXPECT_EQ(Parse("localhost:5000/torch"), (ImageRef{"localhost:5000", "torch", "", ""}));
  EXPECT_EQ(Parse("localhost:5000/torch:2"), (ImageRef{"localhost:5000", "torch", "2", ""}));
  EXPECT_EQ(Parse("localhost/torch"), (ImageRef{"localhost", "torch", "", ""}));
  EXPECT_EQ(Parse("10.0.0.1:443/a/b/c@sha256:" + kHex), (ImageRef{"10.0.0.1:443", "a/b/c", "", kHex}));
  EXPECT_EQ(Parse("Registry.Example.COM/torch").registry, "Registry.Example.COM");  // hosts may be upper-case
  // Not hosts: no '.', ':' or localhost, or nothing after them.
  EXPECT_EQ(Parse("library/ubuntu"), (ImageRef{"", "library/ubuntu", "", ""}));
  EXPECT_EQ(Parse("localhostx/torch").registry, "");
  EXPECT_EQ(Parse("torch.v2"), (ImageRef{"", "torch.v2", "", ""}));
  // Without a '/', what follows ':' is a tag, not a port.
  EXPECT_EQ(Parse("localhost:5000"), (ImageRef{"", "localhost", "5000", ""}));
  EXPECT_EQ(Parse("localhost:5000/torch:2").ToString(), "localhost:5000/torch:2");
  EXPECT_EQ(Parse("localhost:5000/torch:2").Name(), "localhost:5000/torch");
}

TEST(ImageRef, ErrorsNameThePartThatIsWrong) {
  EXPECT_EQ(ErrorOf(""), "it is empty");
  EXPECT_EQ(ErrorOf("Torch"), "path component \"Torch\" has an upper-case letter");
  EXPECT_EQ(ErrorOf("team/Torch:1"), "path component \"Torch\" has an upper-case letter");
  EXPECT_EQ(ErrorOf("a b"), "path component \"a b\" has a character other than a-z, 0-9, '.', '_' and '-'");
  EXPECT_EQ(ErrorOf("-x"), "path component \"-x\" starts with '-'");
  EXPECT_EQ(ErrorOf("a//b"), "has an empty path component ('//', or a '/' at an end)");
  EXPECT_EQ(ErrorOf("a/"), "has an empty path component ('//', or a '/' at an end)");
  EXPECT_EQ(ErrorOf("/a"), "has an empty path component ('//', or a '/' at an end)");
  EXPECT_EQ(ErrorOf("localhost:5000/"), "has an empty path component ('//', or a '/' at an end)");
  EXPECT_EQ(ErrorOf(":tag"), "the name is empty");
  EXPECT_EQ(ErrorOf("@sha256:" + kHex), "the name is empty");
  EXPECT_EQ(ErrorOf("torch:"), "the tag after ':' is empty");
  EXPECT_EQ(ErrorOf("torch:.x"), "tag \".x\" is not letters, digits, '_', '.' and '-' (not first)");
  EXPECT_EQ(ErrorOf("torch:" + std::string(129, 't')), "the tag is longer than 128 bytes");
  EXPECT_EQ(ErrorOf(std::string(256, 'n')), "the name is longer than 255 bytes");
  EXPECT_EQ(ErrorOf("localhost:/torch"), "registry \"localhost:\": the port is not a number");
  EXPECT_EQ(ErrorOf("localhost:50x/torch"), "registry \"localhost:50x\": the port is not a number");
  EXPECT_EQ(ErrorOf("a..b/torch"), "registry \"a..b\" is not a host name");
  EXPECT_EQ(ErrorOf("-a.b/torch"), "registry \"-a.b\" is not a host name");
  for (const std::string& digest : std::vector<std::string>{"torch@", "torch@sha256:abc", "torch@sha256:" + std::string(64, 'C'),
                                    "torch@md5:" + kHex, "torch@sha256:" + kHex + "@sha256:" + kHex}) {
    EXPECT_EQ(ErrorOf(digest), "the digest is not sha256:<64 lower-case hex>") << digest;
  }
  EXPECT_EQ(ErrorOf("a:b:c"), "path component \"a:b\" has a character other than a-z, 0-9, '.', '_' and '-'");
}

TEST(ImageRef, ToStringGivesBackWhatWasWritten) {
  for (const std::string& text : std::vector<std::string>{"torch", "a/b:c", "r.io:1/a@sha256:" + kHex,
                                   "localhost/x:y@sha256:" + kHex}) {
    EXPECT_EQ(Parse(text).ToString(), text);
    EXPECT_EQ(Parse(Parse(text).ToString()), Parse(text));
  }
}

TEST(JobImageRef, OneComponentOfTheFilesServiceOptionallyPinned) {
  EXPECT_EQ(ParseJobImageRef("torch").value(), (ImageRef{"", "torch", "", ""}));
  EXPECT_EQ(ParseJobImageRef("torch@sha256:" + kHex).value(), (ImageRef{"", "torch", "", kHex}));
  EXPECT_TRUE(ParseJobImageRef(std::string(63, 'a')).ok());
  const auto error = [](const std::string& text) {
    StatusOr<ImageRef> ref = ParseJobImageRef(text);
    return ref.ok() ? std::string("(accepted)") : ref.status().message();
  };
  EXPECT_EQ(error("ringmaster/torch"), "it has a '/'; an image name is one component");
  EXPECT_EQ(error("torch:1.13"), "it has a tag; pin an image with @sha256:<64 hex> instead");
  EXPECT_EQ(error("localhost:5000/torch"), "it names a registry; the files service's images have none");
  EXPECT_EQ(error(std::string(64, 'a')), "the name is longer than 63 bytes");
  EXPECT_EQ(error("Torch"), "path component \"Torch\" has an upper-case letter");
}

}  // namespace
}  // namespace ringmaster::protocol
