#include "server/timeline.h"

#include <gtest/gtest.h>

namespace ringmaster::server {
namespace {

using store::Event;

// A job-level event at `t`.
Event JobEv(int64_t t, const std::string& from, const std::string& to) { return {0, 1, 0, -1, t, from, to, ""}; }
// Rank `rank`'s task event.
Event TaskEv(int64_t t, int rank, const std::string& from, const std::string& to, const std::string& reason = "") {
  return {0, 1, 10 + rank, rank, t, from, to, reason};
}
Event PhaseEv(int64_t t, int rank, const std::string& state, const std::string& phase) {
  return TaskEv(t, rank, state, state, PhaseEventReason(phase));
}

std::string Describe(const std::vector<TimelinePhase>& phases) {
  std::string out;
  for (const auto& p : phases) {
    out += p.phase + "/" + std::to_string(p.rank) + "#" + std::to_string(p.attempt) + " " + std::to_string(p.start_ms) +
           "-" + (p.end_ms ? std::to_string(*p.end_ms) : "open") + "; ";
  }
  return out;
}

TEST(TimelineTest, AJobsPhasesFollowItsEvents) {
  const std::vector<Event> events = {
      JobEv(100, "", "PENDING"),
      TaskEv(150, 0, "PENDING", "SCHEDULED", "placed on vm"),
      JobEv(150, "PENDING", "SCHEDULED"),
      PhaseEv(160, 0, "SCHEDULED", "staging"),
      PhaseEv(200, 0, "SCHEDULED", "pulling"),
      PhaseEv(300, 0, "SCHEDULED", "starting"),
      TaskEv(310, 0, "SCHEDULED", "RUNNING", "started"),
      JobEv(310, "SCHEDULED", "RUNNING"),
      PhaseEv(400, 0, "RUNNING", "checkpoint"),
      PhaseEv(420, 0, "RUNNING", "checkpoint"),  // a second file of the same checkpoint
      TaskEv(450, 0, "RUNNING", "RUNNING", kCheckpointWritten),
      TaskEv(460, 0, "RUNNING", "RUNNING", "straggler: slow"),  // other same-state events change nothing
      PhaseEv(500, 0, "RUNNING", "uploading"),
      TaskEv(550, 0, "RUNNING", "SUCCEEDED", "exit 0"),
      JobEv(550, "RUNNING", "SUCCEEDED"),
  };
  EXPECT_EQ(Describe(BuildTimeline(events)),
            "queued/-1#1 100-150; staging/0#1 160-200; pulling/0#1 200-300; starting/0#1 300-310; "
            "running/0#1 310-500; checkpoint/0#1 400-450; uploading/0#1 500-550; ");
}

TEST(TimelineTest, ARestartQueuesAgainAndCountsAttemptsPerRank) {
  const std::vector<Event> events = {
      JobEv(0, "", "PENDING"),
      TaskEv(10, 0, "PENDING", "SCHEDULED"),
      TaskEv(10, 1, "PENDING", "SCHEDULED"),
      TaskEv(20, 0, "SCHEDULED", "RUNNING"),
      TaskEv(25, 1, "SCHEDULED", "RUNNING"),
      PhaseEv(30, 1, "RUNNING", "checkpoint"),
      TaskEv(40, 1, "RUNNING", "FAILED", "exit 1"),  // ends its open checkpoint too
      TaskEv(45, 0, "RUNNING", "CANCELLED"),
      JobEv(50, "RUNNING", "PENDING"),  // restarts
      TaskEv(50, 0, "CANCELLED", "PENDING"),
      TaskEv(50, 1, "FAILED", "PENDING"),
      TaskEv(70, 0, "PENDING", "SCHEDULED"),
      TaskEv(70, 1, "PENDING", "SCHEDULED"),
      TaskEv(80, 0, "SCHEDULED", "RUNNING"),
  };
  EXPECT_EQ(Describe(BuildTimeline(events)),
            "queued/-1#1 0-10; running/0#1 20-45; running/1#1 25-40; checkpoint/1#1 30-40; "
            "queued/-1#2 50-70; running/0#2 80-open; ");
}

TEST(TimelineTest, ACancelledJobThatNeverRanWasOnlyQueuedAndOldAgentsGiveRunningAlone) {
  EXPECT_EQ(Describe(BuildTimeline({JobEv(5, "", "PENDING"), JobEv(9, "PENDING", "CANCELLED")})), "queued/-1#1 5-9; ");
  EXPECT_EQ(Describe(BuildTimeline({JobEv(5, "", "PENDING")})), "queued/-1#1 5-open; ");
  // No phase reports (an agent from before them): the time from placement to start shows as a gap.
  EXPECT_EQ(Describe(BuildTimeline({JobEv(0, "", "PENDING"), TaskEv(1, 0, "PENDING", "SCHEDULED"),
                                    TaskEv(4, 0, "SCHEDULED", "RUNNING"), TaskEv(9, 0, "RUNNING", "LOST"),
                                    JobEv(9, "RUNNING", "FAILED")})),
            "queued/-1#1 0-1; running/0#1 4-9; ");
}

TEST(TimelineTest, AgentPhasesAreTheFourOfTheSequence) {
  for (const char* p : {"staging", "pulling", "starting", "uploading"}) EXPECT_TRUE(IsAgentPhase(p)) << p;
  for (const char* p : {"", "running", "checkpoint", "queued", "STAGING"}) EXPECT_FALSE(IsAgentPhase(p)) << p;
}

}  // namespace
}  // namespace ringmaster::server
