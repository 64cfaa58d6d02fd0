// Election (server/leader.h) step by step on a FakeClock: who wins, when a
// leader whose renewals fail steps down (by its own clock), and that a
// refused renewal steps it down at once.
#include "server/leader.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/testing/shared_meta_store.h"

namespace ringmaster::server {
namespace {

using namespace std::chrono_literals;

class ElectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Election> Make(const std::string& name,
                                 std::function<Status(const store::LeaseState&)> may_follow = nullptr) {
    views_.push_back(shared_.View(name));
    ElectionOptions o{name, "http://" + name, 10s, 2s, 1s, std::move(may_follow)};
    return std::make_unique<Election>(
        views_.back()->leadership(), &clock_, o,
        [this, name](int64_t epoch) {
          won_ = name + "@" + std::to_string(epoch);
          return Status::Ok();
        },
        [this, name](const std::string& why) { lost_ = name + ": " + why; });
  }
  FakeClock clock_;
  testing::SharedMetaStore shared_{&clock_};
  std::vector<std::shared_ptr<store::MetaStore>> views_;
  std::string won_, lost_;
};

TEST_F(ElectionTest, TheFirstWinsTheOtherStandsByAndSeesTheLeader) {
  auto a = Make("a");
  auto b = Make("b");
  a->Step();
  EXPECT_EQ(won_, "a@1");
  EXPECT_EQ(a->View().role, ServerRole::kLeader);
  b->Step();
  EXPECT_EQ(b->View().role, ServerRole::kStandby);
  EXPECT_EQ(b->View().leader_url, "http://a");
  EXPECT_EQ(b->Interval(), 1s);
  EXPECT_EQ(a->Interval(), 2s);
}

TEST_F(ElectionTest, ALeaderWhoseRenewalsFailStepsDownBeforeItsLeaseEndsAndAStandbyTakesOver) {
  auto a = Make("a");
  auto b = Make("b");
  a->Step();
  shared_.Cut("a", true);
  // It steps down a renewal's interval (2 s) before the 10 s lease could end.
  clock_.AdvanceMs(7'000);
  a->Step();  // fails, but 1 s is left before that margin by a's clock
  EXPECT_EQ(a->View().role, ServerRole::kLeader);
  b->Step();
  EXPECT_EQ(b->View().role, ServerRole::kStandby);
  clock_.AdvanceMs(1'000);
  a->Step();
  EXPECT_EQ(a->View().role, ServerRole::kSteppedDown);
  clock_.AdvanceMs(2'000);  // the lease ends in the store
  EXPECT_NE(lost_.find("not renewed"), std::string::npos) << lost_;
  b->Step();
  EXPECT_EQ(won_, "b@2");
}

// A standby checks the leader it stands by at every try (the server: that
// their users' files are where both can read them); a refusal withdraws it.
TEST_F(ElectionTest, AStandbyThatMayNotFollowTheLeaderWithdrawsAndNeverLeads) {
  auto a = Make("a");
  a->Step();
  auto b = Make("b", [](const store::LeaseState& leader) -> Status {
    if (leader.holder == "a") return FailedPrecondition("a keeps its files on its own disk");
    return Status::Ok();
  });
  b->Step();
  EXPECT_EQ(b->View().role, ServerRole::kSteppedDown);
  EXPECT_EQ(lost_, "b: a keeps its files on its own disk");
  shared_.Cut("a", true);
  clock_.AdvanceMs(20'000);
  won_.clear();
  b->Step();
  EXPECT_EQ(won_, "");  // not even once a's lease has run out
}

TEST_F(ElectionTest, ARefusedRenewalStepsTheLeaderDownAtOnce) {
  auto a = Make("a");
  a->Step();
  shared_.Steal("b", "http://b", 10s);
  a->Step();
  EXPECT_EQ(a->View().role, ServerRole::kSteppedDown);
  EXPECT_NE(lost_.find("went to b"), std::string::npos) << lost_;
  // A stepped-down server never leads again (it restarts as a standby).
  clock_.AdvanceMs(20'000);
  won_.clear();
  a->Step();
  EXPECT_EQ(won_, "");
}

TEST_F(ElectionTest, AStandbyFencesItsStoreAndTheWinnerWritesUnderItsEpoch) {
  auto a = Make("a");
  a->Start();
  // Its election runs on a thread of its own and may already have won: a
  // write that went through must be a leader's (leading comes before the
  // store takes writes), and one refused is refused as a standby's.
  const Status early = views_[0]->AddAudit({});
  if (early.ok()) {
    EXPECT_EQ(a->View().role, ServerRole::kLeader) << "a standby wrote";
  } else {
    EXPECT_EQ(early.code(), StatusCode::kUnavailable) << early.ToString();
  }
  for (int i = 0; i < 200 && a->View().role != ServerRole::kLeader; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(a->View().role, ServerRole::kLeader);
  EXPECT_TRUE(views_[0]->AddAudit({}).ok());
  a->Stop();
  EXPECT_EQ(shared_.Lease().holder, "") << "a clean stop releases the lease";
}

}  // namespace
}  // namespace ringmaster::server
