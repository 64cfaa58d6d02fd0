#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "common/small_tmpfs_for_tests.h"
#include "store/meta_store.h"
#include "store/sqlite/sqlite_meta_store.h"

// What only the SQLite backend has: files on disk, migrations, damage, a full
// disk. Everything every backend does is in meta_store_contract_test.cc.
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
    auto s = OpenMetaStore("sqlite:" + (dir_ / "meta.db").string());
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

TEST_F(SqliteMetaStoreTest, IdsAreNeverReusedAfterADeleteAndARestart) {
  int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.spec_json = "{}";
  job.replicas = 2;
  const int64_t first = *store_->CreateJob(job, Task{});
  const int64_t first_task = (*store_->ListTasks(first))[1].id;
  ASSERT_TRUE(store_->DeleteJob(first).ok());
  int64_t tid = *store_->CreateToken(Token{0, uid, "a", "h1", 1, "submit", ""});
  ASSERT_TRUE(store_->DeleteToken(tid).ok());
  Open();  // the contract suite checks a delete; this, a restart after it
  const int64_t second = *store_->CreateJob(job, Task{});
  EXPECT_GT(second, first);
  EXPECT_GT((*store_->ListTasks(second))[0].id, first_task);
  EXPECT_GT(*store_->CreateToken(Token{0, uid, "b", "h2", 1, "submit", ""}), tid);
}

// The database and the files SQLite keeps beside it hold token hashes: owner-only.
TEST_F(SqliteMetaStoreTest, TheDatabaseFilesArePrivate) {
  MakeUser("ada");
  ASSERT_TRUE(store_->Sync().ok());
  for (const char* name : {"meta.db", "meta.db-wal"}) {
    const auto perms = std::filesystem::status(dir_ / name).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
              std::filesystem::perms::none) << name;
  }
}

// What AwaitDurable covered is in the database file's log once it returns:
// a new connection (as after a crash of the process) reads it back.
TEST_F(SqliteMetaStoreTest, WhatATicketCoveredIsReadBackAfterAReopen) {
  const int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.name = "kept";
  const int64_t jid = *store_->CreateJob(job, Task{});
  const uint64_t ticket = store_->CommitTicket();
  EXPECT_GT(ticket, 0u);
  ASSERT_TRUE(store_->AwaitDurable(ticket).ok());
  Open();
  EXPECT_EQ(store_->GetJob(jid)->name, "kept");
  EXPECT_EQ(store_->ListTasks(jid)->size(), 1u);
}

TEST_F(SqliteMetaStoreTest, MigrationSixKeepsEveryRowAndScopesOldTokens) {
  store_.reset();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  const std::string path = (dir_ / "meta.db").string();
  {
    auto v5 = sqlite::Open(path, 5);
    ASSERT_TRUE(v5.ok()) << v5.status().ToString();
  }
  // Rows as a version-5 server wrote them.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* rows = R"sql(
INSERT INTO users(id, name, role, password_hash, created_ms) VALUES (1, 'admin', 'admin', '', 1), (2, 'ada', 'user', 'x', 2);
INSERT INTO tokens(id, user_id, name, hash, created_ms) VALUES (1, 1, 'bootstrap', 'ha', 1), (2, 2, 'cli', 'hb', 2);
INSERT INTO nodes(id, name, cpu_milli, memory_bytes, gpu_count, gpus_json, gpu_model, registered_ms, last_heartbeat_ms,
                  labels_json) VALUES (1, 'vm', 2000, 1, 0, '[]', '', 1, 1, '{"rack":"r1"}');
INSERT INTO jobs(id, user_id, name, kind, state, reason, spec_json, priority, replicas, max_restarts, restarts,
                 stop_state, stop_reason, created_ms, updated_ms, started_ms, finished_ms, service_s)
  VALUES (7, 2, 'old', 'train', 'SUCCEEDED', 'done', '{}', 0, 1, 0, 0, '', '', 1, 1, 1, 1, 12.5);
INSERT INTO tasks(id, job_id, rank, state, reason, node_id, attempt, desired, cpu_milli, memory_bytes, gpus,
                  created_ms, started_ms, finished_ms, port) VALUES (9, 7, 0, 'SUCCEEDED', 'done', 1, 1, 'run', 1000, 1, 0, 1, 1, 1, 41000);
INSERT INTO events(job_id, task_id, rank, ts_ms, from_state, to_state, reason) VALUES (7, 9, 0, 1, 'RUNNING', 'SUCCEEDED', 'done');
)sql";
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, rows, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);

  Open();
  EXPECT_EQ(store_->GetTokenByHash("ha")->scope, "admin");
  EXPECT_EQ(store_->GetTokenByHash("hb")->scope, "submit");
  EXPECT_EQ(store_->GetUserByName("ada")->password_hash, "x");
  EXPECT_EQ(store_->GetNode(1)->labels_json, "{\"rack\":\"r1\"}");
  auto job = store_->GetJob(7);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->service_s, 12.5);
  EXPECT_EQ((*store_->ListTasks(7))[0].port, 41000);
  EXPECT_EQ(store_->ListEvents(7)->size(), 1u);
  // Foreign keys are on again: deleting the job deletes its tasks and events.
  ASSERT_TRUE(store_->DeleteJob(7).ok());
  EXPECT_EQ(store_->GetTask(9).status().code(), StatusCode::kNotFound);
  Job next;
  next.user_id = 2;
  next.spec_json = "{}";
  EXPECT_GT(*store_->CreateJob(next, Task{}), 7);
}

// A damaged row (a field that does not parse) is never served as if sound:
// reading it is DataLoss naming it, lists leave it out, Damage() names it;
// a reopen finds it by itself.
TEST_F(SqliteMetaStoreTest, ADamagedRowIsNamedAndNeverServed) {
  int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.name = "a";
  job.spec_json = "{}";
  int64_t a = *store_->CreateJob(job, Task{});
  int64_t b = *store_->CreateJob(job, Task{});
  EXPECT_TRUE(store_->Damage().empty());
  store_.reset();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "meta.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, ("UPDATE jobs SET state='BOGUS' WHERE id=" + std::to_string(b)).c_str(), nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  Open();
  const std::string named = "job " + std::to_string(b) + ": stored state \"BOGUS\" is not one";
  ASSERT_EQ(store_->Damage().size(), 1u);  // found at open
  EXPECT_EQ(store_->Damage()[0], named);
  auto got = store_->GetJob(b);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find(named), std::string::npos) << got.status().message();
  auto jobs = store_->ListJobs(JobFilter{});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->jobs.size(), 1u);
  EXPECT_EQ(jobs->jobs[0].id, a);
  EXPECT_TRUE(store_->GetJob(a).ok());
}

// Active jobs come in pages: a damaged row in the first page must not end the
// paging (every later job would go unscheduled); a damaged task fails its
// gang's list whole (a gang short of a rank must not look complete).
TEST_F(SqliteMetaStoreTest, ADamagedRowNeitherEndsThePagingNorShortensAGang) {
  int64_t uid = MakeUser("ada");
  Job job;
  job.user_id = uid;
  job.name = "a";
  job.spec_json = "{}";
  job.replicas = 2;
  ASSERT_TRUE(store_->InTransaction([&]() -> Status {
    for (int i = 0; i < 1500; ++i) RM_RETURN_IF_ERROR(store_->CreateJob(job, Task{}).status());
    return Status::Ok();
  }).ok());
  store_.reset();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "meta.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET state='BOGUS' WHERE id=10; UPDATE tasks SET desired='maybe' WHERE job_id=20 AND rank=1",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  Open();
  auto active = store_->ListActiveJobs();
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(active->size(), 1499u);
  EXPECT_EQ(active->back().id, 1500);
  auto gang = store_->ListTasks(20);
  ASSERT_FALSE(gang.ok());
  EXPECT_EQ(gang.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store_->ListTasks(21)->size(), 2u);
}

// A write that finds the disk full is a clear InsufficientStorage,
// rolled back whole; what was stored stays intact, and the same write
// succeeds once space is freed, on the same connection.
TEST(SqliteMetaStoreDiskFullTest, WritesOnAFullDiskAreRefusedWholeAndSucceedOnceSpaceIsBack) {
  SmallTmpfs fs(4 << 20);
  if (!fs.ok()) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string path = fs.dir() + "/meta.db";
  auto opened = OpenMetaStore(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<MetaStore> store = std::move(*opened);
  const int64_t uid = *store->CreateUser(User{0, "ada", Role::kUser, "", 1});
  Job job;
  job.user_id = uid;
  job.replicas = 3;
  job.spec_json = "{\"pad\": \"" + std::string(20000, 'x') + "\"}";  // several pages
  job.name = "kept";
  const int64_t kept = *store->CreateJob(job, Task{});
  ASSERT_TRUE(store->AddEvent({0, kept, 0, -1, 1, "", "PENDING", "submitted"}).ok());
  ASSERT_TRUE(store->Sync().ok());

  fs.Fill();
  job.name = "refused";
  auto refused = store->CreateJob(job, Task{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInsufficientStorage) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("the server's disk is full"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("try again later"), std::string::npos) << refused.status().message();
  Status in_tx = store->InTransaction([&]() -> Status {
    RM_ASSIGN_OR_RETURN(int64_t id, store->CreateJob(job, Task{}));
    return store->AddEvent({0, id, 0, -1, 2, "", "PENDING", std::string(20000, 'e')});
  });
  EXPECT_EQ(in_tx.code(), StatusCode::kInsufficientStorage) << in_tx.ToString();
  // Reads still work and see only what was stored.
  auto jobs = store->ListJobs(JobFilter{});
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->jobs.size(), 1u);
  EXPECT_EQ(jobs->jobs[0].name, "kept");
  EXPECT_EQ(store->ListTasks(kept)->size(), 3u);

  fs.Free();
  job.name = "later";
  auto later = store->CreateJob(job, Task{});
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_TRUE(store->Sync().ok());
  EXPECT_EQ(store->ListTasks(*later)->size(), 3u);
  EXPECT_EQ(store->ListJobs(JobFilter{})->jobs.size(), 2u);
  EXPECT_EQ(store->ListEvents(kept)->size(), 1u);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* check = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(check), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(check, 0)), "ok");
  sqlite3_finalize(check);
  sqlite3_close(db);
  store.reset();
}

}  // namespace
}  // namespace ringmaster::store
