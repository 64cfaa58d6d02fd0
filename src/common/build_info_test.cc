#include "common/build_info.h"

#include <regex>

#include <gtest/gtest.h>

namespace ringmaster {
namespace {

TEST(BuildInfo, IsTheProjectsVersionAndACommit) {
  const BuildInfo& b = ThisBuild();
  EXPECT_EQ(b.version, RM_PROJECT_VERSION);
  EXPECT_TRUE(std::regex_match(b.git_commit, std::regex("[0-9a-f]{7,40}(-dirty)?|unknown"))) << b.git_commit;
  EXPECT_TRUE(std::regex_match(b.platform, std::regex("linux/[a-z0-9]+"))) << b.platform;
  EXPECT_FALSE(b.compiler.empty());
}

TEST(BuildInfo, JsonRoundTrips) {
  const BuildInfo b{"1.2.3", "abcdef012345-dirty", "gcc 12", "linux/arm64"};
  const nlohmann::json j = BuildInfoJson(b);
  EXPECT_EQ(j["version"], "1.2.3");
  EXPECT_EQ(j["git_commit"], "abcdef012345-dirty");
  const BuildInfo back = BuildInfoFromJson(j);
  EXPECT_EQ(back.version, b.version);
  EXPECT_EQ(back.git_commit, b.git_commit);
  EXPECT_EQ(back.compiler, b.compiler);
  EXPECT_EQ(back.platform, b.platform);
}

TEST(BuildInfo, FromJsonToleratesMissingAndWrongFields) {
  const BuildInfo b = BuildInfoFromJson({{"version", 3}, {"git_commit", "abc"}});
  EXPECT_EQ(b.version, "");
  EXPECT_EQ(b.git_commit, "abc");
  EXPECT_EQ(b.platform, "");
  EXPECT_EQ(BuildInfoFromJson(nlohmann::json::array()).version, "");
}

}  // namespace
}  // namespace ringmaster
