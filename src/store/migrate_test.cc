// CopyStore (`ringmaster admin migrate`) from SQLite to SQLite, and to a real
// PostgreSQL when the `postgres` fixture runs (RM_PG_URL_FILE); and the
// online backup of a database a writer keeps writing (store/sqlite/backup.h).
#include "store/migrate.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "store/sqlite/backup.h"

namespace ringmaster::store {
namespace {

template <typename... Args>
std::string Join(const Args&... args) {
  std::ostringstream os;
  ((os << args << '|'), ...);
  return os.str();
}

std::string Str(const User& u) {
  return Join(u.id, u.name, RoleName(u.role), u.password_hash, u.created_ms, u.disabled, u.file_quota_bytes, u.file_bytes,
              u.max_priority, u.host_network);
}
std::string Str(const Token& t) {
  return Join(t.id, t.user_id, t.name, t.hash, t.created_ms, t.scope, t.node, t.expires_ms, t.session);
}
std::string Str(const Node& n) {
  return Join(n.id, n.name, n.cpu_milli, n.memory_bytes, n.gpu_count, n.gpus_json, n.gpu_model, n.registered_ms,
              n.last_heartbeat_ms, n.cpu_util, n.memory_used_bytes, n.agent_version, n.address, n.port_lo, n.port_hi,
              n.labels_json, n.executors, n.network, n.overlay_block, n.cordoned, n.cordon_reason, n.draining,
              n.fence_after_ms);
}
std::string Str(const Job& j) {
  return Join(j.id, j.user_id, j.name, j.kind, StateName(j.state), j.reason, j.spec_json, j.priority, j.replicas,
              j.max_restarts, j.restarts, j.stop_state ? StateName(*j.stop_state) : "-", j.stop_reason, j.created_ms,
              j.updated_ms, j.started_ms, j.finished_ms, j.not_before_ms, j.resize_to, j.service_s, j.submit_key);
}
std::string Str(const Task& t) {
  return Join(t.id, t.job_id, t.rank, StateName(t.state), t.reason, t.node_id, t.attempt, static_cast<int>(t.desired),
              t.exit_code ? std::to_string(*t.exit_code) : "null", t.cpu_milli, t.memory_bytes, t.gpus, t.port,
              t.gpu_indices, t.overlay_ip, t.created_ms, t.started_ms, t.finished_ms);
}
std::string Str(const Event& e) {
  return Join(e.id, e.job_id, e.task_id, e.rank, e.ts_ms, e.from_state, e.to_state, e.reason);
}
std::string Str(const AuditEntry& a) {
  return Join(a.id, a.ts_ms, a.user, a.address, a.action, a.target, a.outcome, a.detail);
}
std::string Str(const RegistryCredential& c) { return Join(c.user_id, c.registry, c.username, c.sealed, c.updated_ms); }

template <typename T>
std::vector<std::string> Strs(const StatusOr<std::vector<T>>& items) {
  EXPECT_TRUE(items.ok()) << items.status().ToString();
  std::vector<std::string> out;
  if (items.ok()) {
    for (const T& i : *items) out.push_back(Str(i));
  }
  return out;
}

// Everything the store holds, as the MetaStore API reads it back.
std::vector<std::string> Dump(MetaStore& s) {
  std::vector<std::string> out;
  auto add = [&](const std::string& what, std::vector<std::string> rows) {
    for (std::string& r : rows) out.push_back(what + ": " + r);
  };
  add("user", Strs(s.ListUsers()));
  add("node", Strs(s.ListNodes()));
  add("audit", Strs(s.ListAudit(100000, "", "")));
  add("site credential", Strs(s.ListRegistryCredentials(0)));
  auto users = s.ListUsers();
  for (const User& u : users.ok() ? *users : std::vector<User>{}) {
    add("token", Strs(s.ListTokens(u.id)));
    add("credential", Strs(s.ListRegistryCredentials(u.id)));
  }
  JobFilter all;
  all.limit = -1;
  auto jobs = s.ListJobs(all);
  EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const Job& j : jobs.ok() ? jobs->jobs : std::vector<Job>{}) {
    out.push_back("job: " + Str(j));
    add("task", Strs(s.ListTasks(j.id)));
    add("event", Strs(s.ListEvents(j.id)));
  }
  return out;
}

Token AToken(int64_t uid, const std::string& name, const std::string& hash, int64_t ms, const std::string& scope) {
  Token t;
  t.user_id = uid;
  t.name = name;
  t.hash = hash;
  t.created_ms = ms;
  t.scope = scope;
  return t;
}

Job AJob(int64_t uid, const std::string& name, const std::string& spec = "{}") {
  Job j;
  j.user_id = uid;
  j.name = name;
  j.kind = "batch";
  j.spec_json = spec;
  return j;
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_migrate_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<MetaStore> Open(const std::string& url) {
    auto s = OpenMetaStore(url);
    EXPECT_TRUE(s.ok()) << url << ": " << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string Sqlite(const std::string& name) { return "sqlite:" + (dir_ / name).string(); }

  // A site: two users (one disabled, with a quota), tokens of several kinds,
  // a node, jobs with tasks and events in several states (a float, a NULL
  // exit code, a submit key), audit entries, registry logins, and a deleted
  // job holding the highest id, which must never come back. Returns that id.
  int64_t FillSite(MetaStore& s) {
    const int64_t alice = *s.CreateUser(User{0, "alice", Role::kAdmin, "argon2-hash", 11});
    const int64_t bob = *s.CreateUser(User{0, "bob", Role::kUser, "", 12});
    EXPECT_TRUE(s.SetUserDisabled(bob, true).ok());
    EXPECT_TRUE(s.SetUserFileQuota(alice, 1 << 30).ok());
    EXPECT_TRUE(s.SetUserPrivileges(bob, 10, true).ok());
    EXPECT_TRUE(s.AddUserFileBytes(alice, 12345).ok());
    EXPECT_TRUE(s.CreateToken(AToken(alice, "cli", "hash-a", 13, "admin")).ok());
    EXPECT_TRUE(s.CreateToken(Token{0, bob, "web", "hash-b", 14, "submit", "", 99999, true}).ok());
    const int64_t gone_token = *s.CreateToken(AToken(bob, "old", "hash-c", 15, "read"));
    EXPECT_TRUE(s.DeleteToken(gone_token).ok());
    Node n;
    n.name = "node-a";
    n.cpu_milli = 4000;
    n.memory_bytes = 8LL << 30;
    n.cpu_util = 0.123456789012345678;
    n.labels_json = R"({"zone":"a"})";
    const int64_t node = *s.UpsertNode(n);
    EXPECT_TRUE(s.CreateToken(Token{0, alice, "agent node-a", "hash-n", 16, "agent", "node-a"}).ok());

    Task tmpl;
    tmpl.cpu_milli = 1000;
    tmpl.memory_bytes = 1 << 20;
    Job done;
    done.user_id = alice;
    done.name = "trained";
    done.kind = "distributed";
    done.spec_json = R"({"command":["train","--lr","0.1"],"note":"quote \" and ünïcode"})";
    done.replicas = 2;
    done.submit_key = "0123abcd";
    const int64_t done_id = *s.CreateJob(done, tmpl);
    auto tasks = *s.ListTasks(done_id);
    for (Task t : tasks) {
      t.state = State::kSucceeded;
      t.node_id = node;
      t.attempt = 1;
      t.exit_code = 0;
      t.port = 30000 + t.rank;
      t.gpu_indices = "0,1";
      EXPECT_TRUE(s.UpdateTask(t).ok());
      EXPECT_TRUE(s.AddEvent(Event{0, done_id, t.id, t.rank, 20, "RUNNING", "SUCCEEDED", "exit 0"}).ok());
    }
    Job updated = *s.GetJob(done_id);
    updated.state = State::kSucceeded;
    updated.service_s = 1.0 / 3.0;
    updated.finished_ms = 21;
    EXPECT_TRUE(s.UpdateJob(updated).ok());
    EXPECT_TRUE(s.AddEvent(Event{0, done_id, 0, -1, 21, "RUNNING", "SUCCEEDED", ""}).ok());
    Job pending;
    pending.user_id = bob;
    pending.name = "waiting";
    pending.kind = "batch";
    pending.spec_json = "{}";
    pending.stop_state = State::kCancelled;
    EXPECT_TRUE(s.CreateJob(pending, tmpl).ok());
    EXPECT_TRUE(s.AddAudit(AuditEntry{0, 30, "alice", "127.0.0.1", "login", "user alice", "ok", ""}).ok());
    EXPECT_TRUE(s.AddAudit(AuditEntry{0, 31, "", "10.0.0.2", "login", "user mallory", "denied", "no such user"}).ok());
    EXPECT_TRUE(s.PutRegistryCredential(RegistryCredential{0, "docker.io", "site", "c2VhbGVk", 40}).ok());
    EXPECT_TRUE(s.PutRegistryCredential(RegistryCredential{alice, "reg.example:5000", "al", "c2VhbGVkMg==", 41}).ok());
    Job doomed = pending;
    doomed.name = "deleted";
    doomed.stop_state.reset();
    const int64_t deleted = *s.CreateJob(doomed, tmpl);
    EXPECT_TRUE(s.DeleteJob(deleted).ok());
    return deleted;
  }

  // Copies a filled site from a fresh SQLite store into `to` and checks it.
  void MigrateInto(MetaStore& to) {
    auto from = Open(Sqlite("from.db"));
    ASSERT_NE(from, nullptr);
    const int64_t deleted = FillSite(*from);
    std::vector<std::string> seen;
    auto copied = CopyStore(*from, to, [&](const CopiedTable& t, bool done) {
      if (done) seen.push_back(t.table);
    });
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    EXPECT_EQ(seen.size(), std::size(kCopiedTables));
    for (const CopiedTable& t : *copied) {
      if (t.table == std::string("jobs")) {
        EXPECT_EQ(t.last_id, deleted);
      }
      if (t.table == std::string("users")) {
        EXPECT_EQ(t.rows, 2);
      }
    }
    EXPECT_EQ(Dump(*from), Dump(to));
    EXPECT_FALSE(Dump(to).empty());
    // The old tokens still find their users.
    auto tok = to.GetTokenByHash("hash-b");
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    EXPECT_EQ(to.GetUser(tok->user_id)->name, "bob");
    // Ids are never reused: the deleted job's id does not come back, nor a
    // deleted token's; and the next ids follow the copied ones.
    auto next = to.CreateJob(AJob(tok->user_id, "new"), Task{});
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_GT(*next, deleted);
    EXPECT_EQ(to.GetJob(deleted).status().code(), StatusCode::kNotFound);
    auto next_token = to.CreateToken(AToken(tok->user_id, "new", "hash-new", 50, "read"));
    ASSERT_TRUE(next_token.ok());
    EXPECT_GT(*next_token, 4);
    auto next_user = to.CreateUser(User{0, "carol", Role::kUser, "", 51});
    ASSERT_TRUE(next_user.ok());
    EXPECT_EQ(*next_user, 3);
    // A submit key keeps its job.
    auto keyed = to.GetJobBySubmitKey(1, "0123abcd");
    ASSERT_TRUE(keyed.ok()) << keyed.status().ToString();
    EXPECT_EQ(keyed->name, "trained");
    // A second migration into the now full store is refused, writing nothing.
    const auto before = Dump(to);
    auto again = CopyStore(*from, to);
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
    EXPECT_NE(again.status().message().find("already holds data"), std::string::npos) << again.status().message();
    EXPECT_EQ(Dump(to), before);
  }

  // A site whose SQLite file holds what no backend stores now, as an old
  // one may: a failed login's junk name in the audit log (a NUL byte, bytes
  // that are not UTF-8). Written through the table copy, which binds them
  // as they are.
  std::unique_ptr<MetaStore> JunkSite(const std::string& file = "junk.db", const std::string& ts_ms = "5") {
    auto from = Open(Sqlite(file));
    if (from == nullptr) return nullptr;
    EXPECT_TRUE(from->CreateUser(User{0, "ada", Role::kUser, "", 1}).ok());
    TableCopy* t = from->tables();
    auto audit = t->ReadTable("audit");
    EXPECT_TRUE(audit.ok());
    const std::vector<std::pair<std::string, std::string>> values = {
        {"id", "1"}, {"ts_ms", ts_ms}, {"user", ""}, {"address", "127.0.0.1"}, {"action", "login"},
        {"target", std::string("user bob\0x\xff", 11)}, {"outcome", "failed"}, {"detail", "caf\xc3\xa9"}};
    auto& row = audit->rows.emplace_back();
    for (const std::string& col : audit->columns) {
      auto it = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == col; });
      row.emplace_back(it == values.end() ? std::optional<std::string>() : it->second);
    }
    const Status st = t->WriteTable("audit", *audit);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return from;
  }

  // The junk is copied with U+FFFD in its place, counted, nothing else changed.
  void MigrateJunkInto(MetaStore& to) {
    auto from = JunkSite();
    ASSERT_NE(from, nullptr);
    auto copied = CopyStore(*from, to);
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    for (const CopiedTable& t : *copied) EXPECT_EQ(t.repaired, t.table == "audit" ? 1 : 0) << t.table;
    auto entries = to.ListAudit(10, "", "");
    ASSERT_TRUE(entries.ok() && entries->size() == 1u);
    EXPECT_EQ((*entries)[0].target, "user bob\xef\xbf\xbdx\xef\xbf\xbd");
    EXPECT_EQ((*entries)[0].detail, "caf\xc3\xa9");
    EXPECT_TRUE(to.GetUserByName("ada").ok());
    // The content check compares the text columns (numbers are written differently by each backend).
    auto read = to.tables()->ReadTable("audit");
    ASSERT_TRUE(read.ok());
    ASSERT_EQ(read->text.size(), read->columns.size());
    for (size_t c = 0; c < read->columns.size(); ++c) {
      const bool text = read->columns[c] != "id" && read->columns[c] != "ts_ms";
      EXPECT_EQ(read->text[c], text) << read->columns[c];
    }
  }

  // A database of this test's own on the fixture's server; "" to skip.
  std::string PostgresDatabase() {
    const char* url_file = std::getenv("RM_PG_URL_FILE");
    if (url_file == nullptr) return "";
    std::ifstream in(url_file);
    std::getline(in, pg_url_);
    pg_db_ = "rm_migrate_" + std::to_string(getpid());
    EXPECT_EQ(std::system(("psql -q '" + pg_url_ + "' -c 'DROP DATABASE IF EXISTS " + pg_db_ +
                           "' -c 'CREATE DATABASE " + pg_db_ + "' > /dev/null").c_str()), 0);
    return pg_url_.substr(0, pg_url_.rfind('/') + 1) + pg_db_;
  }
  void DropPostgresDatabase() {
    EXPECT_EQ(std::system(("psql -q '" + pg_url_ + "' -c 'DROP DATABASE " + pg_db_ + "' > /dev/null").c_str()), 0);
  }

  std::filesystem::path dir_;
  std::string pg_url_, pg_db_;
};

TEST_F(MigrateTest, SqliteToSqliteRepairsTextNoBackendStores) {
  auto to = Open(Sqlite("to.db"));
  ASSERT_NE(to, nullptr);
  MigrateJunkInto(*to);
}

TEST_F(MigrateTest, SqliteToPostgresRepairsTextNoBackendStores) {
  const std::string url = PostgresDatabase();
  if (url.empty()) GTEST_SKIP() << "RM_PG_URL_FILE is unset: runs with the postgres fixture";
  {
    auto to = Open(url);
    ASSERT_NE(to, nullptr);
    MigrateJunkInto(*to);
  }
  DropPostgresDatabase();
}

// A row the destination refuses late in the copy (a number SQLite kept as
// text) fails the whole copy, and nothing of it is left: another try needs
// no emptying first.
TEST_F(MigrateTest, SqliteToPostgresLeavesNothingOfAFailedCopy) {
  const std::string url = PostgresDatabase();
  if (url.empty()) GTEST_SKIP() << "RM_PG_URL_FILE is unset: runs with the postgres fixture";
  {
    auto from = JunkSite("bad.db", "yesterday");
    ASSERT_NE(from, nullptr);
    auto uid = from->GetUserByName("ada");
    ASSERT_TRUE(uid.ok());
    ASSERT_TRUE(from->CreateJob(AJob(uid->id, "j"), Task{}).ok());
    auto to = Open(url);
    ASSERT_NE(to, nullptr);
    auto failed = CopyStore(*from, *to);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument) << failed.status().ToString();
    EXPECT_NE(failed.status().message().find("audit"), std::string::npos) << failed.status().ToString();
    EXPECT_EQ(*to->CountUsers(), 0);
    JobFilter all;
    all.limit = -1;
    EXPECT_TRUE(to->ListJobs(all)->jobs.empty());
    EXPECT_TRUE(to->ListAudit(10, "", "")->empty());
    // The store is sound and empty: a copy of a sound site goes in.
    auto good = JunkSite("good.db");
    ASSERT_NE(good, nullptr);
    auto copied = CopyStore(*good, *to);
    EXPECT_TRUE(copied.ok()) << copied.status().ToString();
  }
  DropPostgresDatabase();
}

TEST_F(MigrateTest, SqliteToSqliteKeepsEveryRowAndId) {
  auto to = Open(Sqlite("to.db"));
  ASSERT_NE(to, nullptr);
  MigrateInto(*to);
}

TEST_F(MigrateTest, SqliteToPostgresKeepsEveryRowAndId) {
  const char* url_file = std::getenv("RM_PG_URL_FILE");
  if (url_file == nullptr) GTEST_SKIP() << "RM_PG_URL_FILE is unset: runs with the postgres fixture";
  std::ifstream in(url_file);
  std::string url;
  ASSERT_TRUE(std::getline(in, url)) << "cannot read " << url_file;
  // A database of this test's own on the fixture's server.
  const std::string db = "rm_migrate_" + std::to_string(getpid());
  const std::string base = url.substr(0, url.rfind('/') + 1);
  ASSERT_EQ(std::system(("psql -q '" + url + "' -c 'DROP DATABASE IF EXISTS " + db + "' -c 'CREATE DATABASE " + db +
                         "' > /dev/null").c_str()), 0);
  {
    auto to = Open(base + db);
    ASSERT_NE(to, nullptr);
    MigrateInto(*to);
  }
  EXPECT_EQ(std::system(("psql -q '" + url + "' -c 'DROP DATABASE " + db + "' > /dev/null").c_str()), 0);
}

TEST_F(MigrateTest, StoresWithoutTablesAreRefused) {
  auto memory = Open("memory:");
  auto sqlite = Open(Sqlite("a.db"));
  ASSERT_NE(memory, nullptr);
  ASSERT_NE(sqlite, nullptr);
  EXPECT_EQ(CopyStore(*memory, *sqlite).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CopyStore(*sqlite, *memory).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(MigrateTest, TableCopyRefusesUnknownTablesAndColumns) {
  auto s = Open(Sqlite("a.db"));
  ASSERT_NE(s, nullptr);
  TableCopy* t = s->tables();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ReadTable("sqlite_master").status().code(), StatusCode::kInvalidArgument);
  TableRows bad{{"id", "name; DROP TABLE users"}, {}};
  EXPECT_EQ(t->WriteTable("users", bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*t->LastId("registry_credentials"), 0);
  EXPECT_TRUE(t->SetLastId("registry_credentials", 0).ok());
  EXPECT_TRUE(t->SetLastId("jobs", 41).ok());
  EXPECT_EQ(*t->LastId("jobs"), 41);
  EXPECT_TRUE(t->SetLastId("jobs", 7).ok());  // never backwards
  EXPECT_EQ(*t->LastId("jobs"), 41);
  auto uid = s->CreateUser(User{0, "a", Role::kUser, "", 1});
  EXPECT_EQ(*s->CreateJob(AJob(*uid, "j"), Task{}), 42);
}

// The online backup: a writer keeps submitting jobs (each one a job and its
// tasks in one transaction) while the copy is taken page by page; the copy
// opens as a store, holds every job written before it began, and no job
// without its tasks (a consistent snapshot).
TEST_F(MigrateTest, OnlineBackupIsConsistentWhileAWriterWrites) {
  const std::string path = (dir_ / "meta.db").string();
  auto s = Open("sqlite:" + path);
  ASSERT_NE(s, nullptr);
  const int64_t uid = *s->CreateUser(User{0, "alice", Role::kAdmin, "", 1});
  ASSERT_TRUE(s->CreateToken(AToken(uid, "cli", "hash-a", 2, "admin")).ok());
  Task tmpl;
  tmpl.cpu_milli = 1000;
  Job j = AJob(uid, "job", std::string(2000, 'x'));
  j.replicas = 3;
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(s->CreateJob(j, tmpl).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    while (!stop) {
      if (s->CreateJob(j, tmpl).ok()) ++written;
    }
  });
  while (written < 20) std::this_thread::yield();
  const std::string to = (dir_ / "backup.db").string();
  int steps = 0;
  int64_t last_done = 0, total = 0;
  Status st = sqlite::Backup(path, to, [&](int64_t done, int64_t t) {
    ++steps;
    last_done = done;
    total = t;
  }, 8);
  stop = true;
  writer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GT(steps, 10) << "the copy was not taken in steps";
  EXPECT_EQ(last_done, total);
  EXPECT_GT(written.load(), 20);
  struct stat sb;
  ASSERT_EQ(::stat(to.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(to + ".tmp"));

  auto copy = Open("sqlite:" + to);
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->Damage().empty());
  EXPECT_EQ(copy->GetUserByName("alice")->id, uid);
  EXPECT_TRUE(copy->GetTokenByHash("hash-a").ok());
  JobFilter all;
  all.limit = -1;
  auto jobs = copy->ListJobs(all);
  ASSERT_TRUE(jobs.ok());
  EXPECT_GE(jobs->total, 520);
  EXPECT_LE(jobs->total, 500 + written.load());
  for (const Job& cj : jobs->jobs) {
    ASSERT_EQ(copy->ListTasks(cj.id)->size(), 3u) << "job " << cj.id << " without its tasks";
  }
  // The copy is a store of its own: it takes writes, the original goes on.
  EXPECT_TRUE(copy->CreateJob(j, tmpl).ok());
  EXPECT_EQ(sqlite::Backup((dir_ / "none.db").string(), to).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::store
