// Elastic jobs in the job state machine: growing into free capacity,
// shrinking for higher-priority work, autoscaling on measured use, and
// preemption by least lost work. Deterministic like job_service_test.cc: a
// FakeClock, real SQLite, agents played by direct calls.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "files/fake_store.h"
#include "server/job_service.h"
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

TEST_F(JobServiceTest, AnElasticJobGrowsIntoFreeCapacityAndShrinksForHigherPriorityWork) {
  int64_t node = AddNode("vm", 3000);
  int64_t blocker = Submit("command: x\nresources: {cpu: 1}\n");
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {min: 2, max: 3}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Tasks(id).size(), 2u);  // it starts at min
  ASSERT_TRUE(Report(Tasks(blocker)[0], "running").ok());
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());

  // The cluster is full (3 of 3 cpus): no growth. The blocker ends: 2 of 3 = 67% < 70%.
  clock_.AdvanceMs(6'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).resize_to, 0);
  ASSERT_TRUE(Report(Tasks(blocker)[0], "exited", 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).resize_to, 3);
  EXPECT_EQ(*Job(id).stop_state, State::kPending);
  EXPECT_EQ(Job(id).stop_reason, "scale up from 2 to 3 workers: no job waits and the cluster was 67% allocated");
  EndAll(id);  // the gang stops (a real trainer checkpoints first) ...
  EXPECT_EQ(Job(id).replicas, 3);
  EXPECT_EQ(Job(id).restarts, 0);  // a resize is not a restart
  ASSERT_TRUE(svc_->RunPass().ok());  // ... and restarts with 3 workers, at once
  auto grown = Tasks(id);
  ASSERT_EQ(grown.size(), 3u);
  for (const auto& t : grown) {
    EXPECT_EQ(t.state, State::kScheduled);
    ASSERT_TRUE(Report(t, "running").ok());
  }
  EXPECT_EQ(grown[2].attempt, 1);
  EXPECT_EQ(grown[0].attempt, 2);
  // Every rank of the resized gang, the new one too, forms a new ringcomm generation.
  auto assigned = *svc_->Assignments(node);
  int ranks = 0;
  for (const auto& t : assigned["tasks"]) {
    if (t["job_id"] != id) continue;
    EXPECT_EQ(t["env"]["RINGMASTER_GENERATION"], "2") << t.dump();
    ++ranks;
  }
  EXPECT_EQ(ranks, 3);

  // A higher-priority job arrives and does not fit: the elastic job gives back one worker.
  int64_t urgent = Submit("command: x\nresources: {cpu: 1}\npriority: 5\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(urgent).state, State::kPending);
  EXPECT_NE(Job(urgent).reason.find("job " + std::to_string(id) + " is scaling down"), std::string::npos) << Job(urgent).reason;
  EXPECT_EQ(Job(id).resize_to, 2);
  EXPECT_EQ(Job(id).stop_reason, fmt::format("scale down from 3 to 2 workers for job {} (priority 5)", urgent));
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(urgent).state, State::kScheduled);
  EXPECT_EQ(Job(id).state, State::kScheduled);
  EXPECT_EQ(Tasks(id).size(), 2u);

  // It never shrinks below min: for another urgent job it is preempted whole
  // (requeued at its size, not a restart).
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  int64_t second = Submit("command: x\nresources: {cpu: 1}\npriority: 5\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(second).state, State::kPending);
  EXPECT_EQ(Job(id).resize_to, 2);
  EXPECT_NE(Job(id).stop_reason.find(fmt::format("preempted for job {} (priority 5 > 0)", second)), std::string::npos)
      << Job(id).stop_reason;
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(second).state, State::kScheduled);
  EXPECT_EQ(Job(id).state, State::kPending);
  EXPECT_EQ(Job(id).restarts, 0);
}

// `autoscale` (issue 15): one worker more when the job's measured CPU is
// above the threshold over the window, one fewer below the other; placed by
// measured use (the least-loaded node); events name metric, value and threshold.
TEST_F(JobServiceTest, AnAutoscaledJobResizesOnItsMeasuredUseOntoTheLeastLoadedNode) {
  monitor::Monitor mon;
  JobServiceOptions o;
  o.monitor = &mon;
  Restart(o);
  // Node a holds another job, so bin-packing (the default profile) would put
  // ranks there; and it is busier, by measured use, with work the platform
  // does not own. Placed by measured use, the job's ranks go to b.
  const int64_t a = AddNode("a", 4000);
  const int64_t other = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(other)[0], "running").ok());
  const int64_t b = AddNode("b", 4000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {min: 1, max: 3}\nresources: {cpu: 1}\n"
                      "autoscale: {metric: cpu, scale_up_above: 80, scale_down_below: 30, window: 10s, cooldown: 10s}\n");
  auto feed = [&](int64_t ms, double task_cores) {
    for (int64_t t = 0; t < ms; t += 1'000) {
      clock_.AdvanceMs(1'000);
      for (int64_t node : {a, b}) {
        protocol::NodeSample s;
        s.t_ms = clock_.NowMs();
        s.cpu = node == a ? 0.3 : 0.1;
        std::set<int64_t> here;
        for (const auto& task : Tasks(id)) {
          if (task.node_id != node || task.state != State::kRunning) continue;
          s.tasks.push_back({task.id, task.attempt, task_cores, 1, 1, 0, -1});
          here.insert(task.id);
        }
        mon.IngestNode(node, {s}, here);
      }
      ASSERT_TRUE(svc_->Heartbeat(a, 0.3, 0).ok());
      ASSERT_TRUE(svc_->Heartbeat(b, 0.1, 0).ok());
    }
  };
  auto run_all = [&] {
    for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  };
  feed(5'000, 0);  // the nodes' load is known before the job is placed
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Tasks(id).size(), 1u);
  EXPECT_EQ(Tasks(id)[0].node_id, b);  // the least loaded by measured use; bin-packing would say a
  run_all();

  // Busy, but not yet for a whole window: nothing.
  feed(5'000, 0.95);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).resize_to, 0);
  feed(6'000, 0.95);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Job(id).resize_to, 2);
  EXPECT_EQ(Job(id).stop_reason, "scale up 1\u21922: cpu 95% > 80% over 10s; the gang restarts with 2 ranks placed by measured use "
            "(least loaded: b, cpu 10%)");
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  auto grown = Tasks(id);
  ASSERT_EQ(grown.size(), 2u);
  // Rank 0 on b; with it, b's projected use (10% + a quarter) is above a's 30%: rank 1 on a.
  EXPECT_EQ(grown[0].node_id, b);
  EXPECT_EQ(grown[1].node_id, a);
  run_all();

  // Idle now: after a whole window (and the cooldown), one worker fewer.
  feed(5'000, 0.1);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(Job(id).stop_state.has_value());  // the window since the resize is not over
  feed(6'000, 0.1);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Job(id).resize_to, 1);
  EXPECT_EQ(Job(id).stop_reason, "scale down 2\u21921: cpu 10% < 30% over 10s; the gang restarts with 1 rank placed by measured use "
            "(most loaded of its nodes: a, cpu 30%)");
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Tasks(id).size(), 1u);
  EXPECT_EQ(Tasks(id)[0].node_id, b);  // the rank on the most-loaded node is the one given up
  EXPECT_EQ(Job(id).restarts, 0);
  // Never below min.
  run_all();
  feed(25'000, 0.0);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(Job(id).stop_state.has_value());
  EXPECT_EQ(svc_->Stats().resizes, 2u);
}

// A spec's autoscale: what it needs, and errors that name the field.
TEST(AutoscaleSpec, ParsesAndRefuses) {
  auto spec = protocol::ParseJobSpec("command: x\nkind: distributed\nreplicas: {min: 1, max: 4}\n"
                           "autoscale: {metric: samples_per_s, scale_up_above: 5000, scale_down_below: 100, window: 2m}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->autoscale->metric, "samples_per_s");
  EXPECT_EQ(spec->autoscale->window_ms, 120'000);
  EXPECT_EQ(spec->autoscale->cooldown_ms, 60'000);
  auto back = protocol::JobSpecFromJson(protocol::JobSpecToJson(*spec).dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *spec);
  auto err = [](const std::string& extra, const std::string& replicas = "{min: 1, max: 4}") {
    return protocol::ParseJobSpec("command: x\nkind: distributed\nreplicas: " + replicas + "\nautoscale: " + extra + "\n")
        .status()
        .message();
  };
  EXPECT_EQ(err("{metric: cpu}", "2"), "autoscale: needs an elastic job (replicas: {min: N, max: M} with M > N)");
  EXPECT_EQ(err("{metric: disk}"), "autoscale.metric: must be cpu, gpu, memory or samples_per_s, got \"disk\"");
  EXPECT_EQ(err("{metric: gpu}"), "autoscale.metric: gpu, but resources.gpu is 0");
  EXPECT_EQ(err("{scale_up_above: 50}"), "autoscale.metric: missing (cpu, gpu, memory or samples_per_s)");
  EXPECT_EQ(err("{metric: cpu, scale_up_above: 20, scale_down_below: 40}"),
            "autoscale.scale_down_below: must be below scale_up_above (20), got 40");
  EXPECT_EQ(err("{metric: cpu, scale_up_above: -1}"), "autoscale.scale_up_above: must be a number >= 0, got \"-1\"");
  EXPECT_EQ(err("{metric: cpu, window: 2y}"), "autoscale.window: \"2y\" is not a duration (use e.g. 90m, 2h or 3600)");
  EXPECT_EQ(err("{metric: cpu, cooldown: 2d}"), "autoscale.cooldown: must be between 1s and 1d, got 2d");
  EXPECT_EQ(err("{metric: cpu, speed: 1}"),
            "autoscale.speed: unknown field (expected one of: cooldown, metric, scale_down_below, scale_up_above, window)");
}

TEST_F(JobServiceTest, AboveTheScaleDownThresholdElasticWorkersYieldToEqualPriority) {
  int64_t node = AddNode("vm", 3000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {min: 1, max: 3}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  clock_.AdvanceMs(6'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Job(id).resize_to, 3);  // 33% allocated: it grows while under 70%, to 100%
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", -1, 15).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  // 100% allocated, above 90%: a job of the same priority gets a worker back.
  int64_t peer = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).resize_to, 2);
  EXPECT_NE(Job(peer).reason.find("is scaling down to make room"), std::string::npos) << Job(peer).reason;
}

TEST_F(JobServiceTest, AnotherUsersPriorityShrinksNoElasticJobWithinItsShare) {
  int64_t node = AddNode("vm", 4000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {min: 1, max: 2}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  clock_.AdvanceMs(6'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Job(id).resize_to, 2);
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", -1, 15).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) ASSERT_TRUE(Report(t, "running").ok());
  // 50% allocated. Bob may ask for priority 1000, but ada holds no more than her half.
  store::User bob;
  bob.name = "bob";
  bob.id = *store_->CreateUser(bob);
  ASSERT_TRUE(store_->SetUserPrivileges(bob.id, 1000, false).ok());
  bob = *store_->GetUser(bob.id);
  const int64_t urgent = *svc_->Submit(bob, *protocol::ParseJobSpec("command: x\nresources: {cpu: 3}\npriority: 1000\n"));
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).resize_to, 0);
  EXPECT_FALSE(Job(id).stop_state) << Job(id).stop_reason;
  EXPECT_EQ(Job(urgent).state, State::kPending);
}

TEST_F(JobServiceTest, PreemptionStopsTheJobThatLosesLeastWorkAndRequeuesIt) {
  auto files = files::NewFakeBlobStore(&clock_);
  JobServiceOptions o;
  o.files = files.get();
  Restart(o);
  int64_t node = AddNode("vm", 3000);
  std::vector<int64_t> low;
  for (int i = 0; i < 3; ++i) low.push_back(Submit("command: train\nresources: {cpu: 1}\n"));
  ASSERT_TRUE(svc_->RunPass().ok());
  for (int64_t id : low) ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  clock_.AdvanceMs(60'000);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  // Checkpoints, by when `latest` reached the files service: low[0] 10 s
  // ago, low[1] 2 s ago, low[2] none (60 s of work). low[0]'s is in the
  // store from before a server restart; low[1]'s the files API reports.
  auto w = files->Create(fmt::format("jobs/{}/checkpoints/latest", low[0]), {});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write("ckpt-1\n").ok());
  clock_.AdvanceMs(-10'000);
  ASSERT_TRUE((*w)->Commit().ok());
  clock_.AdvanceMs(10'000);
  svc_->LearnCheckpointTimes();  // as Start does: low[0]'s from the store
  svc_->NoteCheckpoint(low[1], clock_.NowMs() - 2'000);

  int64_t urgent = Submit("command: x\nresources: {cpu: 1}\npriority: 10\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(urgent).state, State::kPending);
  EXPECT_NE(Job(urgent).reason.find(fmt::format("preempting job {}", low[1])), std::string::npos) << Job(urgent).reason;
  const store::Job victim = Job(low[1]);
  ASSERT_TRUE(victim.stop_state.has_value());
  EXPECT_NE(victim.stop_reason.find("2 device-seconds since its last checkpoint"), std::string::npos)
      << victim.stop_reason;
  // Its task is told to stop (SIGTERM: the trainer checkpoints), the others run on.
  auto a = *svc_->Assignments(node);
  for (const auto& t : a["tasks"]) {
    EXPECT_EQ(t["desired"], t["job_id"] == low[1] ? "stop" : "run") << t.dump();
    if (t["job_id"] == low[1]) {
      EXPECT_EQ(t["stop_grace_ms"], 30'000);  // time to checkpoint, not the usual 5 s
    }
  }
  // Until it has stopped nothing more is preempted.
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(Job(low[0]).stop_state.has_value());
  EXPECT_FALSE(Job(low[2]).stop_state.has_value());
  ASSERT_TRUE(Report(Tasks(low[1])[0], "exited", -1, 15).ok());
  EXPECT_EQ(Job(low[1]).state, State::kPending);
  EXPECT_EQ(Job(low[1]).restarts, 0);  // a preemption is not a failure
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(urgent).state, State::kScheduled);
  EXPECT_EQ(Job(low[1]).state, State::kPending);
}

}  // namespace
}  // namespace ringmaster::server
