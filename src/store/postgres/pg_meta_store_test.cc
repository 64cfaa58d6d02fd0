// What only the PostgreSQL MetaStore has (the contract suite covers the
// rest): migrations shared by servers starting together, the leadership
// lease and fencing, damaged rows, table copies, and a server that goes away.
#include "store/postgres/pg_meta_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "store/postgres/pg_test_db.h"
#include "store/schema.h"

namespace ringmaster::store::postgres {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_pg_store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    url_ = testing::CreateDatabase(dir_.string());
    ASSERT_FALSE(url_.empty()) << "cannot create a database on " << testing::FixtureUrl();
  }
  void TearDown() override {
    if (dir_.empty()) return;
    testing::DropDatabase(dir_.string());
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<MetaStore> OpenStore(const std::string& params = "") {
    auto s = OpenMetaStore(url_ + params);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static int64_t MakeUser(MetaStore& s, const std::string& name) {
    auto id = s.CreateUser(User{0, name, Role::kUser, "", 1});
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  std::filesystem::path dir_;
  std::string url_;
};

TEST_F(PgStoreTest, TwoStoresOpeningTogetherApplyEachMigrationOnce) {
  auto a = std::async(std::launch::async, [&] { return OpenMetaStore(url_); });
  auto b = std::async(std::launch::async, [&] { return OpenMetaStore(url_); });
  auto sa = a.get();
  auto sb = b.get();
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string n = std::to_string(Migrations().size());
  EXPECT_EQ(testing::Query(url_, "SELECT COUNT(*) FROM schema_version"), n);
  EXPECT_EQ(testing::Query(url_, "SELECT COUNT(DISTINCT version) FROM schema_version"), n);
  // A third open migrates nothing.
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(testing::Query(url_, "SELECT COUNT(*) FROM schema_version"), n);
  // Both see one database.
  const int64_t uid = MakeUser(**sa, "ada");
  EXPECT_EQ((*sb)->GetUser(uid)->name, "ada");
}

TEST_F(PgStoreTest, ANewerSchemaIsRefused) {
  ASSERT_NE(OpenStore(), nullptr);
  ASSERT_EQ(testing::Query(url_, "INSERT INTO schema_version VALUES (999)"), "");
  auto s = OpenMetaStore(url_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(PgStoreTest, ATakeoverFencesTheOldLeader) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  Leadership* la = a->leadership();
  Leadership* lb = b->leadership();
  ASSERT_TRUE(la && lb);
  EXPECT_EQ(la->Current()->epoch, 0);
  auto lease = la->Acquire("a", "https://a", 0, milliseconds(300));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(lease->mine);
  const int64_t e = lease->epoch;
  EXPECT_EQ(e, 1);
  std::atomic<int64_t> fenced_seen{-1};
  la->OnFenced([&](int64_t seen) { fenced_seen = seen; });
  la->SetFence(e);
  MakeUser(*a, "before");
  // Renewal keeps the epoch; B cannot take a lease that is held.
  lease = la->Acquire("a", "https://a", e, milliseconds(300));
  ASSERT_TRUE(lease.ok() && lease->mine);
  EXPECT_EQ(lease->epoch, e);
  auto other = lb->Acquire("b", "https://b", 0, milliseconds(10000));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->mine);
  EXPECT_EQ(other->holder, "a");
  EXPECT_EQ(other->holder_url, "https://a");
  EXPECT_GT(other->remaining_ms, 0);
  // A's lease runs out; B takes it.
  std::this_thread::sleep_for(milliseconds(400));
  other = lb->Acquire("b", "https://b", 0, milliseconds(10000));
  ASSERT_TRUE(other.ok() && other->mine);
  EXPECT_EQ(other->epoch, e + 1);
  // A's next write is refused and leaves nothing; A learns it.
  auto late = a->CreateUser(User{0, "late", Role::kUser, "", 1});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(fenced_seen.load(), e + 1);
  EXPECT_EQ(b->GetUserByName("late").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(a->InTransaction([&]() -> Status { return Status::Ok(); }).code(), StatusCode::kUnavailable);
  // Nor can A renew the lease B holds.
  lease = la->Acquire("a", "https://a", e, milliseconds(300));
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(lease->mine);
  EXPECT_EQ(lease->holder, "b");
  // B, fenced at its epoch, writes.
  lb->SetFence(other->epoch);
  MakeUser(*b, "after");
  EXPECT_TRUE(a->GetUserByName("after").ok());
}

TEST_F(PgStoreTest, AWriteInFlightDuringATakeoverCommitsBeforeTheNewEpoch) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  auto lease = a->leadership()->Acquire("a", "", 0, milliseconds(200));
  ASSERT_TRUE(lease.ok() && lease->mine);
  a->leadership()->SetFence(lease->epoch);
  std::this_thread::sleep_for(milliseconds(250));  // expired, not yet taken: A may still write
  std::promise<void> began;
  auto tx = std::async(std::launch::async, [&] {
    return a->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(a->CreateUser(User{0, "inflight", Role::kUser, "", 1}).status());
      began.set_value();
      std::this_thread::sleep_for(milliseconds(500));
      return Status::Ok();
    });
  });
  began.get_future().wait();
  const auto t0 = steady_clock::now();
  auto taken = b->leadership()->Acquire("b", "", 0, milliseconds(10000));
  const auto waited = steady_clock::now() - t0;
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(taken->mine);
  EXPECT_EQ(taken->epoch, lease->epoch + 1);
  // The takeover waited for A's transaction, which committed under A's epoch.
  EXPECT_TRUE(tx.get().ok());
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_TRUE(b->GetUserByName("inflight").ok());
  EXPECT_EQ(a->CreateUser(User{0, "after", Role::kUser, "", 1}).status().code(), StatusCode::kUnavailable);
}

TEST_F(PgStoreTest, AStandbyWritesNothingAndTrustsNoVersion) {
  auto s = OpenStore();
  ASSERT_NE(s, nullptr);
  const int64_t uid = MakeUser(*s, "ada");
  s->leadership()->SetFence(0);
  auto st = s->CreateUser(User{0, "bob", Role::kUser, "", 1});
  ASSERT_EQ(st.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(st.status().message().find("standby"), std::string::npos);
  EXPECT_EQ(s->SetUserDisabled(uid, true).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(s->GetUser(uid)->disabled);
  EXPECT_TRUE(s->GetUser(uid).ok());  // reads go on
  EXPECT_NE(s->JobVersion(1), s->JobVersion(1));
  EXPECT_NE(s->AuthVersion(), s->AuthVersion());
}

// A standby's versions moved at every read; promoted, they go on from there
// (a cache keyed by a version must never see an older one again).
TEST_F(PgStoreTest, VersionsNeverGoBackWhenAStandbyIsPromoted) {
  auto s = OpenStore();
  ASSERT_NE(s, nullptr);
  s->leadership()->SetFence(0);
  uint64_t job = 0, auth = 0;
  for (int i = 0; i < 5; ++i) {
    const uint64_t j = s->JobVersion(7), a = s->AuthVersion();
    EXPECT_GT(j, job);
    EXPECT_GT(a, auth);
    job = j;
    auth = a;
  }
  auto lease = s->leadership()->Acquire("a", "", 0, milliseconds(10000));
  ASSERT_TRUE(lease.ok() && lease->mine);
  s->leadership()->SetFence(lease->epoch);
  EXPECT_GE(s->JobVersion(7), job);
  EXPECT_GE(s->AuthVersion(), auth);
  MakeUser(*s, "bob");
  EXPECT_GT(s->AuthVersion(), auth);
  EXPECT_EQ(s->AuthVersion(), s->AuthVersion());  // a leader's versions stand still between writes
}

// A leader paused with a write transaction open (its share lock on the
// lease row held) cannot hold off a takeover: the database ends the idle
// transaction, the standby takes the lease, and nothing the leader wrote in
// it is kept.
TEST_F(PgStoreTest, ALeaderPausedInsideATransactionDoesNotBlockATakeover) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  auto lease = a->leadership()->Acquire("a", "", 0, milliseconds(1000));
  ASSERT_TRUE(lease.ok() && lease->mine);
  a->leadership()->SetFence(lease->epoch);
  std::promise<void> began;
  auto tx = std::async(std::launch::async, [&] {
    return a->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(a->CreateUser(User{0, "paused", Role::kUser, "", 1}).status());
      began.set_value();
      std::this_thread::sleep_for(milliseconds(8000));  // the leader, paused
      return Status::Ok();
    });
  });
  began.get_future().wait();
  std::this_thread::sleep_for(milliseconds(1100));  // A's lease has run out
  const auto t0 = steady_clock::now();
  StatusOr<LeaseState> taken = Unavailable("not tried");
  while (steady_clock::now() - t0 < milliseconds(12000)) {
    taken = b->leadership()->Acquire("b", "", 0, milliseconds(10000));
    if (taken.ok() && taken->mine) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_TRUE(taken.ok() && taken->mine) << taken.status().ToString();
  EXPECT_LT(steady_clock::now() - t0, milliseconds(7000));
  EXPECT_EQ(taken->epoch, lease->epoch + 1);
  const Status st = tx.get();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(b->GetUserByName("paused").status().code(), StatusCode::kNotFound);
}

TEST_F(PgStoreTest, AReleasedLeaseIsTakenAtOnce) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  auto la = a->leadership()->Acquire("a", "", 0, milliseconds(60000));
  ASSERT_TRUE(la.ok() && la->mine);
  EXPECT_FALSE(b->leadership()->Acquire("b", "", 0, milliseconds(60000))->mine);
  // Releasing with the wrong epoch does nothing.
  ASSERT_TRUE(a->leadership()->Release("a", la->epoch + 7).ok());
  EXPECT_FALSE(b->leadership()->Acquire("b", "", 0, milliseconds(60000))->mine);
  ASSERT_TRUE(a->leadership()->Release("a", la->epoch).ok());
  EXPECT_LE(a->leadership()->Current()->remaining_ms, 0);
  auto lb = b->leadership()->Acquire("b", "", 0, milliseconds(60000));
  ASSERT_TRUE(lb.ok() && lb->mine);
  EXPECT_EQ(lb->epoch, la->epoch + 1);
}

TEST_F(PgStoreTest, ADamagedRowIsDataLossAndLeftOutOfLists) {
  auto s = OpenStore();
  ASSERT_NE(s, nullptr);
  const int64_t uid = MakeUser(*s, "ada");
  Job job;
  job.user_id = uid;
  job.spec_json = "{}";
  const int64_t good = *s->CreateJob(job, Task{});
  const int64_t bad = *s->CreateJob(job, Task{});
  ASSERT_EQ(testing::Query(url_, "UPDATE jobs SET state = 'EXPLODED' WHERE id = " + std::to_string(bad)), "");
  ASSERT_EQ(testing::Query(url_, "UPDATE tasks SET desired = '?' WHERE job_id = " + std::to_string(bad)), "");
  EXPECT_EQ(s->GetJob(bad).status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(s->GetJob(good).ok());
  JobFilter all;
  auto page = s->ListJobs(all);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id, good);
  EXPECT_EQ(s->ListTasks(bad).status().code(), StatusCode::kDataLoss);  // a gang must be whole
  EXPECT_FALSE(s->Damage().empty());
  // A store opened on it names the damage at once.
  auto fresh = OpenStore();
  ASSERT_NE(fresh, nullptr);
  EXPECT_FALSE(fresh->Damage().empty());
}

TEST_F(PgStoreTest, TablesCopyWithTheirIdsAndIdsNeverGoBack) {
  auto src = OpenStore();
  ASSERT_NE(src, nullptr);
  const int64_t uid = MakeUser(*src, "ada");
  ASSERT_TRUE(src->DeleteToken(*src->CreateToken(Token{0, uid, "t", "h1", 1, "read", ""})).ok());
  const int64_t kept = *src->CreateToken(Token{0, uid, "t", "h2", 1, "read", ""});
  ASSERT_TRUE(src->AddAudit(AuditEntry{0, 5, "ada", "::1", "login", "user ada", "ok", ""}).ok());

  // A second database as the destination.
  const std::filesystem::path dst_dir = dir_ / "dst";
  std::filesystem::create_directories(dst_dir);
  const std::string dst_url = testing::CreateDatabase(dst_dir.string());
  ASSERT_FALSE(dst_url.empty());
  {
    auto dst = std::move(OpenMetaStore(dst_url)).value();
    TableCopy* from = src->tables();
    TableCopy* to = dst->tables();
    ASSERT_TRUE(from && to);
    for (const char* table : {"users", "tokens", "audit"}) {
      auto rows = from->ReadTable(table);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      ASSERT_TRUE(to->WriteTable(table, *rows).ok()) << table;
      EXPECT_EQ(to->WriteTable(table, *rows).code(), StatusCode::kFailedPrecondition) << table;
      ASSERT_TRUE(to->SetLastId(table, *from->LastId(table)).ok());
      EXPECT_EQ(*to->LastId(table), *from->LastId(table)) << table;
    }
    EXPECT_EQ(*from->LastId("tokens"), kept);
    EXPECT_EQ(dst->GetToken(kept)->hash, "h2");
    EXPECT_EQ(dst->ListAudit(10, "ada", "")->size(), 1u);
    EXPECT_GT(*dst->CreateToken(Token{0, uid, "t", "h3", 1, "read", ""}), kept);
    ASSERT_TRUE(to->SetLastId("users", 100).ok());
    ASSERT_TRUE(to->SetLastId("users", 50).ok());  // never back
    EXPECT_GT(MakeUser(*dst, "bob"), 100);
    EXPECT_EQ(to->ReadTable("nosuch").status().code(), StatusCode::kInvalidArgument);
  }
  testing::DropDatabase(dst_dir.string());
}

// Text the database refuses (bad encoding, a value of the wrong form) is the
// caller's error, never a server's: InvalidArgument, as on every backend.
TEST_F(PgStoreTest, TextTheDatabaseRefusesIsInvalidArgument) {
  auto info = ParseUrl(url_);
  ASSERT_TRUE(info.ok());
  Connection conn(*info, {}, milliseconds(5000));
  for (const char* sql : {"SELECT convert_from('\\xff'::bytea, 'UTF8')", "SELECT 'yesterday'::bigint"}) {
    auto r = conn.Exec(sql);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << sql << ": " << r.status().ToString();
  }
  auto nul = conn.Exec("SELECT $1::text", Params(std::string("a\0b", 3)));
  EXPECT_EQ(nul.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nul.status().message().find("parameter $1: text with a NUL byte"), std::string::npos)
      << nul.status().ToString();
  EXPECT_TRUE(conn.Exec("SELECT 1").ok());
}

// The database's notices go to the log (at debug), not to stderr.
TEST_F(PgStoreTest, NoticesAreNotPrintedOnStderr) {
  auto info = ParseUrl(url_);
  ASSERT_TRUE(info.ok());
  Connection conn(*info, {}, milliseconds(5000));
  ::testing::internal::CaptureStderr();
  auto r = conn.ExecScript("DO $$ BEGIN RAISE NOTICE 'a notice from the database'; END $$");
  const std::string printed = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(printed.find("a notice from the database"), std::string::npos) << printed;
}

// Its own PostgreSQL (never the shared fixture's), stopped under the store.
TEST_F(PgStoreTest, ALostServerFailsCallsWithinTheStatementTimeout) {
  const char* script = RM_PG_FIXTURE_SCRIPT;
  const std::string own = (std::filesystem::current_path() / ("pg-lost-" + std::to_string(getpid()))).string();
  ASSERT_EQ(std::system(("bash " + std::string(script) + " up " + own + " >/dev/null").c_str()), 0);
  std::ifstream in(own + "/url");
  std::string url;
  std::getline(in, url);
  auto s = std::move(OpenMetaStore(url + "?statement_timeout=1000&pool=2")).value();
  const int64_t uid = MakeUser(*s, "ada");
  ASSERT_TRUE(s->GetUser(uid).ok());
  // A server that stops answering (its processes stopped): the call gives up
  // at its deadline (statement timeout + 2 s) instead of hanging.
  const std::string pids = "$(cat " + own + "/pids)";
  ASSERT_EQ(std::system(("p=$(head -1 " + own + "/data/postmaster.pid); { echo $p; pgrep -P $p; } > " + own +
                         "/pids && kill -STOP " + pids).c_str()),
            0);
  // 30 reads at once on a pool of 2, and a write too big for the socket's
  // buffers (its send would block): each fails by its deadline, none waits
  // for a connection or a send longer, none connects again in turn.
  auto t0 = steady_clock::now();
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < 30; ++i) {
    calls.push_back(std::async(std::launch::async, [&] { return s->GetUser(uid).status(); }));
  }
  calls.push_back(std::async(std::launch::async, [&] {
    return s->CreateUser(User{0, std::string(64 << 20, 'x'), Role::kUser, "", 1}).status();
  }));
  for (auto& call : calls) {
    const Status st = call.get();
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  }
  EXPECT_LT(steady_clock::now() - t0, milliseconds(3000 + 2500));
  // For a short back-off after, calls fail at once, saying so.
  t0 = steady_clock::now();
  auto fast = s->GetUser(uid);
  EXPECT_EQ(fast.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(fast.status().message().find("retrying in"), std::string::npos) << fast.status().ToString();
  EXPECT_EQ(s->CreateUser(User{0, "bob", Role::kUser, "", 1}).status().code(), StatusCode::kUnavailable);
  EXPECT_LT(steady_clock::now() - t0, milliseconds(500));
  ASSERT_EQ(std::system(("kill -CONT " + pids).c_str()), 0);
  // Back: the broken connections are reopened once the back-off is over.
  std::this_thread::sleep_for(kConnectBackOff + milliseconds(100));
  EXPECT_TRUE(s->GetUser(uid).ok());
  EXPECT_TRUE(s->CreateUser(User{0, "bob", Role::kUser, "", 1}).ok());
  // A server that is gone.
  ASSERT_EQ(std::system(("bash " + std::string(script) + " down " + own).c_str()), 0);
  for (int i = 0; i < 3; ++i) {
    t0 = steady_clock::now();
    EXPECT_EQ(s->GetUser(uid).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(s->CreateUser(User{0, "bob" + std::to_string(i), Role::kUser, "", 1}).status().code(),
              StatusCode::kUnavailable);
    EXPECT_EQ(s->leadership()->Current().status().code(), StatusCode::kUnavailable);
    EXPECT_LT(steady_clock::now() - t0, milliseconds(3 * 3000));
  }
}

}  // namespace
}  // namespace ringmaster::store::postgres
