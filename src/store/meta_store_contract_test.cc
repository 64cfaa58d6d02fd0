// The MetaStore contract: one suite, run on every backend (MetaStoreContract.*/sqlite,
// .../memory, .../postgres). A backend passes it or is not a MetaStore. What only one
// backend has (migrations, damage, a full disk, leadership) is tested beside it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "store/meta_store.h"
#include "store/meta_store_contract.h"

namespace ringmaster::store {
namespace {

using namespace contract;  // NOLINT: the fixture and builders of this suite


TEST_P(MetaStoreContract, UsersAreUniqueByNameAndKeepTheirFields) {
  const int64_t uid = *store_->CreateUser(User{0, "ada", Role::kAdmin, "pw-hash", 42, false, 7, 9});
  auto dup = store_->CreateUser(User{0, "ada", Role::kUser, "", 2});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*store_->CountUsers(), 1);
  auto u = store_->GetUser(uid);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->name, "ada");
  EXPECT_EQ(u->role, Role::kAdmin);
  EXPECT_EQ(u->password_hash, "pw-hash");
  EXPECT_EQ(u->created_ms, 42);
  EXPECT_EQ(u->file_quota_bytes, 0);  // set by SetUserFileQuota only
  EXPECT_EQ(u->file_bytes, 0);
  EXPECT_EQ(store_->GetUserByName("ada")->id, uid);
  EXPECT_EQ(store_->GetUserByName("nobody").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetUser(uid + 100).status().code(), StatusCode::kNotFound);
  const int64_t bob = MakeUser("bob");
  auto all = *store_->ListUsers();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, uid);  // by id
  EXPECT_EQ(all[1].id, bob);
}

TEST_P(MetaStoreContract, UserFlagsQuotaAndFileBytes) {
  const int64_t uid = MakeUser("ada");
  EXPECT_FALSE(store_->GetUser(uid)->disabled);
  ASSERT_TRUE(store_->SetUserDisabled(uid, true).ok());
  EXPECT_TRUE(store_->GetUserByName("ada")->disabled);
  ASSERT_TRUE(store_->SetUserFileQuota(uid, 1000).ok());
  ASSERT_TRUE(store_->AddUserFileBytes(uid, 300).ok());
  ASSERT_TRUE(store_->AddUserFileBytes(uid, -100).ok());
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 200);
  ASSERT_TRUE(store_->AddUserFileBytes(uid, -500).ok());
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 0);  // never below 0
  ASSERT_TRUE(store_->SetUserFileBytes(uid, 77).ok());
  auto u = *store_->GetUser(uid);
  EXPECT_EQ(u.file_bytes, 77);
  EXPECT_EQ(u.file_quota_bytes, 1000);
  EXPECT_EQ(u.max_priority, 0);  // no privileges until an admin grants them
  EXPECT_FALSE(u.host_network);
  ASSERT_TRUE(store_->SetUserPrivileges(uid, -250, true).ok());
  u = *store_->GetUserByName("ada");
  EXPECT_EQ(u.max_priority, -250);
  EXPECT_TRUE(u.host_network);
  EXPECT_EQ(u.file_quota_bytes, 1000);  // untouched
  ASSERT_TRUE(store_->SetUserPrivileges(uid, 1000, false).ok());
  EXPECT_EQ((*store_->ListUsers())[0].max_priority, 1000);
  EXPECT_FALSE((*store_->ListUsers())[0].host_network);
  for (Status st : {store_->SetUserDisabled(999, true), store_->SetUserFileQuota(999, 1),
                    store_->SetUserPrivileges(999, 1, true),
                    store_->AddUserFileBytes(999, 1), store_->SetUserFileBytes(999, 1)}) {
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  }
}

TEST_P(MetaStoreContract, TokensAreScopedToTheirUser) {
  const int64_t u1 = MakeUser("ada"), u2 = MakeUser("bob");
  const int64_t tid = *store_->CreateToken(Token{0, u1, "cli", "h1", 5, "read", ""});
  const int64_t agent = *store_->CreateToken(Token{0, u2, "agent", "h2", 6, "agent", "gpu-1"});
  auto t = store_->GetTokenByHash("h1");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, tid);
  EXPECT_EQ(t->user_id, u1);
  EXPECT_EQ(t->name, "cli");
  EXPECT_EQ(t->created_ms, 5);
  EXPECT_EQ(t->scope, "read");
  EXPECT_EQ(store_->GetToken(agent)->node, "gpu-1");
  EXPECT_EQ(*store_->CountTokens(u1), 1);
  EXPECT_EQ(store_->ListTokens(0)->size(), 2u);
  EXPECT_EQ(store_->ListTokens(u2)->size(), 1u);
  EXPECT_EQ((*store_->ListTokens(u2))[0].id, agent);
  EXPECT_FALSE(store_->CreateToken(Token{0, u1, "again", "h1", 7, "read", ""}).ok());  // hashes are unique
  EXPECT_FALSE(store_->CreateToken(Token{0, 999, "orphan", "h3", 7, "read", ""}).ok());  // of no user
  EXPECT_TRUE(store_->DeleteToken(tid).ok());
  EXPECT_EQ(store_->DeleteToken(tid).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetTokenByHash("h1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetToken(tid).status().code(), StatusCode::kNotFound);
}

TEST_P(MetaStoreContract, SessionsAreTokensWithAnExpiry) {
  const int64_t u = MakeUser("ada");
  Token session{0, u, "session", "hs", 5, "submit", ""};
  session.expires_ms = 12345;
  session.session = true;
  const int64_t sid = *store_->CreateToken(session);
  (void)*store_->CreateToken(Token{0, u, "cli", "ht", 6, "read", ""});
  auto t = store_->GetTokenByHash("hs");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, sid);
  EXPECT_EQ(t->expires_ms, 12345);
  EXPECT_TRUE(t->session);
  auto plain = store_->GetTokenByHash("ht");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->expires_ms, 0);
  EXPECT_FALSE(plain->session);
  EXPECT_TRUE((*store_->ListTokens(u))[0].session);
}

TEST_P(MetaStoreContract, RegistryLoginsAreOnePerUserAndRegistry) {
  const int64_t u1 = MakeUser("ada"), u2 = MakeUser("bob");
  ASSERT_TRUE(store_->PutRegistryCredential({u1, "reg.example:5000", "ada", "sealed-1", 10}).ok());
  ASSERT_TRUE(store_->PutRegistryCredential({u1, "docker.io", "ada-hub", "sealed-2", 11}).ok());
  ASSERT_TRUE(store_->PutRegistryCredential({0, "reg.example:5000", "site", "sealed-3", 12}).ok());
  // Put replaces the login of that user and registry only.
  ASSERT_TRUE(store_->PutRegistryCredential({u1, "reg.example:5000", "ada2", "sealed-4", 13}).ok());
  auto c = store_->GetRegistryCredential(u1, "reg.example:5000");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->username, "ada2");
  EXPECT_EQ(c->sealed, "sealed-4");
  EXPECT_EQ(c->updated_ms, 13);
  EXPECT_EQ(store_->GetRegistryCredential(0, "reg.example:5000")->username, "site");
  EXPECT_EQ(store_->GetRegistryCredential(u2, "reg.example:5000").status().code(), StatusCode::kNotFound);
  auto mine = store_->ListRegistryCredentials(u1);
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->size(), 2u);
  EXPECT_EQ((*mine)[0].registry, "docker.io");  // by registry
  EXPECT_TRUE(store_->ListRegistryCredentials(u2)->empty());
  EXPECT_EQ(store_->ListRegistryCredentials(0)->size(), 1u);
  EXPECT_TRUE(store_->DeleteRegistryCredential(u1, "docker.io").ok());
  EXPECT_EQ(store_->DeleteRegistryCredential(u1, "docker.io").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListRegistryCredentials(u1)->size(), 1u);
}

TEST_P(MetaStoreContract, NodesUpsertByNameAndKeepWhatTheServerSet) {
  Node n;
  n.name = "vm";
  n.cpu_milli = 2000;
  n.labels_json = R"({"rack":"r1"})";
  n.executors = "process,runc";
  n.network = "vxlan";
  n.overlay_block = 3;
  n.port_lo = 41000;
  n.port_hi = 41999;
  const int64_t a = *store_->UpsertNode(n);
  ASSERT_TRUE(store_->SetNodeCordon(a, true, "disk", true).ok());
  ASSERT_TRUE(store_->UpdateNodeStatus(a, 99, 0.5, 1234).ok());
  ASSERT_TRUE(store_->SetNodeFence(a, 15000).ok());
  n.cpu_milli = 4000;
  const int64_t b = *store_->UpsertNode(n);
  EXPECT_EQ(a, b);
  auto got = store_->GetNode(a);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->cpu_milli, 4000);
  EXPECT_EQ(got->labels_json, R"({"rack":"r1"})");
  EXPECT_EQ(got->executors, "process,runc");
  EXPECT_EQ(got->network, "vxlan");
  EXPECT_EQ(got->overlay_block, 3);
  EXPECT_EQ(got->port_hi, 41999);
  EXPECT_TRUE(got->cordoned);  // a registration keeps an admin's cordon and drain
  EXPECT_EQ(got->cordon_reason, "disk");
  EXPECT_TRUE(got->draining);
  EXPECT_EQ(got->memory_used_bytes, 1234);
  EXPECT_EQ(got->cpu_util, 0.5);
  EXPECT_EQ(got->fence_after_ms, 0);  // a registration says its fencing window anew
  Node other;
  other.name = "vm2";
  const int64_t c = *store_->UpsertNode(other);
  EXPECT_NE(c, a);
  EXPECT_EQ(store_->ListNodes()->size(), 2u);
  ASSERT_TRUE(store_->DeleteNode(a).ok());
  EXPECT_EQ(store_->GetNode(a).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteNode(a).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->UpdateNodeStatus(a, 1, 0, 0).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->SetNodeCordon(a, false, "", false).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->SetNodeFence(a, 1).code(), StatusCode::kNotFound);
  EXPECT_GT(*store_->UpsertNode(n), c);  // a node that comes back is a new row
}

TEST_P(MetaStoreContract, AuditLogIsNewestFirstFilteredAndPruned) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->AddAudit({0, i, i % 2 ? "ada" : "root", "127.0.0.1", i < 4 ? "login" : "user.disable",
                                  "user ada", "ok", "d" + std::to_string(i)}).ok());
  }
  auto all = *store_->ListAudit(10, "", "");
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].action, "user.disable");  // newest first
  EXPECT_EQ(all[0].detail, "d4");
  EXPECT_EQ(all[0].address, "127.0.0.1");
  EXPECT_EQ(all[0].target, "user ada");
  EXPECT_EQ(all[0].outcome, "ok");
  EXPECT_EQ(all[0].ts_ms, 4);
  EXPECT_EQ(store_->ListAudit(10, "ada", "")->size(), 2u);
  EXPECT_EQ(store_->ListAudit(10, "", "login")->size(), 4u);
  EXPECT_EQ(store_->ListAudit(10, "ada", "user.disable")->size(), 0u);
  EXPECT_EQ(store_->ListAudit(3, "", "")->size(), 3u);
  ASSERT_TRUE(store_->PruneAudit(2).ok());
  auto kept = *store_->ListAudit(10, "", "");
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[1].detail, "d3");  // the newest are kept
}

TEST_P(MetaStoreContract, AFailedTransactionLeavesNoTrace) {
  const int64_t uid = MakeUser("ada");
  const int64_t kept = MakeJob(uid);
  Status st = store_->InTransaction([&]() -> Status {
    Job job;
    job.user_id = uid;
    job.name = "doomed";
    job.spec_json = "{}";
    auto id = store_->CreateJob(job, Task{});
    EXPECT_TRUE(id.ok());
    EXPECT_TRUE(store_->AddEvent({0, kept, 0, -1, 1, "", "PENDING", "x"}).ok());
    EXPECT_TRUE(store_->AddUserFileBytes(uid, 10).ok());
    EXPECT_TRUE(store_->CreateToken(Token{0, uid, "t", "h", 1, "read", ""}).ok());
    EXPECT_TRUE(store_->DeleteJob(kept).ok());
    return Aborted("changed my mind");
  });
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  auto jobs = store_->ListJobs(Where(0, {}, "", "", 10))->jobs;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, kept);
  EXPECT_EQ(store_->ListTasks(kept)->size(), 1u);
  EXPECT_TRUE(store_->ListEvents(kept)->empty());
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 0);
  EXPECT_TRUE(store_->ListTokens(0)->empty());
  // And a transaction that succeeds keeps everything.
  ASSERT_TRUE(store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->AddUserFileBytes(uid, 10));
    return store_->AddEvent({0, kept, 0, -1, 1, "", "PENDING", "x"});
  }).ok());
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 10);
  EXPECT_EQ(store_->ListEvents(kept)->size(), 1u);
}

// A transaction whose function throws is rolled back and ends: the store
// takes the next transaction (the lock, the connection and this thread's
// place in it are all released).
TEST_P(MetaStoreContract, ATransactionThatThrowsLeavesNoTrace) {
  const int64_t uid = MakeUser("ada");
  EXPECT_THROW((void)store_->InTransaction([&]() -> Status {
    EXPECT_TRUE(store_->AddUserFileBytes(uid, 10).ok());
    EXPECT_TRUE(store_->InTransaction([&]() -> Status {
      EXPECT_TRUE(store_->CreateUser(User{0, "inner", Role::kUser, "", 1}).ok());
      throw std::runtime_error("a bug");
    }).ok());
    return Status::Ok();
  }),
               std::runtime_error);
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 0);
  EXPECT_EQ(store_->GetUserByName("inner").status().code(), StatusCode::kNotFound);
  // The next transaction is an outermost one of its own, and commits.
  Status st = store_->InTransaction([&]() -> Status { return store_->AddUserFileBytes(uid, 5); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 5);
  // From another thread too (nothing is left held).
  std::thread other([&] { EXPECT_TRUE(store_->AddUserFileBytes(uid, 1).ok()); });
  other.join();
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 6);
}

// Text a SQL backend cannot hold (PostgreSQL's text ends at a NUL and is
// UTF-8) is refused by every backend alike, before anything is stored: a
// name with a NUL must never be taken for the name it starts with.
TEST_P(MetaStoreContract, TextWithANulByteOrNotUtf8IsRefusedAlike) {
  const int64_t bob = MakeUser("bob");
  const std::string nul("bob\0x", 5);
  auto made = store_->CreateUser(User{0, nul, Role::kUser, "", 1});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("NUL"), std::string::npos) << made.status().ToString();
  auto found = store_->GetUserByName(nul);
  ASSERT_FALSE(found.ok()) << "found user " << found->id << " (bob is " << bob << ")";
  EXPECT_TRUE(found.status().code() == StatusCode::kInvalidArgument || found.status().code() == StatusCode::kNotFound)
      << found.status().ToString();

  const std::string junk = "j\xff\xfeunk";
  Job job;
  job.user_id = bob;
  job.name = junk;
  job.spec_json = "{}";
  auto id = store_->CreateJob(job, Task{});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << id.status().ToString();
  EXPECT_NE(id.status().message().find("UTF-8"), std::string::npos) << id.status().ToString();
  AuditEntry entry{0, 1, "", "127.0.0.1", "login", "user " + junk, "failed", ""};
  EXPECT_EQ(store_->AddAudit(entry).code(), StatusCode::kInvalidArgument);
  entry.target = "user " + nul;
  EXPECT_EQ(store_->AddAudit(entry).code(), StatusCode::kInvalidArgument);
  // Inside a transaction the same, and the transaction fails whole.
  Status st = store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->CreateUser(User{0, "ok", Role::kUser, "", 1}).status());
    return store_->CreateUser(User{0, junk, Role::kUser, "", 1}).status();
  });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(store_->GetUserByName("ok").status().code(), StatusCode::kNotFound);
  // Nothing was stored; valid UTF-8 of every length is.
  EXPECT_EQ(*store_->CountUsers(), 1);
  EXPECT_TRUE(store_->ListJobs(Where(0, {}, "", "", 10))->jobs.empty());
  EXPECT_TRUE(store_->ListAudit(10, "", "")->empty());
  const std::string utf8 = "\u00e9\u20ac\U0001F600 caf\u00e9";
  const int64_t uid = MakeUser(utf8);
  EXPECT_EQ(store_->GetUser(uid)->name, utf8);
}

TEST_P(MetaStoreContract, NestedTransactionsJoinTheOuterOne) {
  const int64_t uid = MakeUser("ada");
  // The inner one succeeds, the outer one fails: nothing of either stays.
  Status st = store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status { return store_->CreateJob(AJob(uid), Task{}).status(); }));
    EXPECT_EQ(store_->ListJobs(Where(0, {}, "", "", 10))->jobs.size(), 1u);  // seen inside
    return Aborted("outer");
  });
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_TRUE(store_->ListJobs(Where(0, {}, "", "", 10))->jobs.empty());
  // The inner one fails and the outer one passes its error on: nothing stays.
  st = store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->CreateJob(AJob(uid), Task{}).status());
    return store_->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(store_->AddUserFileBytes(uid, 5));
      return FailedPrecondition("inner");
    });
  });
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->ListJobs(Where(0, {}, "", "", 10))->jobs.empty());
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 0);
  // Both succeed: both stay.
  ASSERT_TRUE(store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->CreateJob(AJob(uid), Task{}).status());
    return store_->InTransaction([&]() -> Status { return store_->AddUserFileBytes(uid, 5); });
  }).ok());
  EXPECT_EQ(store_->ListJobs(Where(0, {}, "", "", 10))->jobs.size(), 1u);
  EXPECT_EQ(store_->GetUser(uid)->file_bytes, 5);
}

TEST_P(MetaStoreContract, IdsAreNeverReusedAfterADelete) {
  const int64_t uid = MakeUser("ada");
  const int64_t first = MakeJob(uid, 2);
  const int64_t first_task = (*store_->ListTasks(first))[1].id;
  ASSERT_TRUE(store_->AddEvent({0, first, 0, -1, 1, "", "PENDING", "x"}).ok());
  const int64_t first_event = (*store_->ListEvents(first))[0].id;
  ASSERT_TRUE(store_->DeleteJob(first).ok());
  const int64_t second = MakeJob(uid, 2);
  EXPECT_GT(second, first);
  EXPECT_GT((*store_->ListTasks(second))[0].id, first_task);
  ASSERT_TRUE(store_->AddEvent({0, second, 0, -1, 1, "", "PENDING", "x"}).ok());
  EXPECT_GT((*store_->ListEvents(second))[0].id, first_event);
  const int64_t tid = *store_->CreateToken(Token{0, uid, "a", "h1", 1, "submit", ""});
  ASSERT_TRUE(store_->DeleteToken(tid).ok());
  EXPECT_GT(*store_->CreateToken(Token{0, uid, "b", "h2", 1, "submit", ""}), tid);
  Node n;
  n.name = "vm";
  const int64_t node = *store_->UpsertNode(n);
  ASSERT_TRUE(store_->DeleteNode(node).ok());
  EXPECT_GT(*store_->UpsertNode(n), node);
  // Nor those of the ranks a resize dropped.
  const int64_t dropped = (*store_->ListTasks(second))[1].id;
  ASSERT_TRUE(store_->ResizeTasks(second, 1, Task{}).ok());
  ASSERT_TRUE(store_->ResizeTasks(second, 2, Task{}).ok());
  EXPECT_GT((*store_->ListTasks(second))[1].id, dropped);
}

TEST_P(MetaStoreContract, JobVersionMovesAfterEveryWriteToTheJobItsTasksOrEvents) {
  const int64_t uid = MakeUser("ada");
  const uint64_t unborn = store_->JobVersion(1);
  const int64_t jid = MakeJob(uid, 2);
  EXPECT_NE(store_->JobVersion(jid), unborn);  // a view cached while it was "not found" is stale
  auto moves = [&](const std::function<void()>& write) {
    const uint64_t before = store_->JobVersion(jid);
    write();
    return store_->JobVersion(jid) != before;
  };
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->UpdateJob(*store_->GetJob(jid)).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->UpdateTask((*store_->ListTasks(jid))[0]).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->AddEvent({0, jid, 0, -1, 1, "", "PENDING", "x"}).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->ResizeTasks(jid, 3, Task{}).ok()); }));
  EXPECT_TRUE(moves([&] {
    ASSERT_TRUE(store_->InTransaction([&] { return store_->UpdateJob(*store_->GetJob(jid)); }).ok());
  }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->DeleteJob(jid).ok()); }));
}

TEST_P(MetaStoreContract, AuthVersionMovesAfterEveryWriteToUsersOrTokens) {
  auto moves = [&](const std::function<void()>& write) {
    const uint64_t before = store_->AuthVersion();
    write();
    return store_->AuthVersion() != before;
  };
  int64_t uid = 0, tid = 0;
  EXPECT_TRUE(moves([&] { uid = MakeUser("ada"); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->SetUserDisabled(uid, true).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->SetUserFileQuota(uid, 1).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->SetUserPrivileges(uid, 5, true).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->AddUserFileBytes(uid, 1).ok()); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->SetUserFileBytes(uid, 1).ok()); }));
  EXPECT_TRUE(moves([&] { tid = *store_->CreateToken(Token{0, uid, "a", "h1", 1, "submit", ""}); }));
  EXPECT_TRUE(moves([&] { ASSERT_TRUE(store_->DeleteToken(tid).ok()); }));
}

TEST_P(MetaStoreContract, CommitTicketsMoveWithCommitsAndBecomeDurable) {
  const uint64_t start = store_->CommitTicket();
  const int64_t uid = MakeUser("ada");
  const uint64_t after_user = store_->CommitTicket();
  EXPECT_GT(after_user, start);
  ASSERT_TRUE(store_->InTransaction([&]() -> Status {
    RM_RETURN_IF_ERROR(store_->CreateJob(AJob(uid), Task{}).status());
    return store_->CreateJob(AJob(uid), Task{}).status();
  }).ok());
  const uint64_t after_tx = store_->CommitTicket();
  EXPECT_GT(after_tx, after_user);
  EXPECT_TRUE(store_->AwaitDurable(after_user).ok());
  EXPECT_TRUE(store_->AwaitDurable(after_tx).ok());
  EXPECT_TRUE(store_->AwaitDurable(start).ok());  // an old ticket: at once
  EXPECT_TRUE(store_->Sync().ok());
  // Reads commit nothing.
  (void)store_->ListJobs(Where(0, {}, "", "", 10));
  (void)store_->GetUser(uid);
  EXPECT_EQ(store_->CommitTicket(), after_tx);
}

TEST_P(MetaStoreContract, ASoundStoreHasNoDamage) {
  const int64_t uid = MakeUser("ada");
  MakeJob(uid, 2);
  EXPECT_TRUE(store_->Damage().empty());
}

TEST_P(MetaStoreContract, ManyThreadsWriteAndAwaitAtOnce) {
  const int64_t uid = MakeUser("ada");
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::vector<int64_t>> ids(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto id = store_->CreateJob(AJob(uid, 2), Task{});
        if (!id.ok() || !store_->AwaitDurable(store_->CommitTicket()).ok()) {
          ++failures;
          continue;
        }
        ids[t].push_back(*id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<int64_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(store_->ListJobs(Where(0, {}, "", "", 1000))->jobs.size(), all.size());
  EXPECT_EQ(store_->ListPlacedTasks()->size(), 0u);
  for (int64_t id : all) EXPECT_EQ(store_->ListTasks(id)->size(), 2u);
}

}  // namespace
}  // namespace ringmaster::store
