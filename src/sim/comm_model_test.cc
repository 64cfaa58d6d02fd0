#include "sim/comm_model.h"

#include <gtest/gtest.h>

namespace ringmaster::sim {
namespace {

TEST(CommModel, RingMovesTwoNMinusOneOverNOfTheBytesOnEveryLink) {
  LinkModel link{8e9, 1.0};  // 1 GB/s of payload
  EXPECT_DOUBLE_EQ(ExchangeSeconds(Exchange::kRing, 1e9, 1, link), 0);
  EXPECT_DOUBLE_EQ(ExchangeSeconds(Exchange::kRing, 1e9, 2, link), 1.0);
  EXPECT_DOUBLE_EQ(ExchangeSeconds(Exchange::kRing, 1e9, 4, link), 1.5);
  EXPECT_NEAR(ExchangeSeconds(Exchange::kRing, 1e9, 1000, link), 2.0, 0.01);  // bounded as N grows
}

TEST(CommModel, OneParameterServersLinkCarriesEveryWorkersBytes) {
  LinkModel link{8e9, 1.0};
  EXPECT_DOUBLE_EQ(ExchangeSeconds(Exchange::kParameterServer, 1e9, 2, link), 2.0);
  EXPECT_DOUBLE_EQ(ExchangeSeconds(Exchange::kParameterServer, 1e9, 8, link), 8.0);  // grows with N
  EXPECT_GT(ExchangeSeconds(Exchange::kParameterServer, 1e9, 3, link), ExchangeSeconds(Exchange::kRing, 1e9, 3, link));
}

TEST(CommModel, PayloadEfficiencySlowsTheExchange) {
  LinkModel link;  // 1 Gbit/s, TCP at MTU 1500
  EXPECT_NEAR(ExchangeSeconds(Exchange::kRing, 125e6, 2, link), 1514.0 / 1448.0, 1e-9);
}

TEST(CommModel, StepBoundsAreSerialAndOverlapped) {
  LinkModel link{8e9, 1.0};
  auto p = PredictStep(Exchange::kRing, 1e8, 2, 0.05, 64, link);  // exchange 0.1 s
  EXPECT_DOUBLE_EQ(p.exchange_s, 0.1);
  EXPECT_DOUBLE_EQ(p.serial_step_s, 0.15);
  EXPECT_DOUBLE_EQ(p.overlapped_step_s, 0.1);
  EXPECT_DOUBLE_EQ(p.serial_samples_per_s, 128 / 0.15);
  EXPECT_DOUBLE_EQ(p.overlapped_samples_per_s, 1280);
  auto alone = PredictStep(Exchange::kParameterServer, 1e8, 1, 0.05, 64, link);
  EXPECT_DOUBLE_EQ(alone.serial_samples_per_s, 1280);
}

TEST(CommModel, ParsesRatesAsTcDoes) {
  double r = 0;
  EXPECT_TRUE(ParseRate("1gbit", &r));
  EXPECT_DOUBLE_EQ(r, 1e9);
  EXPECT_TRUE(ParseRate("2.5Gbit", &r));
  EXPECT_DOUBLE_EQ(r, 2.5e9);
  EXPECT_TRUE(ParseRate("100mbit", &r));
  EXPECT_DOUBLE_EQ(r, 1e8);
  EXPECT_TRUE(ParseRate("5000", &r));
  EXPECT_DOUBLE_EQ(r, 5000);
  EXPECT_FALSE(ParseRate("gbit", &r));
  EXPECT_FALSE(ParseRate("-1gbit", &r));
  EXPECT_FALSE(ParseRate("1gbyte", &r));
}

}  // namespace
}  // namespace ringmaster::sim
