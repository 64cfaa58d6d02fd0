#include "monitor/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

namespace ringmaster::monitor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(PrometheusValue, SpecialValuesAndShortestText) {
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");             // not 0.10000000000000001
  EXPECT_EQ(FormatValue(17179869184.0), "17179869184");  // 16 GiB of memory: no exponent
  EXPECT_EQ(FormatValue(1e20), "1e+20");          // Go's ParseFloat reads this
  EXPECT_EQ(FormatValue(1.5e-7), "1.5e-07");
}

TEST(PrometheusExposition, FamilyHeaderAndSamples) {
  Exposition e;
  e.Family("ringmaster_jobs", MetricType::kGauge, "Jobs by state.");
  e.Sample("ringmaster_jobs", {{"state", "running"}, {"user", "alice"}}, 3);
  e.Sample("ringmaster_jobs", {{"state", "pending"}, {"user", "bob"}}, 0);
  e.Family("ringmaster_scheduler_placements_total", MetricType::kCounter, "Tasks placed.");
  e.Sample("ringmaster_scheduler_placements_total", {}, 12);
  EXPECT_EQ(e.Take(),
            "# HELP ringmaster_jobs Jobs by state.\n"
            "# TYPE ringmaster_jobs gauge\n"
            "ringmaster_jobs{state=\"running\",user=\"alice\"} 3\n"
            "ringmaster_jobs{state=\"pending\",user=\"bob\"} 0\n"
            "# HELP ringmaster_scheduler_placements_total Tasks placed.\n"
            "# TYPE ringmaster_scheduler_placements_total counter\n"
            "ringmaster_scheduler_placements_total 12\n");
  EXPECT_EQ(e.Take(), "");
  // Take starts over: the same family may be written again in the next scrape.
  e.Family("ringmaster_jobs", MetricType::kGauge, "Jobs by state.");
  EXPECT_NE(e.Take(), "");
}

TEST(PrometheusExposition, EscapesHelpAndLabelValues) {
  Exposition e;
  e.Family("m", MetricType::kGauge, "a \\ b\nc \"quoted\"");
  e.Sample("m", {{"node", "a\\b\"c\nd"}}, 1);
  // HELP escapes \ and newline only; a label value \, " and newline.
  EXPECT_EQ(e.Take(),
            "# HELP m a \\\\ b\\nc \"quoted\"\n"
            "# TYPE m gauge\n"
            "m{node=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(PrometheusExposition, InvalidUtf8InLabelValuesIsReplaced) {
  Exposition e;
  e.Family("m", MetricType::kGauge, "h");
  e.Sample("m", {{"user", "caf\xC3\xA9"}, {"job", "a\xFF" "b\xC3"}}, 1);
  EXPECT_EQ(e.Take(),
            "# HELP m h\n# TYPE m gauge\n"
            "m{user=\"caf\xC3\xA9\",job=\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\"} 1\n");
}

TEST(PrometheusExposition, SpecialSampleValues) {
  Exposition e;
  e.Family("m", MetricType::kGauge, "h");
  e.Sample("m", {{"v", "nan"}}, std::nan(""));
  e.Sample("m", {{"v", "inf"}}, kInf);
  e.Sample("m", {{"v", "-inf"}}, -kInf);
  EXPECT_EQ(e.Take(),
            "# HELP m h\n# TYPE m gauge\n"
            "m{v=\"nan\"} NaN\nm{v=\"inf\"} +Inf\nm{v=\"-inf\"} -Inf\n");
}

TEST(PrometheusExposition, HistogramIsCumulativeWithInfSumAndCount) {
  HistogramData h;
  h.upper_bounds = {0.1, 0.5, 1};
  h.counts = {2, 0, 3, 1};  // 1 above the last bound
  h.sum = 4.25;
  Exposition e;
  e.Family("ringmaster_http_request_duration_seconds", MetricType::kHistogram, "Latency.");
  e.Histogram("ringmaster_http_request_duration_seconds", {{"route", "/api/v1/jobs"}, {"method", "GET"}}, h);
  EXPECT_EQ(e.Take(),
            "# HELP ringmaster_http_request_duration_seconds Latency.\n"
            "# TYPE ringmaster_http_request_duration_seconds histogram\n"
            "ringmaster_http_request_duration_seconds_bucket{route=\"/api/v1/jobs\",method=\"GET\",le=\"0.1\"} 2\n"
            "ringmaster_http_request_duration_seconds_bucket{route=\"/api/v1/jobs\",method=\"GET\",le=\"0.5\"} 2\n"
            "ringmaster_http_request_duration_seconds_bucket{route=\"/api/v1/jobs\",method=\"GET\",le=\"1\"} 5\n"
            "ringmaster_http_request_duration_seconds_bucket{route=\"/api/v1/jobs\",method=\"GET\",le=\"+Inf\"} 6\n"
            "ringmaster_http_request_duration_seconds_sum{route=\"/api/v1/jobs\",method=\"GET\"} 4.25\n"
            "ringmaster_http_request_duration_seconds_count{route=\"/api/v1/jobs\",method=\"GET\"} 6\n");
}

TEST(PrometheusExposition, HistogramWithoutLabels) {
  Histogram hist({1});
  Exposition e;
  e.Family("p", MetricType::kHistogram, "h");
  e.Histogram("p", {}, hist.Snapshot());
  EXPECT_EQ(e.Take(),
            "# HELP p h\n# TYPE p histogram\n"
            "p_bucket{le=\"1\"} 0\np_bucket{le=\"+Inf\"} 0\np_sum 0\np_count 0\n");
}

TEST(PrometheusHistogram, BoundsAreInclusiveAndNanGoesToInf) {
  Histogram h({0.5, 1, 2});
  for (double v : {0.0, 0.5, 0.75, 1.0, 2.0, 2.5, -3.0}) h.Observe(v);
  HistogramData d = h.Snapshot();
  EXPECT_EQ(d.upper_bounds, (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(d.counts, (std::vector<uint64_t>{3, 2, 1, 1}));  // {0, .5, -3} {.75, 1} {2} {2.5}
  EXPECT_DOUBLE_EQ(d.sum, 3.75);
  h.Observe(std::nan(""));
  d = h.Snapshot();
  EXPECT_EQ(d.counts.back(), 2u);
  EXPECT_TRUE(std::isnan(d.sum));
  h.Observe(kInf);
  EXPECT_EQ(h.Snapshot().counts.back(), 3u);
}

TEST(PrometheusHistogram, ConcurrentObserveSumsRight) {
  Histogram h({1, 10, 100});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      // Each thread observes its own value, so each bucket's count is known;
      // halves add exactly in a double, so the sum must be exact too.
      const double v = 0.5 + 40 * (t % 4);  // 0.5, 40.5, 80.5, 120.5
      for (int i = 0; i < kPerThread; ++i) h.Observe(v);
    });
  }
  for (auto& t : threads) t.join();
  HistogramData d = h.Snapshot();
  EXPECT_EQ(d.counts, (std::vector<uint64_t>{2 * kPerThread, 0, 4 * kPerThread, 2 * kPerThread}));
  EXPECT_EQ(d.sum, 2.0 * kPerThread * (0.5 + 40.5 + 80.5 + 120.5));
}

using PrometheusDeathTest = ::testing::Test;

TEST_F(PrometheusDeathTest, BadNamesAbort) {
  Exposition e;
  EXPECT_DEATH(e.Family("1abc", MetricType::kGauge, "h"), "bad metric name '1abc'");
  EXPECT_DEATH(e.Family("a-b", MetricType::kGauge, "h"), "bad metric name");
  EXPECT_DEATH(e.Family("", MetricType::kGauge, "h"), "bad metric name");
  e.Family("ok:name_1", MetricType::kGauge, "h");
  EXPECT_DEATH(e.Sample("ok:name_1", {{"bad-label", "v"}}, 1), "bad label name 'bad-label'");
  EXPECT_DEATH(e.Sample("ok:name_1", {{"__reserved", "v"}}, 1), "bad label name '__reserved'");
  EXPECT_DEATH(e.Sample("ok:name_1", {{"a", "v"}, {"a", "w"}}, 1), "label 'a' twice");
}

TEST_F(PrometheusDeathTest, SamplesStayInTheirFamily) {
  Exposition e;
  EXPECT_DEATH(e.Sample("m", {}, 1), "sample 'm' outside its family");
  e.Family("m", MetricType::kGauge, "h");
  EXPECT_DEATH(e.Family("m", MetricType::kGauge, "h"), "family 'm' started twice");
  EXPECT_DEATH(e.Sample("other", {}, 1), "sample 'other' outside its family \\(the current one is 'm'\\)");
  EXPECT_DEATH(e.Histogram("m", {}, Histogram({1}).Snapshot()), "'m' is not a histogram family");
  e.Family("p", MetricType::kHistogram, "h");
  EXPECT_DEATH(e.Sample("p", {}, 1), "'p' is a histogram");
  EXPECT_DEATH(e.Histogram("p", {{"le", "1"}}, Histogram({1}).Snapshot()), "has a label 'le'");
  HistogramData bad;
  bad.upper_bounds = {1, 2};
  bad.counts = {1};
  EXPECT_DEATH(e.Histogram("p", {}, bad), "1 counts for 2 bounds");
}

TEST_F(PrometheusDeathTest, HistogramBoundsMustAscendAndBeFinite) {
  EXPECT_DEATH(Histogram({1, 1}), "strictly ascending");
  EXPECT_DEATH(Histogram({2, 1}), "strictly ascending");
  EXPECT_DEATH(Histogram({1, kInf}), "finite");
}

}  // namespace
}  // namespace ringmaster::monitor
