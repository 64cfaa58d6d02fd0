#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "store/meta_store.h"

namespace ringmaster::store {
namespace {

class SqliteMetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_store_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Open();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Open() {
    store_.reset();
    auto s = OpenSqliteMetaStore((dir_ / "meta.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  int64_t MakeUser(const std::string& name) {
    auto id = store_->CreateUser(User{0, name, Role::kUser, "", 1});
    EXPECT_TRUE(id.ok());
    return *id;
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> store_;
};

TEST_F(SqliteMetaStoreTest, UsersAreUniqueByName) {
  MakeUser("ada");
  auto dup = store_->CreateUser(User{0, "ada", Role::kAdmin, "", 2});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*store_->CountUsers(), 1);
  EXPECT_EQ(store_->GetUserByName("nobody").status().code(), StatusCode::kNotFound);
}

TEST_F(SqliteMetaStoreTest, JobWithTasksSurvivesReopenAndMigrationsAreIdempotent) {
  int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.name = "train";
  job.kind = "distributed";
  job.replicas = 3;
  job.spec_json = "{}";
  Task tmpl;
  tmpl.cpu_milli = 500;
  auto id = store_->CreateJob(job, tmpl);
  ASSERT_TRUE(id.ok()) << id.status().ToString();

  Open();  // reopen: migrations must not re-run or fail
  auto got = store_->GetJob(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->name, "train");
  EXPECT_EQ(got->state, State::kPending);
  EXPECT_FALSE(got->stop_state.has_value());
  auto tasks = store_->ListTasks(*id);
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 3u);
  EXPECT_EQ((*tasks)[2].rank, 2);
  EXPECT_EQ((*tasks)[2].cpu_milli, 500);
  EXPECT_FALSE((*tasks)[0].exit_code.has_value());
}

TEST_F(SqliteMetaStoreTest, FailedTransactionLeavesNoTrace) {
  int64_t uid = MakeUser("ada");
  Status st = store_->InTransaction([&]() -> Status {
    Job job;
    job.user_id = uid;
    job.name = "doomed";
    job.spec_json = "{}";
    auto id = store_->CreateJob(job, Task{});
    EXPECT_TRUE(id.ok());
    return Aborted("changed my mind");
  });
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_TRUE(store_->ListJobs(0, 10)->empty());
}

TEST_F(SqliteMetaStoreTest, TaskUpdatesAndPlacedTasks) {
  int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.replicas = 2;
  job.spec_json = "{}";
  int64_t jid = *store_->CreateJob(job, Task{});
  auto tasks = *store_->ListTasks(jid);
  tasks[1].state = State::kRunning;
  tasks[1].node_id = 7;
  tasks[1].exit_code = 3;
  ASSERT_TRUE(store_->UpdateTask(tasks[1]).ok());
  auto placed = *store_->ListPlacedTasks();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].node_id, 7);
  EXPECT_EQ(placed[0].exit_code, 3);
}

TEST_F(SqliteMetaStoreTest, NodesUpsertByNameAndTokensAreScopedToTheirUser) {
  Node n;
  n.name = "vm";
  n.cpu_milli = 2000;
  int64_t a = *store_->UpsertNode(n);
  n.cpu_milli = 4000;
  int64_t b = *store_->UpsertNode(n);
  EXPECT_EQ(a, b);
  EXPECT_EQ(store_->GetNode(a)->cpu_milli, 4000);

  int64_t u1 = MakeUser("ada"), u2 = MakeUser("bob");
  int64_t tid = *store_->CreateToken(Token{0, u1, "cli", "h1", 1});
  EXPECT_EQ(store_->GetTokenByHash("h1")->user_id, u1);
  EXPECT_EQ(store_->DeleteToken(u2, tid).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->DeleteToken(u1, tid).ok());
  EXPECT_EQ(store_->GetTokenByHash("h1").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::store
