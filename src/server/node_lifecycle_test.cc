// An admin's node lifecycle (node_lifecycle.cc): cordon, drain, delete.
#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

bool HasEvent(const std::vector<store::Event>& events, const std::string& reason) {
  return std::any_of(events.begin(), events.end(), [&](const store::Event& e) { return e.reason == reason; });
}

TEST_F(JobServiceTest, ACordonedNodeGetsNothingNewAndPendingJobsSayWhy) {
  AddNode("a", 2000);
  ASSERT_TRUE(svc_->Cordon("a", "disk replacement", /*drain=*/false).ok());
  int64_t id = Submit("command: x\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kPending);
  EXPECT_NE(Job(id).reason.find("node a is cordoned: disk replacement"), std::string::npos) << Job(id).reason;
  EXPECT_EQ(CordonText(*svc_->FindNode("a")), "cordoned: disk replacement");
  // A registration of its agent (a restart) keeps the cordon.
  store::Node n = *svc_->FindNode("a");
  ASSERT_TRUE(svc_->RegisterNode(n).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kPending);
  ASSERT_TRUE(svc_->Uncordon(std::to_string(n.id)).ok());  // by id, as `nodes` lists them
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kScheduled);
  EXPECT_EQ(svc_->Cordon("nope", "", false).code(), StatusCode::kNotFound);
}

TEST_F(JobServiceTest, DrainingANodeMovesAGangAwayWithoutCountingARestart) {
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: 2\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) {
    ASSERT_EQ(t.node_id, a);  // best fit packs the gang onto one node
    ASSERT_TRUE(Report(t, "running").ok());
  }
  ASSERT_TRUE(svc_->Cordon("a", "kernel update", /*drain=*/true).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  const std::string why = "moving off node a, which is draining: checkpoint, stop and restart elsewhere";
  EXPECT_EQ(Job(id).stop_reason, why);
  EXPECT_TRUE(HasEvent(*store_->ListEvents(id), why));
  // Its tasks are told to stop with the checkpoint grace (SIGTERM: the trainer checkpoints).
  auto assigned = *svc_->Assignments(a);
  ASSERT_EQ(assigned["tasks"].size(), 2u);
  for (const auto& t : assigned["tasks"]) {
    EXPECT_EQ(t["desired"], "stop");
    EXPECT_EQ(t["stop_grace_ms"], JobServiceOptions{}.checkpoint_grace_ms);
  }
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  for (const auto& t : Tasks(id)) {
    EXPECT_EQ(t.node_id, b);
    EXPECT_EQ(t.attempt, 2);
  }
  EXPECT_EQ(Job(id).restarts, 0);
  EXPECT_TRUE((*svc_->Assignments(a))["tasks"].empty());  // drained
  EXPECT_EQ(CordonText(*svc_->FindNode("a")), "draining: kernel update");
}

TEST_F(JobServiceTest, DrainingANodeShrinksAnElasticJobOffItWhenItCanDoWithout) {
  int64_t a = AddNode("a", 1000), b = AddNode("b", 1000);
  int64_t id = Submit("command: x\nkind: distributed\nreplicas: {min: 1, max: 2}\nresources: {cpu: 1}\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  // Half the cluster is idle: it grows to 2 workers, one per node.
  AdvanceWith(6'000, {a, b});
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_EQ(Job(id).resize_to, 2);
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  auto grown = Tasks(id);
  ASSERT_EQ(grown.size(), 2u);
  ASSERT_NE(grown[0].node_id, grown[1].node_id);
  for (const auto& t : grown) ASSERT_TRUE(Report(t, "running").ok());

  ASSERT_TRUE(svc_->Cordon("a", "", /*drain=*/true).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Job(id).stop_reason, "scale down from 2 to 1 workers: node a is draining");
  EXPECT_EQ(Job(id).resize_to, 1);
  EndAll(id);
  ASSERT_TRUE(svc_->RunPass().ok());
  auto shrunk = Tasks(id);
  ASSERT_EQ(shrunk.size(), 1u);
  EXPECT_EQ(shrunk[0].node_id, b);
  EXPECT_EQ(Job(id).restarts, 0);
}

TEST_F(JobServiceTest, ADrainedNodeWhoseAgentStoppedIsDeletedAtOnce) {
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  (void)a;
  AdvanceWith(11'000, {b});  // a's agent is stopped; it holds nothing
  ASSERT_TRUE(svc_->DeleteNode("a", /*force=*/false).ok());
  EXPECT_EQ(svc_->FindNode("a").status().code(), StatusCode::kNotFound);
}

TEST_F(JobServiceTest, DeletingASilentNodeWithTasksNeedsForceUntilItsWindowIsOut) {
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  int64_t id = Submit("command: x\nresources: {cpu: 2}\nmax_restarts: 1\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  const int64_t on = Tasks(id)[0].node_id;
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  const std::string here = on == a ? "a" : "b", other = on == a ? "b" : "a";
  // Still heard from: refused, naming the way out.
  Status st = svc_->DeleteNode(here, /*force=*/false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("holds 1 tasks: drain it (ringmaster nodes drain " + here + ")"), std::string::npos)
      << st.message();
  // Silent for a lease: its agent may still run the task (it fences only at
  // the window's end), so only an admin who knows the host is down deletes it
  // now; the task is LOST then, and the job restarts on the other node.
  AdvanceWith(11'000, {on == a ? b : a});
  st = svc_->DeleteNode(here, false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("holds 1 tasks that its agent may still run"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--force if you know the host is down"), std::string::npos) << st.message();
  ASSERT_TRUE(svc_->DeleteNode(here, /*force=*/true).ok());
  EXPECT_EQ(svc_->FindNode(here).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(HasEvent(*store_->ListEvents(id), "node " + here + " deleted by an admin"));
  AdvanceWith(1'000, {on == a ? b : a});
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].node_id, svc_->FindNode(other)->id);
  EXPECT_EQ(Job(id).restarts, 1);
  // A live node stays, even with --force: its agent would register it again at
  // once, without an admin's cordon.
  st = svc_->DeleteNode(other, /*force=*/true);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("stop its agent before deleting it"), std::string::npos) << st.message();
  EXPECT_TRUE(svc_->FindNode(other).ok());
}

TEST_F(JobServiceTest, ASilentNodeWhoseWindowIsOutIsDeletedWithoutForce) {
  int64_t a = AddNode("a", 2000), b = AddNode("b", 2000);
  int64_t id = Submit("command: x\nresources: {cpu: 2}\nmax_restarts: 1\n");
  ASSERT_TRUE(svc_->RunPass().ok());
  const int64_t on = Tasks(id)[0].node_id;
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  AdvanceWith(svc_->LostAfterMs() + 1'000, {on == a ? b : a});  // its tasks are LOST by the next pass anyway
  ASSERT_TRUE(svc_->DeleteNode(on == a ? "a" : "b", /*force=*/false).ok());
}

}  // namespace
}  // namespace ringmaster::server
