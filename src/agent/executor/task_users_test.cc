#include "agent/executor/task_users.h"

#include <gtest/gtest.h>
#include <pwd.h>

namespace ringmaster::agent {
namespace {

TaskUsers Make(const TaskUsersOptions& o, uid_t agent_uid = 0) {
  auto t = TaskUsers::Create(o, agent_uid);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : TaskUsers{};
}

std::string CreateError(const TaskUsersOptions& o, uid_t agent_uid = 0) {
  auto t = TaskUsers::Create(o, agent_uid);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.status().message();
}

TEST(TaskUsersTest, ARootAgentGivesEachUserItsOwnUidFromTheDefaultRange) {
  TaskUsers users = Make({});
  EXPECT_TRUE(users.isolating());
  auto alice = users.Resolve(2, "alice");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  EXPECT_EQ(alice->uid, 200002u);
  EXPECT_EQ(alice->gid, 200002u);
  EXPECT_TRUE(alice->groups.empty());
  EXPECT_TRUE(alice->switch_user);
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->Describe(), "uid 200002 (user alice)");
  auto bob = users.Resolve(3, "bob");
  ASSERT_TRUE(bob.ok());
  EXPECT_NE(bob->uid, alice->uid);
}

TEST(TaskUsersTest, AUserBeyondTheRangeIsRefusedNamingTheFlag) {
  TaskUsers users = Make({"300000-300009", {}});
  EXPECT_EQ(users.Resolve(9, "ivy")->uid, 300009u);
  auto carol = users.Resolve(10, "carol");
  ASSERT_FALSE(carol.ok());
  EXPECT_EQ(carol.status().message(),
            "user carol (id 10) has no uid on this node: --task-uids 300000-300009 covers user ids 1 to 9");
}

TEST(TaskUsersTest, RangesWithSystemUidsOrExistingAccountsAreRefused) {
  EXPECT_EQ(CreateError({"500-600000", {}}),
            "--task-uids: 500-600000 includes system uids (below 1000); pick a range like 200000-299999");
  EXPECT_NE(CreateError({"0-10", {}}).find("includes system uids"), std::string::npos);
  EXPECT_NE(CreateError({"lots", {}}).find("is not a uid range like 200000-299999"), std::string::npos);
  EXPECT_NE(CreateError({"300-200", {}}).find("is not a uid range"), std::string::npos);
  if (getpwuid(65534)) {
    std::string e = CreateError({"65000-66000", {}});
    EXPECT_NE(e.find("includes the account " + std::string(getpwuid(65534)->pw_name) + " (uid 65534)"),
              std::string::npos)
        << e;
  }
}

TEST(TaskUsersTest, AnExplicitAccountIsUsedWithItsGroupsAndHomeAndRootIsRefused) {
  EXPECT_EQ(CreateError({"", {"alice=root"}}), "--task-user: alice=root: root is root (uid 0); tasks never run as root");
  EXPECT_NE(CreateError({"", {"alice=no_such_account_here"}}).find("no account no_such_account_here"), std::string::npos);
  EXPECT_NE(CreateError({"", {"alice"}}).find("is not user=account"), std::string::npos);
  passwd* nobody = getpwuid(65534);
  if (!nobody) GTEST_SKIP() << "no account with uid 65534 here";
  TaskUsers users = Make({"", {std::string("alice=") + nobody->pw_name}});
  auto alice = users.Resolve(2, "alice");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->uid, 65534u);
  EXPECT_EQ(alice->gid, nobody->pw_gid);
  EXPECT_EQ(alice->account, nobody->pw_name);
  EXPECT_EQ(alice->home, nobody->pw_dir);
  EXPECT_TRUE(alice->switch_user);
  // Users without a mapping fall back to the range.
  EXPECT_EQ(users.Resolve(3, "bob")->uid, 200003u);
  // With the range off, they are refused.
  TaskUsers only = Make({"none", {std::string("alice=") + nobody->pw_name}});
  auto bob = only.Resolve(3, "bob");
  ASSERT_FALSE(bob.ok());
  EXPECT_EQ(bob.status().message(), "user bob has no account on this node: map it with --task-user bob=ACCOUNT");
}

TEST(TaskUsersTest, ANonRootAgentRunsTasksAsItselfAndSaysUsersAreNotIsolated) {
  TaskUsers users = Make({}, 1234);
  EXPECT_FALSE(users.isolating());
  auto alice = users.Resolve(2, "alice");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->uid, 1234u);
  EXPECT_FALSE(alice->switch_user);
  EXPECT_NE(users.Describe().find("users are not isolated from each other"), std::string::npos);
  EXPECT_EQ(CreateError({"200000-299999", {}}, 1234),
            "--task-uids: the agent is not root, so it cannot run tasks as other uids");
  EXPECT_NE(CreateError({"", {"alice=bob"}}, 1234).find("the agent is not root"), std::string::npos);
}

TEST(TaskUsersTest, ADefaultConstructedMappingNeverYieldsAUserSwitchToRoot) {
  // The executor refuses an identity that does not switch when it is root.
  TaskUsers none;
  auto id = none.Resolve(1, "admin");
  ASSERT_TRUE(id.ok());
  EXPECT_FALSE(id->switch_user);
}

}  // namespace
}  // namespace ringmaster::agent
