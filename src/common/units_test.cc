#include "common/units.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace ringmaster {

TEST(Units, ParsesCpu) {
  EXPECT_EQ(ParseCpuMilli("2"), 2000);
  EXPECT_EQ(ParseCpuMilli("0.5"), 500);
  EXPECT_EQ(ParseCpuMilli("250m"), 250);
  EXPECT_EQ(ParseCpuMilli("lots"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli("-1"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli("1x"), std::nullopt);
}

TEST(Units, ParsesBytes) {
  EXPECT_EQ(ParseBytes("1024"), 1024);
  EXPECT_EQ(ParseBytes("512Mi"), 512LL << 20);
  EXPECT_EQ(ParseBytes("4G"), 4'000'000'000LL);
  EXPECT_EQ(ParseBytes("1.5Gi"), 3LL << 29);
  EXPECT_EQ(ParseBytes("2GiB"), 2LL << 30);
  EXPECT_EQ(ParseBytes("lots"), std::nullopt);
  EXPECT_EQ(ParseBytes("12Q"), std::nullopt);
  EXPECT_EQ(ParseBytes(""), std::nullopt);
}

TEST(Units, FormatsRoundTrip) {
  EXPECT_EQ(FormatCpu(1000), "1");
  EXPECT_EQ(FormatCpu(500), "0.5");
  EXPECT_EQ(FormatCpu(1250), "1.25");
  EXPECT_EQ(FormatBytes(512LL << 20), "512Mi");
  EXPECT_EQ(FormatBytes(100), "100");
  EXPECT_EQ(FormatBytes(3LL << 29), "1.5Gi");
}

TEST(Clock, FormatsTimeAndDurations) {
  EXPECT_EQ(FormatTimeUtc(0), "");
  EXPECT_EQ(FormatTimeUtc(1'700'000'000'123), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(FormatDuration(5'000), "5s");
  EXPECT_EQ(FormatDuration(252'000), "4m12s");
  FakeClock clock(1000);
  clock.AdvanceMs(500);
  EXPECT_EQ(clock.NowMs(), 1500);
}

}  // namespace ringmaster
