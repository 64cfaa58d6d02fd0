// A node's side (job_nodes.cc): registration, heartbeats, leases and the
// fencing window, and a server restart within it.
#include "protocol/agent.h"
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

TEST_F(JobServiceTest, ANodeSilentPastItsFencingWindowLosesItsTasksAndTheGangRestartsElsewhere) {
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\nmax_restarts: 2\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto first = Tasks(id);
  ASSERT_EQ(first[0].node_id, a);  // best fit packs the gang onto one node
  ASSERT_EQ(first[1].node_id, a);
  for (const auto& t : first) ASSERT_TRUE(Report(t, "running").ok());

  // 11 s later only b has renewed its lease (10 s): a is unreachable, and its
  // tasks still run (a server cut off from it, or away, stops nothing).
  AdvanceWith(11'000, {b});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(a)), "unreachable");
  for (const auto& t : Tasks(id)) EXPECT_EQ(t.state, State::kRunning);
  // Its agent stops them after the fencing window; a lease later they are LOST.
  const int64_t silent = svc_->FenceAfterMs() + 1'000;
  ASSERT_LT(silent, svc_->LostAfterMs());
  AdvanceWith(silent - 11'000, {b});
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) EXPECT_EQ(t.state, State::kRunning);
  AdvanceWith(svc_->LostAfterMs() + 1'000 - silent, {b});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(a)), "lost");
  for (const auto& t : Tasks(id)) {
    EXPECT_EQ(t.state, State::kPending);  // LOST, then reset for the restart
  }
  auto events = *store_->ListEvents(id);
  int lost = 0;
  for (const auto& e : events) lost += e.to_state == "LOST";
  EXPECT_EQ(lost, 2);
  EXPECT_EQ(Job(id).restarts, 1);
  EXPECT_EQ(Job(id).reason, "restart 1 of 2 after rank 0 lost: node a lost: no heartbeat for " +
                                FormatDuration(svc_->LostAfterMs() + 1'000) + "; next attempt in 1s");

  AdvanceWith(1'000, {b});
  ASSERT_TRUE(svc_->RunPass().ok());
  auto second = Tasks(id);
  for (const auto& t : second) {
    EXPECT_EQ(t.node_id, b);
    EXPECT_EQ(t.attempt, 2);
  }
  // The partitioned agent on a comes back: its reports for attempt 1 are fenced off,
  // and its assignment list no longer holds the tasks, so it stops them.
  EXPECT_EQ(Report(first[0], "running").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Report(first[1], "exited", 0).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(svc_->Heartbeat(a, 0, 0).ok());
  auto assigned = svc_->Assignments(a);
  ASSERT_TRUE(assigned.ok());
  EXPECT_TRUE((*assigned)["tasks"].empty()) << assigned->dump();

  // A second failure backs off twice as long.
  ASSERT_TRUE(Report(second[0], "running").ok());
  ASSERT_TRUE(Report(second[0], "exited", 3).ok());
  ASSERT_TRUE(Report(Tasks(id)[1], "exited", -1, 15).ok());
  EXPECT_EQ(Job(id).reason, "restart 2 of 2 after rank 0 failed: exit code 3; next attempt in 2s");
}

TEST_F(JobServiceTest, AnUnreachableNodeGetsNoNewWorkUntilItIsBack) {
  int64_t a = AddNode("a", 2000);
  AdvanceWith(11'000, {});
  int64_t id = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kPending);
  EXPECT_NE(Job(id).reason.find("node a is not ready"), std::string::npos) << Job(id).reason;
  ASSERT_TRUE(svc_->Heartbeat(a, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kScheduled);
}

TEST_F(JobServiceTest, ARestartedServerStopsNoTaskWithinTheFencingWindow) {
  int64_t a = AddNode("a", 2000);
  int64_t id = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  // The server is down for two minutes, then starts again: silence counts from its start.
  clock_.AdvanceMs(120'000);
  Restart();
  clock_.AdvanceMs(5'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);
  // An agent that is back keeps its tasks; one that stays silent loses them a
  // lease after the fencing window, counted from the server's start.
  ASSERT_TRUE(svc_->Heartbeat(a, 0, 0).ok());
  AdvanceWith(60'000, {a});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);
  clock_.AdvanceMs(svc_->LostAfterMs() - 1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);
  clock_.AdvanceMs(2'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).state, State::kFailed);  // lost, and no restarts left
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(a)), "lost");
}

TEST_F(JobServiceTest, ANodeThatRegistersAgainWithoutARunningTaskLosesItAtOnce) {
  int64_t a = AddNode("a", 4000);
  int64_t gang = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\nmax_restarts: 1\n");
  int64_t other = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  auto tasks = Tasks(gang);
  for (const auto& t : tasks) ASSERT_TRUE(Report(t, "running").ok());
  ASSERT_EQ(Tasks(other)[0].state, State::kScheduled);  // placed, not started yet
  // The node's agent comes back holding rank 0 only (rank 1's state was lost):
  // rank 1 is LOST now, not after the window; the task not started yet is kept.
  store::Node n = *store_->GetNode(a);
  std::set<std::pair<int64_t, int>> held = {{tasks[0].id, tasks[0].attempt}};
  ASSERT_TRUE(svc_->RegisterNode(n, held).ok());
  const auto after = Tasks(gang);
  EXPECT_EQ(after[0].state, State::kRunning);  // held: not lost (the gang stops it, as any restart does)
  EXPECT_EQ(after[1].state, State::kLost);
  EXPECT_EQ(after[1].reason, "node a registered again without it");
  EXPECT_TRUE(Job(gang).stop_state.has_value());  // the gang restarts
  EXPECT_EQ(Tasks(other)[0].state, State::kScheduled);
  // An agent of protocol 1 says nothing of what it holds: nothing is lost.
  int64_t solo = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(solo)[0], "running").ok());
  ASSERT_TRUE(svc_->RegisterNode(n).ok());
  EXPECT_EQ(Tasks(solo)[0].state, State::kRunning);
}

// An agent keeps the window it was told until a heartbeat says it took
// another: a server restarted with a shorter --node-lost-after waits out the
// longer one for a node that has not yet taken the new one (it may be cut off
// and still running its tasks on the old window).
TEST_F(JobServiceTest, ANodeIsLostOnTheLongerOfItsAgentsWindowAndTheServers) {
  JobServiceOptions long_window;
  long_window.node_lost_after_ms = 600'000;
  Restart(long_window);
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  EXPECT_EQ(store_->GetNode(a)->fence_after_ms, 600'000);
  int64_t id = Submit("command: x\nresources: {cpu: 1}\nmax_restarts: 1\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  const int64_t on = Tasks(id)[0].node_id, off = on == a ? b : a;
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  // The server comes back with the default window (5 minutes); the node of
  // the task is never heard from again, the other one takes the new window.
  Restart();
  ASSERT_TRUE(svc_->Heartbeat(off, 0, 0, svc_->FenceAfterMs()).ok());
  EXPECT_EQ(store_->GetNode(off)->fence_after_ms, svc_->FenceAfterMs());
  AdvanceWith(svc_->LostAfterMs() + 1'000, {off});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);  // its agent may still run it: 10 minutes
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(on)), "unreachable");
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(off)), "ready");
  AdvanceWith(600'000 + 10'000 - (svc_->LostAfterMs() + 1'000) + 1'000, {off});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).restarts, 1);  // lost on the longer window, and restarted
  EXPECT_EQ(svc_->NodeStateName(*store_->GetNode(on)), "lost");
}

// resources.disk reaches the node; a job without it leaves the limit to the node (0).
TEST_F(JobServiceTest, AnAssignmentCarriesTheTasksDiskLimit) {
  const int64_t node = AddNode("a", 4000);
  const int64_t with = Submit("command: x\nresources: {cpu: 1, disk: 3Gi}\n");
  const int64_t without = Submit("command: y\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  protocol::Assignments assigned;
  ASSERT_TRUE(protocol::FromJson(svc_->Assignments(node).value(), &assigned).ok());
  std::map<int64_t, int64_t> disk;
  for (const protocol::Assignment& a : assigned.tasks) disk[a.job_id] = a.limits.disk_bytes;
  EXPECT_EQ(disk, (std::map<int64_t, int64_t>{{with, int64_t{3} << 30}, {without, 0}}));
}

}  // namespace
}  // namespace ringmaster::server
