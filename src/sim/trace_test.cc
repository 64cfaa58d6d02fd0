#include "sim/trace.h"

#include <gtest/gtest.h>

namespace ringmaster::sim {
namespace {

constexpr char kHeader[] = "timestamp,duration,num_gpus,gpu_time,cluster\n";

std::string ErrorOf(std::string_view csv) {
  auto jobs = ParsePhillyTrace(csv);
  EXPECT_FALSE(jobs.ok()) << csv;
  return jobs.ok() ? "" : jobs.status().message();
}

TEST(PhillyTrace, ParsesRowsSortedBySubmitTime) {
  auto jobs = ParsePhillyTrace(std::string(kHeader) +
                               "2017-10-09 07:01:55,66.0,1,66.0,11cb48\r\n"
                               "\n"
                               "2017-10-09 06:13:03,2951.5,2,5903.0,6214e9\n"
                               "2017-10-09 06:13:03,10,4,40\n");  // a tie keeps file order; no cluster
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, 1);
  EXPECT_EQ((*jobs)[0].submit_s, 0);
  EXPECT_EQ((*jobs)[0].gpus, 2);
  EXPECT_EQ((*jobs)[0].duration_s, 2951);
  EXPECT_EQ((*jobs)[0].cluster, "6214e9");
  EXPECT_EQ((*jobs)[1].gpus, 4);
  EXPECT_EQ((*jobs)[1].cluster, "");
  EXPECT_EQ((*jobs)[2].submit_s, 48 * 60 + 52);
  EXPECT_EQ((*jobs)[2].cluster, "11cb48");
}

TEST(PhillyTrace, TimestampsAreUtcCalendarDates) {
  auto jobs = ParsePhillyTrace(std::string(kHeader) +
                               "1970-01-01 00:00:00,1,1,1,a\n"
                               "2000-02-29 12:00:00,1,1,1,a\n"
                               "2017-10-09 07:01:55,1,1,1,a\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[1].submit_s, 951825600);   // date -u -d '2000-02-29 12:00:00' +%s
  EXPECT_EQ((*jobs)[2].submit_s, 1507532515);
}

TEST(PhillyTrace, AMalformedLineIsNamed) {
  EXPECT_EQ(ErrorOf(""), "empty: no Philly header");
  EXPECT_EQ(ErrorOf("a,b,c\n"), "line 1 is not the Philly header timestamp,duration,num_gpus,...");
  EXPECT_EQ(ErrorOf(kHeader), "no jobs");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 07:01:55,66,1,66,x\nyesterday,1,1,1,x\n"),
            "line 3: the timestamp is not YYYY-MM-DD HH:MM:SS: yesterday,1,1,1,x");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-02-29 07:01:55,66,1,66,x\n").rfind("line 2: the timestamp", 0), 0u);
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 24:00:00,66,1,66,x\n").rfind("line 2: the timestamp", 0), 0u);
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 07:01:55,66,1\n"),
            "line 2: not timestamp,duration,num_gpus,gpu_time,cluster: 2017-10-09 07:01:55,66,1");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 07:01:55,66,1,66,x,y\n").rfind("line 2: more than 5", 0), 0u);
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 07:01:55,66,0,66,x\n"),
            "line 2: num_gpus is not an integer from 1 to 65536: 2017-10-09 07:01:55,66,0,66,x");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "2017-10-09 07:01:55,-1,1,66,x\n"),
            "line 2: duration is not a number of seconds from 0 to 1e+09: 2017-10-09 07:01:55,-1,1,66,x");
}

TEST(PhillyTrace, HugeOrOddNumbersAreRefusedNotUndefined) {
  // The sscanf parser cast these to int64 and int: undefined behaviour.
  for (const char* row : {"2017-10-09 07:01:55,1e300,1,1,x", "2017-10-09 07:01:55,nan,1,1,x",
                          "2017-10-09 07:01:55,inf,1,1,x", "2017-10-09 07:01:55,1,99999999999999999999,1,x",
                          "2017-10-09 07:01:55,1,1,1e999,x", "-2147483648-10-09 07:01:55,1,1,1,x",
                          "99999999999-10-09 07:01:55,1,1,1,x", "2017-10-09 07:01:55, 1,1,1,x",
                          "2017-10-09 07:01:55,0x10,1,1,x"}) {
    auto jobs = ParsePhillyTrace(std::string(kHeader) + row + "\n");
    EXPECT_FALSE(jobs.ok()) << row;
  }
  std::string binary(kHeader);
  binary += std::string("2017-10-09 07:01:55,1,1,1,\xff\0x\n", 32);
  EXPECT_FALSE(ParsePhillyTrace(binary).ok());
  EXPECT_FALSE(ParsePhillyTrace(std::string(kHeader) + "2017-10-09 07:01:55,1,1,1," + std::string(64, 'c')).ok());
  EXPECT_TRUE(ParsePhillyTrace(std::string(kHeader) + "2017-10-09 07:01:55,1,1,1," + std::string(63, 'c')).ok());
}

TEST(GavelThroughputs, ReadsSingleGpuThroughputs) {
  auto t = ParseGavelThroughputs(R"J({
    "v100": {"('ResNet-18 (batch size 16)', 1)": {"null": 12.5, "('A', 1)": [1, 2]},
             "('ResNet-18 (batch size 16)', 2)": {"null": 20},
             "('Slow', 1)": {"null": 0}},
    "k80": {"('ResNet-18 (batch size 16)', 1)": {"null": 4}},
    "k80_unconsolidated": {"('ResNet-18 (batch size 16)', 1)": {"null": 3}}})J");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, (Throughputs{{"ResNet-18 (batch size 16)", {{"k80", 4.0}, {"v100", 12.5}}}}));
}

TEST(GavelThroughputs, AnyBytesAreAnErrorNotACrash) {
  EXPECT_FALSE(ParseGavelThroughputs("").ok());
  EXPECT_FALSE(ParseGavelThroughputs("[1]").ok());
  EXPECT_FALSE(ParseGavelThroughputs(std::string(100'000, '[')).ok());
  EXPECT_FALSE(ParseGavelThroughputs("{\"v100\": {\"('\xff', 1)\": {\"null\": 1}}}").ok());
  EXPECT_EQ(ParseGavelThroughputs(R"J({"v100": {"('A', 1)": {"null": 1e999}}})J").status().message(),
            "throughputs: not valid JSON: number overflow parsing '1e999'");
  auto t = ParseGavelThroughputs(R"J({"v100": {"('A', 1)": {"null": -3}, "('B', 1)": {"null": 2}}})J");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->count("A"), 0u);
  EXPECT_EQ(t->at("B").at("v100"), 2.0);
  EXPECT_EQ(ParseGavelThroughputs(R"J({"v100": {"('A', 1)": {"null": "fast"}}})J").status().message(),
            "no single-GPU throughputs (\"null\" entries) found");
}

}  // namespace
}  // namespace ringmaster::sim
