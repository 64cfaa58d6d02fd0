// The MetaStore contract suite on PostgreSQL (MetaStoreContract.*/postgres):
// each case gets a database of its own, created from the fixture's URL
// (RM_PG_URL_FILE) and dropped after.
#include <string>

#include "store/meta_store_contract.h"
#include "store/postgres/pg_test_db.h"

namespace ringmaster::store {
namespace {

using contract::Backend;
using contract::MetaStoreContract;

const Backend kBackends[] = {
    {"postgres",
     [](const std::string& dir) -> std::unique_ptr<MetaStore> {
       const std::string url = postgres::testing::CreateDatabase(dir);
       if (url.empty()) return nullptr;
       auto store = OpenMetaStore(url);
       EXPECT_TRUE(store.ok()) << store.status().ToString();
       return store.ok() ? std::move(*store) : nullptr;
     },
     [](const std::string& dir) { postgres::testing::DropDatabase(dir); }, postgres::testing::SkipReason},
};

INSTANTIATE_TEST_SUITE_P(Backends, MetaStoreContract, ::testing::ValuesIn(kBackends),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace ringmaster::store
