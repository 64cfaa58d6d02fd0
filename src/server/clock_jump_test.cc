// Chaos: the wall clock jumps (an operator sets it, NTP steps it) under a
// running JobService. Leases, restart backoff and time limits are durations,
// measured on the steady clock: a jump forward expires nothing and ends no
// wait early; a jump back keeps nothing alive and makes nobody wait longer.
// CTest names: chaos.ClockJump.*
#include <gtest/gtest.h>

#include "server/job_service_test_fixture.h"

namespace ringmaster::server {
namespace {

using store::State;

constexpr int64_t kHour = 3'600'000;

class ClockJump : public JobServiceTest {
 protected:
  // `ms` pass in steps of a second, node `node` heartbeating.
  void Live(int64_t node, int64_t ms) {
    for (int64_t t = 0; t < ms; t += 1'000) {
      clock_.AdvanceMs(1'000);
      ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
    }
  }
  int64_t RunningJob(const std::string& yaml) {
    int64_t id = Submit(yaml);
    EXPECT_TRUE(svc_->RunPass().ok());
    for (const auto& t : Tasks(id)) EXPECT_TRUE(Report(t, "running").ok());
    EXPECT_EQ(Job(id).state, State::kRunning);
    return id;
  }
};

TEST_F(ClockJump, AnHourForwardExpiresNoLease) {
  int64_t node = AddNode("a", 2000);
  int64_t id = RunningJob("command: x\nresources: {cpu: 1}\n");
  clock_.JumpWallMs(kHour);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_TRUE(svc_->NodeReady(*store_->GetNode(node)));
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);
  Live(node, 5'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].state, State::kRunning);
}

TEST_F(ClockJump, AnHourBackStillFindsADeadNode) {
  int64_t a = AddNode("a", 2000);
  int64_t id = RunningJob("command: x\nresources: {cpu: 1}\nmax_restarts: 1\n");
  clock_.JumpWallMs(-kHour);
  clock_.AdvanceMs(svc_->LostAfterMs() + 1'000);  // a is silent for longer than it may be
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(svc_->NodeReady(*store_->GetNode(a)));
  EXPECT_EQ(Job(id).restarts, 1);
  const std::string lost = "node a lost: no heartbeat for " + FormatDuration(svc_->LostAfterMs() + 1'000);
  EXPECT_NE(Job(id).reason.find(lost), std::string::npos) << Job(id).reason;
}

TEST_F(ClockJump, RestartBackoffLastsItsTimeWhicheverWayTheClockJumps) {
  int64_t node = AddNode("a", 2000);
  int64_t id = RunningJob("command: x\nresources: {cpu: 1}\nmax_restarts: 3\n");
  // Backoff 1 s, and the clock goes back an hour: it still lasts 1 s, not 1 h.
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", 1).ok());
  ASSERT_EQ(Job(id).state, State::kPending);
  clock_.JumpWallMs(-kHour);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 1);
  Live(node, 1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 2);
  // Backoff 2 s, and the clock goes forward an hour: the wait is not skipped.
  ASSERT_TRUE(Report(Tasks(id)[0], "running").ok());
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", 1).ok());
  ASSERT_NE(Job(id).reason.find("next attempt in 2s"), std::string::npos) << Job(id).reason;
  clock_.JumpWallMs(kHour);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 2);
  Live(node, 1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 2);
  Live(node, 1'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 3);
}

TEST_F(ClockJump, ABackoffSetBeforeAServerRestartWaitsNoLongerThanTheLongestBackoff) {
  int64_t node = AddNode("a", 2000);
  int64_t id = RunningJob("command: x\nresources: {cpu: 1}\nmax_restarts: 3\n");
  ASSERT_TRUE(Report(Tasks(id)[0], "exited", 1).ok());
  // The server restarts (the steady clock's times are gone) after the clock was set back a day.
  Restart();
  clock_.JumpWallMs(-24 * kHour);
  ASSERT_TRUE(svc_->Heartbeat(node, 0, 0).ok());
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_EQ(Tasks(id)[0].attempt, 2) << Job(id).reason;
}

TEST_F(ClockJump, TimeLimitsCountTimeThatPassedNotTheClocksJumps) {
  int64_t node = AddNode("a", 2000);
  int64_t id = RunningJob("command: x\nresources: {cpu: 1}\ntime_limit: 1m\n");
  clock_.JumpWallMs(kHour);  // forward: the run is not an hour old
  Live(node, 30'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  EXPECT_FALSE(Job(id).stop_state.has_value()) << Job(id).stop_reason;
  clock_.JumpWallMs(-2 * kHour);  // back: the minute still ends
  Live(node, 31'000);
  ASSERT_TRUE(svc_->RunPass().ok());
  ASSERT_TRUE(Job(id).stop_state.has_value());
  EXPECT_EQ(Job(id).stop_reason, "time limit 1m0s reached");
}

}  // namespace
}  // namespace ringmaster::server
