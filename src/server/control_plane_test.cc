// A server (JobService on a temporary store, AgentService) and three agents
// in one process: each agent talks to the server through an in-process
// ControlPlane, runs its tasks on a ScriptedExecutor, and reads time from one
// FakeClock shared by all. The test drives the clock and calls the agents'
// steps (SyncOnce, Tick, HeartbeatOnce, FenceOnce) and the server's
// scheduling pass: fencing, lease expiry and gang restarts without sleeps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "agent/agent.h"
#include "agent/testing/scripted_executor.h"
#include "common/clock.h"
#include "server/agent_service.h"
#include "server/job_service.h"
#include "server/testing/in_process_control_plane.h"
#include "server/timeline.h"
#include "store/meta_store.h"

namespace ringmaster::server {
namespace {

using store::State;

constexpr std::chrono::milliseconds kGuard{20'000};  // hang guards only: nothing waits for time to pass

class ControlPlaneTest : public ::testing::Test {
 protected:
  struct Node {
    std::string name;
    agent::ScriptedExecutor* exec = nullptr;
    InProcessControlPlane* plane = nullptr;
    std::unique_ptr<agent::Agent> agent;
  };

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_control_plane_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = std::move(store::OpenMetaStore("memory:").value());
    user_.name = "ada";
    user_.id = *store_->CreateUser(user_);
    JobServiceOptions o;
    o.node_timeout_ms = 10'000;
    o.node_lost_after_ms = 30'000;
    jobs_ = std::make_unique<JobService>(store_.get(), &clock_, o);
    service_ = std::make_unique<AgentService>(AgentServiceDeps{jobs_.get(), store_.get(), &clock_});
    for (int i = 0; i < 3; ++i) AddAgent("node-" + std::to_string(i));
    for (Node& n : nodes_) ASSERT_TRUE(n.agent->SyncOnce(std::chrono::seconds(0)).ok());  // registers
  }
  void TearDown() override {
    for (Node& n : nodes_) n.agent->Stop();
    nodes_.clear();
    service_.reset();
    jobs_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void AddAgent(const std::string& name) {
    agent::AgentOptions o;
    o.data_dir = (dir_ / name).string();
    o.node_name = name;
    o.cpu_milli = 2000;
    o.memory_bytes = int64_t{8} << 30;
    o.address = "127.0.0.1";
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    o.task_users = agent::TaskUsers::Create({"300000-300099", {}}, /*agent_uid=*/0).value();
    // No files API here: every task stages nothing (and, of job 0, uploads nothing).
    o.stage_plan = [](int64_t, int) -> StatusOr<agent::StagePlan> { return agent::StagePlan{}; };
    // Each tick polls every task (ScriptedExecutor has no exit fd to watch).
    o.watched_exit_poll = std::chrono::milliseconds(0);
    auto exec = std::make_unique<agent::ScriptedExecutor>();
    exec->set_exit(std::nullopt);  // tasks run until stopped
    exec->set_exit_on_stop(true);
    auto plane = std::make_unique<InProcessControlPlane>(service_.get(), name);
    Node n{name, exec.get(), plane.get(), nullptr};
    n.agent = std::make_unique<agent::Agent>(o, std::move(exec), std::move(plane), &clock_);
    n.agent->Open();
    nodes_.push_back(std::move(n));
  }

  int64_t Submit(const std::string& yaml) {
    auto spec = protocol::ParseJobSpec(yaml);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *jobs_->Submit(user_, *spec);
  }
  std::vector<store::Task> Tasks(int64_t job) { return *store_->ListTasks(job); }
  Node& NodeOf(const store::Task& t) {
    for (Node& n : nodes_) {
      if (n.agent->node_id() == t.node_id) return n;
    }
    ADD_FAILURE() << "task " << t.id << " is on no agent's node";
    return nodes_[0];
  }
  static std::string Key(const store::Task& t) { return fmt::format("{}.{}", t.id, t.attempt); }

  // One round of every agent that is not cut off: assignments, starts,
  // reports; then a heartbeat each.
  void Round() {
    for (Node& n : nodes_) {
      (void)n.agent->SyncOnce(std::chrono::seconds(0));
      ASSERT_TRUE(n.agent->WaitSettled(kGuard));
      n.agent->Tick();
      // An exit the tick saw is uploaded for by the task's own thread: done
      // before the next tick, which reports it.
      ASSERT_TRUE(n.agent->WaitSettled(kGuard));
      n.agent->HeartbeatOnce();
    }
  }
  // Time passes in 5 s steps, the agents heartbeating at each.
  void Advance(int64_t ms) {
    for (int64_t done = 0; done < ms; done += 5'000) {
      clock_.AdvanceMs(std::min<int64_t>(5'000, ms - done));
      for (Node& n : nodes_) n.agent->HeartbeatOnce();
    }
  }

  // A 2-replica job, one replica per node (each takes a node's 2 CPUs), running.
  int64_t RunGang() {
    const int64_t id = Submit("command: x\nreplicas: 2\nresources: {cpu: 2}\nmax_restarts: 3\n");
    EXPECT_TRUE(jobs_->RunPass().ok());
    Round();
    for (const auto& t : Tasks(id)) EXPECT_EQ(t.state, State::kRunning) << "task " << t.id;
    return id;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<store::MetaStore> store_;
  store::User user_;
  std::unique_ptr<JobService> jobs_;
  std::unique_ptr<AgentService> service_;
  std::vector<Node> nodes_;
};

TEST_F(ControlPlaneTest, AnAgentCutOffStopsItsTasksOnceTheFencingWindowHasPassedAndNotBefore) {
  const int64_t id = RunGang();
  const store::Task t = Tasks(id)[0];
  Node& n = NodeOf(t);
  n.agent->HeartbeatOnce();  // the last answer it gets: the window counts from here
  n.plane->SetReachable(false);
  clock_.AdvanceMs(jobs_->FenceAfterMs() - 1);
  n.agent->HeartbeatOnce();  // unanswered
  n.agent->FenceOnce();
  EXPECT_TRUE(n.exec->stopped().empty()) << "fenced before its window was out";
  clock_.AdvanceMs(1);
  n.agent->FenceOnce();
  EXPECT_EQ(n.exec->stopped(), std::vector<std::string>{Key(t)});
  // The other node's agent, still heard, runs on.
  EXPECT_TRUE(NodeOf(Tasks(id)[1]).exec->stopped().empty());
}

TEST_F(ControlPlaneTest, ANodeWhoseHeartbeatsStopIsLostAfterItsLeaseAndItsTasksWithIt) {
  const int64_t id = RunGang();
  const store::Task t = Tasks(id)[0];
  Node& n = NodeOf(t);
  n.plane->SetReachable(false);
  Advance(jobs_->LostAfterMs() - 5'000);  // unreachable, not lost: its tasks may still run
  ASSERT_TRUE(jobs_->RunPass().ok());
  EXPECT_EQ(jobs_->NodeStateName(*store_->GetNode(t.node_id)), "unreachable");
  EXPECT_EQ(store_->GetTask(t.id)->state, State::kRunning);
  Advance(5'001);
  ASSERT_TRUE(jobs_->RunPass().ok());
  EXPECT_EQ(jobs_->NodeStateName(*store_->GetNode(t.node_id)), "lost");
  const store::Task lost = *store_->GetTask(t.id);
  EXPECT_EQ(lost.state, State::kLost);
  EXPECT_EQ(lost.attempt, t.attempt);
  // Its agent, cut off all along, fenced it long before.
  n.agent->FenceOnce();
  EXPECT_EQ(n.exec->stopped(), std::vector<std::string>{Key(t)});
}

TEST_F(ControlPlaneTest, AGangWhoseNodeIsLostRestartsOnTheOthersAndTheOldAttemptIsRefused) {
  const int64_t id = RunGang();
  const std::vector<store::Task> before = Tasks(id);
  Node& cut = NodeOf(before[0]);
  Node& peer = NodeOf(before[1]);
  cut.plane->SetReachable(false);
  Advance(jobs_->LostAfterMs() + 1);
  ASSERT_TRUE(jobs_->RunPass().ok());
  EXPECT_EQ(store_->GetTask(before[0].id)->state, State::kLost);
  // The gang stops: its peer is told to stop its rank, and reports its end.
  Round();
  EXPECT_EQ(peer.exec->stopped(), std::vector<std::string>{Key(before[1])});
  // After the restart backoff the gang is placed again, on the nodes still heard.
  Advance(60'000);
  ASSERT_TRUE(jobs_->RunPass().ok());
  Round();
  const std::vector<store::Task> after = Tasks(id);
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].attempt, before[i].attempt + 1) << "rank " << after[i].rank;
    EXPECT_NE(after[i].node_id, before[0].node_id) << "rank " << after[i].rank << " went back to the lost node";
    EXPECT_EQ(after[i].state, State::kRunning) << "rank " << after[i].rank;
    EXPECT_TRUE(NodeOf(after[i]).exec->WaitStarted(Key(after[i]), kGuard));
  }
  // Fencing by attempt: a report of the old attempt is refused, wherever it comes from.
  protocol::TaskStatusReport stale{0, before[1].attempt, "exited", protocol::TaskExitInfo{0, 0, ""}, ""};
  const store::Task moved = *store_->GetTask(before[1].id);
  auto st = NodeOf(moved).plane->ReportStatuses(moved.node_id, {{{before[1].id, stale}}}, kGuard);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->results.size(), 1u);
  EXPECT_EQ(st->results[0].code, "FailedPrecondition") << st->results[0].message;
  EXPECT_EQ(store_->GetTask(before[1].id)->state, State::kRunning);
  // The cut-off agent comes back: the server no longer lists its old attempt,
  // so it stops it, and the exit it reports is refused as stale.
  cut.plane->SetReachable(true);
  ASSERT_TRUE(cut.agent->SyncOnce(std::chrono::seconds(0)).ok());
  EXPECT_EQ(cut.exec->stopped(), std::vector<std::string>{Key(before[0])});
  cut.agent->Tick();
  const store::Task rank0 = *store_->GetTask(before[0].id);
  EXPECT_EQ(rank0.attempt, before[0].attempt + 1);
  EXPECT_EQ(rank0.state, State::kRunning);
}


// The agent reports where a task is in starting (staging, starting); the
// server keeps them as events, and the job's timeline is derived from those.
TEST_F(ControlPlaneTest, AJobsTimelineHasItsPhasesInOrder) {
  const int64_t id = Submit("command: x\nresources: {cpu: 1}\n");
  clock_.AdvanceMs(1'000);
  ASSERT_TRUE(jobs_->RunPass().ok());
  clock_.AdvanceMs(1'000);
  Round();
  const store::Task t = Tasks(id)[0];
  ASSERT_EQ(t.state, State::kRunning);
  clock_.AdvanceMs(1'000);
  NodeOf(t).exec->set_exit(agent::TaskExit{0, 0, ""});
  Round();
  Round();  // the exit is reported once its output is shipped
  ASSERT_EQ(store_->GetJob(id)->state, State::kSucceeded);

  const auto phases = BuildTimeline(*store_->ListEvents(id));
  std::vector<std::string> names;
  for (const auto& p : phases) names.push_back(p.phase);
  EXPECT_EQ(names, (std::vector<std::string>{"queued", "staging", "starting", "running"}));
  int64_t last = 0;
  for (const auto& p : phases) {
    EXPECT_GE(p.start_ms, last) << p.phase;
    ASSERT_TRUE(p.end_ms.has_value()) << p.phase << " still open after the job ended";
    EXPECT_GE(*p.end_ms, p.start_ms) << p.phase;
    last = p.start_ms;
    EXPECT_EQ(p.attempt, 1) << p.phase;
  }
  EXPECT_LE(*phases[0].end_ms, phases[1].start_ms);  // queued until placed, then staged
  EXPECT_EQ(phases.back().end_ms, clock_.NowMs());  // running ended with the job
}

}  // namespace
}  // namespace ringmaster::server
