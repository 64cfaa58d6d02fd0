// JobService on backend "slurm" with SlurmBackend over a scripted Slurm
// (FakeSlurm below: what sbatch got, the states the test gives each job):
// hand-over, pending reasons, binding ranks to step nodes, cancel, a node
// failure's requeue, Slurm's refusal, orphans, quotas, forgetting step nodes.
// The real Slurm is driven in the e2e tests (tests/e2e/slurm_*).
#include "server/slurm_backend.h"

#include <gtest/gtest.h>

#include "common/crypto.h"
#include "common/strings.h"
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

class FakeSlurm : public slurm::Client {
 public:
  StatusOr<int64_t> Submit(const slurm::SubmitRequest& request) override {
    std::lock_guard<std::mutex> l(mu);
    if (!refuse.ok()) return refuse;
    const int64_t id = next_id++;
    submitted.push_back(request);
    jobs.push_back({id, request.name, "PENDING", "Priority", "", 0, 0});
    return id;
  }
  StatusOr<std::vector<slurm::JobInfo>> Jobs(std::string_view prefix) override {
    std::lock_guard<std::mutex> l(mu);
    std::vector<slurm::JobInfo> out;
    for (const auto& j : jobs) {
      if (j.name.rfind(prefix, 0) == 0) out.push_back(j);
    }
    return out;
  }
  StatusOr<std::vector<slurm::NodeInfo>> Nodes() override {
    return std::vector<slurm::NodeInfo>{{"n1", "idle", "", 4, 0, 4000, 0, 1, 0, "gpu:1", "127.0.0.1"}};
  }
  Status Cancel(int64_t id) override {
    std::lock_guard<std::mutex> l(mu);
    cancelled.push_back(id);
    for (auto& j : jobs) {
      if (j.id == id && slurm::EndOf(j.state) == slurm::EndKind::kNotEnded) j.state = "CANCELLED";
    }
    return Status::Ok();
  }
  std::string Describe() const override { return "fake slurm"; }

  void Set(int64_t id, const std::string& state, const std::string& reason = "", const std::string& nodes = "") {
    std::lock_guard<std::mutex> l(mu);
    for (auto& j : jobs) {
      if (j.id == id) j = {id, j.name, state, reason, nodes, 0, 0};
    }
  }

  std::mutex mu;
  int64_t next_id = 100;
  Status refuse = Status::Ok();
  std::vector<slurm::SubmitRequest> submitted;
  std::vector<slurm::JobInfo> jobs;
  std::vector<int64_t> cancelled;
};

class SlurmBackendTest : public JobServiceTest {
 protected:
  void SetUp() override {
    JobServiceTest::SetUp();
    store::User admin;
    admin.name = "admin";
    admin.role = store::Role::kAdmin;
    ASSERT_TRUE(store_->CreateUser(admin).ok());
    StartSlurm({});
  }
  void TearDown() override {
    backend_.reset();
    JobServiceTest::TearDown();
  }
  void StartSlurm(JobServiceOptions options) {
    backend_.reset();
    options.backend = "slurm";
    Restart(options);
    SlurmBackendOptions so;
    so.server_url = "https://ringmaster:8443";
    so.step_command = "/usr/bin/ringmaster";
    so.site = "s1";
    backend_ = std::make_unique<SlurmBackend>(svc_.get(), store_.get(), &slurm_, &clock_, so);
    backend_->Open();  // the test runs its rounds itself
  }
  // The step of `rank` comes up: its node registers as the wrapper's agent would.
  int64_t StepRegisters(int64_t job, int attempt, int rank, int gpus = 1) {
    store::Node n;
    n.name = JobService::StepNodeName(job, attempt, rank);
    n.cpu_milli = 1000;
    n.memory_bytes = 1LL << 30;
    n.gpu_count = gpus;
    n.gpus_json = gpus ? R"([{"index": )" + std::to_string(2 + rank) + R"(, "model": "slurm gres gpu"}])" : "[]";
    n.port_lo = n.port_hi = 40000 + rank;
    n.labels_json = R"({"slurm.job": "100", "slurm.node": "n2", "slurm.rank": ")" + std::to_string(rank) + "\"}";
    auto id = svc_->RegisterNode(n);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return *id;
  }
  void Sync() { ASSERT_TRUE(backend_->SyncOnce().ok()); }

  FakeSlurm slurm_;
  std::unique_ptr<SlurmBackend> backend_;
};

constexpr const char* kTwoGpuRanks = R"(
name: two
kind: distributed
replicas: 2
command: [ringmaster-train]
resources: {cpu: 1.5, memory: 1Gi, gpu: 1, gpu_type: a100}
time_limit: 90s
)";

TEST_F(SlurmBackendTest, AGangBecomesOneSlurmJobWithGresPerRankAndATokenPerStep) {
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kScheduled);
  for (const auto& t : Tasks(id)) {
    EXPECT_EQ(t.state, State::kScheduled);
    EXPECT_EQ(t.node_id, 0);
    EXPECT_EQ(t.attempt, 1);
  }
  Sync();
  ASSERT_EQ(slurm_.submitted.size(), 1u);
  const slurm::SubmitRequest& r = slurm_.submitted[0];
  EXPECT_EQ(r.name, "rm-s1-" + std::to_string(id) + ".1");
  EXPECT_EQ(r.ntasks, 2);
  EXPECT_EQ(r.cpus_per_task, 2);  // 1.5 rounds up
  EXPECT_EQ(r.memory_mib_per_task, 1024);
  EXPECT_EQ(r.gpus_per_task, 1);
  EXPECT_EQ(r.gpu_type, "a100");
  EXPECT_EQ(r.time_limit_minutes, 3);  // 90 s: 2 minutes, and one past Ringmaster's own limit
  const std::string prefix = "slurm-" + std::to_string(id) + "-1-";
  EXPECT_EQ(r.step_argv, (std::vector<std::string>{"/usr/bin/ringmaster", "slurm-step", "--server",
                                                   "https://ringmaster:8443", "--node-prefix", prefix, "--data-dir",
                                                   "/var/tmp/ringmaster-slurm"}));
  // One agent token per rank, each good for its own step node only; secrets never on argv.
  const auto tokens = Split(r.env.at("RINGMASTER_STEP_TOKENS"), ',');
  ASSERT_EQ(tokens.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    auto t = store_->GetTokenByHash(Sha256Hex(tokens[rank]));
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->scope, "agent");
    EXPECT_EQ(t->node, prefix + std::to_string(rank));
    for (const auto& arg : r.step_argv) EXPECT_EQ(arg.find(tokens[rank]), std::string::npos);
  }
  // A second round submits nothing more: Slurm has it.
  Sync();
  EXPECT_EQ(slurm_.submitted.size(), 1u);
}

TEST_F(SlurmBackendTest, AWaitingJobShowsSlurmsPendingReasonInWords) {
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  slurm_.Set(100, "PENDING", "Resources");
  Sync();
  EXPECT_NE(Job(id).reason.find("waiting in Slurm's queue as job 100: "), std::string::npos) << Job(id).reason;
  EXPECT_EQ(Job(id).reason.find("Resources"), std::string::npos) << "words, not Slurm's code: " << Job(id).reason;
  EXPECT_EQ(Job(id).reason.substr(Job(id).reason.find(": ") + 2), slurm::PendingReasonText("Resources"));
}

TEST_F(SlurmBackendTest, RanksGetTheirTasksOnceEveryStepHasRegistered) {
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  slurm_.Set(100, "RUNNING", "", "n2");
  const int64_t n1 = StepRegisters(id, 1, 1);
  for (const auto& t : Tasks(id)) EXPECT_EQ(t.node_id, 0) << "rank 0's step has not come";
  EXPECT_TRUE((*svc_->Assignments(n1))["tasks"].empty());
  // A step of another attempt (an old one still starting) binds nothing.
  StepRegisters(id, 7, 0);
  for (const auto& t : Tasks(id)) EXPECT_EQ(t.node_id, 0);
  const int64_t n0 = StepRegisters(id, 1, 0);
  auto tasks = Tasks(id);
  EXPECT_EQ(tasks[0].node_id, n0);
  EXPECT_EQ(tasks[1].node_id, n1);
  EXPECT_EQ(tasks[1].port, 40001);
  EXPECT_EQ(tasks[1].gpu_indices, "0") << "the step's one GPU, by its place in the step's list";
  EXPECT_EQ(tasks[1].attempt, 1) << "binding is not a new attempt";
  EXPECT_NE(Job(id).reason.find("started by Slurm as job 100 on n2"), std::string::npos) << Job(id).reason;
  auto a = *svc_->Assignments(n1);
  ASSERT_EQ(a["tasks"].size(), 1u);
  EXPECT_EQ(a["tasks"][0]["rank"], 1);
  // The tasks run and succeed as on agents; the steps' nodes and tokens are then forgotten.
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  EXPECT_EQ(Job(id).state, State::kRunning);
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "exited", 0).ok());
  EXPECT_EQ(Job(id).state, State::kSucceeded);
  slurm_.Set(100, "COMPLETED", "", "n2");
  clock_.AdvanceMs(60'000);  // the steps are silent: their agents are gone
  Sync();
  EXPECT_EQ(Job(id).state, State::kSucceeded);
  for (const auto& n : *store_->ListNodes()) {
    EXPECT_NE(n.name.rfind("slurm-" + std::to_string(id) + "-1-", 0), 0u) << n.name << " should be forgotten";
  }
  auto admin = *store_->GetUserByName("admin");
  for (const auto& t : *store_->ListTokens(admin.id)) EXPECT_NE(t.name.rfind("slurm:", 0), 0u) << t.name;
}

TEST_F(SlurmBackendTest, CancellingAJobWaitingInSlurmRemovesItFromSlurmsQueue) {
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  ASSERT_TRUE(svc_->Cancel(id, "ada").ok());
  EXPECT_EQ(Job(id).state, State::kScheduled) << "it ends when Slurm has ended it";
  Sync();
  ASSERT_EQ(slurm_.cancelled, std::vector<int64_t>{100});
  Sync();
  EXPECT_EQ(Job(id).state, State::kCancelled) << Job(id).reason;
  EXPECT_NE(Job(id).reason.find("cancelled by ada"), std::string::npos) << Job(id).reason;
}

TEST_F(SlurmBackendTest, ANodeFailureRequeuesTheGangWithoutCountingARestart) {
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  slurm_.Set(100, "RUNNING", "", "n[1-2]");
  StepRegisters(id, 1, 0);
  StepRegisters(id, 1, 1);
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  // Rank 1 sees its peer vanish and fails before Slurm's word arrives.
  ASSERT_TRUE(Report(Tasks(id)[1], "exited", 1).ok());
  slurm_.Set(100, "NODE_FAIL", "", "n[1-2]");
  Sync();
  EXPECT_EQ(Job(id).state, State::kRunning) << "its steps' last reports may still come";
  clock_.AdvanceMs(6'000);
  Sync();
  const store::Job j = Job(id);
  EXPECT_EQ(j.state, State::kPending) << j.reason;
  EXPECT_EQ(j.restarts, 0);
  EXPECT_NE(j.reason.find("lost a node on n[1-2] (NODE_FAIL)"), std::string::npos) << j.reason;
  EXPECT_NE(j.reason.find("resumes from its checkpoint"), std::string::npos) << j.reason;
  // It goes back to Slurm as attempt 2 at once.
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  ASSERT_EQ(slurm_.submitted.size(), 2u);
  EXPECT_EQ(slurm_.submitted[1].name, "rm-s1-" + std::to_string(id) + ".2");
}

TEST_F(SlurmBackendTest, SlurmsEndsMapToTheJobsStates) {
  struct Case {
    std::string state;
    State job;
    std::string reason;
  } cases[] = {
      {"TIMEOUT", State::kFailed, "time limit reached"},
      {"OUT_OF_MEMORY", State::kFailed, "out of memory"},
      {"CANCELLED", State::kFailed, "cancelled outside Ringmaster"},
      {"COMPLETED", State::kFailed, "before this rank reported"},
  };
  int64_t slurm_id = 100;
  for (const auto& c : cases) {
    const int64_t id = Submit(kTwoGpuRanks);
    ASSERT_TRUE(svc_->RunPass().ok());
    Sync();
    StepRegisters(id, 1, 0);
    StepRegisters(id, 1, 1);
    for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
    slurm_.Set(slurm_id++, c.state, "", "n1");
    Sync();
    clock_.AdvanceMs(6'000);
    Sync();
    EXPECT_EQ(Job(id).state, c.job) << c.state << ": " << Job(id).reason;
    EXPECT_NE(Job(id).reason.find(c.reason), std::string::npos) << c.state << ": " << Job(id).reason;
  }
}

TEST_F(SlurmBackendTest, ARequestSlurmRefusesFailsTheJobAndUnreachableSlurmIsWaitedOut) {
  slurm_.refuse = Unavailable("Unable to contact slurm controller (connect failure)");
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  EXPECT_EQ(Job(id).state, State::kScheduled);
  EXPECT_NE(Job(id).reason.find("Slurm, which did not answer"), std::string::npos) << Job(id).reason;
  auto admin = *store_->GetUserByName("admin");
  EXPECT_TRUE(store_->ListTokens(admin.id)->empty()) << "a failed submit keeps no token";
  slurm_.refuse = InvalidArgument("Requested node configuration is not available");
  Sync();
  EXPECT_EQ(Job(id).state, State::kFailed);
  EXPECT_NE(Job(id).reason.find("Slurm refused it: Requested node configuration"), std::string::npos)
      << Job(id).reason;
}

TEST_F(SlurmBackendTest, SlurmJobsNoGangOwnsAreCancelled) {
  slurm_.jobs.push_back({7, "rm-s1-99.1", "RUNNING", "", "n1", 0, 0});
  slurm_.jobs.push_back({8, "other-user-job", "RUNNING", "", "n1", 0, 0});
  slurm_.jobs.push_back({9, "rm-s2-99.1", "RUNNING", "", "n1", 0, 0});  // another installation's
  Sync();
  EXPECT_TRUE(slurm_.cancelled.empty()) << "a gang that just ended leaves its steps time to exit";
  clock_.AdvanceMs(61'000);
  Sync();
  EXPECT_EQ(slurm_.cancelled, std::vector<int64_t>{7});
}

TEST_F(SlurmBackendTest, QuotasAndTheQueueCapHoldJobsInRingmastersQueue) {
  JobServiceOptions o;
  o.scheduler.quotas["ada"] = {-1, 2, false};
  o.max_handed_over = 2;
  StartSlurm(o);
  const int64_t a = Submit(kTwoGpuRanks);
  const int64_t b = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(a).state, State::kScheduled);
  EXPECT_EQ(Job(b).state, State::kPending);
  EXPECT_NE(Job(b).reason.find("quota: ada holds 2 of 2 GPUs"), std::string::npos) << Job(b).reason;

  o.scheduler.quotas.clear();
  StartSlurm(o);
  const int64_t c = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(b).state, State::kScheduled);
  EXPECT_EQ(Job(c).state, State::kPending);
  EXPECT_NE(Job(c).reason.find("2 jobs already wait in Slurm's"), std::string::npos) << Job(c).reason;
}

TEST_F(SlurmBackendTest, WhatSlurmCannotGiveIsRefusedAtSubmit) {
  auto dev = protocol::ParseJobSpec("name: nb\nkind: dev\n");
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto st = svc_->Submit(user_, *dev);
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("kind: "), std::string::npos) << st.status().ToString();
  auto pinned = protocol::ParseJobSpec("name: p\ncommand: [true]\nnode_selector: {rack: r1}\n");
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  st = svc_->Submit(user_, *pinned);
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.status().message().rfind("node_selector: ", 0), 0u) << st.status().ToString();
}

TEST_F(SlurmBackendTest, OneUserNeverFillsSlurmsQueueForEveryone) {
  JobServiceOptions o;
  o.max_handed_over_per_user = 1;
  StartSlurm(o);
  const int64_t a = Submit(kTwoGpuRanks);
  const int64_t b = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(a).state, State::kScheduled);
  EXPECT_EQ(Job(b).state, State::kPending);
  EXPECT_NE(Job(b).reason.find("1 of ada's jobs already wait in Slurm's"), std::string::npos) << Job(b).reason;
  // Once the first has started in Slurm, the next goes over.
  Sync();
  StepRegisters(a, 1, 0);
  StepRegisters(a, 1, 1);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(b).state, State::kScheduled) << Job(b).reason;
}

TEST_F(SlurmBackendTest, AJobSlurmCannotStartFailsInsteadOfWaitingForever) {
  EXPECT_TRUE(slurm::NeverStarts("BadConstraints"));
  EXPECT_FALSE(slurm::NeverStarts("Resources"));
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  slurm_.Set(100, "PENDING", "PartitionTimeLimit");
  Sync();
  EXPECT_EQ(Job(id).state, State::kScheduled);
  EXPECT_NE(Job(id).reason.find("will not start"), std::string::npos) << Job(id).reason;
  clock_.AdvanceMs(31'000);
  Sync();
  EXPECT_EQ(Job(id).state, State::kFailed);
  EXPECT_NE(Job(id).reason.find("Slurm cannot run it (job 100)"), std::string::npos) << Job(id).reason;
  EXPECT_EQ(slurm_.cancelled, std::vector<int64_t>{100}) << "its place in Slurm's queue is given back";
}

TEST_F(SlurmBackendTest, ASubmitPastItsDeadlineKeepsItsTokensAndSlurmsSubmitLimitIsAWait) {
  slurm_.refuse = DeadlineExceeded("sbatch: no answer within 20 s");
  const int64_t id = Submit(kTwoGpuRanks);
  ASSERT_TRUE(svc_->RunPass().ok());
  Sync();
  auto admin = *store_->GetUserByName("admin");
  EXPECT_EQ(store_->ListTokens(admin.id)->size(), 2u) << "the job may be queued after all: its steps need them";
  slurm_.refuse = InvalidArgument("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)");
  Sync();
  EXPECT_EQ(Job(id).state, State::kScheduled);
  EXPECT_NE(Job(id).reason.find("waiting for room under Slurm's limits"), std::string::npos) << Job(id).reason;
}

TEST(SlurmStepNames, RoundTrip) {
  int64_t job = 0;
  int attempt = 0, rank = 0;
  ASSERT_TRUE(JobService::ParseStepNodeName(JobService::StepNodeName(12, 3, 4), &job, &attempt, &rank));
  EXPECT_EQ(std::make_tuple(job, attempt, rank), std::make_tuple(12, 3, 4));
  for (const char* bad : {"slurm-12-3", "slurm-12-3-4x", "slurm--3-4", "node-12-3-4", "slurm-0-1-0", "slurm-1-0-0",
                          "slurm-12-3-4-5"}) {
    EXPECT_FALSE(JobService::ParseStepNodeName(bad, &job, &attempt, &rank)) << bad;
  }
}

}  // namespace
}  // namespace ringmaster::server
