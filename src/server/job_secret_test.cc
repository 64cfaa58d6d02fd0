// RINGMASTER_JOB_SECRET: every task of a gang gets the same one, another job
// or another attempt of the job a different one, derived from the service's
// key (the same key gives the same secret, so a restart changes nothing).
#include <gtest/gtest.h>

#include <set>

#include <fmt/format.h>

#include "common/crypto.h"
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

class JobSecretTest : public JobServiceTest {
 protected:
  // The secrets of the job's assigned tasks on `node`, by rank.
  std::map<int, std::string> Secrets(int64_t node, int64_t job) {
    std::map<int, std::string> out;
    const nlohmann::json all = svc_->Assignments(node).value();
    for (const auto& t : all.at("tasks")) {
      if (t.at("job_id").get<int64_t>() != job) continue;
      out[t.at("rank").get<int>()] = t.at("env").value("RINGMASTER_JOB_SECRET", std::string());
    }
    return out;
  }
};

TEST_F(JobSecretTest, OnePerJobAndAttemptSharedByTheGang) {
  const int64_t node = AddNode("vm", 8000);
  const int64_t a = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\nmax_restarts: 1\n");
  const int64_t b = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto first = Secrets(node, a), other = Secrets(node, b);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(other.size(), 2u);
  EXPECT_TRUE(IsSha256Hex(first[0])) << first[0];
  EXPECT_EQ(first[0], first[1]) << "the ranks of one gang share it";
  EXPECT_EQ(other[0], other[1]);
  EXPECT_NE(first[0], other[0]) << "another job has its own";

  // The gang restarts: its new attempt gets a new secret, so no rank of the
  // old one (or anyone who learned its secret) can join it.
  ASSERT_TRUE(Report(Tasks(a)[0], "exited", 1).ok());
  ASSERT_TRUE(Report(Tasks(a)[1], "exited", -1, 15).ok());
  clock_.AdvanceMs(1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Tasks(a)[0].attempt, 2);
  auto second = Secrets(node, a);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0], second[1]);
  EXPECT_NE(second[0], first[0]);
  EXPECT_TRUE(IsSha256Hex(second[0]));

  // A user's env cannot choose it.
  const int64_t c = Submit("command: x\nreplicas: 1\nresources: {cpu: 1}\nenv: {RINGMASTER_JOB_SECRET: mine}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_NE(Secrets(node, c)[0], "mine");
}

TEST_F(JobSecretTest, DerivedFromTheServicesKeySoARestartKeepsIt) {
  JobServiceOptions o;
  o.job_secret_key = std::string(32, 'k');
  Restart(o);
  const int64_t node = AddNode("vm", 8000);
  const int64_t id = Submit("command: x\nreplicas: 1\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  const std::string before = Secrets(node, id)[0];
  EXPECT_EQ(before, HexEncode(HmacSha256(o.job_secret_key, fmt::format("ringmaster-job-secret/{}/1", id))));
  Restart(o);
  EXPECT_EQ(Secrets(node, id)[0], before);
  o.job_secret_key = std::string(32, 'x');
  Restart(o);
  EXPECT_NE(Secrets(node, id)[0], before) << "another server key, other secrets";
}

}  // namespace
}  // namespace ringmaster::server
