// The MetaStore contract suite on the backends that need no outside service
// (sqlite, memory), and OpenMetaStore's choice of backend by URL.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "store/meta_store_contract.h"

namespace ringmaster::store {
namespace {

using contract::AUser;
using contract::Backend;
using contract::MetaStoreContract;

const Backend kBackends[] = {
    {"sqlite", [](const std::string& dir) { return std::move(OpenMetaStore("sqlite:" + dir + "/meta.db")).value(); }},
    {"memory", [](const std::string&) { return std::move(OpenMetaStore("memory:")).value(); }},
};

INSTANTIATE_TEST_SUITE_P(Backends, MetaStoreContract, ::testing::ValuesIn(kBackends),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

TEST(OpenMetaStoreTest, ChoosesTheBackendByScheme) {
  const auto dir = std::filesystem::temp_directory_path() / ("rm_open_meta_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A bare path is SQLite, as before there were schemes; so is sqlite:PATH.
  for (const std::string& url : {(dir / "a.db").string(), "sqlite:" + (dir / "b.db").string()}) {
    auto s = OpenMetaStore(url);
    ASSERT_TRUE(s.ok()) << url << ": " << s.status().ToString();
    EXPECT_TRUE((*s)->CreateUser(AUser("ada")).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "a.db"));
  EXPECT_TRUE(std::filesystem::exists(dir / "b.db"));
  EXPECT_TRUE(OpenMetaStore("memory:").ok());
  for (const char* bad : {"memory:x", "nosuch:/x", ""}) {
    auto s = OpenMetaStore(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // Two memory stores are two stores.
  auto a = std::move(OpenMetaStore("memory:")).value();
  auto b = std::move(OpenMetaStore("memory:")).value();
  ASSERT_TRUE(a->CreateUser(AUser("ada")).ok());
  EXPECT_EQ(*b->CountUsers(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ringmaster::store
