#include "monitor/series_store.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

namespace ringmaster::monitor {
namespace {

SeriesStoreOptions Small() {
  SeriesStoreOptions o;
  o.tiers = {{1'000, 10}, {10'000, 6}, {60'000, 5}};
  return o;
}

TEST(SeriesStore, RawPointsAndDownsampledAverages) {
  SeriesStore s(Small());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(s.Add("a", 100'000 + i * 1'000, i));
  // The raw ring holds the last 10 seconds.
  auto raw = s.Query("a", 110'000, 0);
  ASSERT_EQ(raw.size(), 10u);
  EXPECT_EQ(raw.front().t_ms, 110'000);
  EXPECT_DOUBLE_EQ(raw.front().avg, 10);
  EXPECT_DOUBLE_EQ(raw.back().avg, 19);
  // Further back than the raw ring reaches: 10 s averages and maxima.
  auto mid = s.Query("a", 100'000, 0);
  ASSERT_EQ(mid.size(), 2u);
  EXPECT_DOUBLE_EQ(mid[0].avg, 4.5);  // 0..9
  EXPECT_DOUBLE_EQ(mid[0].max, 9);
  EXPECT_DOUBLE_EQ(mid[1].avg, 14.5);
  // A coarser step over raw points.
  auto stepped = s.Query("a", 110'000, 5'000);
  ASSERT_EQ(stepped.size(), 2u);
  EXPECT_DOUBLE_EQ(stepped[0].avg, 12);  // 10..14
  EXPECT_DOUBLE_EQ(stepped[1].max, 19);
}

TEST(SeriesStore, RingsWrapAndStayBounded) {
  SeriesStore s(Small());
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(s.Add("a", i * 1'000LL, i));
  auto raw = s.Query("a", 9'990'000, 0);
  ASSERT_EQ(raw.size(), 10u);
  EXPECT_DOUBLE_EQ(raw.back().avg, 9'999);
  EXPECT_DOUBLE_EQ(raw.front().avg, 9'990);
  // The minute ring: the last 5 minutes.
  auto low = s.Query("a", 0, 0);
  ASSERT_EQ(low.size(), 5u);
  EXPECT_EQ(low.back().t_ms, 9'960'000);
  EXPECT_DOUBLE_EQ(low.back().avg, (9'960 + 9'999) / 2.0);
  EXPECT_LE(s.MemoryBytes(), 1'000u);  // one series, whatever the time it ran
}

TEST(SeriesStore, ARingWrapsRightFromAnyStartingSlot) {
  // Starting at slot 3 of 10: the growing ring is rotated as it fills.
  SeriesStore s(Small());
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(s.Add("a", 3'000 + i * 1'000LL, i));
  auto raw = s.Query("a", 18'000, 0);
  ASSERT_EQ(raw.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(raw[i].t_ms, 18'000 + i * 1'000);
    EXPECT_DOUBLE_EQ(raw[i].avg, 15 + i);
  }
  // And with a gap while it wraps: the skipped slots are empty, not stale.
  ASSERT_TRUE(s.Add("a", 31'000, 100));
  raw = s.Query("a", 22'000, 0);
  ASSERT_EQ(raw.size(), 7u);  // 22..27, then 31
  EXPECT_EQ(raw.back().t_ms, 31'000);
  EXPECT_EQ(raw[raw.size() - 2].t_ms, 27'000);
}

TEST(SeriesStore, AHugeStepVisitsOnlyWhatIsHeld) {
  SeriesStore s(Small());
  for (int i = 0; i < 5; ++i) s.Add("a", 1'000'000 + i * 1'000LL, 2);
  int64_t used = 0;
  auto one = s.Query("a", 0, 86'400'000, &used);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(used, 86'400'000);
  EXPECT_DOUBLE_EQ(one[0].avg, 2);
}

TEST(SeriesStore, TheClockSetBackStartsTheSeriesAfresh) {
  SeriesStore s(Small());
  ASSERT_TRUE(s.Add("a", 1'000'000, 1));
  EXPECT_FALSE(s.Add("a", 999'000, 2));   // a late sample: refused
  EXPECT_TRUE(s.Add("a", 500'000, 3));    // the clock went back minutes: a fresh start
  auto raw = s.Query("a", 0, 0);
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_DOUBLE_EQ(raw[0].avg, 3);
}

TEST(SeriesStore, TaskSeriesLeaveRoomForNodes) {
  SeriesStoreOptions o = Small();
  o.max_series = 4;
  o.max_capped_series = 2;
  SeriesStore s(o);
  EXPECT_TRUE(s.Add("task/1/cpu_cores", 0, 1));
  EXPECT_TRUE(s.Add("task/2/cpu_cores", 0, 1));
  EXPECT_FALSE(s.Add("task/3/cpu_cores", 0, 1));
  EXPECT_TRUE(s.Add("node/1/cpu", 0, 1));
  s.Erase("task/1/");
  EXPECT_TRUE(s.Add("task/3/cpu_cores", 0, 1));
  EXPECT_EQ(s.EraseIdle(1, "task/"), 2u);
  EXPECT_EQ(s.series(), 1u);
}

TEST(SeriesStore, GapsAreEmptyNotZero) {
  SeriesStore s(Small());
  s.Add("a", 0, 1);
  s.Add("a", 5'000, 3);
  auto raw = s.Query("a", 0, 0);
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_EQ(raw[1].t_ms, 5'000);
  EXPECT_DOUBLE_EQ(*s.Mean("a", 0), 2);
  // Silent for longer than the raw ring: its old points are gone, not misplaced.
  s.Add("a", 100'000, 7);
  auto after = s.Query("a", 95'000, 0);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_DOUBLE_EQ(after[0].avg, 7);
}

TEST(SeriesStore, RefusesOldSamplesAndTooManySeries) {
  SeriesStoreOptions o = Small();
  o.max_series = 2;
  SeriesStore s(o);
  EXPECT_TRUE(s.Add("a", 10'000, 1));
  EXPECT_FALSE(s.Add("a", 5'000, 1));
  EXPECT_TRUE(s.Add("b", 0, 1));
  EXPECT_FALSE(s.Add("c", 0, 1));
  EXPECT_FALSE(s.Add("a", 20'000, NAN));
  EXPECT_EQ(s.series(), 2u);
  EXPECT_EQ(s.dropped(), 2u);
}

TEST(SeriesStore, CoarseTiersSurviveARestart) {
  const std::string path = ::testing::TempDir() + "/series-" + std::to_string(getpid());
  {
    SeriesStore s(Small());
    for (int i = 0; i < 120; ++i) s.Add("node/1/cpu", 1'000'000 + i * 1'000LL, i % 2 ? 1.0 : 0.0);
    ASSERT_TRUE(s.Save(path).ok());
  }
  SeriesStore t(Small());
  ASSERT_TRUE(t.Load(path).ok());
  auto mid = t.Query("node/1/cpu", 1'000'000, 10'000);
  ASSERT_FALSE(mid.empty());
  EXPECT_DOUBLE_EQ(mid[0].avg, 0.5);
  EXPECT_DOUBLE_EQ(mid[0].max, 1.0);
  // New samples continue the loaded rings.
  EXPECT_TRUE(t.Add("node/1/cpu", 1'200'000, 1.0));
  EXPECT_DOUBLE_EQ(t.Query("node/1/cpu", 1'200'000, 0).back().avg, 1.0);

  // A damaged file: DataLoss, and the store stays usable (and empty).
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  SeriesStore u(Small());
  Status st = u.Load(path);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_EQ(u.series(), 0u);
  // Other tiers: the history is not read as if it were theirs.
  ASSERT_TRUE(t.Save(path).ok());
  SeriesStoreOptions other = Small();
  other.tiers[1].points = 7;
  SeriesStore v(other);
  EXPECT_EQ(v.Load(path).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(SeriesStore(Small()).Load(path + ".absent").ok());
  unlink(path.c_str());
}

TEST(SeriesStore, KeysEraseAndIdle) {
  SeriesStore s(Small());
  s.Add("task/1/cpu_cores", 0, 1);
  s.Add("task/1/memory_bytes", 0, 1);
  s.Add("task/12/cpu_cores", 50'000, 1);
  EXPECT_EQ(s.Keys("task/1/").size(), 2u);
  s.Erase("task/1/");
  EXPECT_EQ(s.series(), 1u);
  EXPECT_EQ(s.EraseIdle(60'000), 1u);
  EXPECT_EQ(s.series(), 0u);
}

}  // namespace
}  // namespace ringmaster::monitor
